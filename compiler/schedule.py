"""Schedules: how a tensor-expression computation is executed, stage by stage.

`create_schedule(outputs)` gives one `Stage` per compute tensor. A stage's loop nest starts
as its root axes (data axes, then reduce axes) and is transformed by the primitives
`split`, `fuse`, `reorder`, annotated by `parallel`, `vectorize`, `unroll`, `prefetch`, and
placed by `compute_inline`, `compute_at` or left at the root. `Schedule.cache_write` inserts a local
accumulator stage (e.g. a register tile). For GPUs, `bind` ties loops to block / thread
indices, `Schedule.cache_read` inserts a copy stage in shared memory or registers, and
`set_scope` places a stage there. Packing stages for weights are ordinary compute
stages (see `compiler.ops.common.pack`), scheduled like any other.

The primitives and their semantics are those of Halide (Ragan-Kelley et al., PLDI 2013)
and TVM's te.schedule. Illegal use raises `ScheduleError` naming the stage and the axis.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from .expr import IterVar, Reduce, TensorLoad
from .ir import map_expr, substitute
from .te import ComputeOp, PlaceholderOp, Tensor, post_order


class ScheduleError(ValueError):
    """A schedule primitive was used illegally; the message names the stage and axis."""


@dataclass(eq=False)
class Split:
    parent: IterVar
    outer: IterVar
    inner: IterVar
    factor: int | None
    nparts: int | None


@dataclass(eq=False)
class Fuse:
    outer: IterVar
    inner: IterVar
    fused: IterVar


@dataclass(eq=False)
class Prefetch:
    """`Stage.prefetch`: at the top of each iteration of loop `at`, the cache lines of `tensor`
    that the iteration reads when loop `ahead` stands `offset` iterations further."""

    tensor: Tensor
    at: IterVar
    ahead: IterVar
    offset: int
    locality: int = 2


LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled")
#: GPU loop kinds (`Stage.bind`): a loop bound to a block or thread index is not a loop in the
#: kernel; each block / thread runs one iteration, its variable read from the index.
BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")
GPU_TAGS = BLOCK_TAGS + THREAD_TAGS
#: Storage scopes of a stage: 'global' (a kernel argument or a root temporary), 'shared' (GPU
#: shared memory, one copy per thread block), 'local' (registers / a small per-thread array).
SCOPES = ("global", "shared", "local")


@dataclass(frozen=True)
class TensorIntrin:
    """A micro-kernel given as C source that replaces a loop nest (see `Stage.tensorize`).

    func: the C function's name; source: C source defining it (compiled into every
    candidate and the artifact, with the same flags); args: the call's arguments, each one of
      "<tensor>"          pointer to the tensor's first element of the tile (inner loops at 0),
      "<tensor>.stride<d>" the element stride of dimension d of the tensor's buffer,
      "extent:<axis>"     the extent of a tensorized loop, by leaf axis name.
    E.g. an mr×nr GEMM update `void gemm(int64_t K, const float* A, int64_t lda,
    const float* B, int64_t ldb, float* C, int64_t ldc)` is
    TensorIntrin("gemm", src, ["extent:k", "A", "A.stride0", "B", "B.stride0", "C", "C.stride0"]).
    """

    func: str
    source: str
    args: tuple[str, ...]


class Stage:
    """The schedule of one compute tensor.

    Attributes: `op` (its ComputeOp; replaced by a copy op after cache_write), `tensor`,
    `leaf_iter_vars` (loop order, outermost first), `relations` (Split/Fuse in application
    order), `iter_kind` ({IterVar: loop kind}), `attach` ('root' | 'inline' | 'at') with
    `attach_stage` / `attach_ivar`, and `scope` ('global', 'shared' or 'local'; see `set_scope`).
    """

    def __init__(self, tensor: Tensor, op: ComputeOp, scope: str = "global"):
        self.tensor, self.op, self.scope = tensor, op, scope
        self.leaf_iter_vars: list[IterVar] = [*op.axes, *op.reduce_axes]
        self.all_iter_vars: list[IterVar] = list(self.leaf_iter_vars)
        self.relations: list[Split | Fuse] = []
        self.iter_kind: dict[IterVar, str] = {}
        self.attach, self.attach_stage, self.attach_ivar = "root", None, None
        self.tensorized: tuple[IterVar, TensorIntrin] | None = None
        self.row_pad = 0
        self.double_buffered = False
        self.prefetches: list[Prefetch] = []

    @property
    def name(self) -> str:
        return self.tensor.name

    def __repr__(self):
        return f"Stage({self.name})"

    def _leaf(self, iv: IterVar, what: str) -> int:
        for n, leaf in enumerate(self.leaf_iter_vars):
            if leaf is iv:
                return n
        owner = "an axis of another stage" if iv not in self.all_iter_vars else "no longer a leaf (already split or fused)"
        raise ScheduleError(f"stage {self.name!r}: {what}: axis {getattr(iv, 'name', iv)!r} is {owner}; "
                            f"leaf axes: {[v.name for v in self.leaf_iter_vars]}")

    def _new_var(self, name: str, extent: int, kind: str) -> IterVar:
        iv = IterVar(name, extent, kind)
        self.all_iter_vars.append(iv)
        return iv

    # ----------------------------------------------------------------- loop transforms
    def split(self, parent: IterVar, factor: int | None = None, nparts: int | None = None) -> tuple[IterVar, IterVar]:
        """Split `parent` into (outer, inner) with inner extent `factor` or outer extent `nparts`.

        A factor that does not divide the extent leaves a tail, handled by the lowering.
        """
        pos = self._leaf(parent, "split")
        if (factor is None) == (nparts is None):
            raise ScheduleError(f"stage {self.name!r}: split of {parent.name!r} needs exactly one of factor / nparts")
        n = factor if factor is not None else nparts
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise ScheduleError(f"stage {self.name!r}: split of {parent.name!r}: factor/nparts must be a positive int, got {n!r}")
        if parent in self.iter_kind:
            raise ScheduleError(f"stage {self.name!r}: axis {parent.name!r} is annotated {self.iter_kind[parent]}; split before annotating")
        if factor is not None:
            inner_e, outer_e = factor, math.ceil(parent.extent / factor)
        else:
            outer_e, inner_e = nparts, math.ceil(parent.extent / nparts)
        outer = self._new_var(f"{parent.name}_o", outer_e, parent.kind)
        inner = self._new_var(f"{parent.name}_i", inner_e, parent.kind)
        self.relations.append(Split(parent, outer, inner, factor, nparts))
        self.leaf_iter_vars[pos:pos + 1] = [outer, inner]
        return outer, inner

    def fuse(self, *axes: IterVar) -> IterVar:
        """Fuse consecutive leaf axes (outermost first) into one."""
        if len(axes) < 2:
            if len(axes) == 1:
                return axes[0]
            raise ScheduleError(f"stage {self.name!r}: fuse needs at least one axis")
        pos = [self._leaf(a, "fuse") for a in axes]
        if pos != list(range(pos[0], pos[0] + len(pos))):
            raise ScheduleError(f"stage {self.name!r}: fuse of {[a.name for a in axes]}: axes must be adjacent "
                                f"and in loop order; current order {[v.name for v in self.leaf_iter_vars]}")
        kinds = {a.kind for a in axes}
        if len(kinds) > 1:
            raise ScheduleError(f"stage {self.name!r}: cannot fuse data axes with reduce axes {[a.name for a in axes]}")
        fused = axes[0]
        for inner in axes[1:]:
            new = self._new_var(f"{fused.name}_{inner.name}_f", fused.extent * inner.extent, fused.kind)
            self.relations.append(Fuse(fused, inner, new))
            fused = new
        self.leaf_iter_vars[pos[0]:pos[-1] + 1] = [fused]
        return fused

    def reorder(self, *axes: IterVar) -> None:
        """Put the given leaf axes in this order, in the positions they occupy together."""
        pos = [self._leaf(a, "reorder") for a in axes]
        if len(set(pos)) != len(pos):
            raise ScheduleError(f"stage {self.name!r}: reorder lists an axis twice: {[a.name for a in axes]}")
        for p, a in zip(sorted(pos), axes):
            self.leaf_iter_vars[p] = a

    def _annotate(self, iv: IterVar, kind: str) -> None:
        self._leaf(iv, kind)
        if kind in ("parallel", "vectorized") and iv.kind == "reduce":
            raise ScheduleError(f"stage {self.name!r}: cannot {kind[:-2] if kind.endswith('ed') else kind} "
                                f"reduce axis {iv.name!r}")
        self.iter_kind[iv] = kind

    def parallel(self, iv: IterVar) -> None:
        """Run this loop's iterations on the runtime's thread pool."""
        self._annotate(iv, "parallel")

    def vectorize(self, iv: IterVar) -> None:
        """Turn this (innermost, data) loop into SIMD vector operations."""
        self._annotate(iv, "vectorized")

    def unroll(self, iv: IterVar) -> None:
        """Unroll this loop completely."""
        self._annotate(iv, "unrolled")

    def bind(self, iv: IterVar, tag: str) -> None:
        """Bind this (data) loop to a GPU block or thread index (`GPU_TAGS`, e.g. "threadIdx.x").

        Each block (thread) runs the iteration of its index; a loop shorter than the launch
        extent of its tag is guarded. Loops of stages attached inside may bind the same thread
        tags again (cooperative fetching: the threads of a block share a shared-memory copy).
        """
        if tag not in GPU_TAGS:
            raise ScheduleError(f"stage {self.name!r}: cannot bind {iv.name!r} to {tag!r}; "
                                f"allowed: {', '.join(GPU_TAGS)}")
        self._leaf(iv, f"bind to {tag}")
        if iv.kind == "reduce":
            raise ScheduleError(f"stage {self.name!r}: cannot bind reduce axis {iv.name!r} to {tag}")
        for other, kind in self.iter_kind.items():
            if kind == tag and other is not iv and other in self.leaf_iter_vars:
                raise ScheduleError(f"stage {self.name!r}: {tag} is already bound to {other.name!r}")
        self.iter_kind[iv] = tag

    def set_scope(self, scope: str) -> None:
        """Where this stage's buffer lives when it is attached (`compute_at`): 'shared'
        (GPU shared memory, region relaxed over the thread indices of the block), 'local'
        (per thread) or 'global'."""
        if scope not in SCOPES:
            raise ScheduleError(f"stage {self.name!r}: scope {scope!r}; allowed: {', '.join(SCOPES)}")
        self.scope = scope

    def pad_rows(self, elements: int) -> None:
        """Lay this attached stage's buffer out with `elements` unused elements after each row
        (its innermost dimension), e.g. so that the threads of a warp writing a column of a
        shared-memory tile hit different banks. Indexing follows the padded strides."""
        if not isinstance(elements, int) or isinstance(elements, bool) or elements < 0:
            raise ScheduleError(f"stage {self.name!r}: pad_rows needs a non-negative int, got {elements!r}")
        self.row_pad = elements

    def double_buffer(self) -> None:
        """Keep two copies of this shared-memory stage (computed at a serial loop of its reader,
        e.g. the K loop of a GEMM): while the threads compute on the tile of iteration k, they
        load the tile of iteration k + 1 from global memory into registers and store it into the
        other copy afterwards, so one barrier per iteration remains and the loads' latency
        overlaps the arithmetic (as TVM's `double_buffer`, staged through registers as in
        CUTLASS's SIMT GEMM mainloop). Lowering for CUDA raises ScheduleError for a stage whose
        scope is not 'shared'."""
        self.double_buffered = True

    def prefetch(self, tensor: Tensor, at: IterVar, ahead: IterVar, offset: int = 1, locality: int = 2) -> None:
        """Prefetch, at the top of each iteration of this stage's loop `at`, the part of `tensor`
        that the same iteration reads when loop `ahead` (`at` itself, or a loop around it: of this
        stage or of the stage it is computed at) is `offset` iterations further: software
        prefetches (GCC's __builtin_prefetch for a read with `locality` 0-3; on x86 2 is PREFETCHT1,
        into the L2, not the L1, and 3 PREFETCHT0, into the L1 too) of the cache lines (64 bytes) of
        the box that the reads of `tensor` below `at` cover, for a stream that the hardware
        prefetchers lose, e.g. rows of a matrix read a few at a time, each in another page (TVM's
        `Stage.prefetch` with `at` = `ahead`; Intel's optimization manual, "software
        prefetching"). A prefetch never faults, so the last iterations may name lines past the
        tensor. Raises ScheduleError for an `offset` that is not a positive int or a `locality`
        outside 0-3; lowering raises it where `at` is vectorized or bound, or `ahead` does not
        move the reads (`offset` would prefetch what the iteration reads anyway)."""
        self._leaf(at, "prefetch")
        if not any(t is tensor for t in self.op.input_tensors()):
            raise ScheduleError(f"stage {self.name!r}: prefetch of {getattr(tensor, 'name', tensor)!r}, which it "
                                f"does not read; it reads {[t.name for t in self.op.input_tensors()]}")
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 1:
            raise ScheduleError(f"stage {self.name!r}: prefetch offset must be a positive int, got {offset!r}")
        if locality not in (0, 1, 2, 3) or isinstance(locality, bool):
            raise ScheduleError(f"stage {self.name!r}: prefetch locality must be 0, 1, 2 or 3, got {locality!r}")
        self.prefetches.append(Prefetch(tensor, at, ahead, offset, locality))

    def tensorize(self, iv: IterVar, intrin: TensorIntrin) -> None:
        """Replace the loops from `iv` inward by a call to `intrin` (a C micro-kernel).

        Tiles where a split leaves a tail run the original loops instead of the call.
        """
        self._leaf(iv, "tensorize")
        if not isinstance(intrin, TensorIntrin):
            raise ScheduleError(f"stage {self.name!r}: tensorize needs a TensorIntrin, got {type(intrin).__name__}")
        self.tensorized = (iv, intrin)

    # ----------------------------------------------------------------- placement
    def compute_inline(self) -> None:
        """Substitute this stage's body into its consumers (elementwise stages only)."""
        if isinstance(self.op.body, Reduce):
            raise ScheduleError(f"stage {self.name!r}: cannot inline a reduction")
        self.attach, self.attach_stage, self.attach_ivar = "inline", None, None

    def compute_at(self, parent: "Stage", iv: IterVar) -> None:
        """Compute the region of this stage that `parent` needs inside loop `iv` of `parent`."""
        if not isinstance(parent, Stage):
            raise ScheduleError(f"stage {self.name!r}: compute_at needs a Stage, got {type(parent).__name__}")
        if parent is self:
            raise ScheduleError(f"stage {self.name!r}: cannot compute_at itself")
        parent._leaf(iv, f"compute_at of {self.name!r}")
        self.attach, self.attach_stage, self.attach_ivar = "at", parent, iv

    def compute_root(self) -> None:
        self.attach, self.attach_stage, self.attach_ivar = "root", None, None


class Schedule:
    """Stages of a computation, producers first. Index with a tensor: `s[C]`."""

    def __init__(self, outputs: Sequence[Tensor]):
        self.outputs = list(outputs)
        self.stages: list[Stage] = [Stage(t, t.op) for t in post_order(outputs) if isinstance(t.op, ComputeOp)]
        self._by_tensor = {id(st.tensor): st for st in self.stages}

    def __getitem__(self, t: Tensor) -> Stage:
        try:
            return self._by_tensor[id(t)]
        except KeyError:
            kind = "an input (placeholder)" if isinstance(getattr(t, "op", None), PlaceholderOp) else "not in this schedule"
            raise ScheduleError(f"tensor {getattr(t, 'name', t)!r} is {kind}; it has no stage") from None

    def cache_write(self, t: Tensor, scope: str = "local") -> Tensor:
        """Compute `t` into a new `scope` buffer; `t`'s stage becomes a copy from it.

        Returns the cache tensor; schedule its stage (`s[cache]`) — typically
        `compute_at` into a loop of `t`'s stage so the cache is a register tile.
        """
        st = self[t]
        if st.relations or st.iter_kind or st.attach != "root":
            raise ScheduleError(f"stage {st.name!r}: cache_write must come before other primitives on it")
        if scope not in ("local",):
            raise ScheduleError(f"stage {st.name!r}: cache_write scope {scope!r}; allowed: local")
        op = st.op
        axes = tuple(IterVar(a.name, a.extent) for a in op.axes)
        raxes = tuple(IterVar(a.name, a.extent, "reduce") for a in op.reduce_axes)
        mapping = dict(zip((*op.axes, *op.reduce_axes), (*axes, *raxes)))
        if isinstance(op.body, Reduce):
            body = Reduce(op.body.combiner, substitute(op.body.source, mapping), raxes)
        else:
            body = substitute(op.body, mapping)
        cache_op = ComputeOp(f"{op.name}_{scope}", axes, body, op.tag)
        cache = Tensor(cache_op.name, t.shape, t.dtype, cache_op)
        st.op = ComputeOp(op.name, op.axes, TensorLoad(cache, op.axes), op.tag)
        st.leaf_iter_vars = list(op.axes)
        st.all_iter_vars = list(op.axes)
        cst = Stage(cache, cache_op, scope)
        self.stages.insert(self.stages.index(st), cst)
        self._by_tensor[id(cache)] = cst
        return cache

    def cache_read(self, t: Tensor, scope: str, readers: Sequence[Tensor]) -> Tensor:
        """A stage copying `t` into a `scope` ('shared' or 'local') buffer, read by `readers`
        (tensors whose stages then read the copy instead of `t`).

        Returns the cache tensor; schedule its stage (`s[cache]`), typically `compute_at` a
        loop of a reader, with its loops bound to the thread indices for a cooperative fetch.
        `t` may be an input or another stage (e.g. a register copy of a shared copy).
        """
        if scope not in ("shared", "local"):
            raise ScheduleError(f"cache_read of {t.name!r}: scope {scope!r}; allowed: shared, local")
        if not readers:
            raise ScheduleError(f"cache_read of {t.name!r}: needs at least one reader")
        stages = [self[r] for r in readers]
        for st in stages:
            if not any(n is t for n in st.op.input_tensors()):
                raise ScheduleError(f"cache_read of {t.name!r}: stage {st.name!r} does not read it")
        axes = tuple(IterVar(f"ax{d}", n) for d, n in enumerate(t.shape))
        name = f"{t.name}_{scope}"
        taken = {st.name for st in self.stages}
        k = 1
        while name in taken:
            name, k = f"{t.name}_{scope}{k}", k + 1
        cache_op = ComputeOp(name, axes, TensorLoad(t, axes))
        cache = Tensor(name, t.shape, t.dtype, cache_op)

        def redirect(e):
            return map_expr(e, lambda n: TensorLoad(cache, n.indices) if isinstance(n, TensorLoad) and n.tensor is t
                            else None)

        for st in stages:
            op = st.op
            body = op.body
            if isinstance(body, Reduce):
                body = Reduce(body.combiner, redirect(body.source), body.axes)
            else:
                body = redirect(body)
            st.op = ComputeOp(op.name, op.axes, body, op.tag)
        cst = Stage(cache, cache_op, scope)
        self.stages.insert(min(self.stages.index(st) for st in stages), cst)
        self._by_tensor[id(cache)] = cst
        return cache


def create_schedule(outputs: Tensor | Sequence[Tensor]) -> Schedule:
    """A default schedule (every stage at the root, loops in definition order) for `outputs`."""
    return Schedule([outputs] if isinstance(outputs, Tensor) else outputs)
