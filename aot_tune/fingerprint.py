"""Fingerprints: hashes of every input that decides a task's result, computed without importing
torch or triton so that a no-op ``doit tune`` stays fast.

A kernel's source fingerprint covers the kernel function, its launch function, and everything
they reference at module level (other ``@triton.jit`` helpers, constants, functions imported from
other modules under the project root), followed transitively. Editing one kernel therefore does
not invalidate another kernel that lives in the same file. Imports are followed only inside the
project: the standard library and installed packages are covered by the toolchain versions, and
aot_tune itself (the runtime table lookup) never changes what a config measures.
"""
from __future__ import annotations

import ast
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from .errors import TuneError

#: Bump when the meaning of a record changes, so every record is re-measured once.
RECORD_FORMAT = 2


def digest(*parts: Any) -> str:
    """A short stable hash of JSON-serializable parts."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


@dataclass
class _Module:
    path: Path
    source: str
    definitions: dict[str, ast.AST]
    imports: dict[str, tuple[str, str]]  # local name -> (module, attribute)


@dataclass
class SourceIndex:
    """Parses project modules once and answers 'which source decides this function'."""

    root: Path
    _modules: dict[str, _Module | None] = field(default_factory=dict)

    def closure(self, refs: Iterable[str], with_lines: bool = False) -> str:
        """Hash of the source of ``module:attr`` references and all they reach at module level."""
        pending = [self._checked(ref) for ref in refs]
        seen: dict[tuple[str, str], str] = {}
        while pending:
            module_name, name = pending.pop()
            if (module_name, name) in seen:
                continue
            module = self._module(module_name)
            if module is None or name not in module.definitions:
                if module is not None and name in module.imports:
                    pending.append(module.imports[name])
                    continue
                seen[(module_name, name)] = ""  # not Python source we can read: tracked by the toolchain
                continue
            node = module.definitions[name]
            seen[(module_name, name)] = _segment(module.source, node, with_lines)
            for referenced in _names_used(node):
                if referenced in module.definitions:
                    pending.append((module_name, referenced))
                elif referenced in module.imports:
                    pending.append(module.imports[referenced])
        return digest(sorted(seen.items()))

    def _checked(self, ref: str) -> tuple[str, str]:
        """A manifest reference must name a top-level definition of a module we can read; it may
        live in an installed package (found on sys.path, never imported)."""
        module_name, _, name = ref.partition(":")
        if module_name not in self._modules:
            self._modules[module_name] = self._parse(module_name, (self.root, *(Path(p) for p in sys.path if p)))
        module = self._modules[module_name]
        if module is None:
            raise TuneError(f"cannot find module '{module_name}' (from '{ref}') under {self.root} or sys.path; "
                            f"fix: check the module path in the manifest")
        if name not in module.definitions and name not in module.imports:
            raise TuneError(f"{module.path} has no top-level '{name}' (from '{ref}'); "
                            f"fix: name a function defined in that module")
        return module_name, name

    def _module(self, module_name: str) -> _Module | None:
        """A module followed from an import: project modules only, aot_tune excluded."""
        if module_name not in self._modules:
            tool = module_name == "aot_tune" or module_name.startswith("aot_tune.")
            self._modules[module_name] = None if tool else self._parse(module_name, (self.root,))
        return self._modules[module_name]

    def _parse(self, module_name: str, folders: tuple[Path, ...]) -> _Module | None:
        """Find the module's source in the folders, without importing anything."""
        parts = module_name.split(".")
        for folder in folders:
            base = folder.joinpath(*parts)
            for path in (base.with_suffix(".py"), base / "__init__.py"):
                if path.is_file():
                    source = path.read_text()
                    tree = ast.parse(source, filename=str(path))
                    return _Module(path, source, *_index(tree, module_name))
        return None


def _index(tree: ast.Module, module_name: str) -> tuple[dict[str, ast.AST], dict[str, tuple[str, str]]]:
    definitions: dict[str, ast.AST] = {}
    imports: dict[str, tuple[str, str]] = {}
    package = module_name.rpartition(".")[0]
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            definitions[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name_node in ast.walk(target):
                    if isinstance(name_node, ast.Name):
                        definitions[name_node.id] = node
        elif isinstance(node, ast.ImportFrom):
            source_module = node.module or ""
            if node.level:
                parts = package.split(".") if package else []
                parts = parts[: len(parts) - (node.level - 1)] if node.level > 1 else parts
                source_module = ".".join([*parts, source_module] if source_module else parts)
            for alias in node.names:
                imports[alias.asname or alias.name] = (source_module, alias.name)
    return definitions, imports


def _names_used(node: ast.AST) -> set[str]:
    return {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}


def _segment(source: str, node: ast.AST, with_lines: bool) -> str:
    lines = source.splitlines()
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    text = "\n".join(lines[first - 1: node.end_lineno])
    return f"@{first}\n{text}" if with_lines else text
