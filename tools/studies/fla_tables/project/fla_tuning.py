"""The tuning side of a project that uses flash-linear-attention (``fla-core`` from PyPI, installed
as is, never edited): launches that force one config past fla's autotuner, input builders, a
reference, and an exporter writing fla's own per-kernel config files.

fla reads ``$FLA_CONFIG_DIR/<kernel function>.json`` when ``FLA_CACHE_MODE`` is ``strict``,
``fuzzy`` or ``full`` (fla/ops/utils/cache.py): ``autotune_entries`` keyed by the md5 of the
JSON of its autotune key, which is the key args' values followed by ``str(dtype)`` of every
tensor argument in call order. With an exact entry for a call, fla launches that config and
never benchmarks.
"""
from __future__ import annotations

import hashlib
import json

import torch
import triton
from fla.modules.norm.l2norm import l2norm_fwd_kernel, l2norm_fwd_kernel_row

import aot_tune

EPS = 1e-6
#: fla's l2norm_fwd buckets token counts by this many rows (NB = cdiv(T, ROWS_PER_BUCKET)).
ROWS_PER_BUCKET = 2048 * 32


def make_inputs(shape: dict, dtype: torch.dtype, device) -> tuple[torch.Tensor]:
    """T rows of D features: what fla.modules.l2norm sees after flattening (batch x seq x heads)."""
    return (torch.randn(shape["T"], shape["D"], dtype=dtype, device=device),)


def reference(x: torch.Tensor) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).sum(-1, keepdim=True) + EPS)).to(x.dtype)


def _outputs(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int, int, int]:
    T, D = x.shape
    return torch.empty_like(x), torch.empty(T, dtype=torch.float32, device=x.device), T, D, triton.next_power_of_2(D)


def launch_blocked(x: torch.Tensor, config: dict) -> torch.Tensor:
    """fla's l2norm_fwd for D <= 512 (rows in blocks of BT), with ``config`` instead of fla's pick."""
    y, rstd, T, D, BD = _outputs(x)
    grid = (triton.cdiv(T, config["BT"]),)
    aot_tune.untuned(l2norm_fwd_kernel)[grid](x=x, y=y, rstd=rstd, eps=EPS, T=T, D=D, BD=BD,
                                              NB=triton.cdiv(T, ROWS_PER_BUCKET), **config)
    return y


def launch_row(x: torch.Tensor, config: dict) -> torch.Tensor:
    """fla's l2norm_fwd for D > 512 (one program a row), with ``config`` instead of fla's pick."""
    y, rstd, T, D, BD = _outputs(x)
    aot_tune.untuned(l2norm_fwd_kernel_row)[(T,)](x=x, y=y, rstd=rstd, eps=EPS, D=D, BD=BD, **config)
    return y


#: Per kernel: the dtype of each tensor argument in fla's call order ("input": the launch's dtype).
TENSOR_ARGS = {
    "l2norm_fwd_kernel": ("input", "input", "float32"),      # x, y, rstd
    "l2norm_fwd_kernel_row": ("input", "input", "float32"),
}
#: Per kernel: its autotuner's key, in order (the manifest's key holds the same dims).
KEYS = {"l2norm_fwd_kernel": ("D", "NB"), "l2norm_fwd_kernel_row": ("D",)}


def fla_config_file(entries: list[dict], info: dict) -> str:
    """aot_tune exporter (``to: fla_tuning:fla_config_file``): one fla config file per kernel."""
    kernel = info["kernel"]
    table = {}
    for entry in entries:
        dtypes = [f"torch.{entry['dtype'] if d == 'input' else d}" for d in TENSOR_ARGS[kernel]]
        key = [entry["key"][dim] for dim in KEYS[kernel]] + dtypes
        config = dict(entry["config"])
        launch = {name: config.pop(name) for name in ("num_warps", "num_stages") if name in config}
        digest = hashlib.md5(json.dumps(key, separators=(",", ":"), sort_keys=True).encode()).hexdigest()
        table[digest] = {"autotune_key": key, "config": {"kwargs": config, "num_ctas": 1, "maxnreg": None, **launch},
                         "time_s": entry["time_s"]}
    body = {"kernel_name": kernel, "triton_version": info["triton"], "autotune_entries": table}
    return json.dumps(body, indent=2, sort_keys=True) + "\n"
