"""Every use of Triton internals lives in this package, so a Triton upgrade touches one place
(see ``internals`` for what is relied on, and why)."""
from aot_tune.triton_compat.internals import (PINNED_ENV, SHARED_MEMORY_LIMIT, CacheHitCounter, CapturedCompile,
                                              ResourceUsage, SharedMemoryExceeded, Specialization,
                                              cache_entry_folder, capture_specializations, compile_error_kind,
                                              compile_instead_of_launch, cuobjdump_path, import_first_launch_modules,
                                              install_cache_entry, installation_identity, jit_function,
                                              load_cached_kernel, load_instead_of_launch, pack_cache_entry,
                                              parse_target, pin_environment, prepare_runtime, resource_usage,
                                              shared_memory_limit, stop_when_shared_memory_exceeds,
                                              target_driver, triton_cache_dir, versions, warm_start_key,
                                              wrap_jit_compile)

__all__ = ["PINNED_ENV", "SHARED_MEMORY_LIMIT", "CacheHitCounter", "CapturedCompile", "ResourceUsage",
           "SharedMemoryExceeded", "Specialization", "cache_entry_folder", "capture_specializations",
           "compile_error_kind", "compile_instead_of_launch", "cuobjdump_path", "import_first_launch_modules",
           "install_cache_entry", "installation_identity", "jit_function", "load_cached_kernel",
           "load_instead_of_launch", "pack_cache_entry", "parse_target", "pin_environment", "prepare_runtime",
           "resource_usage", "shared_memory_limit", "stop_when_shared_memory_exceeds", "target_driver",
           "triton_cache_dir", "versions", "warm_start_key", "wrap_jit_compile"]
