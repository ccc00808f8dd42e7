"""The manifest: ``tuning.yaml`` parsed and validated into frozen, typed records (``records``); every
mistake is one ``ManifestError`` line naming the file, the line, the key and a fix. Reading starts in
``kernels``; ``yaml_lines`` keeps the lines, ``checks`` words the errors, and ``shared_keys``,
``space_rules``, ``shapes``, ``expressions``, ``output_paths`` and ``exports`` hold the rules of each part
of an entry; ``writing`` is the text aot_tune writes into a manifest. Imports neither torch nor triton:
the doit loader reads it on every run."""
from aot_tune.manifest.kernels import MAX_KERNEL_NAME, load_manifest
from aot_tune.manifest.records import (BenchSettings, Defaults, ExportSpec, KernelSpec, Manifest, SearchSettings,
                                       STRATEGIES, STRATEGY_KEYS)

__all__ = ["MAX_KERNEL_NAME", "STRATEGIES", "STRATEGY_KEYS", "BenchSettings", "Defaults", "ExportSpec", "KernelSpec",
           "Manifest", "SearchSettings", "load_manifest"]
