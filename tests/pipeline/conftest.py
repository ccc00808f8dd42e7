"""Set-up that tests of several pipeline modules share."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
from tunerun import doit_command


@pytest.fixture(scope="session")
def tuned_library(tmp_path_factory) -> SimpleNamespace:
    """test_stranger_project's library migrated with ``doit adopt``, listed with ``doit list``,
    then tuned once with ``doit tune`` under the interpreter (its tables inside its package): its
    folder, and the listing. Each test that builds, installs or edits it works on a copy."""
    from test_stranger_project import adopted, run

    root = adopted(tmp_path_factory.mktemp("library") / "lib")
    listed = run(root, *doit_command(), "list")
    run(root, *doit_command(), "tune", "-n", "2", "--bench-backend", "interpreter")
    return SimpleNamespace(root=root, listed=listed)
