"""A valid tuning.yaml to edit, and the checks every manifest test makes of a load or an error
(tests/unit/test_manifest.py, test_manifest_settings.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from aot_tune.errors import ManifestError
from aot_tune.manifest import Manifest, load_manifest

BASE = """\
version: 1
defaults:
  dtypes: [fp16]
  bench: {warmup_ms: 10}
kernels:
  gemm:
    kernel: kernels.gemm:matmul_kernel
    launch: kernels.gemm:matmul
    inputs: kernels.gemm:make_inputs
    reference: kernels.gemm:reference
    key: [M, N, K]
    space:
      BLOCK_M: [32, 64, 128, 256]
      BLOCK_N: [32, 64, 128, 256]
      BLOCK_K: [32, 64, 128, 256]
      GROUP_M: [8]
      num_warps: [2, 4, 8]
      num_stages: [3, 4, 5]
    constraints:
      - "BLOCK_M * BLOCK_K + BLOCK_K * BLOCK_N <= 65536"
      - "BLOCK_M <= max(32, next_pow2(M))"
    shapes:
      - {M: 256, N: 256, K: 256}
      - grid: {M: [256, 512], N: [256], K: [256, 4096]}
  softmax:
    kernel: kernels.softmax:softmax_kernel
    launch: kernels.softmax:softmax
    inputs: kernels.softmax:make_inputs
    reference: kernels.softmax:reference
    key: [ROWS, COLS]
    space:
      BLOCK: [128, 256]
      num_warps: [4]
    shapes:
      - {ROWS: 4, COLS: 128}
    interpreter_shapes:
      - {ROWS: 1, COLS: 16}
    dtypes: [float32, bf16, half]
    bench: {rep_ms: 50, l2_flush: false}
    targets: [90, sm_100]
    cache: "cache/{kernel}.txtpb"
    generated: "gen/{kernel}_configs.py"
"""


def load(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> Manifest:
    """Write ``text`` to tuning.yaml in tmp_path and load it by its relative name."""
    (tmp_path / "tuning.yaml").write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    return load_manifest("tuning.yaml")


def fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text: str) -> ManifestError:
    """Load ``text`` expecting a ManifestError; check the parts every error has."""
    with pytest.raises(ManifestError) as info:
        load(tmp_path, monkeypatch, text)
    err = info.value
    assert err.path == "tuning.yaml"
    assert err.fix and f"; fix: {err.fix}" in str(err)
    assert "\n" not in str(err)
    return err


def line_of(text: str, needle: str, nth: int = 1) -> int:
    """1-based line of the nth line containing ``needle``."""
    hits = [i for i, line in enumerate(text.splitlines(), 1) if needle in line]
    return hits[nth - 1]


def edit(old: str, new: str, text: str = BASE) -> str:
    assert old in text, old
    return text.replace(old, new, 1)


def assert_error(err: ManifestError, line: int | None, key: str, *needles: str, shown: str = "tuning.yaml") -> None:
    assert (err.line, err.key) == (line, key), str(err)
    prefix = shown + (f":{line}" if line is not None else "") + (f": {key}" if key else "")
    assert str(err).startswith(prefix + ": "), str(err)
    for needle in needles:
        assert needle in str(err), str(err)
