"""Schedule pieces shared by the CUDA templates: cooperative fetching into shared memory and
the register-blocked GEMM schedule (block tile of warps, warp tile of lanes, thread tile in
registers, a K loop staging tiles of both operands in shared memory)."""

from __future__ import annotations

from ...schedule import Stage
from ..common import knob_choices

#: Threads per warp.
WARP = 32


def cooperative_fetch(stage: Stage, contiguous: int, threads_x: int, threads_y: int, vector: int) -> None:
    """Schedule the copy `stage` (computed at a loop of its reader) so the threads of a block
    share it: axis `contiguous` (the one that is contiguous in the source) innermost, split by
    `vector` (vectorized: 16-byte loads when `vector` is 4 and the source is aligned), the rest
    fused and spread over threadIdx.x, then threadIdx.y."""
    axes = list(stage.op.axis)
    inner = axes[contiguous]
    others = [a for n, a in enumerate(axes) if n != contiguous]
    if vector > 1:
        outer, vec = stage.split(inner, factor=vector)
        stage.reorder(*others, outer, vec)
        fused = stage.fuse(*others, outer)
    else:
        vec = None
        stage.reorder(*others, inner)
        fused = stage.fuse(*others, inner)
    rest, tx = stage.split(fused, factor=threads_x)
    if threads_y > 1:
        rest, ty = stage.split(rest, factor=threads_y)
        stage.bind(ty, "threadIdx.y")
    stage.bind(tx, "threadIdx.x")
    if vec is not None:
        stage.vectorize(vec)


