"""What a run measures and leaves behind besides its outputs, as plain records below the pipeline:
its statistics (``stats``, written by the stages), the progress lines of its stages (``progress``),
its closing lines and the run log's entry (``summary``), the log of runs (``log``, ``runs.json``), and
the machine's history of every project's runs (``history``, under the user's cache folder). The
pipeline writes them; the summary, the forecast and the report read them without it."""

#: The run's work folder under the manifest's: task outputs, the run log, the configs: lists' cache.
WORK_DIR = ".aot_tune"


def shape_label(shape: tuple[int, ...]) -> str:
    return "x".join(str(v) for v in shape)
