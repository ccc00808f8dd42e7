"""The one line for a generated module that holds tuned entries its cache lacks: the run (or the
merge) stops instead of dropping them, and says how to restore or drop them on purpose."""
from __future__ import annotations

from aot_tune.codegen import describe_missing
from aot_tune.errors import program
from aot_tune.manifest import KernelSpec


def lost_tables_message(spec: KernelSpec, missing: dict[str, int]) -> str:
    devices = " ".join(missing)
    return (f"{spec.generated} holds tuned entries that {spec.cache} lacks ({describe_missing(missing)}); "
            f"a run would drop them; fix: restore the cache from git (git checkout -- {spec.cache}), or drop "
            f"those tables on purpose with `{program()} drop-device --kernel {spec.name} {devices}` and retune")
