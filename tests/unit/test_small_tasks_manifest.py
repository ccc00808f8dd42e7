"""tools.bench.small_tasks: the many-small-tasks manifest is valid and as small per task as the
bench-share target asks (at least 30 shapes, at most 12 configs each)."""
from __future__ import annotations

from aot_tune.manifest import load_manifest
from tools.bench.small_tasks import small_tasks_manifest


def test_the_small_tasks_manifest_has_many_shapes_of_few_configs(tmp_path):
    path = tmp_path / "tuning.yaml"
    path.write_text(small_tasks_manifest())
    kernels = load_manifest(str(path)).kernels
    shapes = [(k.name, shape) for k in kernels for shape in k.shapes]
    assert len(shapes) >= 30
    for kernel in kernels:
        for shape in kernel.shapes:
            configs = kernel.space.configs_for(kernel.shape_dict(shape))
            assert 7 <= len(configs) <= 12, (kernel.name, shape, len(configs))
