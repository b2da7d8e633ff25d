"""Counting GPUs without torch (plan.devices): the driver's folder when it lists GPUs, else nvidia-smi."""

from __future__ import annotations

import stat

import pytest

from fsdp_bench.plan import devices


def _fake_nvidia_smi(bin_dir, lines: list[str]) -> None:
    script = bin_dir / "nvidia-smi"
    script.write_text("#!/bin/sh\n" + "".join(f"echo '{line}'\n" for line in lines))
    script.chmod(script.stat().st_mode | stat.S_IEXEC)


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """A driver folder and a PATH holding only this test's nvidia-smi (if it writes one)."""
    gpus, bin_dir = tmp_path / "gpus", tmp_path / "bin"
    gpus.mkdir()
    bin_dir.mkdir()
    monkeypatch.setattr(devices, "NVIDIA_GPUS_DIR", gpus)
    monkeypatch.setenv("PATH", str(bin_dir))  # alone: a GPU machine's own /usr/bin/nvidia-smi must not answer
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    return gpus, bin_dir


def test_an_empty_driver_folder_asks_nvidia_smi(machine):
    """A sandbox may show /proc/driver/nvidia/gpus without its GPUs: that read 0 GPUs, and
    --bench-device cuda refused to run on a machine that has one."""
    gpus, bin_dir = machine
    _fake_nvidia_smi(bin_dir, ["GPU 0: NVIDIA H200 (UUID: GPU-0)"])
    assert devices.count_cuda_devices() == 1
    (gpus / "0000:00:05.0").mkdir()
    (gpus / "0000:00:06.0").mkdir()
    assert devices.count_cuda_devices() == 2  # the folder, when it lists GPUs, answers first


def test_no_gpu_anywhere_and_hidden_gpus_count_zero(machine, monkeypatch):
    assert devices.count_cuda_devices() == 0  # an empty folder and no nvidia-smi on PATH
    gpus, bin_dir = machine
    (gpus / "0000:00:05.0").mkdir()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    assert devices.count_cuda_devices() == 0
