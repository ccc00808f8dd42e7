"""doit rules: one module per stage, each turning the tuning plan into doit task dicts.

Rules stay thin: they decide task names, dependencies and up-to-date checks, and each action
calls one ``aot_tune.pipeline.session.TuneSession`` method. The repository keeps them at top level
(``rules/``); they install as ``aot_tune.rules``.
"""
STAGES = ("compile", "bench", "merge", "generate")
