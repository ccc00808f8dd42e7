"""Which source decides a function: the closure of a ``module:attr`` reference through the code it
reaches, hashed without importing anything (no torch or triton), so that a no-op ``doit tune``
stays fast, and the manifest reads a ``configs:`` list's cache without the fingerprints of
measurements (aot_tune.fingerprint), which build on these closures.

A closure covers the function and everything it references at module level, followed
transitively through every import form inside the project: ``from pkg.mod import name``,
``from pkg import mod``, ``import pkg.mod`` and ``import pkg.mod as m`` (an attribute chain such as ``m.SCALE`` or ``pkg.mod.helper`` is
followed to the definition it names; a module used as a whole covers all its definitions).
Editing one kernel therefore does not invalidate another kernel that lives in the same file.

Code outside the project is covered by the distribution it is installed from, by name and
version (a third-party kernel library's helpers: upgrading it marks its tables stale). The
standard library, triton and torch are covered by the toolchain versions every record names,
and aot_tune itself (the runtime table lookup) never changes what a config measures. A module
outside the project that no installed distribution owns (a folder on ``sys.path``) is followed
as source, like the project's own.

``closure_parts`` also names each piece with its own digest, so that ``doit check`` can say
which dependency changed (records keep those parts, aot_tune.tuning.proto ``Dependency``).
"""
from __future__ import annotations

import ast
import functools
import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from aot_tune.errors import TuneError, shorten

#: Packages covered by the toolchain versions of every record (or that never change a measurement).
TOOLCHAIN_PACKAGES = frozenset({"triton", "torch", "aot_tune"})
#: The folder holding this aot_tune, where a manifest's ``aot_tune.record.replay`` refs are read
#: (an editable install is not on sys.path as a folder).
_AOT_TUNE_HOME = Path(__file__).resolve().parents[1]


def digest(*parts: Any) -> str:
    """A short stable hash of JSON-serializable parts."""
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


@dataclass
class _Module:
    name: str
    path: Path
    source: str
    definitions: dict[str, ast.AST]
    imports: dict[str, tuple[str, str]]  # local name -> (module, attribute): from-imports
    modules: dict[str, str]  # local name -> module name: ``import a.b`` binds a, ``import a.b as c`` binds c


#: (module, name, attribute chain after the name): one reference to follow.
_Ref = tuple[str, str, tuple[str, ...]]


