"""Tests for aot_tune.runtime: config selection from generated tables, and TunedTable's fallbacks."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
import warnings
from pathlib import Path

import pytest

from aot_tune.runtime import lookup as runtime
from aot_tune.runtime import TunedTable, TuningWarning, select_config

ROOT = Path(__file__).resolve().parents[2]

TABLES = {
    "h100-sxm": {
        (256, "float16"): {"BLOCK": 32},
        (4096, "float16"): {"BLOCK": 512},
        (1024, "bfloat16"): {"BLOCK": 128},
    },
    "interpreter": {
        (64, "float32"): {"BLOCK": 16},
    },
}
KEY = ("N",)


# --------------------------------------------------------------------------- select_config


def test_select_exact_hit() -> None:
    assert select_config(TABLES, KEY, "h100-sxm", "float16", {"N": 256}) == {"BLOCK": 32}
    assert select_config(TABLES, KEY, "h100-sxm", "float16", {"N": 4096}) == {"BLOCK": 512}
    assert select_config(TABLES, KEY, "h100-sxm", "bfloat16", {"N": 1024}) == {"BLOCK": 128}


def test_select_nearest_by_log2_distance() -> None:
    # log2(300) is 0.23 from 256 and 3.77 from 4096; log2(3000) is 3.55 from 256 and 0.45 from 4096
    assert select_config(TABLES, KEY, "h100-sxm", "float16", {"N": 300}) == {"BLOCK": 32}
    assert select_config(TABLES, KEY, "h100-sxm", "float16", {"N": 3000}) == {"BLOCK": 512}
    # the float16 entries only: log2(1500)=10.55 is 2.55 from 256 and 1.45 from 4096
    assert select_config(TABLES, KEY, "h100-sxm", "float16", {"N": 1500}) == {"BLOCK": 512}
    # 1024 is 2.0 from both float16 keys (the bfloat16 entry at 1024 does not count): the smaller key wins
    assert select_config(TABLES, KEY, "h100-sxm", "float16", {"N": 1024}) == {"BLOCK": 32}


def test_select_log2_not_linear() -> None:
    tables = {"d": {(100, "f"): {"c": "low"}, (1000, "f"): {"c": "high"}}}
    # 400 is linearly nearer 100 (300 vs 600) but geometrically nearer 1000 (log2 1.32 from 1000, 2.0 from 100)
    assert select_config(tables, ("N",), "d", "f", {"N": 400}) == {"c": "high"}


def test_select_sums_distance_over_dims() -> None:
    tables = {"d": {(256, 256, "f"): {"c": "a"}, (4096, 256, "f"): {"c": "b"}, (256, 4096, "f"): {"c": "c"}}}
    assert select_config(tables, ("M", "N"), "d", "f", {"M": 4000, "N": 300}) == {"c": "b"}
    assert select_config(tables, ("M", "N"), "d", "f", {"M": 300, "N": 4000}) == {"c": "c"}
    assert select_config(tables, ("M", "N"), "d", "f", {"N": 250, "M": 260}) == {"c": "a"}


def test_select_dtype_must_match() -> None:
    assert select_config(TABLES, KEY, "h100-sxm", "float32", {"N": 256}) is None
    # the only bfloat16 entry is far away, yet wins over float16 entries at the exact key
    assert select_config(TABLES, KEY, "h100-sxm", "bfloat16", {"N": 256}) == {"BLOCK": 128}


def test_select_accepts_torch_style_dtype_names() -> None:
    class FakeDtype:
        def __str__(self) -> str:
            return "torch.float16"

    assert select_config(TABLES, KEY, "h100-sxm", FakeDtype(), {"N": 4096}) == {"BLOCK": 512}


def test_select_unknown_device() -> None:
    assert select_config(TABLES, KEY, "a100-sxm", "float16", {"N": 256}) is None
    assert select_config({"h100-sxm": {}}, KEY, "h100-sxm", "float16", {"N": 256}) is None


# --------------------------------------------------------------------------- TunedTable


GENERATED = '''"""A generated table, as codegen writes it."""
KERNEL = "vec"
KEY = ("N",)
DEVICES = {
    "h100-sxm": {"compute_capability": "9.0", "name": "NVIDIA H100 80GB HBM3"},
    "interpreter": {"compute_capability": "cpu", "name": "Triton interpreter (CPU)"},
}
TABLES = {
    "h100-sxm": {(256, "float16"): {"BLOCK": 99}},
    "interpreter": {
        (256, "float32"): {"BLOCK": 64, "num_warps": 2},
        (4096, "float32"): {"BLOCK": 1024, "num_warps": 8},
    },
}
'''

GPU_ONLY = '''KERNEL = "vec"
KEY = ("N",)
DEVICES = {"h100-sxm": {"compute_capability": "9.0", "name": "NVIDIA H100 80GB HBM3"}}
TABLES = {"h100-sxm": {(256, "float32"): {"BLOCK": 99}}}
'''

DEFAULT = {"BLOCK": 128, "num_warps": 4}


@pytest.fixture
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert runtime.current_device_key() == "interpreter"


@pytest.fixture
def generated(tmp_path, monkeypatch):
    """Writes a generated module under a unique name on sys.path; returns its name."""
    names = []

    def write(text: str) -> str:
        name = f"aot_tune_test_tables_{uuid.uuid4().hex}"
        (tmp_path / f"{name}.py").write_text(text)
        names.append(name)
        return name

    monkeypatch.syspath_prepend(str(tmp_path))
    yield write
    for name in names:
        sys.modules.pop(name, None)


def tuning_warnings(record: list) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, TuningWarning)]


def test_exact_config_without_warning(interpreter, generated) -> None:
    table = TunedTable("vec", DEFAULT, module=generated(GENERATED))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert table.lookup("float32", N=256) == {"BLOCK": 64, "num_warps": 2}
        assert table.lookup("float32", N=4096) == {"BLOCK": 1024, "num_warps": 8}
    assert tuning_warnings(record) == []


def test_nearest_key_warns_once_per_missing_key(interpreter, generated) -> None:
    table = TunedTable("vec", DEFAULT, module=generated(GENERATED))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(3):
            assert table.lookup("float32", N=300) == {"BLOCK": 64, "num_warps": 2}
        assert len(tuning_warnings(record)) == 1
        for _ in range(3):
            assert table.lookup("float32", N=3000) == {"BLOCK": 1024, "num_warps": 8}
        assert table.lookup("float32", N=300) == {"BLOCK": 64, "num_warps": 2}
    messages = tuning_warnings(record)
    assert len(messages) == 2
    assert "300" in messages[0] and "nearest" in messages[0]
    assert "3000" in messages[1]


def test_dtype_without_entries_gives_default_and_warns_once(interpreter, generated) -> None:
    table = TunedTable("vec", DEFAULT, module=generated(GENERATED))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert table.lookup("float16", N=256) == DEFAULT
        assert table.lookup("float16", N=512) == DEFAULT
    assert len(tuning_warnings(record)) == 1


def test_missing_module_gives_default_and_warns_once(interpreter) -> None:
    name = f"aot_tune_test_missing_{uuid.uuid4().hex}"
    table = TunedTable("vec", DEFAULT, module=name)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert table.lookup("float32", N=256) == DEFAULT
        assert table.lookup("float32", N=4096) == DEFAULT
    messages = tuning_warnings(record)
    assert len(messages) == 1
    assert name in messages[0]


def test_default_module_name_is_generated_kernel() -> None:
    assert TunedTable("gemm", DEFAULT).module_name == "generated.gemm"


def test_device_without_table_gives_default_and_warns_once(interpreter, generated) -> None:
    table = TunedTable("vec", DEFAULT, module=generated(GPU_ONLY))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert table.lookup("float32", N=256) == DEFAULT
        assert table.lookup("float32", N=1024) == DEFAULT
    messages = tuning_warnings(record)
    assert len(messages) == 1
    assert "interpreter" in messages[0]


def test_returned_configs_are_copies(interpreter, generated) -> None:
    default = dict(DEFAULT)
    table = TunedTable("vec", default, module=generated(GENERATED))
    first = table.lookup("float32", N=256)
    first["BLOCK"] = -1
    first["extra"] = True
    assert table.lookup("float32", N=256) == {"BLOCK": 64, "num_warps": 2}

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TuningWarning)
        fallback = table.lookup("float16", N=256)
        fallback["BLOCK"] = -1
        assert table.lookup("float16", N=256) == DEFAULT
        default["BLOCK"] = -2  # the caller's dict is copied at construction
        assert table.lookup("float16", N=256) == DEFAULT
        assert table.lookup("float16", N=777) == DEFAULT


_RUNTIME_PROBE = """
import json, sys
sys.path.insert(0, sys.argv[1])
import aot_tune.runtime
print(json.dumps(sorted(m for m in ("torch", "triton") if m in sys.modules)))
"""


def test_importing_the_runtime_imports_neither_torch_nor_triton() -> None:
    out = subprocess.run([sys.executable, "-c", _RUNTIME_PROBE, str(ROOT)], capture_output=True, text=True,
                         timeout=60, check=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


# --------------------------------------------------------------------------- fallbacks across devices, strict mode


def test_a_gpu_without_a_table_uses_one_of_the_same_compute_capability_once_warned(generated, monkeypatch) -> None:
    monkeypatch.setattr(runtime, "_cuda_capability", lambda: "9.0")
    table = TunedTable("vec", DEFAULT, module=generated(GENERATED))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert table.choose("h100-pcie", "float16", {"N": 256}) == {"BLOCK": 99}
        assert table.choose("h100-pcie", "float16", {"N": 300}) == {"BLOCK": 99}  # and its nearest key
    messages = tuning_warnings(record)
    assert len(messages) == 2
    assert "'h100-sxm' (same compute capability 9.0)" in messages[0]
    assert "nearest" in messages[1]


def test_a_gpu_of_another_compute_capability_gets_the_default(generated, monkeypatch) -> None:
    monkeypatch.setattr(runtime, "_cuda_capability", lambda: "8.0")
    table = TunedTable("vec", DEFAULT, module=generated(GENERATED))
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert table.choose("a100-sxm", "float16", {"N": 256}) is None
    assert "no tuned table for device 'a100-sxm'" in tuning_warnings(record)[0]


def test_strict_table_raises_for_anything_but_an_exact_entry_of_this_device(interpreter, generated, monkeypatch) -> None:
    monkeypatch.setattr(runtime, "_cuda_capability", lambda: "9.0")
    table = TunedTable("vec", DEFAULT, module=generated(GENERATED), strict=True)
    assert table.lookup("float32", N=256) == {"BLOCK": 64, "num_warps": 2}
    for device, dtype, n in (("interpreter", "float32", 300), ("interpreter", "float16", 256),
                             ("h100-pcie", "float16", 256)):
        with pytest.raises(runtime.UntunedError) as info:
            table.choose(device, dtype, {"N": n})
        message = str(info.value)
        assert "\n" not in message
        assert f"'N': {n}" in message and dtype in message and f"'{device}'" in message
        assert "fix: add it to tuning.yaml and run `doit tune vec`" in message


def test_a_generated_module_that_fails_to_import_is_not_taken_for_a_missing_one(interpreter, generated) -> None:
    table = TunedTable("vec", DEFAULT, module=generated("import aot_tune_no_such_dependency\n"))
    with pytest.raises(ModuleNotFoundError, match="aot_tune_no_such_dependency"):
        table.lookup("float32", N=256)
