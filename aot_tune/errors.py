"""Errors a user can cause and fix.

The CLI catches :class:`TuneError`, prints ``str(err)`` as a single line and
exits 1 without a traceback, so every message must stand on its own: say where
the problem is, what is wrong, and how to fix it.
"""

from __future__ import annotations

import os


class TuneError(Exception):
    """An error the user can cause and fix; the CLI prints str(err) as one line and exits 1 (no traceback)."""


class BenchUnavailable(TuneError):
    """No device of the model a bench task needs can run it (e.g. a cluster lost every such worker,
    or its scheduler); the task fails with this one line and writes nothing."""


class ManifestError(TuneError):
    """A mistake in tuning.yaml, located by file, line and dotted key path.

    ``str()`` reads ``tuning.yaml:12: kernels.gemm.space.BLOCK_M: expected a
    non-empty list, got 64; fix: write BLOCK_M: [64]``. The line or key part is
    left out when unknown (e.g. a missing file has neither).
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        line: int | None,
        key: str,
        problem: str,
        fix: str,
    ) -> None:
        self.path = os.fspath(path)
        self.line = line
        self.key = key
        self.problem = problem
        self.fix = fix
        super().__init__(self._format())

    def _format(self) -> str:
        where = self.path if self.line is None else f"{self.path}:{self.line}"
        parts = [where, self.key, self.problem] if self.key else [where, self.problem]
        text = ": ".join(parts)
        return f"{text}; fix: {self.fix}" if self.fix else text

    def __reduce__(self) -> tuple[type, tuple]:
        # Exception pickling replays self.args, which holds only the message;
        # doit may ship errors between processes, so rebuild from the fields.
        return (type(self), (self.path, self.line, self.key, self.problem, self.fix))
