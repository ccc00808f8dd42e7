"""``python -m aot_tune <command>``: the commands without an install or any doit settings."""
from aot_tune.commands import main

raise SystemExit(main(program="python -m aot_tune"))
