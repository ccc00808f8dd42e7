"""Scripts for developing aot_tune, not shipped with it; run from the repository root as
``python -m tools.<group>.<name>``."""