def schedule_gemm(sch, cfg, prod, out, a_shared, b_shared, *, a_contiguous: int, b_contiguous: int) -> None:
    """The GEMM schedule on `out` (= epilogue of `prod`, or `prod` itself) with axes (*batch, i, j):

    - i = by·BM + wy·(LY·TM) + ly·TM + yi and j = bx·BN + wx·(LX·TN) + lx·TN + xi: a block
      tile BM×BN of WY×WX warps, each warp a tile of LY×LX lanes, each thread a TM×TN tile in
      registers; batch axes fused onto blockIdx.z; threadIdx.x = lane, threadIdx.y = warp;
    - the register tile (cache_write of prod) at the thread loop, its K loop (the last reduce
      axis; any others, e.g. a convolution's kh and kw, run outside it) split by BK;
    - `a_shared` ([*batch, K, M]) and `b_shared` ([*batch, K, N]), with the outer reduce axes
      before K where there are some, are stages in shared memory computed per K tile, fetched
      cooperatively along their `*_contiguous` axis;
    - register copies of a_shared / b_shared per k step (TM and TN values, 16-byte shared loads
      when aligned), the k step unrolled or not.

    - a tile transposed on its way into shared memory (A; B when given transposed) gets rows
      padded by 4 floats with `pad_shared` (its column-wise writes then avoid bank conflicts);
    - with `double_buffer`, both tiles are double-buffered: the next K tile's global loads are
      issued into registers before the current tile's arithmetic and stored after it, one
      barrier per K tile (see `Stage.double_buffer`).

    Knobs (see define_gemm_knobs): tile_m, tile_n, lanes_y, warps_y, warps_x, bk, unroll_k, vec,
    pad_shared, double_buffer.
    """
    TM, TN = cfg["tile_m"].val, cfg["tile_n"].val
    LY = cfg["lanes_y"].val
    LX = WARP // LY
    WY, WX = cfg["warps_y"].val, cfg["warps_x"].val
    BK = cfg["bk"].val
    vec = 4 if cfg["vec"].val else 1
    acc = sch.cache_write(prod, "local")
    if out is not prod:
        sch[prod].compute_inline()
    sch[a_shared].set_scope("shared")
    sch[b_shared].set_scope("shared")
    a_local = sch.cache_read(a_shared, "local", [acc])
    b_local = sch.cache_read(b_shared, "local", [acc])

    so = sch[out]
    *batch, i, j = so.op.axis
    i, yi = so.split(i, factor=TM)
    i, ly = so.split(i, factor=LY)
    by, wy = so.split(i, factor=WY)
    j, xi = so.split(j, factor=TN)
    j, lx = so.split(j, factor=LX)
    bx, wx = so.split(j, factor=WX)
    so.reorder(*batch, by, bx, wy, wx, ly, lx, yi, xi)
    if batch:
        so.bind(so.fuse(*batch), "blockIdx.z")
    so.bind(by, "blockIdx.y")
    so.bind(bx, "blockIdx.x")
    warp = so.fuse(wy, wx)
    lane = so.fuse(ly, lx)
    so.bind(warp, "threadIdx.y")
    so.bind(lane, "threadIdx.x")
    so.unroll(yi)
    if vec > 1 and TN % vec == 0:
        so.vectorize(xi)
    else:
        so.unroll(xi)

    # the extents the lowering derives (a tile larger than the matrix shrinks to it): the copies
    # must use exactly the threads the output uses, or a barrier would be skipped by some
    M, N = out.shape[-2:]
    m_tiles, n_tiles = -(-M // min(TM, M)), -(-N // min(TN, N))
    ly_e, lx_e = min(LY, m_tiles), min(LX, n_tiles)
    wy_e, wx_e = min(WY, -(-m_tiles // ly_e)), min(WX, -(-n_tiles // lx_e))
    threads_x, threads_y = ly_e * lx_e, wy_e * wx_e

    sa = sch[acc]
    sa.compute_at(so, lane)
    *_, ai, aj = sa.op.axis
    *outer_k, k = sa.op.reduce_axis
    ko, ki = sa.split(k, factor=BK)
    sa.reorder(*outer_k, ko, ki, ai, aj)
    if cfg["unroll_k"].val:
        sa.unroll(ki)
    sa.unroll(ai)
    sa.unroll(aj)

    for shared, contiguous in ((a_shared, a_contiguous), (b_shared, b_contiguous)):
        ss = sch[shared]
        ss.compute_at(sa, ko)
        extent = BK if contiguous == len(ss.op.axis) - 2 else None
        v = vec if extent is None or extent % vec == 0 else 1
        cooperative_fetch(ss, contiguous, threads_x, threads_y, v)
        if extent is not None and cfg["pad_shared"].val:
            # a transposed tile is written column-wise (a thread's 4 k values are 4 rows apart):
            # rows of BM + 4 floats put those rows in different banks and keep 16-byte alignment
            ss.pad_rows(4)
        if cfg["double_buffer"].val:
            ss.double_buffer()
    for local, n in ((a_local, TM), (b_local, TN)):
        sl = sch[local]
        sl.compute_at(sa, ki)
        if vec > 1 and n % vec == 0:
            sl.vectorize(sl.op.axis[-1])
        else:
            sl.unroll(sl.op.axis[-1])


#: The default rule's block tiles, largest first, as (tile_m, tile_n, lanes_y, warps_y, warps_x):
#: block tile (tile_m·lanes_y·warps_y) × (tile_n·(32 / lanes_y)·warps_x).
GEMM_DEFAULT_SHAPES = ((8, 8, 8, 2, 4), (8, 8, 8, 1, 2), (4, 4, 8, 1, 2), (4, 4, 4, 1, 2), (2, 2, 4, 1, 2),
                       (1, 4, 4, 1, 2))


def define_gemm_knobs(cfg, M: int, N: int, K: int) -> None:
    """Knobs of schedule_gemm for an M×N×K product: thread tile (tile_m × tile_n), lanes of a warp
    in rows (lanes_y; lanes_x = 32 / lanes_y), warps of a block (warps_y × warps_x), the K tile
    (bk), unroll of the k step, and vector (16-byte) copies. Candidates larger than the matrix
    are left out; limits of the device are the verifier's business."""
    cfg.define_knob("tile_m", [t for t in (1, 2, 4, 8) if t <= max(1, M)] or [1])
    cfg.define_knob("tile_n", [t for t in (1, 2, 4, 8) if t <= max(1, N)] or [1])
    cfg.define_knob("lanes_y", [1, 2, 4, 8, 16, 32])
    cfg.define_knob("warps_y", [1, 2, 4])
    cfg.define_knob("warps_x", [1, 2, 4])
    cfg.define_knob("bk", [b for b in (4, 8, 16, 32) if b <= max(4, K)])
    cfg.define_knob("unroll_k", [True, False])
    cfg.define_knob("vec", [True, False])
    cfg.define_knob("pad_shared", [True, False])
    cfg.define_knob("double_buffer", [True, False])


def gemm_default(space, M: int, N: int, K: int, *, batch: int = 1, sm_count: int = 0) -> dict:
    """The untuned config: the first block tile of `GEMM_DEFAULT_SHAPES` that leaves at least
    about as many blocks as the device has multiprocessors (`sm_count`, 100 if unknown), else
    the one with the most blocks; bk 8, unrolled, 16-byte copies, the transposed tile padded,
    both tiles double-buffered.

    The shapes go from the classic fp32 SGEMM block (8×8 register tiles, lanes 8×4 — a
    quarter warp then reads 4 distinct 16-byte B chunks 32 bytes apart and 2 of A: no bank
    conflicts —, 128×128 of 8 warps) to blocks of 2 warps with ever smaller tiles (64×64,
    32×32, 16×64, 8×32, 4×64): a product too small to fill the device with large blocks runs
    faster on more small ones than on few large ones. Measured on an NVIDIA H200 (sm_90, 132
    SMs; 2026-12-04, every shape timed on 24 workloads: ResNet-50's convolutions at batch 1,
    matmul 1024³, 4096³ and 128×3072×768, two batch_matmuls): the sum of the times 1.30× below
    the former ladder (128×128, 128×64, 64×64 and 4×4 tiles of 2-8 warps), 0.93 of each
    workload's best shape; e.g. the 3×3 layers at 14² 1387 -> 2521 GFLOP/s, matmul 1024³
    27.9 -> 33.5 TFLOP/s, 128×3072×768 12.6 -> 19.0; the 56² layers with 64 output channels
    lost 15%."""
    sms = sm_count or 100
    tile_ms, tile_ns = knob_choices(space, "tile_m"), knob_choices(space, "tile_n")
    shapes = ([c for c in GEMM_DEFAULT_SHAPES if c[0] in tile_ms and c[1] in tile_ns]
              or [(tile_ms[-1], tile_ns[-1], 4, 1, 1)])

    def blocks(c):
        tm, tn, ly, wy, wx = c
        return batch * -(-M // (tm * ly * wy)) * -(-N // (tn * (WARP // ly) * wx))

    chosen = next((c for c in shapes if blocks(c) >= 0.9 * sms), max(shapes, key=blocks))
    tm, tn, ly, wy, wx = chosen
    bks = knob_choices(space, "bk")
    return {"tile_m": tm, "tile_n": tn, "lanes_y": ly, "warps_y": wy, "warps_x": wx,
            "bk": max([b for b in bks if b <= 8] or [bks[0]]), "unroll_k": True, "vec": True, "pad_shared": True,
            "double_buffer": True}
