"""``aot_tune record``: a workload's autotuned launches recorded and made tuning.yaml entries.

A recording is a manifest source, not a second pipeline: ``capture`` (inside the recorded
processes, through ``boot/sitecustomize.py`` and ``triton_compat.autotuner_hook``) writes each
distinct launch; ``entries`` folds them into ``recordings/<entry>.json`` (the records of
``recording``) and ordinary tuning.yaml entries; ``replay`` is the built-in launcher those
entries name, which the compile, bench and select stages use like any user's; ``run`` is the
command. At run time ``aot_tune.use_tables`` (the runtime) installs the tuned configs.
"""
