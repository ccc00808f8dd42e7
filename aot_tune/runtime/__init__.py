"""The runtime: what kernel libraries import. Tables are read through ``TunedTable`` (in a launch
function) or ``aot_tune.autotune`` (the decorator); generated modules call ``select_config``.
Imports neither torch nor triton.

* ``lookup``: a table's config for a launch, its fallbacks and strict mode, device keys;
* ``decorator``: ``aot_tune.autotune``, a drop-in for ``@triton.autotune``;
* ``forcing``: how the tuner runs a launch with one candidate config;
* ``untuned``: the kernel beneath a library's ``@triton.autotune``, to launch one config of it;
* ``warm_start``: a tuned kernel's first launch in a process without Triton's installation hash;
* ``devices``: device keys and datasheet peaks of GPU models;
* ``autotuners``: ``use_tables``, tuned configs installed in a library's own autotuners.
"""
from aot_tune.runtime.autotuners import Installed, use_tables
from aot_tune.runtime.forcing import FORCED, ForcedConfig, launch_with_config
from aot_tune.runtime.lookup import (STRICT_ENV, TunedTable, TuningWarning, UntunedError, current_device_key,
                                     dtype_name, select_config)
from aot_tune.runtime.untuned import untuned

__all__ = ["FORCED", "ForcedConfig", "Installed", "STRICT_ENV", "TunedTable", "TuningWarning", "UntunedError",
           "current_device_key", "dtype_name", "launch_with_config", "select_config", "untuned",
           "use_tables"]
