"""aot_tune.autotune under the Triton interpreter: forced candidates, table lookups, fallbacks,
hooks, and the proof that a launch never benchmarks or compiles more than the config it runs."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import uuid
import warnings
from pathlib import Path

import pytest
import torch
import triton
import triton.language as tl

import aot_tune
from aot_tune.errors import TuneError
from aot_tune.runtime import TuningWarning, UntunedError, launch_with_config

ROOT = Path(__file__).resolve().parents[2]

TABLE = '''KERNEL = "scale"
KEY = ("n",)
DEVICES = {"interpreter": {"compute_capability": "cpu", "name": "Triton interpreter (CPU)"}}
TABLES = {
    "interpreter": {
        (64, "float32"): {"BLOCK": 16, "num_warps": 1},
        (4096, "float32"): {"BLOCK": 256, "num_warps": 4},
        (64, "float16"): {"BLOCK": 32, "num_warps": 2},
    },
}
'''

CONFIGS = [triton.Config({"BLOCK": 128}, num_warps=4, num_stages=1),
           triton.Config({"BLOCK": 8}, num_warps=1, num_stages=1)]


@triton.jit
def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    """out = x * factor, one BLOCK per program."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)


@triton.jit
def accumulate_kernel(x_ptr, acc_ptr, n, BLOCK: tl.constexpr):
    """acc += x: run twice without a reset, acc holds 2x."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(acc_ptr + offs, tl.load(acc_ptr + offs, mask=mask) + tl.load(x_ptr + offs, mask=mask), mask=mask)


class Spy:
    """Stands in for a decorated kernel's inner function: records every launch's meta-parameters
    and forwards it (each decorated kernel gets its own spy, though they share scale_kernel)."""

    def __init__(self, kernel: aot_tune.runtime.decorator.TunedKernel, monkeypatch) -> None:
        self.launches: list[dict] = []
        self.inner = kernel.fn
        monkeypatch.setattr(kernel, "fn", self)

    def run(self, *args, grid, warmup, **kwargs):
        self.launches.append({k: v for k, v in kwargs.items() if k in ("BLOCK", "num_warps", "num_stages")})
        return self.inner.run(*args, grid=grid, warmup=warmup, **kwargs)


@pytest.fixture
def table_module(tmp_path, monkeypatch):
    """A generated table under a unique module name; returns the name."""
    name = f"aot_tune_test_decorated_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(TABLE)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    sys.modules.pop(name, None)


def decorate(module: str, **options):
    """A fresh decorated scale_kernel reading ``module`` (fresh: memos and warnings start empty)."""
    options.setdefault("configs", CONFIGS)
    return aot_tune.autotune(key=["n"], table="scale", module=module, **options)(scale_kernel)


def scale(kernel, n: int, dtype=torch.float32, factor: float = 3.0) -> torch.Tensor:
    x = torch.arange(n, dtype=dtype)
    out = torch.full_like(x, float("nan"))
    kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n, factor)
    torch.testing.assert_close(out, x * factor)
    return out


def tuning_warnings(record) -> list[str]:
    return [str(w.message) for w in record if issubclass(w.category, TuningWarning)]


# --------------------------------------------------------------------------- run time: the table


def test_tuned_key_launches_the_table_config_once_without_warning(table_module, monkeypatch) -> None:
    kernel = decorate(table_module)
    spy = Spy(kernel, monkeypatch)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        scale(kernel, 64)
        scale(kernel, 4096)
        scale(kernel, 64, torch.float16)
    assert spy.launches == [{"BLOCK": 16, "num_warps": 1}, {"BLOCK": 256, "num_warps": 4},
                            {"BLOCK": 32, "num_warps": 2}]
    assert tuning_warnings(record) == []


def test_key_args_may_be_keywords_and_the_dtype_comes_from_the_first_tensor(table_module, monkeypatch) -> None:
    kernel = decorate(table_module)
    spy = Spy(kernel, monkeypatch)
    x = torch.ones(4096)
    out = torch.empty(4096)
    kernel[lambda meta: (triton.cdiv(4096, meta["BLOCK"]),)](x, out, n=4096, factor=2.0)
    kernel[lambda meta: (triton.cdiv(4096, meta["BLOCK"]),)](x_ptr=x, out_ptr=out, n=4096, factor=2.0)
    assert spy.launches == [{"BLOCK": 256, "num_warps": 4}] * 2
    assert kernel.config_for(x, out, 4096, 2.0) == {"BLOCK": 256, "num_warps": 4}
    assert torch.equal(out, 2 * x)


def test_unseen_key_uses_the_nearest_tuned_key_and_warns_once_per_key(table_module, monkeypatch) -> None:
    kernel = decorate(table_module)
    spy = Spy(kernel, monkeypatch)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(3):
            scale(kernel, 100)   # log2 distance 0.64 to 64, 5.36 to 4096
        for _ in range(2):
            scale(kernel, 3000)  # nearer 4096
    assert spy.launches == [{"BLOCK": 16, "num_warps": 1}] * 3 + [{"BLOCK": 256, "num_warps": 4}] * 2
    messages = tuning_warnings(record)
    assert len(messages) == 2
    assert "'n': 100" in messages[0] and "nearest" in messages[0] and "doit tune scale" in messages[0]
    assert "'n': 3000" in messages[1]
    assert all(w.filename == __file__ for w in record)  # the warning points at the launch line


def test_strict_mode_raises_one_line_naming_kernel_key_device_and_fix(table_module, monkeypatch) -> None:
    kernel = decorate(table_module, strict=True)
    scale(kernel, 64)  # tuned keys launch as usual
    with pytest.raises(UntunedError) as info:
        scale(kernel, 100)
    message = str(info.value)
    assert "\n" not in message
    for part in ("scale", "'n': 100", "float32", "'interpreter'", "fix:", "`doit tune scale`"):
        assert part in message


def test_strict_mode_follows_the_environment(table_module, monkeypatch) -> None:
    monkeypatch.setenv("AOT_TUNE_STRICT", "1")
    with pytest.raises(UntunedError):
        scale(decorate(table_module), 100)
    with pytest.raises(UntunedError, match="no generated module"):
        scale(decorate(f"aot_tune_missing_{uuid.uuid4().hex}"), 64)
    monkeypatch.setenv("AOT_TUNE_STRICT", "0")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TuningWarning)
        scale(decorate(table_module), 100)


def test_without_a_usable_table_the_first_config_is_the_default(monkeypatch) -> None:
    kernel = decorate(f"aot_tune_missing_{uuid.uuid4().hex}")
    spy = Spy(kernel, monkeypatch)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        scale(kernel, 64)
        scale(kernel, 100)
    assert spy.launches == [{"BLOCK": 128, "num_warps": 4, "num_stages": 1}] * 2
    assert len(tuning_warnings(record)) == 1  # one warning for the missing module, not one per key


def test_a_declared_default_wins_over_the_configs(table_module, monkeypatch) -> None:
    kernel = decorate(table_module, default={"BLOCK": 64, "num_warps": 2})
    spy = Spy(kernel, monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TuningWarning)
        scale(kernel, 64, torch.float16)  # tuned
        scale(kernel, 100, torch.float16)  # nearest float16 key
        scale(kernel, 100, torch.float64)  # no float64 entries: the default
    assert spy.launches == [{"BLOCK": 32, "num_warps": 2}] * 2 + [{"BLOCK": 64, "num_warps": 2}]


def test_prune_configs_by_picks_the_fallback_without_measuring(monkeypatch) -> None:
    seen = []

    def early_config_prune(configs, named_args, **kwargs):
        seen.append(named_args["n"])
        return [c for c in configs if c.kwargs["BLOCK"] <= named_args["n"]]

    missing = f"aot_tune_missing_{uuid.uuid4().hex}"
    pruned = decorate(missing, prune_configs_by={"early_config_prune": early_config_prune})
    modelled = decorate(missing, prune_configs_by={"perf_model": lambda **meta: meta["BLOCK"], "top_k": 1})
    spy_pruned, spy_modelled = Spy(pruned, monkeypatch), Spy(modelled, monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TuningWarning)
        scale(pruned, 100)
        scale(pruned, 100)
        scale(modelled, 1000)
    assert spy_pruned.launches == [{"BLOCK": 8, "num_warps": 1, "num_stages": 1}] * 2
    assert seen == [100]  # once per key, then memoized
    assert spy_modelled.launches == [{"BLOCK": 8, "num_warps": 1, "num_stages": 1}]


def test_a_config_pre_hook_runs_at_every_launch_and_the_tuning_hooks_do_not(table_module) -> None:
    calls = []
    configs = [triton.Config({"BLOCK": 16}, num_warps=1, pre_hook=lambda nargs: calls.append(("config", nargs["n"])))]
    kernel = decorate(table_module, configs=configs, pre_hook=lambda nargs: calls.append(("tuning", nargs["n"])),
                      post_hook=lambda nargs, exception: calls.append(("post", nargs["n"])))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TuningWarning)
        scale(kernel, 64)    # the table's config {BLOCK: 16, num_warps: 1}: not in configs, the shared hook runs
        scale(kernel, 4096)
    assert calls == [("config", 64), ("config", 4096)]


# --------------------------------------------------------------------------- tuning: forced candidates


def launch_scale(x: torch.Tensor, factor: float = 3.0) -> torch.Tensor:
    """A manifest launch function: no config parameter, the decorated kernel is forced."""
    out = torch.empty_like(x)
    n = x.numel()
    FORCED_TARGET[0][lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n, factor)
    return out


FORCED_TARGET: list = [None]


def test_launch_with_config_forces_the_candidate_on_the_decorated_kernel(table_module, monkeypatch) -> None:
    kernel = FORCED_TARGET[0] = decorate(table_module)
    spy = Spy(kernel, monkeypatch)
    x = torch.arange(64, dtype=torch.float32)
    for block in (8, 32):
        out = launch_with_config(launch_scale, (x,), {"BLOCK": block, "num_warps": 2}, kernel="scale")
        torch.testing.assert_close(out, 3 * x)
    assert spy.launches == [{"BLOCK": 8, "num_warps": 2}, {"BLOCK": 32, "num_warps": 2}]
    scale(kernel, 64)  # outside the context: the table again
    assert spy.launches[-1] == {"BLOCK": 16, "num_warps": 1}


def test_a_candidate_for_another_kernel_is_not_forced_and_an_unforced_launch_raises(table_module) -> None:
    FORCED_TARGET[0] = decorate(table_module)
    x = torch.arange(64, dtype=torch.float32)
    with pytest.raises(TuneError) as info:
        launch_with_config(launch_scale, (x,), {"BLOCK": 8}, kernel="gemm")
    message = str(info.value)
    assert "\n" not in message and "launch_scale" in message and "table='gemm'" in message


def test_a_launch_function_with_a_config_parameter_gets_it() -> None:
    got = []
    assert launch_with_config(lambda x, config=None: got.append(config) or x, (5,), {"BLOCK": 8}) == 5
    assert got == [{"BLOCK": 8}]


def test_forced_launches_run_reset_to_zero_and_restore_value(table_module) -> None:
    def decorated(**hooks):
        return aot_tune.autotune(configs=CONFIGS, key=["n"], table="acc", module=table_module, **hooks)(accumulate_kernel)

    def launcher(kernel):
        def launch(x, acc):
            kernel[lambda meta: (triton.cdiv(64, meta["BLOCK"]),)](x, acc, 64)
            return acc.clone()
        return launch

    x, acc = torch.ones(64), torch.full((64,), 5.0)
    reset = launcher(decorated(reset_to_zero=["acc_ptr"]))
    for _ in range(3):  # zeroed before each forced launch: acc never accumulates across runs
        assert torch.equal(launch_with_config(reset, (x, acc), {"BLOCK": 16}, kernel="acc"), x)
    launch_with_config(reset, (x, acc), {"BLOCK": 16}, kernel="acc", hooks=False)
    assert torch.equal(acc, 2 * x)  # no hooks: no reset (the compile stage launches nothing)

    restore = launcher(decorated(restore_value=["acc_ptr"]))
    acc = torch.full((64,), 5.0)
    launch_with_config(restore, (x, acc), {"BLOCK": 16}, kernel="acc")
    assert torch.equal(acc, torch.full((64,), 5.0))  # restored after the launch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TuningWarning)
        restore(x, acc)  # run time: no tuning hooks, the launch's effect stays
    assert torch.equal(acc, torch.full((64,), 6.0))


def test_forced_launches_run_user_hooks_with_the_exception(table_module, monkeypatch) -> None:
    calls = []
    kernel = FORCED_TARGET[0] = decorate(
        table_module, pre_hook=lambda nargs: calls.append(("pre", nargs["BLOCK"])),
        post_hook=lambda nargs, exception: calls.append(("post", type(exception).__name__)))
    x = torch.arange(64, dtype=torch.float32)
    launch_with_config(launch_scale, (x,), {"BLOCK": 8}, kernel="scale")
    monkeypatch.setattr(kernel, "fn", type("Failing", (), {"run": lambda self, *a, **k: 1 / 0})())
    with pytest.raises(ZeroDivisionError):
        launch_with_config(launch_scale, (x,), {"BLOCK": 8}, kernel="scale")
    assert calls == [("pre", 8), ("post", "NoneType"), ("pre", 8), ("post", "ZeroDivisionError")]


# --------------------------------------------------------------------------- never tune at run time


def test_an_unseen_key_never_benchmarks_and_launches_only_the_chosen_config(table_module, monkeypatch) -> None:
    """Under the interpreter every kernel invocation goes through ``run``: count them, and make
    every benchmarking entry point Triton has fail loudly."""
    def no_bench(*args, **kwargs):
        raise AssertionError("benchmarked at run time")

    monkeypatch.setattr(triton.testing, "do_bench", no_bench)
    monkeypatch.setattr(triton.testing, "do_bench_cudagraph", no_bench)
    kernel = decorate(table_module)
    spy = Spy(kernel, monkeypatch)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TuningWarning)
        scale(kernel, 1000)
        scale(kernel, 1000, torch.float16)
    assert spy.launches == [{"BLOCK": 256, "num_warps": 4}, {"BLOCK": 32, "num_warps": 2}]


_COMPILE_PROBE = r"""
import json, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import torch, triton, triton.language as tl
import aot_tune
from aot_tune import triton_compat
from aot_tune.runtime import lookup as runtime

