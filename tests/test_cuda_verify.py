"""The verifier: configs over the device's limits (threads per block, shared memory per block,
registers, grid) or with a barrier not every thread reaches are InvalidConfig before any
build; the limits depend on the architecture; the builder reports them apart."""

from __future__ import annotations

import pytest

from tunefleet.compiler import ops, te
from tunefleet.compiler.cuda.build import lower_and_verify, workload_kernel
from tunefleet.compiler.cuda.limits import DeviceLimits, InvalidConfig, limits_for
from tunefleet.compiler.cuda.lower import lower_cuda
from tunefleet.compiler.cuda.verify import register_estimate, verify
from tunefleet.compiler.ops.gpu.common import GEMM_DEFAULT_SHAPES
from tunefleet.compiler.schedule import ScheduleError, create_schedule
from tunefleet.compiler.target import Target

from cuda_helpers import SM80, SM90

MATMUL = ops.make_workload("matmul", {"M": 2048, "N": 2048, "K": 512})


def config(workload, target, **knobs):
    base = ops.default_config(workload, target).to_json()["knobs"]
    return ops.config_space(workload, target).from_json({"knobs": {**base, **knobs}})


def test_default_configs_pass_the_verifier():
    for op, args in [("matmul", {"M": 4096, "N": 4096, "K": 4096}), ("matmul", {"M": 128, "N": 3072, "K": 768}),
                     ("batch_matmul", {}), ("conv2d_nchw", {"CI": 64, "CO": 64, "H": 56, "W": 56, "padding": 1}),
                     ("depthwise_conv2d_nchw", {"C": 32, "H": 112, "W": 112, "padding": 1})]:
        w = ops.make_workload(op, args)
        for target in (SM80, SM90):
            part = workload_kernel(w, ops.default_config(w, target), target)
            assert part.gfunc.threads <= 1024


def test_default_gemm_block_tile_is_the_largest_that_fills_the_device():
    # the lowered grids, not the rule's own arithmetic: the default is the first (largest)
    # block tile of the ladder whose grid gives about every multiprocessor a block
    sms = limits_for(SM90).sm_count
    big = ops.make_workload("matmul", {"M": 4096, "N": 4096, "K": 4096})
    small = ops.make_workload("conv2d_nchw", {"CI": 256, "CO": 256, "H": 14, "W": 14, "padding": 1})
    chosen = {}
    for name, w in (("big", big), ("small", small)):
        default = workload_kernel(w, ops.default_config(w, SM90), SM90).gfunc
        ladder = [workload_kernel(w, config(w, SM90, tile_m=tm, tile_n=tn, lanes_y=ly, warps_y=wy, warps_x=wx),
                                  SM90).gfunc for tm, tn, ly, wy, wx in GEMM_DEFAULT_SHAPES]
        chosen[name] = next(n for n, g in enumerate(ladder) if g.grid[0] * g.grid[1] * g.grid[2] >= 0.9 * sms)
        assert (default.grid, default.block) == (ladder[chosen[name]].grid, ladder[chosen[name]].block)
    # 4096³ fills the device with the classic 128x128 blocks of 256 threads; a 3x3 layer at 14x14
    # (256 x 196 outputs) would leave most multiprocessors idle with them and takes smaller ones
    assert chosen["big"] == 0
    assert chosen["small"] > 0


def test_shared_memory_over_the_architecture_limit_is_invalid():
    # 4x4 warps of 32x1 lanes, 8x8 thread tiles: a 1024x32 block tile; bk 32: 32*(1024+32)*4 = 135 KB
    cfg = config(MATMUL, SM90, tile_m=8, tile_n=1, lanes_y=32, warps_y=4, warps_x=4, bk=32, double_buffer=False)
    part = workload_kernel(MATMUL, cfg, SM90)  # fits the 227 KB of sm_90
    assert 99 * 1024 < part.gfunc.shared_bytes <= 227 * 1024
    with pytest.raises(InvalidConfig, match="shared memory") as exc:
        workload_kernel(MATMUL, cfg, Target("cuda", "sm_86"))  # 99 KB
    assert exc.value.limit == "shared_memory" and exc.value.value == part.gfunc.shared_bytes
    assert exc.value.maximum == 99 * 1024
    assert isinstance(exc.value, ScheduleError)  # older callers still treat it as a failed build


def test_limits_per_architecture():
    assert limits_for(SM80).max_shared_per_block == 163 * 1024
    assert limits_for(SM90).max_shared_per_block == 227 * 1024
    assert limits_for(Target("cuda", "sm_90a")).max_shared_per_block == 227 * 1024
    assert limits_for(Target("cuda", "sm_75")).max_shared_per_block == 64 * 1024
    device = DeviceLimits.from_device_info({"shared_per_block_optin": 232448, "regs_per_block": 65536,
                                            "max_threads_per_block": 1024, "l2_bytes": 52428800})
    assert device.max_shared_per_block == 232448 and device.l2_bytes == 52428800


