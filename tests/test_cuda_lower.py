"""GPU schedule primitives and lowering: bind / cache_read / set_scope and their errors, what a
CUDA kernel cannot express, shared regions relaxed over the threads of a block, barriers and
dynamic shared memory, and the code generator's choices (16-byte accesses only where aligned,
32-bit indices where every buffer fits)."""

from __future__ import annotations

import numpy as np
import pytest

from tunefleet.compiler import ops, te
from tunefleet.compiler.cuda.build import workload_kernel
from tunefleet.compiler.cuda.codegen import generate_cuda, index_type
from tunefleet.compiler.cuda.lower import lower_cuda
from tunefleet.compiler.cuda.shared_memory import BARRIER
from tunefleet.compiler.ir import Evaluate, For, walk_stmt
from tunefleet.compiler.schedule import ScheduleError, create_schedule

from cuda_helpers import SM90


def _tiled_sum(n=256, m=64, tile=32, *, shared=True):
    """C[i] = sum_k A[i, k], a block of `tile` rows; A's tile staged in shared memory per block."""
    A = te.placeholder((n, m), name="A")
    AS = te.compute((n, m), lambda i, k: A[i, k], name="AS")
    k = te.reduce_axis(m, "k")
    C = te.compute((n,), lambda i: te.sum(AS[i, k], axis=k), name="C")
    s = create_schedule(C)
    (i,) = s[C].op.axis
    bo, t = s[C].split(i, factor=tile)
    s[C].bind(bo, "blockIdx.x")
    s[C].bind(t, "threadIdx.x")
    if shared:
        s[AS].set_scope("shared")
        s[AS].compute_at(s[C], t)
        ai, ak = s[AS].op.axis
        ko, kv = s[AS].split(ak, factor=4)
        f = s[AS].fuse(ai, ko)
        _, tx = s[AS].split(f, factor=tile)
        s[AS].bind(tx, "threadIdx.x")
        s[AS].vectorize(kv)
    else:
        s[AS].compute_inline()
    return s, [A, C]


def test_bind_errors_name_the_stage_and_axis():
    A = te.placeholder((64,), name="A")
    k = te.reduce_axis(64, "k")
    S = te.compute((1,), lambda i: te.sum(A[k], axis=k), name="S")
    s = create_schedule(S)
    with pytest.raises(ScheduleError, match="cannot bind 'i' to 'warpIdx.x'; allowed: blockIdx.x"):
        s[S].bind(s[S].op.axis[0], "warpIdx.x")
    with pytest.raises(ScheduleError, match="reduce axis 'k'"):
        s[S].bind(s[S].op.reduce_axis[0], "threadIdx.x")
    B = te.compute((64, 2), lambda i, j: A[i] + 1.0, name="B")
    sb = create_schedule(B)
    i, j = sb[B].op.axis
    sb[B].bind(i, "threadIdx.x")
    with pytest.raises(ScheduleError, match="threadIdx.x is already bound to 'i'"):
        sb[B].bind(j, "threadIdx.x")
    with pytest.raises(ScheduleError, match="scope 'texture'"):
        sb[B].set_scope("texture")


def test_cache_read_redirects_the_readers():
    A = te.placeholder((8, 8), name="A")
    B = te.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    C = te.compute((8, 8), lambda i, j: A[j, i] + B[i, j], name="C")
    s = create_schedule(C)
    AS = s.cache_read(A, "shared", [B])
    assert s[AS].scope == "shared" and AS.name == "A_shared"
    assert AS in s[B].op.input_tensors() and A not in s[B].op.input_tensors()
    assert A in s[C].op.input_tensors()  # not a reader given: still reads A
    assert [st.name for st in s.stages] == ["A_shared", "B", "C"]
    with pytest.raises(ScheduleError, match="does not read it"):
        s.cache_read(AS, "local", [C])
    with pytest.raises(ScheduleError, match="scope 'global'"):
        s.cache_read(A, "global", [C])


