"""Errors a user can cause and fix.

The CLI catches :class:`TuneError`, prints ``str(err)`` as a single line and
exits 1 without a traceback, so every message must stand on its own: say where
the problem is, what is wrong, and how to fix it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

#: Longest user value (a module path, a name, a key, a value) a message shows whole.
SHOWN_CHARACTERS = 120


def shorten(value: object, limit: int = SHOWN_CHARACTERS) -> str:
    """A user value as a message shows it: whole up to ``limit`` characters, else its start and
    a ``…(N characters)`` marker, so a 10 MB name in a manifest never becomes a 10 MB error."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit - 20]}…({len(text):,} characters)"


def quoted(value: object, limit: int = SHOWN_CHARACTERS) -> str:
    """``repr(value)``, shortened as ``shorten`` does: a user's string as a message quotes it."""
    return shorten(repr(value), limit)


_program = "doit"


def program() -> str:
    """The program the user typed to run a command (``doit``, ``aot_tune``, ``python -m aot_tune``),
    for the commands a message tells them to run; ``doit`` until a command line sets it."""
    return _program


def set_program(name: str) -> None:
    global _program
    _program = name


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
        path = shorten(self.path, 2 * SHOWN_CHARACTERS)
        where = path if self.line is None else f"{path}:{self.line}"
        key = shorten(self.key, SHOWN_CHARACTERS + 40)  # key paths hold the user's keys
        parts = [where, key, self.problem] if key else [where, self.problem]
        text = ": ".join(parts)
        return f"{text}; fix: {self.fix}" if self.fix else text

    def __reduce__(self) -> tuple[type, tuple]:
        # Exception pickling replays self.args, which holds only the message;
        # doit may ship errors between processes, so rebuild from the fields.
        return (type(self), (self.path, self.line, self.key, self.problem, self.fix))


@dataclass(frozen=True)
class StageFailure:
    """A stage task that failed for a reason the user can act on (one line); the run's other
    tasks go on, and the tables stay as they were. The doit loader turns it into a failed task."""

    message: str
