"""Every use of Triton internals lives in this package, so a Triton upgrade touches one place.
Each module's docstring lists the internals it relies on, and why:

* ``target``: compiling for a GPU that is not there (the stand-in driver, shared memory limits,
  compile errors), and the toolchain versions and environment a compile depends on;
* ``stages``: a compile's lowering stages timed, and stopped once its shared memory is proven too much;
* ``launch``: the launch path intercepted, to compile, load or capture a specialization instead;
* ``binary``: a compiled kernel's registers and local memory, from its cubin;
* ``disk_cache``: Triton's on-disk cache, its hits, and moving an entry to another cache folder;
* ``warm``: loading a cached kernel without Triton's cache key, and a process's first-launch set-up;
* ``layers``: what ``@triton.autotune`` and ``@triton.heuristics`` wrap (``aot_tune.untuned``);
* ``kernel_source``: a kernel's Triton source as data, rebuilt without importing its library.
"""
from aot_tune.triton_compat.binary import ResourceUsage, cuobjdump_path, resource_usage
from aot_tune.triton_compat.disk_cache import (CacheHitCounter, cache_entry_folder, install_cache_entry,
                                               pack_cache_entry, triton_cache_dir)
from aot_tune.triton_compat.layers import (AUTOTUNER, HEURISTICS, autotuner_configs, autotuners_refused, heuristics_over,
                                           layer_kind)
from aot_tune.triton_compat.launch import (CapturedCompile, Specialization, capture_specializations,
                                           builds_launchers, compile_instead_of_launch, jit_function,
                                           find_instead_of_launch, load_found, prebuild_launcher, StandIn)
from aot_tune.triton_compat.target import (PINNED_ENV, SHARED_MEMORY_LIMIT, SharedMemoryExceeded, compile_error_kind,
                                           parse_target, pin_environment, shared_memory_limit,
                                           target_driver, triton_driver_created,
                                           versions)
from aot_tune.triton_compat.stages import StageLog, ttgir_shared_lower_bound, watched_stages
from aot_tune.triton_compat.warm import (hash_kernel_source, installation_identity,
                                         jit_with_compile_path, load_cached_kernel, prepare_runtime, triton_release,
                                         warm_first_lookup, warm_start_applies, warm_start_key, wrap_jit_compile)

__all__ = ["AUTOTUNER", "autotuner_configs", "autotuners_refused", "builds_launchers", "cache_entry_folder", "CacheHitCounter",
           "capture_specializations", "CapturedCompile", "compile_error_kind", "compile_instead_of_launch",
           "cuobjdump_path", "find_instead_of_launch", "hash_kernel_source", "HEURISTICS", "heuristics_over",
           "install_cache_entry", "installation_identity", "jit_function",
           "jit_with_compile_path", "layer_kind", "load_cached_kernel", "load_found", "pack_cache_entry",
           "parse_target", "pin_environment", "PINNED_ENV", "prebuild_launcher", "prepare_runtime", "resource_usage", "ResourceUsage",
           "shared_memory_limit", "SHARED_MEMORY_LIMIT", "SharedMemoryExceeded", "Specialization", "StageLog", "StandIn",
           "target_driver", "triton_cache_dir", "triton_driver_created", "triton_release",
           "ttgir_shared_lower_bound", "versions", "warm_first_lookup", "warm_start_applies", "warm_start_key", "watched_stages",
           "wrap_jit_compile"]