def test_what_a_cuda_kernel_cannot_express():
    A = te.placeholder((64,), name="A")
    T = te.compute((64,), lambda i: A[i] * 2.0, name="T")
    B = te.compute((64,), lambda i: T[i] + 1.0, name="B")
    s = create_schedule(B)
    o, t = s[B].split(s[B].op.axis[0], factor=32)
    s[B].bind(o, "blockIdx.x")
    s[B].bind(t, "threadIdx.x")
    with pytest.raises(ScheduleError, match="'T' is computed at the root but is not a kernel argument"):
        lower_cuda(s, [A, B], "k")
    s[T].compute_inline()
    lower_cuda(s, [A, B], "k")
    s2 = create_schedule(B)
    s2[T].compute_inline()
    with pytest.raises(ScheduleError, match="needs a loop bound to a block index"):
        lower_cuda(s2, [A, B], "k")
    s2[B].parallel(s2[B].op.axis[0])
    with pytest.raises(ScheduleError, match="'parallel', which has no meaning in a CUDA kernel"):
        lower_cuda(s2, [A, B], "k")


def test_shared_region_spans_the_block_and_barriers_surround_the_copy():
    s, args = _tiled_sum()
    g = lower_cuda(s, args, "tiled")
    (buf, offset), = g.shared
    assert buf.shape == (32, 64) and offset == 0  # relaxed over the 32 threads, not one row per thread
    assert g.shared_bytes == 32 * 64 * 4 and g.launch["threadIdx.x"] == 32 and g.launch["blockIdx.x"] == 8
    barriers = [n for n in walk_stmt(g.func.body) if isinstance(n, Evaluate) and n.func == BARRIER]
    assert len(barriers) == 2
    src, vec = generate_cuda(g)
    assert "extern __shared__ __align__(16) unsigned char tf_smem[];" in src
    assert "__launch_bounds__(32)" in src and src.count("__syncthreads();") == 2
    assert "*reinterpret_cast<const float4*>(A + " in src and "*reinterpret_cast<float4*>(AS + " in src
    assert vec == {"A"}


def test_no_16_byte_access_without_proven_alignment():
    s, args = _tiled_sum(n=256, m=66, tile=32)  # rows of 66 floats: row starts not 16-byte aligned
    src, vec = generate_cuda(lower_cuda(s, args, "odd"))
    assert vec == set() and "reinterpret_cast<const float4*>(A" not in src
    assert "reinterpret_cast<float4*>(AS" not in src  # the shared rows are 66 floats too


def test_index_type():
    s, args = _tiled_sum()
    assert index_type(lower_cuda(s, args, "small")) == "int"
    A = te.placeholder((1 << 16, 1 << 15), name="A")
    B = te.compute(A.shape, lambda i, j: A[i, j] * 2.0, name="B")
    sb = create_schedule(B)
    i, j = sb[B].op.axis
    sb[B].bind(i, "blockIdx.x")
    jo, ji = sb[B].split(j, factor=256)
    sb[B].bind(ji, "threadIdx.x")
    g = lower_cuda(sb, [A, B], "big")
    assert index_type(g) == "long long" and "long long" in generate_cuda(g)[0]


def test_cpu_lowering_ignores_the_gpu_rules():
    """A schedule without bindings lowers as before (shared/local scopes only matter with them)."""
    from tunefleet.compiler.lower import lower

    s, args = _tiled_sum(shared=False)
    A, C = args
    s2 = create_schedule(C)
    func = lower(s2, args, "cpu")
    assert not any(isinstance(n, Evaluate) and n.func == BARRIER for n in walk_stmt(func.body))


def test_padded_rows_change_the_layout_not_the_region():
    s, args = _tiled_sum()
    AS = next(st for st in s.stages if st.name == "AS")
    AS.pad_rows(4)
    g = lower_cuda(s, args, "padded")
    (buf, _), = g.shared
    assert buf.shape == (32, 68) and g.shared_bytes == 32 * 68 * 4
    src, _ = generate_cuda(g)
    assert "* 68" in src and "reinterpret_cast<float4*>(AS + " in src  # rows of 68 keep 16-byte alignment
    with pytest.raises(ScheduleError, match="non-negative int"):
        AS.pad_rows(-1)


def _barriers(stmt) -> int:
    return sum(1 for n in walk_stmt(stmt) if isinstance(n, Evaluate) and n.func == BARRIER)