def _elementwise(n: int, threads: int, tile: int = 1):
    A = te.placeholder((n,), name="A")
    B = te.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = create_schedule(B)
    (i,) = s[B].op.axis
    o, t = s[B].split(i, factor=threads)
    s[B].bind(o, "blockIdx.x")
    s[B].bind(t, "threadIdx.x")
    return s, [A, B]


def test_too_many_threads_per_block_is_invalid():
    s, args = _elementwise(1 << 16, 2048)
    g = lower_cuda(s, args, "wide")
    assert g.threads == 2048
    with pytest.raises(InvalidConfig, match="threadIdx.x extent 2048") as exc:
        verify(g, limits_for(SM90))
    assert exc.value.limit in ("threads",)


def test_too_many_blocks_in_y_is_invalid():
    A = te.placeholder((70000, 4), name="A")
    B = te.compute((70000, 4), lambda i, j: A[i, j] + 1.0, name="B")
    s = create_schedule(B)
    i, j = s[B].op.axis
    s[B].bind(i, "blockIdx.y")
    s[B].bind(j, "threadIdx.x")
    with pytest.raises(InvalidConfig, match="blockIdx.y extent 70000") as exc:
        lower_and_verify(s, [A, B], SM90, "tall")
    assert exc.value.limit == "grid"


def _register_tile(tm: int, tn: int, threads: int):
    A = te.placeholder((8192, 64), name="A")
    B = te.placeholder((64, 256), name="B")
    k = te.reduce_axis(64, "k")
    C = te.compute((8192, 256), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = create_schedule(C)
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=tm)
    jo, ji = s[C].split(j, factor=tn)
    bo, to = s[C].split(io, factor=threads)
    s[C].reorder(bo, to, jo, ii, ji)
    s[C].bind(bo, "blockIdx.x")
    s[C].bind(to, "threadIdx.x")
    s[CL].compute_at(s[C], jo)
    return s, [A, B, C]


def test_register_tile_over_the_limits_is_invalid():
    s, args = _register_tile(16, 16, 64)  # 256 accumulators per thread
    g = lower_cuda(s, args, "regs")
    assert register_estimate(g) > 255
    with pytest.raises(InvalidConfig, match="registers per thread") as exc:
        verify(g, limits_for(SM90))
    assert exc.value.limit == "registers"
    s, args = _register_tile(8, 8, 1024)  # 64 accumulators fit a thread, not 1024 threads of a block
    g = lower_cuda(s, args, "regs_block")
    with pytest.raises(InvalidConfig, match="registers of a block"):
        verify(g, limits_for(SM90))
    s, args = _register_tile(8, 8, 128)
    verify(lower_cuda(s, args, "regs_ok"), limits_for(SM90))


def test_barrier_under_a_thread_guard_is_invalid():
    # the shared copy runs inside the output's threadIdx.x loop of 24 iterations while the copy binds
    # 32 threads: threads 24..31 would skip the barrier around it
    A = te.placeholder((96, 64), name="A")
    AS = te.compute((96, 64), lambda i, k: A[i, k], name="AS")
    k = te.reduce_axis(64, "k")
    C = te.compute((96,), lambda i: te.sum(AS[i, k], axis=k), name="C")
    s = create_schedule(C)
    s[AS].set_scope("shared")
    (i,) = s[C].op.axis
    bo, t = s[C].split(i, factor=24)
    s[C].bind(bo, "blockIdx.x")
    s[C].bind(t, "threadIdx.x")
    s[AS].compute_at(s[C], t)
    ai, ak = s[AS].op.axis
    f = s[AS].fuse(ai, ak)
    _, tx = s[AS].split(f, factor=32)
    s[AS].bind(tx, "threadIdx.x")
    with pytest.raises(InvalidConfig, match="barrier") as exc:
        lower_cuda(s, [A, C], "diverge")
    assert exc.value.limit == "barrier"


def test_builder_reports_invalid_configs_without_building(tmp_path, monkeypatch):
    from tunefleet.tuner.builder import build_candidate
    from tunefleet.tuner.gpu_runner import is_invalid_config
    from tunefleet.tuner.measure import MeasureInput, MeasureResult

    monkeypatch.setenv("NVCC", str(tmp_path / "no-nvcc"))  # a build would fail differently
    cfg = config(MATMUL, SM90, tile_m=8, tile_n=1, lanes_y=32, warps_y=4, warps_x=4, bk=32)
    result = build_candidate(MeasureInput(MATMUL.to_json(), "cuda -arch=sm_86", cfg.to_json()))
    assert result.status == "compile_error" and result.error.startswith("InvalidConfig:")
    assert is_invalid_config(MeasureResult("compile_error", error=result.error))
