"""GPU templates against the operators' numpy references, without a GPU: the generated CUDA
kernels run on the CPU under `compiler.cuda.emulate` (one host thread per CUDA thread, threads
of a block taking turns between barriers, shared memory poisoned with NaN bytes). This checks
lowering and code generation (indices, guards, shared-memory regions, barriers, vector
accesses as code), not the hardware; tests on a GPU are in test_cuda_gpu.py."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tunefleet.compiler import ops
from tunefleet.compiler.cuda import shared_memory
from tunefleet.compiler.cuda.build import workload_kernel
from tunefleet.compiler.cuda.emulate import emulate_many
from tunefleet.compiler.ir import For, Seq, map_stmt, seq
from tunefleet.tuner.measure_child import TOLERANCE, relative_error

from cuda_helpers import SM90, random_valid_configs

#: Small shapes (every CUDA thread is a host thread) with tails, epilogues, residuals, transposes, padding.
SMALL = [
    ("matmul", {"M": 50, "N": 72, "K": 37, "bias": True, "epilogue": "gelu"}),
    ("matmul", {"M": 64, "N": 64, "K": 32, "dtype": "float64"}),
    ("batch_matmul", {"batch": 2, "M": 33, "N": 40, "K": 20, "transpose_b": True}),
    ("batch_matmul", {"batch": 3, "M": 16, "N": 24, "K": 9}),
    ("conv2d_nchw", {"N": 2, "CI": 6, "CO": 12, "H": 9, "W": 7, "KH": 3, "KW": 3, "padding": [1, 2],
                     "dilation": [1, 2], "bias": True, "epilogue": "relu"}),
    ("conv2d_nchw", {"N": 1, "CI": 16, "CO": 8, "H": 6, "W": 6, "KH": 1, "KW": 1, "residual": True}),
    ("conv2d_nchw", {"N": 1, "CI": 3, "CO": 8, "H": 11, "W": 11, "KH": 3, "KW": 3, "stride": 2, "residual": True,
                     "epilogue": "relu"}),
    ("depthwise_conv2d_nchw", {"N": 1, "C": 3, "H": 17, "W": 23, "KH": 5, "KW": 3, "stride": [2, 1],
                               "padding": [2, 1], "bias": True, "epilogue": "relu"}),
    ("depthwise_conv2d_nchw", {"N": 2, "C": 2, "H": 8, "W": 8, "KH": 3, "KW": 3}),
]


def check(workload, *parts) -> None:
    rng = np.random.default_rng(7)
    inputs = ops.random_inputs(workload.tensors(), rng)
    refs = workload.reference(*inputs)
    tol = TOLERANCE[workload.args["dtype"]]
    for part, outs in zip(parts, emulate_many([(p, inputs) for p in parts])):
        errs = [relative_error(o, np.asarray(r)) for o, r in zip(outs, refs)]
        assert all(e <= tol for e in errs), f"{workload!r} {part.name}: relative error {errs} > {tol}"


@pytest.mark.timeout(300)
@pytest.mark.parametrize("op, args", SMALL, ids=[f"{op}-{i}" for i, (op, _) in enumerate(SMALL)])
def test_default_and_random_configs_match_numpy(op, args):
    w = ops.make_workload(op, args)
    names = itertools.count()
    default = workload_kernel(w, ops.default_config(w, SM90), SM90, name="default_k")
    parts, _ = random_valid_configs(op, args, SM90, 2, seed=len(op),
                                    build=lambda w_, c: workload_kernel(w_, c, SM90, name=f"random_k{next(names)}"))
    check(w, default, *parts)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("op, args", [SMALL[0], SMALL[2], SMALL[4]], ids=["matmul", "batch_matmul", "conv2d"])
def test_double_buffered_and_single_buffered_tiles_match_numpy(op, args):
    """Tails in K (the last tile partly out of range), a transposed B, and the implicit GEMM of a
    padded, dilated convolution, with bk 4 so that the K loop has several tiles to prefetch."""
    w = ops.make_workload(op, args)
    space = ops.config_space(w, SM90)
    knobs = {**ops.default_config(w, SM90).to_json()["knobs"], "bk": 4}
    parts = [workload_kernel(w, space.from_json({"knobs": {**knobs, "double_buffer": db}}), SM90, name=f"db_{db}")
             for db in (True, False)]
    assert parts[0].gfunc.shared_bytes > parts[1].gfunc.shared_bytes
    check(w, *parts)


def test_a_missing_barrier_gives_a_wrong_answer(monkeypatch):
    """The emulation really checks barriers: without the one after each shared-memory copy, the
    threads of a block read tiles not yet written."""
    w = ops.make_workload("matmul", {"M": 64, "N": 64, "K": 32})
    original = shared_memory.dedupe_barriers

    def drop_read_barriers(stmt):
        def fs(n):
            if isinstance(n, Seq):
                kept, seen = [], 0
                for x in n.stmts:
                    if shared_memory.is_barrier(x):
                        seen += 1
                        if seen == 2:
                            continue
                    kept.append(x)
                return seq(kept)
            return None

        return map_stmt(original(stmt), lambda e: e, fs)

    monkeypatch.setattr(shared_memory, "dedupe_barriers", drop_read_barriers)
    space = ops.config_space(w, SM90)
    single = space.from_json({"knobs": {**ops.default_config(w, SM90).to_json()["knobs"], "double_buffer": False}})
    part = workload_kernel(w, single, SM90, name="no_barrier")
    assert part.kernel.count("__syncthreads();") == 1
    with pytest.raises(AssertionError, match="relative error"):
        check(w, part)


def test_a_missing_barrier_in_a_double_buffered_loop_gives_a_wrong_answer(monkeypatch):
    """Without the barrier that ends each K tile, fast threads overwrite the half that slow ones
    still read; the emulation (threads in turn between barriers) shows it."""
    w = ops.make_workload("matmul", {"M": 64, "N": 64, "K": 32})
    original = shared_memory.double_buffer

    def drop_barriers(n):
        if isinstance(n, Seq):
            return seq(x for x in n.stmts if not shared_memory.is_barrier(x))
        return None

    def without_loop_barrier(body, shared, ids):
        out, shared = original(body, shared, ids)

        def fs(n):
            if isinstance(n, For) and n.kind == "serial":
                return For(n.var, n.extent, n.kind, map_stmt(n.body, lambda e: e, drop_barriers))
            return None

        return map_stmt(out, lambda e: e, fs), shared

    monkeypatch.setattr(shared_memory, "double_buffer", without_loop_barrier)
    space = ops.config_space(w, SM90)
    cfg = space.from_json({"knobs": {**ops.default_config(w, SM90).to_json()["knobs"], "bk": 4,
                                     "double_buffer": True}})
    part = workload_kernel(w, cfg, SM90, name="racy")
    assert part.kernel.count("__syncthreads();") == 2  # the two around the first tile's copy
    with pytest.raises(AssertionError, match="relative error"):
        check(w, part)