def test_double_buffer_keeps_one_barrier_per_k_tile_and_two_copies_of_each_tile():
    w = ops.make_workload("matmul", {"M": 256, "N": 256, "K": 100})  # K tail: 100 = 12 tiles of 8 + 4
    space = ops.config_space(w, SM90)
    knobs = {**ops.default_config(w, SM90).to_json()["knobs"], "bk": 8}
    single = workload_kernel(w, space.from_json({"knobs": {**knobs, "double_buffer": False}}), SM90, name="one_copy")
    double = workload_kernel(w, space.from_json({"knobs": {**knobs, "double_buffer": True}}), SM90, name="two_copies")

    def k_loop(part):
        (loop,) = [n for n in walk_stmt(part.gfunc.func.body) if isinstance(n, For) and n.extent == 13]
        return loop

    assert _barriers(k_loop(single)) == 2 and _barriers(k_loop(double)) == 1
    assert _barriers(double.gfunc.func.body) == 3  # before and after the first tile's copy, one per tile
    for (b1, _), (b2, _) in zip(single.gfunc.shared, double.gfunc.shared):
        assert b2.shape == (2, -(-b1.size // 4) * 4)  # two halves, each 16-byte aligned
    assert double.gfunc.shared_bytes >= 2 * single.gfunc.shared_bytes
    assert "float A_shared_next[" in double.kernel and "float B_shared_next[" in double.kernel
    assert "k_o % 2 * " in double.kernel and "(k_o + 1) % 2 * " in double.kernel
    assert "reinterpret_cast<float4*>(B_shared + " in double.kernel  # the half offset keeps 16-byte alignment


def test_double_buffer_needs_a_shared_stage_at_a_loop():
    s, args = _tiled_sum()
    AS = next(st for st in s.stages if st.name == "AS")
    AS.double_buffer()
    AS.set_scope("local")
    with pytest.raises(ScheduleError, match="double_buffer needs a stage in shared memory"):
        lower_cuda(s, args, "k")


def test_reads_beyond_reports_reads_past_a_buffer():
    from tunefleet.compiler import passes
    from tunefleet.compiler.ir import Buffer, Load, Ramp, Store
    from tunefleet.compiler.te import Var

    src, dst = Buffer("src", (8,), "float32", "shared"), Buffer("dst", (16,), "float32")
    i = Var("i")
    assert passes.reads_beyond(For(i, 10, "serial", Store(dst, i, Load(src, i))), [src]) == [(src, 0, 9)]
    j = Var("j")
    vector = For(j, 2, "serial", Store(dst, Ramp(j * 4, 1, 4), Load(src, Ramp(j * 4, 1, 4))))
    assert passes.reads_beyond(vector, [src]) == []
    assert passes.reads_beyond(For(j, 3, "serial", vector.body), [src]) == [(src, 0, 11)]


def test_a_block_tile_wider_than_the_output_reads_inside_its_shared_memory():
    """conv2d 32->48 at 14x14: 196 output columns, a block of 2 warps x 32 lanes x 8 columns
    covers 512. The columns beyond 196 are computed and never stored; the shared tile of the
    input must hold what they read. It was clipped to 196 columns, so the last rows' reads
    went past the end of the kernel's shared memory: on an H200 such a config of the ResNet-50
    layer 256@28x28/2 stopped with an illegal memory access, which poisons the CUDA context
    (compute-sanitizer: an invalid __shared__ read of 16 bytes). Checked on the emulator."""
    from tunefleet.compiler import passes
    from tunefleet.compiler.cuda.emulate import emulate_many
    from tunefleet.tuner.measure_child import TOLERANCE, relative_error

    w = ops.make_workload("conv2d_nchw", {"N": 1, "CI": 32, "CO": 48, "H": 14, "W": 14, "padding": [1, 1]})
    knobs = {"tile_m": 1, "tile_n": 8, "lanes_y": 1, "warps_y": 2, "warps_x": 2, "bk": 4, "unroll_k": True,
             "vec": True, "pad_shared": True, "double_buffer": True}
    part = workload_kernel(w, ops.config_space(w, SM90).from_json({"knobs": knobs}), SM90, name="wide")
    g = part.gfunc
    assert g.launch["blockIdx.x"] == 1 and 2 * 32 * 8 > 14 * 14  # one block of columns, wider than the output
    assert passes.reads_beyond(g.func.body, [b for b, _ in g.shared]) == []
    inputs = ops.random_inputs(w.tensors(), np.random.default_rng(3))
    (outs,) = emulate_many([(part, inputs)])
    assert relative_error(outs[0], np.asarray(w.reference(*inputs)[0])) <= TOLERANCE["float32"]
