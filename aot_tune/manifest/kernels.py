"""Read ``tuning.yaml``: the file, the top level and each kernel entry, into a :class:`Manifest`.

Every mistake a user can make in the manifest raises :class:`ManifestError`
with the file, the 1-based line, the dotted key path and a fix, e.g.::

    tuning.yaml:12: kernels.gemm.space.BLOCK_M: expected a non-empty list, got 64; fix: write BLOCK_M: [64]

The rules for each part of an entry live in the sibling modules. The schema and its rules are
documented once, in docs/reference/tuning-yaml.md.
"""

from __future__ import annotations

import ast
import keyword
import os
import re
from pathlib import Path
from typing import Any

import yaml

from aot_tune.errors import quoted, shorten
from aot_tune.manifest.config_list import parse_config_list
from aot_tune.manifest.checks import Ctx, as_list, as_mapping, described, did_you_mean, is_ident, is_int
from aot_tune.cost import COST_NAMES
from aot_tune.manifest.expressions import check_flag_use, parse_compile_cost, parse_cost, parse_default_config
from aot_tune.manifest.exports import check_exports
from aot_tune.space import ConfigSpace, Constraint, ConstraintError
from aot_tune.manifest.output_paths import check_outputs_distinct, check_outputs_inside
from aot_tune.manifest.records import Defaults, KernelSpec, Manifest
from aot_tune.manifest.shapes import check_kinds, ordered_shapes, parse_shapes
from aot_tune.manifest.shared_keys import parse_defaults, parse_shared
from aot_tune.manifest.space_rules import parse_space
from aot_tune.manifest.yaml_lines import LineLoader, Map, MAX_YAML_NODES, node_line, oversized_node
from aot_tune.space import FUNCTIONS


def load_manifest(path: str | os.PathLike[str], *, write_caches: bool = True) -> Manifest:
    """Read, parse and validate a manifest; every user mistake is a ManifestError. Without
    ``write_caches`` a ``configs:`` list it had to import is not kept under .aot_tune/."""
    ctx = Ctx(os.fspath(path), write_caches)
    doc = _parse_yaml(ctx, _read_text(ctx))
    top = _top_mapping(ctx, doc)
    absolute = Path(os.path.abspath(ctx.shown))
    return Manifest(path=absolute, root=absolute.parent, kernels=_kernels(ctx, top, absolute.parent))


def _read_text(ctx: Ctx) -> str:
    try:
        return Path(ctx.shown).read_text(encoding="utf-8")
    except FileNotFoundError:
        ctx.fail(None, "", "file not found", "check the path, or create the manifest (start it with 'version: 1')")
    except IsADirectoryError:
        ctx.fail(None, "", "is a directory, not a manifest file", "pass the path of the YAML file, e.g. tuning.yaml")
    except UnicodeDecodeError as e:
        ctx.fail(None, "", f"not UTF-8 text (bad byte at offset {e.start})", "save the file as UTF-8")
    except OSError as e:
        ctx.fail(None, "", f"cannot read the file ({e.strerror or e})", "check that it exists and is readable")


def _parse_yaml(ctx: Ctx, text: str) -> Any:
    fix = "correct the YAML at that line (indentation, ':' after keys, matching quotes and brackets)"
    try:
        loader = LineLoader(text)  # a SafeLoader
        try:
            node = loader.get_single_node()
            bomb = oversized_node(node) if node is not None else None
            if bomb is not None:
                ctx.fail(node_line(bomb), "", f"the YAML expands to more than {MAX_YAML_NODES:,} values from here "
                         f"(anchors and aliases repeat what they name)", "write the manifest without nested aliases")
            return loader.construct_document(node) if node is not None else None
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        context = e.context or ""
        if e.context and e.context_mark and mark and e.context_mark.line != mark.line:
            context += f" (started at line {e.context_mark.line + 1})"
        problem = " ".join(p for p in (context, e.problem) if p)
        ctx.fail(mark.line + 1 if mark else None, "", f"invalid YAML: {problem}", fix)
    except yaml.YAMLError as e:
        ctx.fail(None, "", f"invalid YAML: {e}".replace("\n", " "), fix)


