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


def pytest_collection_modifyitems(items):
    """Tests marked ``gpu`` share one xdist group: under ``-n`` they run on one worker, one after
    another, since they time kernels on the GPU (a mark without effect where xdist is not used)."""
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(pytest.mark.xdist_group("gpu"))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """``-n N`` (the README's test command) spreads the tests over N workers, each group (the GPU
    tests) whole on one of them; called only where pytest-xdist is installed."""
    from xdist.scheduler import LoadGroupScheduling

    return LoadGroupScheduling(config, log)
