"""The doit commands: the only modules that import doit.

``loader`` reads tuning.yaml into the stage tasks of rules/; ``tune``, ``check``, ``export``,
``merge_caches`` (merge-caches, drop-device), ``report`` (report, subset) and ``adopt`` are the commands,
registered as doit plugins in pyproject.toml; ``options`` holds what they share.
"""