def _top_mapping(ctx: Ctx, doc: Any) -> Map:
    if doc is None:
        ctx.fail(1, "", "the manifest is empty", "start it with 'version: 1' and a 'kernels:' mapping")
    if not isinstance(doc, Map):
        ctx.fail(
            getattr(doc, "line", 1),
            "",
            f"expected a mapping at the top level, got {described(doc)}",
            "write 'version: 1', 'defaults:' and 'kernels:' as top-level keys",
        )
    top = as_mapping(ctx, doc, "", doc.line, allowed=("version", "defaults", "kernels"))
    if "version" not in top and "kernels" not in top:
        ctx.fail(top.line, "", "missing required keys 'version', 'kernels'",
                 "start the file with 'version: 1' and add a 'kernels:' mapping of kernel name -> spec")
    if "version" not in top:
        ctx.fail(top.line, "version", "missing required key 'version'", "add 'version: 1' at the top of the file")
    if not (is_int(top["version"]) and top["version"] == 1):
        ctx.fail(
            top.value_lines["version"],
            "version",
            f"unsupported version {described(top['version'])}",
            "set version: 1 (the only version this aot_tune reads)",
        )
    if "kernels" not in top:
        ctx.fail(
            top.line, "kernels", "missing required key 'kernels'", "add a 'kernels:' mapping of kernel name -> spec"
        )
    return top


_KERNEL_KEYS = (
    "kernel", "launch", "inputs", "reference", "key", "space", "configs", "constraints",
    "shapes", "interpreter_shapes", "dtypes", "bench", "search", "targets", "cache", "generated",
    "default_config", "vendor", "cost", "compile_cost", "devices", "dtype_combos", "tolerance", "exports",
)  # fmt: skip
_REQUIRED_KERNEL_KEYS = ("kernel", "launch", "inputs", "key", "shapes")
_KERNEL_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def _kernels(ctx: Ctx, top: Map, root: Path) -> tuple[KernelSpec, ...]:
    base = parse_defaults(ctx, top)
    m = as_mapping(ctx, top["kernels"], "kernels", top.key_lines["kernels"])
    if not m:
        ctx.fail(
            top.key_lines["kernels"], "kernels", "no kernels are defined", "add at least one kernel under 'kernels:'"
        )
    specs = tuple(_kernel(ctx, name, m, base, root) for name in m)
    check_outputs_inside(ctx, specs, m, top, root)
    check_outputs_distinct(ctx, specs, m)
    check_exports(ctx, specs, m, top, root)
    return specs


