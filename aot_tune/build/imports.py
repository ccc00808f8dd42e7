"""What importing a kernel's modules costs a process that has torch and triton already (a compile
or device worker; the tuning process itself when an exporter is the project's own), estimated from
their source without importing anything, for the forecast (aot_tune.pipeline.forecast).

A kernel library's import is mostly not its size: fla-core's l2norm module reaches 2.8 MB of fla's
source, which Python compiles in under a second, but Triton reads and tokenizes the source of each
of its 400 ``@triton.jit`` functions, and seven ``torch.compile`` calls at import load torch's
inductor: 3.2 s in a worker of a quiet 2-core CPU, about 1.4 s of it Triton reading the jitted
functions, 1.2 s the inductor and 0.4 s compiling the source. So the walk (module-level imports,
followed through every module the references reach outside the standard library, torch, triton,
aot_tune and what they import, which the workers have before they load a kernel) counts: modules,
bytes compiled from source and read from a fresh bytecode cache, the bytes of Triton-jitted
functions, and whether ``torch.compile`` runs at import. Imports inside functions are not
followed (they run later, if ever), nor those under ``if TYPE_CHECKING:`` (never run). The walk
reads lines, not syntax trees: an AST of fla takes 2 s to build, the lines 0.3 s.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import re
import sys
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

#: Seconds per unit on a 2-core CPU VM, in a process after the fork server's imports
#: (aot_tune.workers.preload), as a worker loads a kernel; none of them measured on a kernel
#: library: compiling source (sympy, networkx, hypothesis, jinja2 without bytecode: 0.18-0.33 s a
#: MB), reading bytecode (sympy: 0.06 s a MB), a jitted function (Triton reads and tokenizes its
#: source: generated functions of 1.1 and 4.6 KB took 1.9 and 6.3 ms, so 0.4 ms each and 1.3 s a
#: MB), the first ``torch.compile`` (it imports torch's inductor: 1.1-1.2 s), and each module's
#: finding. A loaded machine takes longer: the machine's history scales the estimate
#: (aot_tune.pipeline.calibration).
SOURCE_S_PER_MB = 0.25
CACHED_S_PER_MB = 0.06
JIT_S = 0.0004
JIT_S_PER_MB = 1.3
TORCH_COMPILE_S = 1.15
MODULE_S = 0.0003
#: Packages a worker holds before it loads a kernel (the fork server's imports: torch, triton and
#: what they import), never walked.
PRELOADED = frozenset({"torch", "triton", "aot_tune", "functorch", "numpy", "sympy", "mpmath", "networkx", "jinja2",
                       "markupsafe", "filelock", "fsspec", "typing_extensions", "packaging", "yaml"})
#: Files walked at most (a huge dependency tree is cut short: the estimate then leans low).
MAX_FILES = 4000

_IMPORT = re.compile(r"import\s+(.+)")
_FROM = re.compile(r"from\s+(\.*)([\w.]*)\s+import\s+(.+)")
_JIT = re.compile(r"@\s*(?:triton\.jit|jit|triton\.language\.jit|tl\.jit)\b")
_TORCH_COMPILE = re.compile(r"(?:@\s*torch\.compile\b|torch\.compile\s*\()")
_BRACKET = re.compile(r"[][(){}]")
_STRINGS = re.compile(r"(\"[^\"]*\"|'[^']*'|#.*$)")
#: A block whose imports are for type checkers only: never run (transformers' package lists every
#: model there, behind a lazy module: 3447 files walked with it, against what an import reads).
_TYPE_CHECKING = re.compile(r"if\s+(?:typing\.)?TYPE_CHECKING\s*:")
_BLOCK = re.compile(r"(?:async\s+)?def\s|class\s|if\s|elif\s|else\s*:|try\s*:|except\b|finally\s*:|with\s|for\s|while\s")


@dataclass
class ImportCost:
    """What the walk found (see the module doc)."""

    modules: int = 0
    source_bytes: int = 0
    cached_bytes: int = 0
    jit_functions: int = 0
    jit_bytes: int = 0
    torch_compile: bool = False
    toolchain: bool = False  # whether they import torch or triton (which a worker holds already)

    def seconds(self) -> float:
        """The estimate on the machine the constants were measured on."""
        return (self.source_bytes / 1e6 * SOURCE_S_PER_MB + self.cached_bytes / 1e6 * CACHED_S_PER_MB
                + self.jit_functions * JIT_S + self.jit_bytes / 1e6 * JIT_S_PER_MB + self.torch_compile * TORCH_COMPILE_S
                + self.modules * MODULE_S)


def import_cost(root: str | os.PathLike, modules: Iterable[str], path: Sequence[str] | None = None) -> ImportCost:
    """The cost of importing ``modules`` (and the packages above them) with ``root`` first on the
    path, as a worker does; modules that cannot be found count nothing (the run will say why)."""
    search = [str(root), *(sys.path if path is None else path)]
    cost = ImportCost()
    seen: set[str] = set()
    pending = [m for m in modules if m]
    while pending and cost.modules < MAX_FILES:
        name = pending.pop()
        for parent in _parents(name):
            if parent.split(".")[0] in ("torch", "triton"):
                cost.toolchain = True
            if parent in seen or parent.split(".")[0] in PRELOADED or _stdlib(parent):
                continue
            seen.add(parent)
            spec = _find(parent, search)
            if spec is None or not spec.origin or not spec.origin.endswith(".py"):
                continue
            package = parent if spec.submodule_search_locations is not None else parent.rpartition(".")[0]
            found = _scan(spec.origin, package, cost)
            pending.extend(f for f in found if f not in seen)
    return cost


class ImportWalk:
    """``import_cost`` of the workers' modules and of the tuning process's (its exporters'), on a
    thread of its own from the moment it is made: a library that reaches a large tree (fla-core
    reaches transformers on the GPU images) is read while the run captures its launches, not
    before them. ``result`` waits for it and raises what it raised."""

    def __init__(self, root: str | os.PathLike, workers: Sequence[str], main: Sequence[str]) -> None:
        self._found: tuple[ImportCost, ImportCost | None] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._walk, args=(str(root), list(workers), list(main)),
                                        name="aot_tune-import-walk", daemon=True)
        self._thread.start()

    def _walk(self, root: str, workers: list[str], main: list[str]) -> None:
        try:
            self._found = (import_cost(root, workers), import_cost(root, main) if main else None)
        except BaseException as exc:  # noqa: BLE001 - raised again by result(), in the caller's thread
            self._error = exc

    def result(self) -> tuple[ImportCost, ImportCost | None]:
        """The workers' cost, and the tuning process's (None: it imports no exporter of its own)."""
        self._thread.join()
        if self._error is not None:
            raise self._error
        assert self._found is not None
        return self._found


def _parents(name: str) -> list[str]:
    parts = name.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts) + 1)]


def _stdlib(name: str) -> bool:
    return name.split(".")[0] in getattr(sys, "stdlib_module_names", ()) or name.split(".")[0] in sys.builtin_module_names


def _find(name: str, search: list[str]):
    """The module's spec, found on the path without importing any package above it. Each part is
    looked up by its own name in its parent's folders: a dotted name makes importlib read the
    parent's ``__path__`` from ``sys.modules`` for a namespace package (fla-core's dependencies
    have them), which is not there, since nothing is imported."""
    locations: list[str] | None = search
    spec = None
    for part in _parents(name):
        if locations is None:
            return None
        tail = part.rpartition(".")[2]
        try:
            spec = importlib.machinery.PathFinder.find_spec(tail, locations)
        except (ImportError, ValueError, OSError, KeyError):
            return None
        if spec is None:
            return None
        if spec.submodule_search_locations is None:
            locations = None
        elif spec.origin in (None, "namespace"):  # a namespace package: its folders among the parent's
            locations = [folder for folder in (os.path.join(where, tail) for where in locations) if os.path.isdir(folder)]
        else:
            locations = list(spec.submodule_search_locations)
    return spec


def _scan(origin: str, package: str, cost: ImportCost) -> list[str]:
    """Count one module's file into ``cost``; the modules its import statements outside functions name."""
    try:
        with open(origin, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return []
    size = len(text.encode("utf-8", errors="replace"))
    cost.modules += 1
    cached = importlib.util.cache_from_source(origin) if sys.implementation.cache_tag else ""
    try:
        fresh = bool(cached) and os.stat(cached).st_mtime >= os.stat(origin).st_mtime
    except OSError:
        fresh = False
    if fresh:
        cost.cached_bytes += size
    else:
        cost.source_bytes += size
    return _statements(text, package, cost)


def _statements(text: str, package: str, cost: ImportCost) -> list[str]:
    """Walk the logical lines: imports outside function bodies and type-checking blocks, jitted
    functions' extents (from the decorator to the end of the body), and ``torch.compile``
    outside them."""
    names: list[str] = []
    blocks: list[tuple[int, bool]] = []  # (indent, whether its body runs later or never) of the open blocks
    jit: list | None = None  # [indent, bytes, whether its def line was read] of the jitted function being read
    depth, quote, pending = 0, "", ""
    for raw in text.splitlines():
        line = raw.strip()
        starts = not quote and depth == 0 and line and not line.startswith("#")
        if starts:  # a logical line begins here
            indent = len(raw) - len(raw.lstrip())
            if jit is not None and jit[2] and indent <= jit[0]:
                cost.jit_bytes += jit[1]
                jit = None
            while blocks and blocks[-1][0] >= indent:
                blocks.pop()
            deferred = any(later for _, later in blocks)
            if _JIT.match(line):
                cost.jit_functions += 1
                jit = jit or [indent, 0, False]
            if jit is not None and line.startswith(("def ", "async def ")):
                jit[2] = True
            if not deferred and _TORCH_COMPILE.search(line):
                cost.torch_compile = True
            if _BLOCK.match(line):
                later = line.startswith(("def ", "async def ")) or bool(_TYPE_CHECKING.match(line))
                blocks.append((indent, later))
            pending = line if not deferred and line.startswith(("import ", "from ")) else ""
        elif pending and not quote:
            pending += " " + line
        if jit is not None:
            jit[1] += len(raw) + 1
        if quote:
            quote = "" if line.count(quote) % 2 else quote
            continue
        if "\"\"\"" in line or "\'\'\'" in line:
            quote = next((mark for mark in ('"""', "\'\'\'") if line.count(mark) % 2), "")
            if quote:  # the brackets of a line that opens a string are not counted, nor of its closing line
                continue
        if _BRACKET.search(line):
            depth = max(0, depth + _parens(line))
        if pending and depth == 0 and not line.endswith("\\"):
            names += _imported(pending, package)
            pending = ""
    if jit is not None:
        cost.jit_bytes += jit[1]
    return names


def _parens(line: str) -> int:
    code = _STRINGS.sub("", line) if "'" in line or '"' in line or "#" in line else line
    return code.count("(") + code.count("[") + code.count("{") - code.count(")") - code.count("]") - code.count("}")


def _imported(statement: str, package: str) -> list[str]:
    """The modules one import statement loads (a from-import's names may be modules too)."""
    statement = re.sub(r"#.*", "", statement).replace("(", " ").replace(")", " ").replace("\\", " ")
    statement = statement.split(";")[0].strip()
    found = _FROM.fullmatch(statement)
    if found:
        dots, module, names = found.groups()
        if dots:
            base = package.split(".") if package else []
            base = base[:len(base) - (len(dots) - 1)] if len(dots) > 1 else base
            module = ".".join([*base, module] if module else base)
        if not module:
            return []
        return [module] + [f"{module}.{n.split()[0]}" for n in names.split(",") if n.strip() and n.strip() != "*"]
    found = _IMPORT.fullmatch(statement)
    if found:
        return [part.split()[0] for part in found.group(1).split(",") if part.strip()]
    return []


_DEF = re.compile(r"(\s*)(?:async\s+)?def\s+(\w+)\s*\(")
_CALL = re.compile(r"\b(\w+)\s*\(")
_DOCSTRING = re.compile(r'("""|\'\'\')(?:.|\n)*?\1')


def kernel_bytes(root: str | os.PathLike, ref: str, path: Sequence[str] | None = None) -> int:
    """The code Triton lowers for one compile of the jitted function ``ref`` (``module:function``):
    its lines without comments, docstrings or blank lines, and those of the jitted functions of
    its module it calls, followed through them. A compile's seconds follow it from kernel to
    kernel (on a 2-core CPU: this repository's vector_add, softmax, rmsnorm and gemm, 0.4-1.6 KB,
    took 0.10, 0.13, 0.19 and 0.66 s a compile, fla-core's l2norm, 0.8 KB, 0.25 s), where the
    configs' estimates (aot_tune.build.compile.compile_time_estimate) only rank a kernel's own.
    0 where the function is not found jitted in its module's source."""
    module, _, name = ref.partition(":")
    spec = _find(module, [str(root), *(sys.path if path is None else path)])
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return 0
    try:
        with open(spec.origin, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return 0
    jitted = _jitted_functions(text)
    seen, pending, size = set(), [name.split(".")[-1]], 0
    while pending:
        function = pending.pop()
        if function in seen or function not in jitted:
            continue
        seen.add(function)
        code = jitted[function]
        size += len(code.encode("utf-8", errors="replace"))
        pending.extend(set(_CALL.findall(code)) & set(jitted))
    return size


def _jitted_functions(text: str) -> dict[str, str]:
    """Each Triton-jitted function of a module's source, by name: its code (see ``kernel_bytes``)."""
    lines = text.splitlines()
    found: dict[str, str] = {}
    for i, line in enumerate(lines):
        head = _DEF.match(line)
        if head is None:
            continue
        above = i - 1
        while above >= 0 and (lines[above].strip().startswith(("@", ")", "]", "}", "#")) or
                              lines[above][:1] in (" ", "\t") and not _DEF.match(lines[above])):
            if _JIT.match(lines[above].strip()):
                break
            above -= 1
        if above < 0 or not _JIT.match(lines[above].strip()):
            continue
        indent = len(head.group(1))
        body = [line]
        for following in lines[i + 1:]:
            if following.strip() and len(following) - len(following.lstrip()) <= indent and \
                    not following.strip().startswith((")", "]", "}")):
                break
            body.append(following)
        code = _DOCSTRING.sub("", "\n".join(body))
        found[head.group(2)] = "\n".join(s.rstrip() for s in code.splitlines()
                                         if s.strip() and not s.strip().startswith("#"))
    return found
