"""Schedules lowered, compiled with gcc and run: the numbers must match numpy."""

import numpy as np
import pytest
from isa_targets import FAMILY, params, runs_here

from tunefleet.compiler import te
from tunefleet.compiler.driver import build
from tunefleet.compiler.lower import lower
from tunefleet.compiler.expr import Const
from tunefleet.compiler.ir import Evaluate, For, IfThenElse, substitute, walk_stmt
from tunefleet.compiler.schedule import ScheduleError, create_schedule
from tunefleet.compiler.simplify import Simplifier
from tunefleet.compiler.target import Target

TARGET = Target.host()
RNG = np.random.default_rng(7)


def rand(*shape):
    return (RNG.random(shape) * 2 - 1).astype(np.float32)


def run(sch, args, name, *inputs):
    return build(sch, args, TARGET, name).run(*inputs)


def test_elementwise_split_with_tail_vectorized_and_parallel():
    A = te.placeholder((37, 45), name="A")
    B = te.compute((37, 45), lambda i, j: te.tanh(A[i, j]) * 2.0 + te.sqrt(te.abs(A[i, j])), name="B")
    s = create_schedule(B)
    i, j = s[B].op.axis
    jo, ji = s[B].split(j, factor=16)
    s[B].parallel(i)
    s[B].vectorize(ji)
    a = rand(37, 45)
    (b,) = run(s, [A, B], "ew", a)
    np.testing.assert_allclose(b, np.tanh(a) * 2 + np.sqrt(np.abs(a)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("combiner", ["sum", "max", "min"])
def test_row_reduction_with_split_reduce_axis(combiner):
    A = te.placeholder((19, 53), name="A")
    k = te.reduce_axis(53, "k")
    red = {"sum": te.sum, "max": te.max, "min": te.min}[combiner]
    B = te.compute((19,), lambda i: red(A[i, k], axis=k), name="B")
    s = create_schedule(B)
    ko, ki = s[B].split(s[B].op.reduce_axis[0], factor=8)
    s[B].unroll(ki)
    a = rand(19, 53)
    (b,) = run(s, [A, B], f"red_{combiner}", a)
    np.testing.assert_allclose(b, getattr(np, combiner)(a, axis=1), rtol=1e-5, atol=1e-5)


def test_compute_at_infers_the_region_of_a_padded_stencil():
    A = te.placeholder((30, 30), name="A")
    P = te.compute((32, 32), lambda i, j: te.if_then_else(
        te.all_of(i >= 1, i < 31, j >= 1, j < 31), A[te.min(te.max(i - 1, 0), 29), te.min(te.max(j - 1, 0), 29)], 0.0),
        name="P")
    B = te.compute((30, 30), lambda i, j: P[i, j] + P[i + 2, j + 2] + P[i + 1, j + 1], name="B")
    s = create_schedule(B)
    i, j = s[B].op.axis
    io, ii = s[B].split(i, factor=7)
    s[P].compute_at(s[B], io)
    func = lower(s, [A, B], "stencil")
    allocs = [n for n in walk_stmt(func.body) if type(n).__name__ == "Allocate"]
    assert allocs and allocs[0].buffer.shape == (9, 32)  # 7 rows + a 2-row halo
    a = rand(30, 30)
    (b,) = run(s, [A, B], "stencil", a)
    p = np.pad(a, 1)
    np.testing.assert_allclose(b, p[:30, :30] + p[2:, 2:] + p[1:31, 1:31], rtol=1e-6)


def test_cache_write_register_tile_and_fuse():
    M, N, K = 23, 40, 17
    A, B = te.placeholder((M, K), name="A"), te.placeholder((K, N), name="B")
    k = te.reduce_axis(K, "k")
    C = te.compute((M, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = create_schedule(C)
    CL = s.cache_write(C, "local")
    i, j = s[C].op.axis
    io, ii = s[C].split(i, factor=4)
    jo, ji = s[C].split(j, factor=16)
    s[C].reorder(io, jo, ii, ji)
    f = s[C].fuse(io, jo)
    s[C].parallel(f)
    s[C].vectorize(ji)
    s[CL].compute_at(s[C], f)
    ci, cj = s[CL].op.axis
    s[CL].reorder(s[CL].op.reduce_axis[0], ci, cj)
    s[CL].unroll(ci)
    s[CL].vectorize(cj)
    a, b = rand(M, K), rand(K, N)
    (c,) = run(s, [A, B, C], "tile", a, b)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-5)


def test_inline_and_float64():
    A = te.placeholder((10, 12), "float64", name="A")
    B = te.compute((10, 12), lambda i, j: A[i, j] * 3.0, name="B")
    C = te.compute((10, 12), lambda i, j: B[i, j] + te.cast("float64", i), name="C")
    s = create_schedule(C)
    s[B].compute_inline()
    s[C].vectorize(s[C].op.axis[1])
    a = RNG.random((10, 12))
    (c,) = run(s, [A, C], "inl64", a)
    np.testing.assert_allclose(c, a * 3 + np.arange(10)[:, None])


def test_tails_are_peeled_so_the_main_loop_has_no_guard():
    A = te.placeholder((100,), name="A")
    B = te.compute((100,), lambda i: A[i] + 1.0, name="B")
    s = create_schedule(B)
    io, ii = s[B].split(s[B].op.axis[0], factor=16)
    s[B].vectorize(ii)
    func = lower(s, [A, B], "peel")
    loops = [n for n in walk_stmt(func.body) if isinstance(n, For)]
    main = next(n for n in loops if n.extent == 6)
    assert not any(isinstance(n, IfThenElse) for n in walk_stmt(main))
    a = rand(100)
    (b,) = run(s, [A, B], "peel", a)
    np.testing.assert_allclose(b, a + 1)


def test_illegal_schedules_name_stage_and_axis():
    A = te.placeholder((8, 8), name="A")
    k = te.reduce_axis(8, "k")
    B = te.compute((8,), lambda i: te.sum(A[i, k], axis=k), name="B")
    C = te.compute((8,), lambda i: B[i] * 2.0, name="C")
    s = create_schedule(C)
    with pytest.raises(ScheduleError, match="stage 'B'.*reduce axis 'k'"):
        s[B].vectorize(s[B].op.reduce_axis[0])
    with pytest.raises(ScheduleError, match="stage 'B'.*cannot inline a reduction"):
        s[B].compute_inline()
    with pytest.raises(ScheduleError, match="stage 'C'.*axis 'k' is an axis of another stage"):
        s[C].split(s[B].op.reduce_axis[0], factor=2)
    io, ii = s[C].split(s[C].op.axis[0], factor=2)
    with pytest.raises(ScheduleError, match="no longer a leaf"):
        s[C].split(s[C].op.axis[0], factor=2)
    with pytest.raises(ScheduleError, match="adjacent"):
        s[C].fuse(ii, io)
    with pytest.raises(ScheduleError, match="input"):
        s[A]


def _row_sums(rows: int, K: int, tile: int, step: int):
    """(A, out, schedule, ko): out[i] = Σ_k A[i, k] over `tile` rows of A at a time, K in steps of `step`."""
    A = te.placeholder((rows, K), name="A")
    k = te.reduce_axis(K, "k")
    out = te.compute((rows,), lambda i: te.sum(A[i, k], axis=k), name="out")
    s = create_schedule(out)
    io, ii = s[out].split(s[out].op.axis[0], factor=tile)
    ko, ki = s[out].split(s[out].op.reduce_axis[0], factor=step)
    s[out].reorder(io, ko, ii, ki)
    s[out].unroll(ii)
    s[out].unroll(ki)
    return A, out, s, io, ko


def _prefetched_offsets(func, at: str, outer: str) -> dict[tuple[int, int], list[int]]:
    """{(outer, at) iteration: the element offsets of the lines prefetched there} of a lowered
    function whose loop `at` (inside loop `outer`) holds the prefetches."""
    loops = {s.var.name: s for s in walk_stmt(func.body) if isinstance(s, For)}
    calls = [s for s in walk_stmt(loops[at].body) if isinstance(s, Evaluate) and s.func == "__builtin_prefetch"]
    assert all([c.value for c in call.args[1:]] == [0, 2] for call in calls)  # a read, kept in L2
    simplifier = Simplifier({})
    return {(o, a): [simplifier.simplify(substitute(call.args[0].index, {loops[outer].var: Const(o, "int64"),
                                                                           loops[at].var: Const(a, "int64")})).value
                     for call in calls]
            for o in range(loops[outer].extent) for a in range(loops[at].extent)}


def test_prefetch_names_each_line_that_the_iteration_ahead_reads():
    """Stage.prefetch at the loop over K of a tile of 2 rows, one tile ahead: each step of K
    prefetches the box the next tile reads in that step, 2 rows × the 32 elements of the step
    (two 64-byte lines each), and the sums still match numpy."""
    A, out, s, io, ko = _row_sums(rows=6, K=128, tile=2, step=32)
    s[out].prefetch(A, ko, io)
    offsets = _prefetched_offsets(lower(s, [A, out], "pf", lanes=TARGET.lanes("float32")), "k_o", "i_o")
    assert offsets == {(o, a): [(2 * o + 2 + r) * 128 + 32 * a + 16 * line for r in range(2) for line in range(2)]
                       for o in range(3) for a in range(4)}
    a = rand(6, 128)
    (b,) = run(s, [A, out], "pf", a)
    np.testing.assert_allclose(b, a.sum(axis=1), rtol=1e-5, atol=1e-5)


def test_prefetch_at_its_own_loop_reads_that_loop_ahead():
    """`ahead` = `at` (TVM's form): each step of K prefetches the step `offset` further on."""
    A, out, s, io, ko = _row_sums(rows=8, K=256, tile=4, step=16)
    s[out].prefetch(A, ko, ko, offset=3)
    offsets = _prefetched_offsets(lower(s, [A, out], "pf", lanes=TARGET.lanes("float32")), "k_o", "i_o")
    assert offsets[(1, 5)] == [(4 + r) * 256 + 16 * (5 + 3) for r in range(4)]


def test_prefetch_into_the_l1_asks_for_locality_3():
    A, out, s, io, ko = _row_sums(rows=4, K=64, tile=2, step=16)
    s[out].prefetch(A, ko, ko, offset=2, locality=3)
    func = lower(s, [A, out], "pf", lanes=TARGET.lanes("float32"))
    calls = [c for c in walk_stmt(func.body) if isinstance(c, Evaluate) and c.func == "__builtin_prefetch"]
    assert calls and all([c.value for c in call.args[1:]] == [0, 3] for call in calls)


def test_illegal_prefetches_name_the_stage_and_the_reason():
    A, out, s, io, ko = _row_sums(rows=4, K=64, tile=2, step=16)
    B = te.placeholder((4, 64), name="B")
    with pytest.raises(ScheduleError, match="stage 'out'.*prefetch of 'B', which it does not read"):
        s[out].prefetch(B, ko, io)
    with pytest.raises(ScheduleError, match="offset must be a positive int"):
        s[out].prefetch(A, ko, io, offset=0)
    with pytest.raises(ScheduleError, match="locality must be 0, 1, 2 or 3, got 4"):
        s[out].prefetch(A, ko, io, locality=4)
    with pytest.raises(ScheduleError, match="stage 'out'.*prefetch.*axis 'k' is no longer a leaf"):
        s[out].prefetch(A, s[out].op.reduce_axis[0], io)
    D = te.compute((4,), lambda i: A[i, 0] + 1.0, name="D")
    E = te.compute((4, 5), lambda i, j: D[i] * 2.0, name="E")
    se = create_schedule(E)
    se[D].compute_at(se[E], se[E].op.axis[0])
    ei, ej = se[E].op.axis
    se[D].prefetch(A, se[D].op.axis[0], ej)
    with pytest.raises(ScheduleError, match="stage 'D': prefetch of 'A' 1 iterations of 'j' ahead, which its "
                                            "indices do not read"):
        lower(se, [A, E], "pf_bad", lanes=TARGET.lanes("float32"))
    F = te.compute((4, 64), lambda i, j: A[i, j] + 1.0, name="F")
    sf = create_schedule(F)
    fi, fj = sf[F].op.axis
    sf[F].vectorize(fj)
    sf[F].prefetch(A, fj, fi)
    with pytest.raises(ScheduleError, match="stage 'F': prefetch at loop 'j', which is vectorized"):
        lower(sf, [A, F], "pf_vec", lanes=TARGET.lanes("float32"))


@pytest.mark.parametrize("fn, ref", [
    ("exp", np.exp), ("tanh", np.tanh), ("sigmoid", lambda v: 1 / (1 + np.exp(-v))),
    ("erf", np.vectorize(__import__("math").erf)),
])
def test_vectorized_math_intrinsics_are_accurate(fn, ref):
    x = np.concatenate([np.linspace(-12, 12, 4000), np.linspace(-1e-3, 1e-3, 96)]).astype(np.float32)
    A = te.placeholder((x.size,), name="A")
    B = te.compute((x.size,), lambda i: getattr(te, fn)(A[i]), name="B")
    s = create_schedule(B)
    s[B].vectorize(s[B].split(s[B].op.axis[0], factor=16)[1])
    built = build(s, [A, B], TARGET, f"vmath_{fn}")
    assert f"tf_v{fn}_" in built.source  # the vector implementation, not a call per lane
    (y,) = built.run(x)
    r = ref(x.astype(np.float64))
    big = np.abs(r) > 1e-6
    assert np.max(np.abs(y - r)[big] / np.abs(r)[big]) < 2e-6


@pytest.mark.parametrize("target", params(FAMILY))
@pytest.mark.parametrize("K", [64, 67])
def test_a_register_tile_reading_padded_panels_computes_whole_vectors(target, K):
    """A GEMM whose tiles divide neither M nor N (blocks of the fused parallel loop straddle
    both edges): the register tile reads B from zero-padded packed panels, so its columns
    need no guard and its update stays a vector statement; only the rows, whose reads of A
    would leave the matrix, are guarded. Before, every lane was guarded and nothing vectorized.
    Also where the unroll of K does not divide it (67 in steps of 4): the split's overhang
    keeps its own guard and reads nothing, so it does not make the columns unsafe (it did:
    the tile at N's edge became a tile of scalars, 2-4x slower and up to 1 MB of C).
    For each ISA of the host's family (its register tile's nr is that ISA's default)."""
    from tunefleet.compiler import ops
    from tunefleet.compiler.driver import build_workload
    from tunefleet.compiler.ir import Store, lanes_of

    nr = 2 * target.lanes("float32")
    N = 4 * nr + target.lanes("float32") + 3  # the last tile: a vector and 3 columns
    w = ops.make_workload("matmul", {"M": 250, "N": N, "K": K, "bias": True, "epilogue": "relu"})
    knobs = {**ops.default_config(w, target).to_json()["knobs"], "mr": 6, "nr": nr, "bm": 8, "bn": 4,
             "pack_b": True, "parallel": "fused", "ku": 4, "kc": K}
    assert 250 % (6 * 8) and N % (nr * 4)  # blocks straddle both edges
    built = build_workload(w, ops.config_space(w, target).from_json({"knobs": knobs}), target)
    updates = [n for n in walk_stmt(built.func.body) if isinstance(n, Store) and n.buffer.name == "C_acc_local"]
    assert updates and all(lanes_of(n.index) > 1 for n in updates)
    check_against_numpy(w, built, target)


def test_a_vector_loop_guarded_lane_by_lane_is_versioned():
    """A vectorized loop over a tile's 16 columns whose guard keeps them inside N = 100 at a
    column the loop does not fix (x * 16 + j, x an enclosing loop's variable: the 7th tile
    holds 4 columns): vectorize versions it, whole vectors where its last lane passes, the
    guarded loop over single lanes otherwise. partition_tails splits such tiles off where it
    reaches the enclosing loop's variable; this is the fallback where it does not."""
    from tunefleet.compiler import passes
    from tunefleet.compiler.expr import BinOp, Const, Var
    from tunefleet.compiler.ir import Buffer, Load, Store, lanes_of

    a, c = Buffer("A", (112,), "float32"), Buffer("C", (100,), "float32")
    x, j = Var("x"), Var("j")
    col = BinOp("add", BinOp("mul", x, Const(16, "int64")), j)
    store = Store(c, col, BinOp("mul", Load(a, col), Const(2.0, "float32")))
    tile = For(j, 16, "vectorized", IfThenElse(BinOp("lt", col, Const(100, "int64")), store))
    versions = [n for n in walk_stmt(passes.vectorize(For(x, 7, "serial", tile), 16))
                if isinstance(n, IfThenElse) and n.otherwise is not None]
    assert len(versions) == 1
    assert all(lanes_of(n.index) == 16 for n in walk_stmt(versions[0].then) if isinstance(n, Store))
    assert isinstance(versions[0].otherwise, For) and versions[0].otherwise.kind == "ivdep"


def test_a_vector_loop_longer_than_whole_vectors_vectorizes_them_and_leaves_the_rest_scalar():
    """A vectorized loop of 19 lanes at 8 per vector: two vector statements, then a loop over
    the 3 lanes left (not 19 single lanes)."""
    from tunefleet.compiler import passes
    from tunefleet.compiler.expr import BinOp, Const, Var
    from tunefleet.compiler.ir import Buffer, Load, Store, lanes_of

    a, c = Buffer("A", (19,), "float32"), Buffer("C", (19,), "float32")
    j = Var("j")
    store = Store(c, j, BinOp("mul", Load(a, j), Const(2.0, "float32")))
    lowered = passes.vectorize(For(j, 19, "vectorized", store), 8)
    stores = [n for n in walk_stmt(lowered) if isinstance(n, Store)]
    assert [lanes_of(n.index) for n in stores] == [8, 8, 1]
    rest = [n for n in walk_stmt(lowered) if isinstance(n, For)]
    assert [(n.extent, n.kind) for n in rest] == [(3, "ivdep")]


def test_a_vector_loop_narrower_than_a_vector_is_cut_into_narrower_vectors():
    """A vectorized loop of 15 lanes at 16 per vector (and 31: one whole vector first): a
    vector of 8 lanes, one of 4, then a loop over the 3 lanes left (not 15 single lanes)."""
    from tunefleet.compiler import passes
    from tunefleet.compiler.expr import BinOp, Const, Var
    from tunefleet.compiler.ir import Buffer, Load, Store, lanes_of

    for extent, lanes in ((15, [8, 4, 1]), (31, [16, 8, 4, 1])):
        a, c = Buffer("A", (extent,), "float32"), Buffer("C", (extent,), "float32")
        j = Var("j")
        store = Store(c, j, BinOp("mul", Load(a, j), Const(2.0, "float32")))
        lowered = passes.vectorize(For(j, extent, "vectorized", store), 16)
        stores = [n for n in walk_stmt(lowered) if isinstance(n, Store)]
        assert [lanes_of(n.index) for n in stores] == lanes
        assert [(n.extent, n.kind) for n in walk_stmt(lowered) if isinstance(n, For)] == [(3, "ivdep")]


@pytest.mark.parametrize("target", params([t for t in FAMILY if t.lanes("float32") >= 8]))
def test_a_tile_at_ns_edge_narrower_than_a_vector_keeps_its_accumulators_in_registers(target):
    """B read in place, tiles of one vector, N leaving one lane less than a vector for the
    last tile (15 columns of 16 lanes: vectors of 8 and 4 lanes and 3 single lanes per row; 7
    of 8: 4 lanes and 3): its accumulators are variables GCC holds in registers (`C_local_<i>`
    or, where the vectors differ in width, `C_local_p<first element>`), among them vectors of
    4 lanes, not an array in memory of single lanes; the result matches numpy."""
    from tunefleet.compiler import ops
    from tunefleet.compiler.driver import build_workload

    lanes = target.lanes("float32")
    w = ops.make_workload("matmul", {"M": 20, "N": 3 * lanes - 1, "K": 67})
    knobs = {**ops.default_config(w, target).to_json()["knobs"], "mr": 4, "nr": lanes, "bm": 1, "bn": 1,
             "ku": 4, "kc": 67, "order": "nm_nm", "parallel": "fused", "pack_b": False, "pack_a": False}
    built = build_workload(w, ops.config_space(w, target).from_json({"knobs": knobs}), target)
    assert "C_local[" not in built.source
    assert "tf_f32x4 C_local_" in built.source
    check_against_numpy(w, built, target)


def test_simplify_drops_the_updates_of_a_local_buffer_that_nothing_reads():
    """An accumulator that is updated but never read (a register tile whose write-back was cut
    away) goes with its loop and allocation; one that is written back stays, as does one whose
    address an extern call takes."""
    from tunefleet.compiler import passes
    from tunefleet.compiler.expr import BinOp, Var
    from tunefleet.compiler.ir import Address, Allocate, Buffer, Evaluate, Load, Store, seq

    a, c = Buffer("A", (8,), "float32"), Buffer("C", (1,), "float32")
    acc = Buffer("acc", (1,), "float32", "local")
    k = Var("k")
    update = For(k, 8, "serial", Store(acc, 0, BinOp("add", Load(acc, 0), Load(a, k))))
    assert not any(isinstance(n, (For, Store)) for n in walk_stmt(passes.simplify_stmt(Allocate(acc, update))))
    kept = Allocate(acc, seq([update, Store(c, 0, Load(acc, 0))]))
    assert any(isinstance(n, For) for n in walk_stmt(passes.simplify_stmt(kept)))
    extern = Allocate(acc, seq([update, Evaluate("consume", [Address(acc, 0)])]))
    assert any(isinstance(n, For) for n in walk_stmt(passes.simplify_stmt(extern)))


@pytest.mark.parametrize("target", params(FAMILY))
def test_a_tile_at_ns_edge_wider_than_a_vector_keeps_its_accumulators_in_vector_registers(target):
    """B read in place, tiles of 4 vectors, N leaving one vector and 3 columns for the last
    tile (and 67 = K in steps of 4): that tile computes a vector and 3 lanes per row, its
    accumulators still vector registers (`C_local_<i>`, lanes addressed by subscript), not an
    array in memory of scalars as when the whole tile fell back to single lanes."""
    from tunefleet.compiler import ops
    from tunefleet.compiler.driver import build_workload

    lanes = target.lanes("float32")
    N = 2 * 4 * lanes + lanes + 3
    w = ops.make_workload("matmul", {"M": 20, "N": N, "K": 67})
    knobs = {**ops.default_config(w, target).to_json()["knobs"], "mr": 4, "nr": 4 * lanes, "bm": 1, "bn": 1,
             "ku": 4, "kc": 67, "order": "nm_nm", "parallel": "fused", "pack_b": False, "pack_a": False}
    built = build_workload(w, ops.config_space(w, target).from_json({"knobs": knobs}), target)
    assert "C_local[" not in built.source
    check_against_numpy(w, built, target)


@pytest.mark.parametrize("target", params(FAMILY))
def test_the_row_guards_of_a_tile_straddling_m_leave_its_loop_over_k(target):
    """Register tiles of 6 rows over M = 100 (the last tile has 4) in blocks fused into the
    parallel loop, whose variable the guards reach through a modulo (the partitioner versions
    the loop's body on that block index): no tile's loop over K tests a row, the edge tile's
    computes its 4 rows."""
    from tunefleet.compiler import ops
    from tunefleet.compiler.driver import build_workload

    w = ops.make_workload("matmul", {"M": 100, "N": 64, "K": 64, "bias": True})
    space = ops.config_space(w, target)
    nr = target.lanes("float32")
    knobs = {**ops.default_config(w, target).to_json()["knobs"], "mr": 6, "nr": nr, "bm": 4, "bn": 2, "ku": 4,
             "parallel": "fused", "kc": 64}
    built = build_workload(w, space.from_json({"knobs": knobs}), target)
    loops_over_k = [n for n in walk_stmt(built.func.body) if isinstance(n, For) and n.var.name.startswith("k")]
    assert loops_over_k
    assert not any(isinstance(x, IfThenElse) for k in loops_over_k for x in walk_stmt(k.body))
    check_against_numpy(w, built, target)


@pytest.mark.parametrize("target", params(FAMILY))
@pytest.mark.parametrize("parallel", ["outer", "fused"])
def test_the_tiles_of_the_last_block_of_m_are_cut_to_the_rows_left(target, parallel):
    """M = 58 in blocks of 8 tiles of 6 rows: the last block holds 10 rows, one whole tile
    and one of 4 rows; its other 6 tiles are beyond M. Each is cut off on its own: the tile
    of 4 rows is computed unguarded at its height, no loop is left over tiles beyond M (before,
    a loop over the last 7 tiles tested each row of each, and only the first had any), and no
    guard is left inside a serial loop."""
    from tunefleet.compiler import ops
    from tunefleet.compiler.driver import build_workload

    w = ops.make_workload("matmul", {"M": 58, "N": 64, "K": 32})
    knobs = {**ops.default_config(w, target).to_json()["knobs"], "mr": 6, "nr": target.lanes("float32"), "bm": 8,
             "bn": 1, "ku": 4, "parallel": parallel, "kc": 32, "pack_a": False}
    built = build_workload(w, ops.config_space(w, target).from_json({"knobs": knobs}), target)
    serial = [n for n in walk_stmt(built.func.body) if isinstance(n, For) and n.kind != "parallel"]
    assert not any(isinstance(x, IfThenElse) for n in serial for x in walk_stmt(n.body))
    loops_over_k = [n for n in walk_stmt(built.func.body) if isinstance(n, For) and n.var.name.startswith("k")]
    assert len(loops_over_k) == 3  # whole blocks' tiles, the last block's whole tile, its 4 rows
    check_against_numpy(w, built, target)


@pytest.mark.parametrize("target", params(FAMILY))
@pytest.mark.parametrize("bn", [1, 2])
@pytest.mark.parametrize("order", ["nm_nm", "mn_nm"])
def test_the_tiles_at_ns_edge_of_blocks_fused_into_the_parallel_loop_are_split_off(target, bn, order):
    """Register tiles of 2 vectors over N = 196 (the last is partial on every ISA), bn panels
    per block, the blocks of N and of M fused into one parallel loop, B read in place: the
    column block is the parallel variable divided by the number of blocks of M (blocks of N
    outermost) or modulo the number of blocks of N. The blocks before the last column block
    run unguarded, and in the last one the partial tile is computed at its own width (a
    block's tile wholly beyond N is dropped): no tile falls back to a loop over single lanes,
    which before kept every tile's accumulators in memory (6-12x slower: 1024 -> 256 channels
    at 14², AMD Zen 4)."""
    from tunefleet.compiler import ops
    from tunefleet.compiler.driver import build_workload
    from tunefleet.compiler.ir import Store, lanes_of

    w = ops.make_workload("matmul", {"M": 20, "N": 196, "K": 64, "bias": True, "epilogue": "relu"})
    space = ops.config_space(w, target)
    nr = 2 * target.lanes("float32")
    assert 196 % nr
    knobs = {**ops.default_config(w, target).to_json()["knobs"], "mr": 6, "nr": nr, "bm": 1, "bn": bn, "ku": 4,
             "order": order, "parallel": "fused", "pack_b": False, "pack_a": False, "kc": 64}
    built = build_workload(w, space.from_json({"knobs": knobs}), target)
    assert not any(isinstance(n, For) and n.kind == "ivdep" for n in walk_stmt(built.func.body))
    stores = [n for n in walk_stmt(built.func.body) if isinstance(n, Store) and n.buffer.name == "C"]
    assert stores and all(lanes_of(n.index) > 1 for n in stores)
    check_against_numpy(w, built, target)


@pytest.mark.parametrize("target", params(FAMILY))
def test_a_block_packed_in_every_piece_of_a_partitioned_loop_is_allocated_once(target):
    """Blocks of M outermost (order mn_nm, each thread's blocks of M in turn), B packed per
    block inside them (pack_b "block"), M = 58 in blocks of 8 tiles of 6 rows, so the loop is
    cut into whole blocks and the last one, each packing B into a heap buffer (4096 × 2 vectors:
    beyond the stack's 64 KiB): the buffer is hoisted to the task once, not once per piece
    (before: two nested allocations of it, the outer unused)."""
    from tunefleet.compiler import ops
    from tunefleet.compiler.driver import build_workload
    from tunefleet.compiler.ir import Allocate

    w = ops.make_workload("matmul", {"M": 58, "N": 64, "K": 4096})
    knobs = {**ops.default_config(w, target).to_json()["knobs"], "mr": 6, "nr": 2 * target.lanes("float32"),
             "bm": 8, "bn": 1, "ku": 4, "order": "mn_nm", "parallel": "outer", "pack_b": "block", "pack_a": False,
             "kc": 4096}
    built = build_workload(w, ops.config_space(w, target).from_json({"knobs": knobs}), target)
    packed = [n for n in walk_stmt(built.func.body) if isinstance(n, Allocate) and n.buffer.name == "B_packed"]
    assert len(packed) == 1
    check_against_numpy(w, built, target)


def test_reads_beyond_narrows_a_loop_variable_in_the_branches_of_its_pieces():
    """The pieces of a parallel loop are simplified for their own range of its variable (the
    last block's expressions may only hold there): a read that stays inside its buffer in the
    branch where x < 5 holds (or fails) is not reported; the same read unguarded is."""
    from tunefleet.compiler import passes
    from tunefleet.compiler.expr import BinOp, Const, Var
    from tunefleet.compiler.ir import Buffer, Load, Store

    a, c = Buffer("A", (10,), "float32", "local"), Buffer("C", (10,), "float32")
    x = Var("x")
    low = Store(c, x, Load(a, BinOp("add", x, Const(5, "int64"))))  # inside A for x < 5
    high = Store(c, x, Load(a, BinOp("sub", x, Const(5, "int64"))))  # inside A for x >= 5
    split = BinOp("lt", x, Const(5, "int64"))
    assert passes.reads_beyond(For(x, 10, "parallel", IfThenElse(split, low, high)), [a]) == []
    assert len(passes.reads_beyond(For(x, 10, "parallel", IfThenElse(split, high, low)), [a])) == 2
    assert len(passes.reads_beyond(For(x, 10, "parallel", low), [a])) == 1


def check_against_numpy(workload, built, target):
    """Run `built` (built for `target`) on random inputs and compare with the workload's numpy
    reference, where this host executes `target`; elsewhere the gcc build was the check."""
    from tunefleet.compiler import ops

    if runs_here(target):
        inputs = ops.random_inputs(workload.tensors(), RNG)
        (out,) = built.run(*inputs)
        np.testing.assert_allclose(out, workload.reference(*inputs)[0], rtol=1e-4, atol=1e-4)


def test_scalar_float_max_is_inline_like_the_vector_one():
    """relu on a scalar path (an NCHWc write-back, a tail) is `a > b ? a : b` inline, as the
    vector helper computes it, not libm's fmaxf: without -ffast-math that is a call per element."""
    A = te.placeholder((37,), name="A")
    B = te.compute((37,), lambda i: te.max(A[i], 0.0) + te.min(A[i], 0.5), name="B")
    s = create_schedule(B)
    built = build(s, [A, B], TARGET, "relu_scalar")
    assert "tf_maxf(" in built.source and "tf_minf(" in built.source and "fmaxf(" not in built.source
    a = rand(37)
    (b,) = built.run(a)
    np.testing.assert_allclose(b, np.maximum(a, 0) + np.minimum(a, 0.5), rtol=1e-6)


def test_a_parallel_loop_keeps_its_tail_iterations():
    """Tail partitioning of a parallel loop whose last iteration is partial: every iteration
    stays in the one parallel loop (the tail is a branch of its body, not a serial loop run
    after it on one thread), the guard-free main piece is there, and the numbers match."""
    A = te.placeholder((100, 24), name="A")
    B = te.compute((100, 24), lambda i, j: A[i, j] * 3.0, name="B")
    s = create_schedule(B)
    io, ii = s[B].split(s[B].op.axis[0], factor=16)
    s[B].parallel(io)
    func = lower(s, [A, B], "par_tail")
    loops = [n for n in walk_stmt(func.body) if isinstance(n, For)]
    parallel = [n for n in loops if n.kind == "parallel"]
    assert len(parallel) == 1 and parallel[0].extent == 7
    top = [n for n in loops if n is not parallel[0] and not any(n is m for m in walk_stmt(parallel[0].body))]
    assert not top  # nothing left outside the parallel loop
    assert any(isinstance(n, IfThenElse) and n.otherwise is not None for n in walk_stmt(parallel[0].body))
    a = rand(100, 24)
    (b,) = run(s, [A, B], "par_tail", a)
    np.testing.assert_allclose(b, a * 3.0, rtol=1e-6)


@pytest.mark.parametrize("target", params(FAMILY))
def test_a_tile_wider_than_what_is_left_reads_inside_its_producers_region(target):
    """The NHWC default for a 73-column output takes a register tile of padded columns (its
    tiles do not divide 73): the last tile computes columns beyond the output, which are
    never stored, and reads the padded input tile beyond the image. That tile, a stack array
    computed at the row loop, must hold those reads: it was clipped to the image's width and
    the kernel read up to 768 bytes past its end. No read of a local array may leave it."""
    from tunefleet.compiler import ops, passes
    from tunefleet.compiler.driver import build_workload
    from tunefleet.compiler.ir import Allocate

    w = ops.make_workload("conv2d_nhwc", {"N": 1, "CI": 64, "CO": 64, "H": 73, "W": 73, "KH": 3, "KW": 3,
                                          "padding": 1})
    built = build_workload(w, ops.default_config(w, target), target)
    local = [n.buffer for n in walk_stmt(built.func.body) if isinstance(n, Allocate)]
    assert any(b.name == "data_pad" for b in local)
    assert passes.reads_beyond(built.func.body, local) == []
    check_against_numpy(w, built, target)


#: shapes whose tiles overhang: odd extents, strides, a 73-column image
OVERHANG_CASES = [
    ("matmul", dict(M=37, N=45, K=29, bias=True, epilogue="relu")),
    ("batch_matmul", dict(batch=2, M=13, N=21, K=17, transpose_b=True)),
    ("dense", dict(M=9, N=40, K=19)),
    ("conv2d_nchw", dict(N=1, CI=13, CO=7, H=13, W=7, KH=3, KW=2, padding=[1, 2], stride=[2, 1])),
    ("conv2d_nhwc", dict(N=1, CI=16, CO=16, H=13, W=73, KH=3, KW=3, padding=1)),
    ("depthwise_conv2d_nchw", dict(N=1, C=16, H=28, W=28, KH=3, KW=3, stride=2)),
]


@pytest.mark.parametrize("target", params(FAMILY))
@pytest.mark.parametrize("op, args", OVERHANG_CASES, ids=[op for op, _ in OVERHANG_CASES])
def test_no_config_reads_past_its_temporaries(target, op, args):
    """Over the default and random configs of every CPU template: no read of a stack or heap
    temporary can leave it (`passes.reads_beyond` over the loops' whole ranges). Before the
    producer regions held the overhang of their consumers' tiles, 59 of 330 random configs of
    ResNet-sized layers read past the end of one (the values were never stored, but reading
    beyond a stack array is undefined behaviour, and on a GPU a fault)."""
    import random

    from tunefleet.compiler import ops, passes
    from tunefleet.compiler.driver import lower_workload
    from tunefleet.compiler.ir import Allocate

    w = ops.make_workload(op, args)
    space = ops.config_space(w, target)
    rnd = random.Random(len(op))
    for config in [ops.default_config(w, target), *(space.get(rnd.randrange(space.size)) for _ in range(8))]:
        func, _ = lower_workload(w, config, target)
        temporaries = [n.buffer for n in walk_stmt(func.body) if isinstance(n, Allocate)]
        assert passes.reads_beyond(func.body, temporaries) == [], config
