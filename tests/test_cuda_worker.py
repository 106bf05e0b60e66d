"""GPU worker mode without a GPU: device keys from device names, nvidia-smi parsing, device
selection through CUDA_VISIBLE_DEVICES, the measurer chosen by target kind, and the GPU
measurement child reporting a missing device as one failed trial (never a dead worker)."""

from __future__ import annotations

import pytest

from tunefleet.compiler import ops
from tunefleet.compiler import cuda_device
from tunefleet.compiler.cuda import nvcc
from tunefleet.compiler.cuda.limits import DeviceLimits
from tunefleet.compiler.target import Target
from tunefleet.tuner.gpu_runner import GpuMeasurer, measurer_for
from tunefleet.tuner.measure import MeasureInput, MeasureProtocol
from tunefleet.tuner.runner import LocalMeasurer
from tunefleet.worker import gpu

from cuda_helpers import needs_nvcc


@pytest.mark.parametrize("name, slug", [
    ("NVIDIA H100 80GB HBM3", "h100"), ("NVIDIA H100 PCIe", "h100"), ("NVIDIA H200", "h200"),
    ("NVIDIA A100-SXM4-40GB", "a100"), ("NVIDIA GeForce RTX 4090", "rtx-4090"), ("Tesla V100-SXM2-16GB", "v100"),
    ("NVIDIA L40S", "l40s"),
])
def test_device_key_from_the_device_name(name, slug):
    assert gpu.name_slug(name) == slug
    info = {"name": name, "major": 9, "minor": 0}
    assert gpu.device_key(info) == f"cuda-{slug}-sm90"
    assert gpu.target(info) == Target("cuda", "sm_90")


def test_nvidia_smi_line():
    info = cuda_device.parse_smi("NVIDIA H100 80GB HBM3, 9.0, 81559, 570.124.06, 00000000:19:00.0", 1)
    assert info["arch"] == "sm_90" and info["memory_bytes"] == 81559 << 20 and info["index"] == 1
    assert info["driver_version"] == "570.124.06" and info["pci_bus_id"] == "00000000:19:00.0"
    with pytest.raises(cuda_device.GpuNotFound):
        cuda_device.parse_smi("garbage")


def test_limits_from_device_facts():
    limits = gpu.limits({"shared_per_block_optin": 232448, "regs_per_block": 65536, "max_threads_per_block": 1024,
                         "l2_bytes": 52428800})
    assert limits == DeviceLimits(max_shared_per_block=232448, l2_bytes=52428800)


def test_select_restricts_the_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert gpu.select(1) == "1"
    import os

    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1" and os.environ["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    assert gpu.select(1) == "5"
    with pytest.raises(gpu.GpuNotFound, match="out of range"):
        gpu.select(2)


def test_measurer_by_target_kind():
    m = measurer_for(Target("cuda", "sm_90"), n_parallel=1)
    try:
        assert isinstance(m, GpuMeasurer)
    finally:
        m.close()
    m = measurer_for(Target.host(), n_parallel=1)
    try:
        assert type(m) is LocalMeasurer
    finally:
        m.close()


@needs_nvcc
@pytest.mark.timeout(300)
def test_a_missing_gpu_costs_one_trial(tmp_path, monkeypatch):
    if cuda_device.device_count() > 0:
        pytest.skip("this host has a GPU: test_cuda_gpu.py measures on it")
    monkeypatch.setenv("TUNEFLEET_CACHE_DIR", str(tmp_path))
    w = ops.make_workload("matmul", {"M": 64, "N": 64, "K": 64})
    target = Target("cuda", "sm_80")
    inp = MeasureInput(w.to_json(), str(target), ops.default_config(w, target).to_json())
    with GpuMeasurer(n_parallel=1) as measurer:
        (result,) = measurer.measure_batch([inp], MeasureProtocol(repeat=1, min_repeat_ms=0))
    assert result.status == "runtime_error" and "GpuUnavailable" in result.error, result.error
    assert result.build_s > 0 and nvcc.have_nvcc()
