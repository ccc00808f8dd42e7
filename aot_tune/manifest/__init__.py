"""The manifest: ``tuning.yaml`` parsed and validated into frozen, typed records (``spec``); every
mistake is one ``ManifestError`` line naming the file, the line, the key and a fix. Imports
neither torch nor triton: the doit loader reads it on every run."""
from aot_tune.manifest.spec import (MAX_KERNEL_NAME, STRATEGIES, STRATEGY_KEYS, BenchSettings, Defaults, KernelSpec,
                                    Manifest,
                                    SearchSettings, load_manifest)

__all__ = ["MAX_KERNEL_NAME", "STRATEGIES", "STRATEGY_KEYS", "BenchSettings", "Defaults", "KernelSpec", "Manifest",
           "SearchSettings", "load_manifest"]