@dataclass
class SourceIndex:
    """Parses project modules once and answers 'which source decides this function'."""

    root: Path
    _modules: dict[str, _Module | None] = field(default_factory=dict)

    def closure(self, refs: Iterable[str], with_lines: bool = False) -> str:
        """Hash of the source of ``module:attr`` references and all they reach."""
        return self.closure_parts(refs, with_lines)[0]

    def closure_parts(self, refs: Iterable[str], with_lines: bool = False,
                      signatures: Iterable[str] = ()) -> tuple[str, dict[str, str]]:
        """The closure's hash, and each piece it covers with a digest of its own: project
        definitions as ``path:name``, installed distributions as ``distribution NAME`` (its version).
        A function named in ``signatures`` counts by its decorators and parameters alone (what
        Triton's specialization of a kernel's arguments reads), not by its body."""
        pending: list[_Ref] = [(*self._checked(ref), ()) for ref in refs]
        signature_only = {self._checked(ref)[:2] for ref in signatures}
        seen: dict[tuple[str, str], str] = {}
        distributions: dict[str, str] = {}
        while pending:
            module_name, name, rest = pending.pop()
            if (module_name, name) in seen and not rest:
                continue
            module = self._module(module_name)
            if module is None:
                _add_distribution(module_name, distributions)
                seen.setdefault((module_name, name), "")  # not Python source we follow: the toolchain's
                continue
            if not module.path.is_relative_to(self.root):  # a ref found on sys.path may belong to one
                _add_distribution(module_name, distributions)
            if name in module.definitions:
                if (module_name, name) in seen:
                    continue
                node = module.definitions[name]
                if (module_name, name) in signature_only and isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    heading = [*node.decorator_list, node.args]
                    seen[(module_name, name)] = "\n".join(ast.unparse(part) for part in heading)
                    pending.extend(ref for part in heading for ref in self._uses(module, part))
                    continue
                seen[(module_name, name)] = _segment(module.source, node, with_lines)
                pending.extend(self._uses(module, node))
            elif name in module.imports:
                pending.append((*module.imports[name], rest))
            elif name in module.modules:
                pending.extend(self._module_attribute(module.modules[name], rest, distributions))
            elif self._module(f"{module_name}.{name}") is not None:
                pending.extend(self._module_attribute(f"{module_name}.{name}", rest, distributions))
            else:
                seen[(module_name, name)] = ""  # not a top-level definition we can read
        covered = sorted(seen.items())
        whole = digest(covered, sorted(distributions.items())) if distributions else digest(covered)
        parts = {f"{self._shown(m)}:{n}": digest(text) for (m, n), text in covered if text}
        parts.update({f"distribution {d}": version for d, version in distributions.items()})
        return whole, dict(sorted(parts.items()))

    def _uses(self, module: _Module, node: ast.AST) -> list[_Ref]:
        """What a definition refers to in its module's namespace, with attribute chains."""
        found = []
        for name, chain in _references(node):
            if name in module.definitions or name in module.imports or name in module.modules:
                found.append((module.name, name, chain))
        return found

    def _module_attribute(self, module_name: str, chain: tuple[str, ...], distributions: dict[str, str]
                          ) -> list[_Ref]:
        """``module.a.b`` is what ``a`` of that module is; a module used as a whole is all of it.
        A module not followed (the toolchain's, the standard library's, an installed
        distribution's) adds its distribution, if any, and nothing else."""
        module = self._module(module_name)
        if module is None:
            _add_distribution(module_name, distributions)
            return []
        if chain:
            return [(module_name, chain[0], chain[1:])]
        return [(module_name, definition, ()) for definition in module.definitions]

    def _shown(self, module_name: str) -> str:
        module = self._modules.get(module_name)
        if module is None:
            return module_name
        try:
            return module.path.relative_to(self.root).as_posix()
        except ValueError:
            return module_name

    def _checked(self, ref: str) -> tuple[str, str]:
        """A manifest reference must name a top-level definition of a module we can read; it may
        live in an installed package (found on sys.path, never imported)."""
        module_name, _, name = ref.partition(":")
        if module_name not in self._modules or self._modules[module_name] is None:
            self._modules[module_name] = self._parse(module_name, (self.root, *(Path(p) for p in sys.path if p),
                                                                   _AOT_TUNE_HOME))
        module = self._modules[module_name]
        if module is None:
            raise UnresolvedReference(ref, f"cannot find module '{shorten(module_name)}' under {self.root} or "
                                      f"sys.path", "check the module path in the manifest")
        if name not in module.definitions and name not in module.imports and name not in module.modules:
            raise UnresolvedReference(ref, f"{module.path} has no top-level '{shorten(name)}'",
                                      "name a function defined in that module")
        return module_name, name

    def _module(self, module_name: str) -> _Module | None:
        """A module followed from an import: the project's, or a module on sys.path that no
        installed distribution owns; None for the standard library, the toolchain, and code of
        installed distributions (covered by their versions)."""
        if module_name not in self._modules:
            top = module_name.partition(".")[0]
            found = None
            if top not in TOOLCHAIN_PACKAGES and top not in sys.stdlib_module_names:
                found = self._parse(module_name, (self.root,))
                if found is None and _distribution(module_name) is None:
                    found = self._parse(module_name, tuple(Path(p) for p in sys.path if p and Path(p) != self.root))
            self._modules[module_name] = found
        return self._modules[module_name]

    def _parse(self, module_name: str, folders: tuple[Path, ...]) -> _Module | None:
        """Find the module's source in the folders, without importing anything."""
        parts = module_name.split(".")
        for folder in folders:
            base = folder.joinpath(*parts)
            for path in (base.with_suffix(".py"), base / "__init__.py"):
                if _is_file(path):
                    source, tree = _read_source(path, module_name)
                    return _Module(module_name, path, source, *_index(tree, module_name, path.name == "__init__.py"))
        return None


