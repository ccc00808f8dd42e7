"""Exports end to end, in a project of someone else's (a folder outside this checkout with its own
tuning.yaml, kernel module and exporter): `doit tune` under the interpreter writes a vLLM-style
JSON file and a user exporter's file beside the generated module, refuses to write over a file
it did not write but updates its own in a fresh clone, and `doit check` fails on a missing or
stale export until `aot_tune export`."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from tunerun import doit, executed, subprocess_env, tune

from aot_tune.codegen import module_tables

KERNEL = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, out_ptr, N, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    for start in range(0, N, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        mask = cols < N
        x = tl.load(x_ptr + row * N + cols, mask=mask)
        tl.store(out_ptr + row * N + cols, x * 2, mask=mask)


def scale(x, config=None):
    config = config or {"BLOCK_N": 32, "num_warps": 1}
    out = torch.empty_like(x)
    scale_kernel[(x.shape[0],)](x, out, x.shape[1], BLOCK_N=config["BLOCK_N"], num_warps=config["num_warps"])
    return out


def make_inputs(shape, dtype, device):
    return (torch.randn(shape["M"], shape["N"], dtype=dtype, device=device),)


def reference(x):
    return x * 2
'''

EXPORTER = '''\
def csv_table(entries, info):
    rows = [f"# {info['kernel']} on {info['device_name']} (triton {info['triton']})", "N,M,dtype,BLOCK_N,num_warps"]
    rows += [f"{e['key']['N']},{e['key']['M']},{e['dtype']},{e['config']['BLOCK_N']},{e['config']['num_warps']}"
             for e in entries]
    return "\\n".join(rows) + "\\n"


def csv_table_v2(entries, info):
    return csv_table(entries, info).replace("# ", "# v2: ", 1)
'''

MANIFEST = """\
version: 1
defaults:
  targets: [sm90]
  bench: {warmup_ms: 1, rep_ms: 1}
kernels:
  scale:
    kernel: scalelib:scale_kernel
    launch: scalelib:scale
    inputs: scalelib:make_inputs
    reference: scalelib:reference
    key: [N, M]
    space: {BLOCK_N: [32, 64], num_warps: [1, 2]}
    shapes: [{grid: {N: [64], M: [1, 4]}}]
    dtypes: [float32]
    exports:
      - {to: json, path: "configs/N={N},device_name={device_name}.json"}
      - {to: "exporters:csv_table", path: "tables/{kernel}-{device}.csv"}
"""

JSON_EXPORT = "configs/N=64,device_name=Triton_interpreter__CPU_.json"
CSV_EXPORT = "tables/scale-interpreter.csv"
#: ``python -m aot_tune``: the commands of this checkout, whatever aot_tune is installed
AOT_TUNE = ("import runpy; runpy.run_module('aot_tune', run_name='__main__', alter_sys=True)",)


def aot_tune(project: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", *AOT_TUNE, *args], cwd=project, env=subprocess_env(),
                          capture_output=True, text=True, timeout=600)


def test_tune_writes_the_exports_guards_them_and_check_and_export_keep_them_in_sync(tmp_path):
    project = tmp_path / "library"
    project.mkdir()
    (project / "scalelib.py").write_text(KERNEL)
    (project / "exporters.py").write_text(EXPORTER)
    (project / "tuning.yaml").write_text(MANIFEST)
    foreign = project / JSON_EXPORT  # the library's own tuned file, where the export would go
    foreign.parent.mkdir()
    foreign.write_text('{"1": {"BLOCK_N": 128}}\n')

    refused = tune(project, "-n", "2", check=False)
    assert refused.returncode != 0
    assert f"{JSON_EXPORT} was not written by aot_tune" in refused.stdout + refused.stderr
    assert foreign.read_text() == '{"1": {"BLOCK_N": 128}}\n' and not (project / CSV_EXPORT).exists()
    assert not (project / "generated" / "scale.py").exists()  # nothing of the stage is written

    foreign.unlink()  # moved away: aot_tune may own the path now
    again = tune(project, "-n", "2")
    assert executed(again) == ["generate:scale"]  # the measurements were kept
    table = module_tables(project / "generated" / "scale.py")["interpreter"]
    exported = json.loads((project / JSON_EXPORT).read_text())
    assert list(exported) == ["1", "4"]
    assert exported == {str(m): table[(64, m, "float32")] for m in (1, 4)}
    assert all(set(config) == {"BLOCK_N", "num_warps"} for config in exported.values())
    csv = (project / CSV_EXPORT).read_text().splitlines()
    assert csv[0].startswith("# scale on Triton_interpreter__CPU_ (triton ")
    assert csv[2:] == [f"64,{m},float32,{table[(64, m, 'float32')]['BLOCK_N']},"
                       f"{table[(64, m, 'float32')]['num_warps']}" for m in (1, 4)]

    assert executed(tune(project, "-n", "2")) == []  # in sync: nothing to do
    assert "in sync" in doit(project, "check").stdout

    # a fresh clone: the exports are checked in, .aot_tune/ (the record of what aot_tune wrote) is not;
    # a retune that changes the cache still updates them, since they held what the old cache exported
    (project / ".aot_tune" / "exports.json").unlink()
    grown = MANIFEST.replace("M: [1, 4]", "M: [1, 2, 4]")
    (project / "tuning.yaml").write_text(grown)
    assert "generate:scale" in executed(tune(project, "-n", "2"))
    assert list(json.loads((project / JSON_EXPORT).read_text())) == ["1", "2", "4"]

    (project / JSON_EXPORT).unlink()  # a missing export, and a stale one (the exporter changed)
    (project / "tuning.yaml").write_text(grown.replace("exporters:csv_table", "exporters:csv_table_v2"))
    checked = doit(project, "check")
    assert checked.returncode == 1
    assert (f"problem: export {JSON_EXPORT} of kernel scale is missing; fix: run `doit export scale` and commit it"
            in checked.stdout), checked.stdout
    assert f"problem: export {CSV_EXPORT} of kernel scale does not match its cache" in checked.stdout
    helped = aot_tune(project, "export", "--help")
    assert helped.returncode == 0 and "aot_tune export [KERNEL ...]" in helped.stdout, helped.stderr
    exported = aot_tune(project, "export")
    assert exported.returncode == 0, exported.stderr
    assert exported.stdout.splitlines() == [f"wrote {JSON_EXPORT}", f"wrote {CSV_EXPORT}"]
    assert (project / CSV_EXPORT).read_text().startswith("# v2: scale")
    assert "in sync" in doit(project, "check").stdout
    assert aot_tune(project, "export", "scale").stdout.splitlines() == [
        f"unchanged {JSON_EXPORT}", f"unchanged {CSV_EXPORT}"]