def _kernel(ctx: Ctx, name: str, kernels: Map, base: Defaults, root: Path) -> KernelSpec:
    key, line = f"kernels.{name}", kernels.key_lines[name]
    _check_kernel_name(ctx, name, key, line)
    m = as_mapping(ctx, kernels[name], key, line, allowed=_KERNEL_KEYS)
    _check_required(ctx, m, key, line)
    refs = {f: _module_attr(ctx, m[f], f"{key}.{f}", m.value_lines[f]) if f in m else None
            for f in ("kernel", "launch", "inputs", "reference")}
    key_dims = _key_dims(ctx, m["key"], f"{key}.key", m.value_lines["key"])
    written = parse_shapes(ctx, m["shapes"], f"{key}.shapes", m.value_lines["shapes"], key_dims)
    written_interp = parse_shapes(ctx, m["interpreter_shapes"], f"{key}.interpreter_shapes",
                             m.value_lines["interpreter_shapes"], key_dims) if "interpreter_shapes" in m else written
    bench_dims, (shapes, interp) = ordered_shapes(ctx, key_dims, written, written_interp)
    dims = key_dims + bench_dims  # what constraints, defaults and costs may name
    if "configs" in m:
        ref = m["configs"] if isinstance(m["configs"], str) else None
        if ref is not None:
            ref = _module_attr(ctx, ref, f"{key}.configs", m.value_lines["configs"])
        space = parse_config_list(ctx, m, key, dims, root, ref)
    else:
        space = parse_space(ctx, m, key, dims)
    s = parse_shared(ctx, m, key, base)
    every_shape = tuple(dict.fromkeys(shapes + interp))
    kinds = check_kinds(ctx, m.value_lines["shapes"], f"{key}.shapes", dims, every_shape)
    for i, c in enumerate(space.constraints):
        check_flag_use(ctx, c, kinds, f"{key}.constraints[{i}]", c.line or m.key_lines.get("constraints", line))
    _check_every_shape_has_configs(ctx, m, key, space, dims, every_shape)
    default = parse_default_config(ctx, m, key, space, dims, every_shape) if "default_config" in m else None
    for param, value in default.values if default else ():
        if isinstance(value, Constraint):
            check_flag_use(ctx, value, kinds, f"{key}.default_config.{param}", value.line)
    vendor = _module_attr(ctx, m["vendor"], f"{key}.vendor", m.value_lines["vendor"]) if "vendor" in m else None
    used_combos = tuple(c for c in s.dtype_combos if c.name in s.dtypes)
    _check_combo_args(ctx, refs["launch"], used_combos, root)
    cost = parse_cost(ctx, m, key, dims, every_shape, s.dtypes, used_combos) if "cost" in m else None
    for part_name in COST_NAMES:
        part = getattr(cost, part_name, None)
        if part is not None:
            check_flag_use(ctx, part, kinds, f"{key}.cost.{part_name}", part.line)
    compile_cost = parse_compile_cost(ctx, m, key, space) if "compile_cost" in m else None
    return KernelSpec(
        name=name, **refs, key=key_dims, bench_dims=bench_dims, space=space, shapes=shapes, interpreter_shapes=interp,
        dtypes=s.dtypes, bench=s.bench, targets=s.targets,
        cache=s.cache.replace("{kernel}", name), generated=s.generated.replace("{kernel}", name), line=line,
        default_config=default, vendor=vendor, cost=cost, compile_cost=compile_cost, search=s.search,
        devices=s.devices,
        dtype_combos=used_combos, tolerance=s.tolerance, exports=s.exports, key_line=m.value_lines["key"],
        space_line=m.key_lines["space" if "space" in m else "configs"],
        manifest=ctx.shown, ref_lines=tuple((f, m.value_lines[f]) for f in (*refs, "vendor") if f in m),
    )  # fmt: skip


def _check_required(ctx: Ctx, m: Map, key: str, line: int) -> None:
    """Every missing required key in one error; exactly one of ``space`` and ``configs``."""
    missing = [k for k in _REQUIRED_KERNEL_KEYS if k not in m]
    if "space" not in m and "configs" not in m:
        missing.insert(missing.index("shapes") if "shapes" in missing else len(missing), "space")
    if missing:
        shown = ", ".join(f"{quoted(k)}" + (" (or 'configs')" if k == "space" else "") for k in missing)
        ctx.fail(line, key if len(missing) > 1 else f"{key}.{missing[0]}",
                 f"missing required key{'s' if len(missing) > 1 else ''} {shown}",
                 f"add {', '.join(f'{k}:' + (' (or configs:)' if k == 'space' else '') for k in missing)} "
                 f"under {key} (docs/reference/tuning-yaml.md)")
    if "space" in m and "configs" in m:
        ctx.fail(m.key_lines["configs"], f"{key}.configs", "both 'space' and 'configs' are given",
                 "keep one: 'space' for a grid of values, 'configs' for an explicit list")


def _check_every_shape_has_configs(ctx: Ctx, m: Map, key: str, space: ConfigSpace, dims: tuple[str, ...],
                                   shapes: tuple[tuple[int, ...], ...]) -> None:
    """Evaluate the shape-dependent constraints for every declared shape now: one that raises, or
    that rejects every config of a shape, is a mistake in the manifest, not a failed compile later."""
    for shape in shapes:
        named = dict(zip(dims, shape, strict=True))
        try:
            found = space.configs_for(named)
        except ConstraintError as e:
            c = e.constraint
            where = c.line if c is not None and c.line is not None else m.key_lines.get("constraints", m.line)
            index = space.constraints.index(c) if c is not None else None
            ckey = f"{key}.constraints" + (f"[{index}]" if index is not None else "")
            ctx.fail(where, ckey, f"{e.problem} (shape {named})", e.fix)
        if not found:
            shown = ", ".join(f"{d}={v}" for d, v in named.items())
            ctx.fail(m.key_lines.get("constraints", m.key_lines["shapes"]), f"{key}.constraints",
                     f"no config of the space passes the constraints for the shape {shown}",
                     "relax the constraints for that shape, add values to the space, or drop the shape")


