"""A kernel's ``configs:``, the explicit list of configs that stands instead of a ``space`` grid:
inline mappings, or ``module:attr`` naming a ``@triton.autotune`` decorator's own list of
``triton.Config`` objects (or dicts).

A ``module:attr`` list is read by importing its module, which imports triton, so it is done only
when the source that defines the list changed: the expanded list is kept in
``.aot_tune/configs/<module>.<attr>.json`` under the fingerprint of that source (the list's
definition and everything it reaches, aot_tune.sources.SourceIndex), and a no-op run reads
that file and imports nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from aot_tune.errors import TuneError, quoted, shorten
from aot_tune.fileio import write_atomic
from aot_tune.manifest.checks import Ctx, as_list, described, is_ident
from aot_tune.manifest.space_rules import check_value, fail_constraint, parse_constraints
from aot_tune.manifest.yaml_lines import Map
from aot_tune.runs import WORK_DIR
from aot_tune.sources import SourceIndex
from aot_tune.space import FUNCTIONS, Config, ConfigSpace, ConstraintError

#: Where expanded ``module:attr`` lists are kept, under the manifest's folder.
CONFIGS_CACHE = Path(WORK_DIR) / "configs"
#: A triton.Config's launch options, and for the optional ones the value that means "not set".
_TRITON_DEFAULTS = {"num_warps": 4, "num_stages": 3, "num_ctas": 1, "maxnreg": None}
MAX_LISTED_CONFIGS = 10_000


def parse_config_list(ctx: Ctx, m: Map, key: str, dims: tuple[str, ...], root: Path, ref: str | None) -> ConfigSpace:
    """The kernel's candidates from ``configs:`` (``ref`` when it is a ``module:attr`` string)."""
    ckey, line = f"{key}.configs", m.value_lines["configs"]
    if ref is not None:
        entries = resolve_configs(ctx, ref, root, ckey, line)
        lines = [line] * len(entries)
    else:
        seq = as_list(ctx, m["configs"], ckey, line, "{BLOCK_M: 64, num_warps: 4}")
        entries, lines = list(seq), list(seq.item_lines)
    if len(entries) > MAX_LISTED_CONFIGS:
        ctx.fail(line, ckey, f"{len(entries):,} configs, over the {MAX_LISTED_CONFIGS:,} a list may hold",
                 "list fewer configs, or write the space as a grid with constraints")
    configs: list[Config] = []
    for i, entry in enumerate(entries):
        config = _entry(ctx, entry, f"{ckey}[{i}]", lines[i], dims, ref)
        if configs and set(config.as_dict()) != set(configs[0].as_dict()):
            ctx.fail(lines[i], f"{ckey}[{i}]", f"params {', '.join(sorted(config.as_dict()))} differ from the "
                     f"first config's ({', '.join(sorted(configs[0].as_dict()))})",
                     "give every config the same params (a table's configs share their names)")
        if config in configs:
            ctx.fail(lines[i], f"{ckey}[{i}]", f"duplicate of config [{configs.index(config)}] ({config.label()})",
                     "list each config once")
        configs.append(config)
    names = [name for name, _ in configs[0].params] + list(dims)
    space = ConfigSpace.from_list(tuple(configs), parse_constraints(ctx, m, key, names))
    try:
        if space.size():
            return space
    except ConstraintError as e:
        fail_constraint(ctx, space, m, key, e.constraint, e.problem, e.fix)
    ctx.fail(m.key_lines.get("constraints", line), f"{key}.constraints",
             f"the shape-independent constraints reject all {len(configs)} listed configs",
             "relax them or list other configs")


def _entry(ctx: Ctx, entry: Any, key: str, line: int, dims: tuple[str, ...], ref: str | None) -> Config:
    where = f" (from {ref})" if ref else ""
    if not isinstance(entry, dict) or not entry:
        ctx.fail(line, key, f"expected a mapping of params to values{where}, got {described(entry)}",
                 "write each config as {BLOCK_M: 64, num_warps: 4}")
    for name, value in entry.items():
        if not is_ident(name) or name in dims or name in FUNCTIONS:
            why = ("is a key dim" if name in dims else "shadows a constraint function" if name in FUNCTIONS
                   else "is not an identifier")
            ctx.fail(line, f"{key}.{name}", f"param name {quoted(name)} {why}{where}", "rename the param")
        check_value(ctx, name, value, f"{key}.{name}", line)
    return Config.from_dict(entry)


