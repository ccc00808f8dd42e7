"""The project's Python files a bench worker needs, shipped so workers need no copy of the checkout.

A worker imports the manifest's launch, input and reference functions. Those live in the
project's own packages (``kernels/`` here), which may import more of the project. We ship every
``.py`` file of each top-level package or module under the project root that the manifest's
references name or that those files import, followed transitively (installed packages and
aot_tune are the workers' own). A worker unpacks a bundle once, into a folder named by its
digest, so an edited kernel gets a fresh folder and a fresh device process.
"""
from __future__ import annotations

import ast
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from aot_tune.errors import TuneError

#: Bigger than any kernel library's sources; a bundle this large means something else is being picked up.
MAX_BUNDLE_BYTES = 64 * 2**20
_SKIPPED_FOLDERS = {"__pycache__", ".git", ".aot_tune"}


@dataclass(frozen=True)
class SourceBundle:
    digest: str
    files: tuple[tuple[str, bytes], ...]  # (path relative to the project root, content), sorted


def project_sources(root: Path, refs: Iterable[str]) -> SourceBundle:
    """The files of the top-level project packages that ``module:attr`` refs reach through imports."""
    files: dict[str, bytes] = {}
    seen: set[str] = set()
    pending = [ref.partition(":")[0] for ref in refs]
    while pending:
        top = pending.pop().split(".")[0]
        if not top or top in seen or top == "aot_tune":
            continue
        seen.add(top)
        for path in _top_level_files(root, top):
            data = path.read_bytes()
            files[path.relative_to(root).as_posix()] = data
            pending.extend(_imported_modules(data, path))
    size = sum(len(data) for data in files.values())
    if size > MAX_BUNDLE_BYTES:
        raise TuneError(f"the project packages {', '.join(sorted(seen))} under {root} hold {size / 2**20:.0f} MiB of "
                        f"Python files, too many to ship to bench workers; fix: keep the kernels in a smaller package")
    ordered = tuple(sorted(files.items()))
    digest = hashlib.sha256()
    for name, data in ordered:
        digest.update(name.encode() + b"\0" + hashlib.sha256(data).digest())
    return SourceBundle(digest.hexdigest()[:20], ordered)


def _top_level_files(root: Path, top: str) -> list[Path]:
    if (root / f"{top}.py").is_file():
        return [root / f"{top}.py"]
    package = root / top
    if not package.is_dir():
        return []  # not the project's: an installed package or the standard library
    found = []
    for folder, subfolders, names in os.walk(package):
        subfolders[:] = sorted(s for s in subfolders if s not in _SKIPPED_FOLDERS)
        found.extend(Path(folder) / name for name in sorted(names) if name.endswith(".py"))
    return found


def _imported_modules(source: bytes, path: Path) -> list[str]:
    """Absolute module names a file imports anywhere in it (relative imports stay in its package)."""
    try:
        tree = ast.parse(source, filename=str(path))
    except SyntaxError:
        return []
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.extend(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.append(node.module)
    return names


def unpack(bundle: SourceBundle, base: Path) -> Path:
    """The folder holding the bundle's files under ``base`` (written once, atomically)."""
    target = base / bundle.digest
    if target.is_dir():
        return target
    base.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=base, prefix=f".{bundle.digest}-"))
    for name, data in bundle.files:
        path = staging / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    try:
        staging.rename(target)
    except OSError:  # another process unpacked the same bundle first
        shutil.rmtree(staging, ignore_errors=True)
    return target