def _check_combo_args(ctx: Ctx, launch: str, combos: tuple, root: Path) -> None:
    """Every argument a used combination names is a parameter of the launch function, read from
    its source without importing it (a launch defined elsewhere, e.g. installed, is checked when
    its inputs are built)."""
    params = launch_params(root, launch)
    if params is None:
        return
    for combo in combos:
        for arg, _ in combo.args:
            if arg not in params:
                hint = did_you_mean(arg, params)
                ctx.fail(combo.line, f"{combo.where}.{arg}",
                         f"combination {quoted(combo.name)} names {quoted(arg)}, which is not an argument of "
                         f"{shorten(launch)} "
                         f"(arguments: {', '.join(params)})", (hint + " " if hint else "") +
                         "name the launch function's tensor arguments")


def launch_params(root: Path, ref: str) -> tuple[str, ...] | None:
    """The parameter names of ``module:function`` when the module is a file under ``root``."""
    module, _, attr = ref.partition(":")
    base = root.joinpath(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            continue
        for node in tree.body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == attr:
                a = node.args
                return tuple(p.arg for p in (*a.posonlyargs, *a.args, *a.kwonlyargs))
        return None
    return None


def _check_kernel_name(ctx: Ctx, name: str, key: str, line: int) -> None:
    if _KERNEL_NAME.fullmatch(name) and len(name) > MAX_KERNEL_NAME:
        ctx.fail(line, f"kernels.{name[:40]}...", f"kernel name of {len(name)} characters is too long "
                 f"(at most {MAX_KERNEL_NAME}: it names files)", f"shorten it, e.g. to {name[:MAX_KERNEL_NAME]!r}")
    if _KERNEL_NAME.fullmatch(name) and not keyword.iskeyword(name):
        return
    better = re.sub(r"[^a-z0-9_]", "_", name.lower())
    better = f"_{better}" if not better or better[0].isdigit() or keyword.iskeyword(better) else better
    ctx.fail(
        line,
        key,
        f"kernel name {quoted(name)} must match [a-z_][a-z0-9_]* and not be a Python keyword",
        f"rename it, e.g. to {quoted(better)}",
    )


#: Kernel names become file names (generated/<kernel>.py, .aot_tune/bench/<device>/<kernel>/...).
MAX_KERNEL_NAME = 64


_MODULE_ATTR = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*", re.ASCII)


def _module_attr(ctx: Ctx, value: Any, key: str, line: int) -> str:
    if isinstance(value, str) and _MODULE_ATTR.fullmatch(value):
        return value
    fix = "write it as package.module:name, e.g. kernels.gemm:matmul"
    if value == "FILL_IN":
        ctx.fail(line, key, "still the FILL_IN placeholder of doit adopt", f"{fix} (docs/adopting.md)")
    if isinstance(value, str) and ":" not in value and "." in value:
        module, attr = value.rsplit(".", 1)
        if _MODULE_ATTR.fullmatch(f"{module}:{attr}"):
            fix = f"separate the attribute with a colon: {module}:{attr}"
    ctx.fail(line, key, f"expected 'module.path:attr', got {described(value)}", fix)


def _key_dims(ctx: Ctx, value: Any, key: str, line: int) -> tuple[str, ...]:
    seq = as_list(ctx, value, key, line, "M, N, K")
    for i, d in enumerate(seq):
        sub, iline = f"{key}[{i}]", seq.item_lines[i]
        if not is_ident(d):
            ctx.fail(
                iline,
                sub,
                f"key dim {described(d)} is not an identifier",
                "use names like M, N, K (letters, digits and _)",
            )
        if d in FUNCTIONS or d == "grid":
            ctx.fail(
                iline, sub, f"key dim {quoted(d)} is a reserved name",
                f"rename it (reserved: grid, {', '.join(FUNCTIONS)})"
            )
        if d in seq[:i]:
            ctx.fail(iline, sub, f"key dim {quoted(d)} is listed twice", "list each key dim once")
    return tuple(seq)
