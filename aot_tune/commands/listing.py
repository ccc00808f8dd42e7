"""``doit list`` / ``aot_tune list``: the stages of tuning.yaml's tasks, in any folder with a
tuning.yaml. doit picks its task loader from ``[tool.doit] loader``; without that setting it
would look for a dodo.py, so this command takes the manifest loader where there is a tuning.yaml
and no dodo.py, and stays doit's own ``list`` for every other doit project.
"""
from __future__ import annotations

from pathlib import Path

from doit.cmd_base import DodoTaskLoader
from doit.cmd_list import List

from aot_tune.commands.loader import ManifestLoader
from aot_tune.commands.options import HelpOption


def manifest_project(task_loader) -> bool:
    """A folder doit would read a dodo.py from that holds a tuning.yaml instead."""
    default = task_loader is None or type(task_loader) is DodoTaskLoader
    return default and Path("tuning.yaml").is_file() and not Path("dodo.py").exists()


class StageList(HelpOption, List):
    name = "list"
    doc_purpose = "list the stages of tuning.yaml's tasks (--all: every task)"

    def __init__(self, task_loader=None, **kwargs) -> None:
        if manifest_project(task_loader):
            task_loader = ManifestLoader()
        super().__init__(task_loader=task_loader, **kwargs)