def _is_file(path: Path) -> bool:
    """``path.is_file()``, False for a name the system refuses (a part over 255 bytes, say)."""
    try:
        return path.is_file()
    except OSError:
        return False


def _read_source(path: Path, module_name: str) -> tuple[str, ast.Module]:
    """A module's text and syntax tree; a file that is not UTF-8 Python is one line for the user."""
    try:
        source = path.read_text(encoding="utf-8")
        return source, ast.parse(source, filename=str(path))
    except UnicodeDecodeError as exc:
        raise TuneError(f"{path}: not UTF-8 text (byte {exc.start}), so the fingerprint of {module_name} cannot "
                        f"be read; fix: save the file as UTF-8") from None
    except SyntaxError as exc:
        raise TuneError(f"{path}:{exc.lineno}: {exc.msg} (module {module_name}, which a kernel entry reaches); "
                        f"fix: correct the syntax") from None


@functools.lru_cache(maxsize=None)
def _installed() -> dict[str, list[str]]:
    """Top-level import name -> distributions (read once, only when code outside the project is met)."""
    from importlib import metadata

    return metadata.packages_distributions()


def _add_distribution(module_name: str, distributions: dict[str, str]) -> None:
    """Note the installed distribution ``module_name`` comes from, if any, with its version."""
    owner = _distribution(module_name)
    if owner is not None:
        distributions[owner[0]] = owner[1]


@functools.lru_cache(maxsize=None)
def _distribution(module_name: str) -> tuple[str, str] | None:
    """(distribution, version) of the installed distribution a module comes from; None for the
    standard library, the toolchain, and modules no distribution owns."""
    top = module_name.partition(".")[0]
    if top in TOOLCHAIN_PACKAGES or top in sys.stdlib_module_names:
        return None
    names = _installed().get(top)
    if not names:
        return None
    from importlib import metadata

    name = sorted(names)[0]
    try:
        return name, metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def _index(tree: ast.Module, module_name: str, is_package: bool
           ) -> tuple[dict[str, ast.AST], dict[str, tuple[str, str]], dict[str, str]]:
    definitions: dict[str, ast.AST] = {}
    imports: dict[str, tuple[str, str]] = {}
    modules: dict[str, str] = {}
    package = module_name if is_package else module_name.rpartition(".")[0]
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
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    modules[alias.asname] = alias.name
                else:
                    top = alias.name.partition(".")[0]
                    modules[top] = top
    return definitions, imports, modules


def _references(node: ast.AST) -> list[tuple[str, tuple[str, ...]]]:
    """Every name a definition uses, with the attribute chain read off it (``m.a.b`` -> (m, (a, b)))."""
    found: list[tuple[str, tuple[str, ...]]] = []

    def visit(child: ast.AST) -> None:
        if isinstance(child, ast.Attribute):
            chain, base = [], child
            while isinstance(base, ast.Attribute):
                chain.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name):
                found.append((base.id, tuple(reversed(chain))))
                return
        if isinstance(child, ast.Name):
            found.append((child.id, ()))
            return
        for grandchild in ast.iter_child_nodes(child):
            visit(grandchild)

    visit(node)
    return found


def _segment(source: str, node: ast.AST, with_lines: bool) -> str:
    lines = source.splitlines()
    first = min([node.lineno] + [d.lineno for d in getattr(node, "decorator_list", [])])
    text = "\n".join(lines[first - 1: node.end_lineno])
    return f"@{first}\n{text}" if with_lines else text


class UnresolvedReference(TuneError):
    """A manifest reference whose module or top-level name cannot be found in the sources."""

    def __init__(self, ref: str, problem: str, fix: str) -> None:
        self.ref, self.problem, self.fix = ref, problem, fix
        super().__init__(f"{problem}; fix: {fix}")

    def __reduce__(self) -> tuple[type, tuple]:
        return (type(self), (self.ref, self.problem, self.fix))
