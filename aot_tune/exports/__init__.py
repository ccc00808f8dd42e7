"""Exports: a kernel's tables also written in the formats libraries read (``exports:`` in
tuning.yaml), so a library can use aot_tune as its tuner with no change to its runtime code.

``export`` is the interface (render, prepare and write, claim, stale, problems, remove_dropped); the formats sit
beside it: ``json_format`` (vLLM's tuned-config files) and ``user`` (a project's own
``module:function``); ``ownership`` keeps the record of what aot_tune wrote."""
from aot_tune.exports.export import (ExportFile, PreparedExports, claim, prepare, problems, remove_dropped, render,
                                     stale, write)

__all__ = ["ExportFile", "PreparedExports", "claim", "prepare", "problems", "remove_dropped", "render", "stale",
           "write"]