def resolve_configs(ctx: Ctx, ref: str, root: Path, key: str, line: int) -> list[dict]:
    """The list ``module:attr`` names, as plain dicts: from the cache while the source that
    defines it is unchanged, else by importing the module (once per change)."""
    try:
        fingerprint = SourceIndex(root).closure([ref])
    except TuneError as e:
        ctx.fail(line, key, str(e).split("; fix: ")[0], "name a module-level list, e.g. mykernels.matmul:CONFIGS")
    cache = root / CONFIGS_CACHE / f"{ref.replace(':', '.')}.json"
    try:
        kept = json.loads(cache.read_text(encoding="utf-8"))
        if kept.get("fingerprint") == fingerprint and isinstance(kept.get("configs"), list):
            return kept["configs"]
    except (OSError, ValueError, AttributeError):
        pass  # no cache yet, or a torn one: import instead
    configs = _imported(ctx, ref, root, key, line)
    if not ctx.write_caches:
        return configs
    try:
        write_atomic(cache, json.dumps({"ref": ref, "fingerprint": fingerprint, "configs": configs}, indent=1))
    except OSError:
        pass  # a read-only checkout imports again next time
    return configs


def _imported(ctx: Ctx, ref: str, root: Path, key: str, line: int) -> list[dict]:
    from aot_tune.build.loading import resolve

    try:
        value = resolve(str(root), ref)
    except TuneError as e:
        ctx.fail(line, key, str(e).split("; fix: ")[0], "name a module-level list of triton.Config, e.g. "
                 "mykernels.matmul:CONFIGS")
    except Exception as e:  # noqa: BLE001 - the user's module failed to import
        ctx.fail(line, key, f"importing {shorten(ref)} raised {type(e).__name__}: {shorten(str(e))}",
                 "fix the module so it imports")
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        ctx.fail(line, key, f"{shorten(ref)} is {type(value).__name__}, not a list of configs",
                 "name the list the decorator's configs= takes")
    return common_options([config_as_dict(ctx, c, f"{key}[{i}]", line, ref) for i, c in enumerate(value)])


def common_options(configs: list[dict]) -> list[dict]:
    """``num_ctas`` and ``maxnreg`` only where some config sets them (then in every config, so
    all share their param names); dicts keep what they give."""
    for option, unset in _TRITON_DEFAULTS.items():
        if option in ("num_ctas", "maxnreg") and all(c.get(option, unset) == unset for c in configs):
            for c in configs:
                c.pop(option, None)
    return configs


def config_as_dict(ctx: Ctx | None, config: Any, key: str, line: int | None, ref: str) -> dict:
    """A ``triton.Config`` (kwargs, num_warps, num_stages, and num_ctas / maxnreg when set) or a
    dict as the params of a listed config; a ``pre_hook`` or ``ir_override`` cannot be tuned."""
    if isinstance(config, dict):
        return dict(config)
    if not hasattr(config, "kwargs") or not hasattr(config, "num_warps"):
        return _refuse(ctx, line, key, f"{type(config).__name__} is not a triton.Config or a dict (in {ref})",
                       "list triton.Config objects or dicts")
    for unsupported in ("pre_hook", "ir_override"):
        if getattr(config, unsupported, None) is not None:
            _refuse(ctx, line, key, f"a config of {ref} has a {unsupported}, which a tuning table cannot hold",
                    f"drop the {unsupported} from the configs, or list the configs inline without it")
    return {**config.kwargs, **{option: getattr(config, option, unset) for option, unset in _TRITON_DEFAULTS.items()}}


def _refuse(ctx: Ctx | None, line: int | None, key: str, problem: str, fix: str) -> Any:
    if ctx is None:
        raise TuneError(f"{problem}; fix: {fix}")
    ctx.fail(line, key, problem, fix)
