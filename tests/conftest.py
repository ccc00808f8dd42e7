"""Test-session setup.

Kernels in this process run under the Triton interpreter, which Triton reads when it is first
imported, so it is switched on here, before any test module imports triton. Everything that
must compile or launch for real (doit runs, compile workers, GPU checks) runs in subprocesses
that remove it.
"""
import os

os.environ.setdefault("TRITON_INTERPRET", "1")
# The machine's run history (aot_tune.runs.history) is off for the session and every `doit tune`
# it starts, so that no test reads or writes the real one under ~/.cache, nor depends on another
# test's runs; its tests point it at a folder of their own.
os.environ["AOT_TUNE_HISTORY"] = "off"
# Likewise the forecast's defaults are taken as they are, not at this machine's pace (a probe's
# time: aot_tune.pipeline.calibration.machine_pace); its tests set it themselves.
os.environ["AOT_TUNE_PACE"] = "1"


import pytest  # noqa: E402


@pytest.fixture(scope="session")
def compile_executors(tmp_path_factory):
    """One compile worker for the session's real cross-compiles and captures (it imports torch
    and triton once), compiling into one fresh Triton cache."""
    from aot_tune.workers.pools import Executors
    from aot_tune.bench.runner import INTERPRETER_DEVICE

    pool = Executors(INTERPRETER_DEVICE, tmp_path_factory.mktemp("triton-cache"), compile_jobs=1)
    yield pool
    pool.close()


@pytest.fixture(autouse=True)
def program_restored():
    """A command run in this process names the program it was typed as in later messages
    (aot_tune.errors.program); each test starts from doit's."""
    from aot_tune import errors

    errors.set_program("doit")
    yield
    errors.set_program("doit")
