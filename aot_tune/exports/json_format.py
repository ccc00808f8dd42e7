"""``to: json``: a file per filled-in path, an object keyed by the key dims the path leaves
unnamed, as vLLM's tuned-config files are (``{"1": {"BLOCK_SIZE_M": 16, ...}, "16": {...}}``)."""
from __future__ import annotations

import json
from collections.abc import Collection, Sequence

from aot_tune.errors import TuneError
from aot_tune.select import TableEntry


def key_text(value: object) -> str:
    """A key value as an object key: ``16``, ``true``, ``gelu``."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def config_object(config: dict) -> dict:
    """The params and launch options, sorted by name (json keeps this order)."""
    return {name: config[name] for name in sorted(config)}


def json_text(kernel: str, path: str, key: Sequence[str], named: Collection[str], entries: Sequence[TableEntry]) -> str:
    """The file's text: keyed by the unnamed dims' values (joined with ``,`` when several), in the
    key's order (numeric for sizes); the one config itself when the path names every key dim."""
    free = [i for i, dim in enumerate(key) if dim not in named]
    if not free:
        if len(entries) != 1:
            raise TuneError(_clash(kernel, path, entries))
        document: object = config_object(entries[0].config)
    else:
        document = {}
        for entry in sorted(entries, key=lambda e: tuple(e.key[i] for i in free)):
            name = ",".join(key_text(entry.key[i]) for i in free)
            if name in document:
                raise TuneError(_clash(kernel, path, entries))
            document[name] = config_object(entry.config)
    try:
        return json.dumps(document, indent=4, allow_nan=False) + "\n"
    except (TypeError, ValueError) as exc:
        raise TuneError(f"cannot write kernel {kernel}'s export {path} as JSON ({exc}); fix: restore the cache "
                        f"from git") from None


def _clash(kernel: str, path: str, entries: Sequence[TableEntry]) -> str:
    dtypes = sorted({e.dtype for e in entries})
    return (f"kernel {kernel}'s export {path} would hold two configs for one key (its tables hold the dtypes "
            f"{', '.join(dtypes)}); fix: add {{dtype}} to the export's path in tuning.yaml")