@triton.jit
def scale_kernel(x_ptr, out_ptr, n, factor, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * factor, mask=mask)

configs = [triton.Config({"BLOCK": b}, num_warps=w) for b, w in ((128, 4), (8, 1), (512, 8), (64, 2))]
kernel = aot_tune.autotune(configs=configs, key=["n"], table="scale", module=sys.argv[3])(scale_kernel)
runtime._uniform_key = "h100-sxm"  # what a process on an H100 SXM computes on its first launch
counter = triton_compat.CacheHitCounter()
with counter.installed(), triton_compat.target_driver(90), \
        triton_compat.compile_instead_of_launch(kernel) as captured:
    x = torch.empty(5000, device="meta")
    kernel[lambda meta: (triton.cdiv(5000, meta["BLOCK"]),)](x, torch.empty_like(x), 5000, 2.0)
print(json.dumps({"compiles": counter.hits + counter.misses, "captured": [c.name for c in captured],
                  "config": kernel.config_for(x, x, 5000, 2.0)}))
"""

GPU_TABLE = '''KERNEL = "scale"
KEY = ("n",)
DEVICES = {"h100-sxm": {"compute_capability": "9.0", "name": "NVIDIA H100 80GB HBM3"}}
TABLES = {"h100-sxm": {(1024, "float32"): {"BLOCK": 32, "num_warps": 2},
                       (4096, "float32"): {"BLOCK": 256, "num_warps": 4}}}
'''


def test_an_unseen_key_compiles_only_the_chosen_config_for_a_real_gpu_target(tmp_path) -> None:
    """A real JIT launch path (cross-compiled for sm90, no GPU): Triton's compile listener sees
    one compile for an untuned key, of the nearest key's config, out of four configs."""
    from tunerun import subprocess_env

    (tmp_path / "scale_gpu_table.py").write_text(GPU_TABLE)
    (tmp_path / "probe.py").write_text(_COMPILE_PROBE)  # @triton.jit needs its source in a file
    env = {**subprocess_env(), "TRITON_CACHE_DIR": str(tmp_path / "triton-cache")}
    proc = subprocess.run([sys.executable, str(tmp_path / "probe.py"), str(tmp_path), str(ROOT), "scale_gpu_table"],
                          capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["compiles"] == 1
    assert result["captured"] == ["scale_kernel"]
    assert result["config"] == {"BLOCK": 256, "num_warps": 4}  # 5000 is nearest 4096
    assert "was not tuned on 'h100-sxm'" in proc.stderr  # and it said so


# --------------------------------------------------------------------------- misuse


def test_key_names_must_be_kernel_arguments() -> None:
    with pytest.raises(TuneError, match="key names size, which is not an argument; fix: use argument names"):
        aot_tune.autotune(configs=CONFIGS, key=["size"])(scale_kernel)


def test_triton_only_benchmark_options_are_accepted_and_typos_are_not() -> None:
    aot_tune.autotune(configs=CONFIGS, key=["n"], warmup=5, rep=20, do_bench=None, cache_results=True)(scale_kernel)
    with pytest.raises(TypeError, match="tabel"):
        aot_tune.autotune(configs=CONFIGS, key=["n"], tabel="scale")


def test_a_triton_older_than_the_runtime_launches_with_is_refused_at_decoration(monkeypatch) -> None:
    """triton 2.x lacks Config.all_kwargs: a launch would fail deep inside; decorating says so in one line."""
    monkeypatch.setattr(triton, "__version__", "2.3.1")
    with pytest.raises(TuneError, match=r"on scale_kernel: triton 2.3 is older than 3.0, the oldest the runtime "
                                        r"launches with; fix: install triton>=3.0"):
        aot_tune.autotune(configs=CONFIGS, key=["n"])(scale_kernel)
    monkeypatch.setattr(triton, "__version__", "3.0.0")
    aot_tune.autotune(configs=CONFIGS, key=["n"])(scale_kernel)


def test_warm_start_applies_only_to_the_triton_releases_it_was_read_against(monkeypatch) -> None:
    from aot_tune import triton_compat

    for version, applies in (("3.5.1", False), ("3.6.0", True), ("3.9.0+git1234", True), ("3.10.0", False)):
        monkeypatch.setattr(triton, "__version__", version)
        assert triton_compat.warm_start_applies() is applies, version


def test_a_table_keyed_by_other_names_is_one_clear_error(tmp_path, monkeypatch) -> None:
    name = f"aot_tune_test_other_key_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text(TABLE.replace('KEY = ("n",)', 'KEY = ("numel",)'))
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(TuneError, match=r"keyed by numel but the launch gives n; fix:"):
        scale(decorate(name), 64)


def test_the_decorator_imports_neither_torch_nor_triton() -> None:
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT)!r})
        import aot_tune
        assert callable(aot_tune.autotune)
        print(sorted(m for m in ("torch", "triton") if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "[]"


# --------------------------------------------------------------------------- Triton's Autotuner attributes


def test_best_config_configs_and_key_behave_as_on_tritons_autotuner(table_module) -> None:
    kernel = decorate(table_module)
    tuner = triton.autotune(configs=CONFIGS, key=["n"])(scale_kernel)
    assert kernel.configs == tuner.configs and kernel.keys == tuner.keys == kernel.key == ["n"]
    assert kernel.best_config is None  # as on Triton's, until a launch
    scale(kernel, 64)
    assert isinstance(kernel.best_config, triton.Config)
    assert kernel.best_config.all_kwargs() == {"BLOCK": 16, "num_warps": 1, "num_ctas": 1, "num_stages": 3}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TuningWarning)
        fallback = decorate(f"{table_module}_missing")
        scale(fallback, 64)
    assert fallback.best_config is CONFIGS[0]  # a config of the list is that very object


def test_warnings_point_at_the_callers_line_through_heuristics_and_launch_functions(tmp_path, monkeypatch) -> None:
    """A launch through @triton.heuristics (Triton's frames) and a launch wrapper in another module:
    each warning names the line that made the call, never aot_tune's or Triton's."""
    kernel = triton.heuristics({"unused": lambda args: 1})(decorate("aot_tune_test_no_such_table"))
    (tmp_path / "aot_tune_test_wrapper.py").write_text(textwrap.dedent('''\
        import triton, torch
        def launch(kernel, n):
            x = torch.ones(n)
            out = torch.empty(n)
            kernel[lambda meta: (triton.cdiv(n, meta["BLOCK"]),)](x, out, n, 2.0)
            return out
        '''))
    monkeypatch.syspath_prepend(str(tmp_path))
    import aot_tune_test_wrapper

    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        line = sys._getframe().f_lineno + 1
        kernel[lambda meta: (triton.cdiv(64, meta["BLOCK"]),)](torch.ones(64), torch.empty(64), 64, 2.0)
    assert [(w.filename, w.lineno) for w in record if w.category is TuningWarning] == [(__file__, line)]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        aot_tune_test_wrapper.launch(decorate("aot_tune_test_no_such_table"), 64)
    assert [(Path(w.filename).name, w.lineno) for w in record if w.category is TuningWarning] == [
        ("aot_tune_test_wrapper.py", 5)]
