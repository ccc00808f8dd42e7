"""Tests for aot_tune.runtime.devices (GPU model -> table key) and aot_tune.bench.local.detect (what this run tunes for)."""

from __future__ import annotations

import os
import re
import stat

import pytest

from aot_tune.bench.local import detect as hardware
from aot_tune.runtime.devices import INTERPRETER, device_key
from aot_tune.errors import TuneError


@pytest.mark.parametrize("name,key", [
    ("NVIDIA H100 80GB HBM3", "h100-sxm"),
    ("NVIDIA H100 PCIe", "h100-pcie"),
    ("NVIDIA H100 NVL", "h100-nvl"),
    ("NVIDIA H200", "h200"),
    ("NVIDIA H200 NVL", "h200"),
    ("NVIDIA GH200 480GB", "gh200"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm"),
    ("NVIDIA A100-PCIE-40GB", "a100-pcie"),
    ("NVIDIA B200", "b200"),
    ("NVIDIA L4", "l4"),
    ("NVIDIA L40S", "l40s"),
    ("NVIDIA L40", "l40"),
])
def test_device_key_known_models(name, key) -> None:
    assert device_key(name) == key


def test_device_key_unknown_model_is_a_slug() -> None:
    key = device_key("NVIDIA RTX 6000 Ada Generation")
    assert "nvidia" not in key
    assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", key)
    assert key == "rtx-6000-ada-generation"
    assert device_key("NVIDIA RTX 6000 Ada Generation") == key


def test_device_key_of_a_bare_vendor_name_is_not_empty() -> None:
    assert device_key("NVIDIA") == "unknown-gpu"


# --------------------------------------------------------------------------- hardware.detect


def test_detect_interpreter() -> None:
    device = hardware.detect("interpreter")
    assert device.backend == "interpreter"
    assert device.key == INTERPRETER
    assert device.compute_capability == "cpu"
    assert device.count == 1
    assert device.target is None
    assert device.arch is None


def test_detect_unknown_backend_names_the_option() -> None:
    with pytest.raises(TuneError) as info:
        hardware.detect("bogus")
    assert "--bench-backend" in str(info.value)
    assert "bogus" in str(info.value)


@pytest.fixture
def no_gpu(tmp_path, monkeypatch):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_detect_cuda_without_nvidia_smi_raises(no_gpu) -> None:
    with pytest.raises(TuneError) as info:
        hardware.detect("cuda")
    assert "fix:" in str(info.value)


def test_detect_auto_without_gpu_falls_back_to_the_interpreter(no_gpu) -> None:
    device = hardware.detect("auto")
    assert device.backend == "interpreter"
    assert device.key == INTERPRETER
    assert device.count == 1
    assert "no CUDA GPU" in device.notice
    assert hardware.INTERPRETER_DEVICE.notice == ""  # the shared default is not modified


def fake_nvidia_smi(directory, output: str, rc: int = 0) -> None:
    directory.mkdir(exist_ok=True)
    script = directory / "nvidia-smi"
    script.write_text(f"#!/bin/sh\nprintf '{output}'\nexit {rc}\n")
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


TWO_H100 = r"0, NVIDIA H100 80GB HBM3, 9.0\n1, NVIDIA H100 80GB HBM3, 9.0\n"


@pytest.fixture
def smi_dir(tmp_path, monkeypatch):
    directory = tmp_path / "bin"
    monkeypatch.setenv("PATH", str(directory))
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return directory


def test_detect_auto_with_two_gpus(smi_dir) -> None:
    fake_nvidia_smi(smi_dir, TWO_H100)
    for requested in ("auto", "cuda"):
        device = hardware.detect(requested)
        assert device.backend == "cuda"
        assert device.key == "h100-sxm"
        assert device.name == "NVIDIA H100 80GB HBM3"
        assert device.compute_capability == "9.0"
        assert device.count == 2
        assert device.arch == 90
        assert device.target == "sm90"
        assert device.notice == ""


def test_cuda_visible_devices_limits_the_count(smi_dir, monkeypatch) -> None:
    fake_nvidia_smi(smi_dir, TWO_H100)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    device = hardware.detect("auto")
    assert (device.backend, device.key, device.count, device.target) == ("cuda", "h100-sxm", 1, "sm90")


def test_mixed_models_use_the_first_and_name_the_others(smi_dir) -> None:
    fake_nvidia_smi(smi_dir, r"0, NVIDIA A100-SXM4-80GB, 8.0\n1, NVIDIA H100 80GB HBM3, 9.0\n"
                             r"2, NVIDIA A100-SXM4-80GB, 8.0\n")
    device = hardware.detect("auto")
    assert (device.key, device.count, device.target) == ("a100-sxm", 2, "sm80")
    assert "NVIDIA H100 80GB HBM3" in device.notice


def test_failing_nvidia_smi_means_no_gpu(smi_dir) -> None:
    fake_nvidia_smi(smi_dir, r"NVIDIA-SMI has failed\n", rc=9)
    assert hardware.detect("auto").backend == "interpreter"
    with pytest.raises(TuneError):
        hardware.detect("cuda")


def test_fake_nvidia_smi_is_what_runs(smi_dir) -> None:
    # guard: the tests above must not see a real nvidia-smi of the host
    fake_nvidia_smi(smi_dir, TWO_H100)
    assert os.environ["PATH"] == str(smi_dir)
    assert [(g.index, g.name, g.compute_capability) for g in hardware.visible_gpus()] == \
        [("0", "NVIDIA H100 80GB HBM3", "9.0"), ("1", "NVIDIA H100 80GB HBM3", "9.0")]
