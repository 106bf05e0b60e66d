"""Features of a config for the cost model, read from its lowered loop nest.

As AutoTVM's itervar features (Chen et al., "Learning to Optimize Tensor
Programs", NeurIPS 2018; TVM ``autotvm/feature.py``), simplified: the nest is
lowered *before* the IR passes (``compiler.lower.lower_loop_nest``: about 1.5 ms for a
matmul config, against ~35 ms with the passes), where loop kinds are still the
schedule's annotations (unrolled, vectorized, parallel) and no loop has been
unrolled or partitioned yet.

The **main statement** is the store executed most often (the deepest on ties;
in a CUDA kernel, a loop bound to the GPU index an enclosing loop is bound to
is that index and counts once), e.g. the register-tile update of a matmul.
For each loop around it, outermost to innermost, aligned on the innermost loop
(slot ``N_LEVELS - 1`` is always the innermost loop; missing outer levels are
zeros, levels beyond ``N_LEVELS`` are dropped from the outside),
:data:`LEVEL_FEATURES`:

- ``extent``; ``kind_<k>``: one-hot of serial / parallel / vectorized / unrolled /
  block (bound to a ``blockIdx.*``) / thread (bound to a ``threadIdx.*``);
- ``topdown`` / ``bottomup``: product of the extents of the loops from the
  outermost down to this one / from this one down to the innermost;
- for each of the first ``N_BUFFERS`` buffers of the statement (the stored
  buffer, then the loaded ones, each once, in the fixed order in which
  ``ir.expr_nodes`` walks the stored value; missing ones are zeros):
  ``stride`` (elements the flat index moves when this loop's
  variable moves by one, at the loop origin), ``bytes`` (bytes of the buffer
  touched by one run of this loop: the product of the extents of the loops
  from here inwards that move the index, times the element size, at most the
  buffer's size) and ``reuse`` (times each touched element is reused within
  one run of this loop: the product of the extents from here inwards that do
  not move the index).

Then :data:`TOTAL_FEATURES` of the whole function (flop, arithmetic intensity,
buffer counts and bytes by scope, iterations of all stores and the main
store's share of them, parallel / vector / unrolled extents on the main path,
guards around the main statement, its depth, whether it stores to a local
tile, and ``invalid``: 1 in a vector of zeros for a config whose schedule fails
to lower, or whose CUDA kernel the verifier would reject for exceeding the
device's limits (threads, grid, shared memory, registers; computed from the GPU
totals below, equal to the lowered kernel's, without lowering; a barrier that
not every thread reaches is not looked for)).

Then :data:`GPU_FEATURES` of a CUDA kernel (all zeros for a nest with no loop
bound to a GPU index, i.e. every CPU config), after Ansor's GPU features
(Zheng et al., "Ansor: Generating High-Performance Tensor Programs for Deep
Learning", OSDI 2020; TVM ``src/auto_scheduler/feature.cc``: ``blockIdx_*_len``,
``threadIdx_*_len``, ``alloc_size``, ``alloc_outer_prod``), read from the same
pre-pass nest by the compiler's GPU resource accounting
(``compiler.cuda.resources.estimate_resources``: about 4 ms for a cuda matmul
config, against ~30 ms for ``cuda.lower.lower_cuda``, which runs the passes):

- ``blockIdx_<x|y|z>_len``, ``threadIdx_<x|y|z>_len``: the launch extents, as
  ``cuda.resources.launch_extents`` computes them; ``blocks`` (grid size) and
  ``threads_per_block``, their products; ``warp_fill``: threads per block over
  the lanes of the warps they occupy (1 for a multiple of 32);
- ``shared_bytes``: dynamic shared memory per block (the ``shared`` buffers at
  16-byte aligned offsets, both halves of a double-buffered one, as
  ``lower_cuda`` lays them out), ``n_shared``: those buffers;
  ``shared_fills``: times a thread refills shared memory (the iterations of
  the non-GPU loops around each loop the shared copies are computed at, e.g.
  the K tiles of a GEMM; a refill costs two barriers, one when
  double-buffered); ``double_buffered``: the share of the shared buffers that
  are (``Stage.double_buffer``);
- ``local_words``: 4-byte words of per-thread arrays live at once (register
  tiles, register copies and the registers staging a double-buffered copy, as
  ``lower_cuda``'s ``local_words``);
- ``vec_global`` / ``vec_shared``: the share of global / shared memory element
  accesses (counted over all executions of every store) made by vector
  accesses: in a store whose innermost loop is vectorized, with unit stride in
  it (float4 for float32, where the code generator proves the alignment).

Magnitudes are ``log2(1 + x)``, strides ``sign(x) · log2(1 + |x|)``, so the
vector is float32 of fixed width :data:`N_FEATURES` for every operator, shape
and target: the cost model can learn across them. :func:`feature_schema` names
the columns for the cost model (a saved model of other columns is refused on
load); :data:`FEATURIZER_VERSION` is bumped whenever what a column holds changes
but its name does not.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import TYPE_CHECKING

import numpy as np

from tunefleet.compiler import ops
from tunefleet.compiler.cuda.limits import DeviceLimits, limits_for
from tunefleet.compiler.cuda.resources import KernelResources, estimate_resources, round_up
from tunefleet.compiler.cuda.shared_memory import double_buffered_buffers
from tunefleet.compiler.ir import For, PrimFunc, Ramp
from tunefleet.compiler.loop_nest import LoopNest, StoreSite, collect_loop_nest
from tunefleet.compiler.lower import lower_loop_nest
from tunefleet.compiler.ops.gpu.common import WARP
from tunefleet.compiler.schedule import BLOCK_TAGS, GPU_TAGS, THREAD_TAGS, ScheduleError
from tunefleet.compiler.space import ConfigEntity
from tunefleet.compiler.target import DTYPE_BYTES, Target
from tunefleet.compiler.te import BinOp, Cast, Const, Expr, Select, Var

from . import plugins, processes
from .records import Record
from .resolve import workload_space

if TYPE_CHECKING:
    from .cost_model import FeatureSchema

__all__ = ["N_LEVELS", "N_BUFFERS", "KINDS", "LEVEL_FEATURES", "TOTAL_FEATURES", "GPU_FEATURES", "FEATURE_NAMES",
           "N_FEATURES", "FEATURIZER_VERSION", "feature_schema", "nest_features", "config_features", "Featurizer"]

N_LEVELS = 12
N_BUFFERS = 4
KINDS = ("serial", "parallel", "vectorized", "unrolled", "block", "thread")
BUFFER_FEATURES = ("stride", "bytes", "reuse")
LEVEL_FEATURES = ("extent", *(f"kind_{k}" for k in KINDS), "topdown", "bottomup",
                  *(f"buf{b}_{f}" for b in range(N_BUFFERS) for f in BUFFER_FEATURES))
TOTAL_FEATURES = ("flop", "intensity", "n_global", "n_local", "n_heap", "local_bytes", "heap_bytes",
                  "total_iters", "main_share", "n_nests", "parallel_extent", "vector_extent", "unrolled_extent",
                  "guards", "depth", "main_is_local", "invalid")
_LAUNCH_FEATURES = {tag: f"{tag.replace('.', '_')}_len" for tag in GPU_TAGS}
GPU_FEATURES = (*_LAUNCH_FEATURES.values(), "blocks", "threads_per_block", "warp_fill", "shared_bytes", "n_shared",
                "shared_fills", "double_buffered", "local_words", "vec_global", "vec_shared")
FEATURE_NAMES = [f"L{lv}_{f}" for lv in range(N_LEVELS) for f in LEVEL_FEATURES] + [*TOTAL_FEATURES, *GPU_FEATURES]
N_FEATURES = len(FEATURE_NAMES)
#: Version of what the columns hold: bump it with any change to how a column is computed that keeps
#: the names (a change of the names changes the schema by itself).
FEATURIZER_VERSION = 2
_TOTAL = {name: N_LEVELS * len(LEVEL_FEATURES) + i for i, name in enumerate((*TOTAL_FEATURES, *GPU_FEATURES))}
_COLUMN = {name: i for i, name in enumerate(LEVEL_FEATURES)}


def feature_schema() -> FeatureSchema:
    """What the columns of these features mean, for the cost model: :data:`FEATURE_NAMES` as
    computed by :data:`FEATURIZER_VERSION`."""
    from .cost_model import FeatureSchema  # here: a Featurizer's pool processes need no XGBoost

    return FeatureSchema(tuple(FEATURE_NAMES), FEATURIZER_VERSION)


def _log(x: float) -> float:
    return math.log2(1.0 + x)


def _signed_log(x: float) -> float:
    return math.copysign(math.log2(1.0 + abs(x)), x)


_INT_OPS = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.floor_divide,
            "floordiv": np.floor_divide, "floormod": np.mod, "min": np.minimum, "max": np.maximum,
            "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
            "ne": np.not_equal, "and": np.logical_and, "or": np.logical_or}


def _evaluate(e: Expr, env: dict[Var, np.ndarray]):
    """Integer value of an index expression at each point of ``env`` (arrays); loads and calls count 0."""
    if isinstance(e, Const):
        return e.value
    if isinstance(e, Var):
        return env.get(e, 0)
    if isinstance(e, BinOp):
        return _INT_OPS[e.op](_evaluate(e.a, env), _evaluate(e.b, env))
    if isinstance(e, Select):
        return np.where(_evaluate(e.cond, env), _evaluate(e.t, env), _evaluate(e.f, env))
    if isinstance(e, Cast):
        return _evaluate(e.value, env)
    if isinstance(e, Ramp):
        return _evaluate(e.base, env)
    return 0


def _strides(index: Expr, loops: list[For]) -> np.ndarray:
    """(len(loops),) elements the index moves per unit step of each loop variable, at the origin."""
    n = len(loops)
    basis = np.eye(n + 1, dtype=np.int64)[1:]  # loop j is column j + 1; column 0 is the origin
    with np.errstate(all="ignore"):
        value = np.broadcast_to(_evaluate(index, {loop.var: basis[j] for j, loop in enumerate(loops)}), (n + 1,))
    return (value[1:] - value[0]).astype(np.float64)


def _kind(loop: For) -> str:
    """The loop's level one-hot: 'block' / 'thread' for a loop bound to a GPU index, its kind when
    in KINDS, else 'serial'."""
    if loop.kind in BLOCK_TAGS:
        return "block"
    if loop.kind in THREAD_TAGS:
        return "thread"
    return loop.kind if loop.kind in KINDS else "serial"


def _level_block(site: StoreSite) -> np.ndarray:
    loops = site.loops[-N_LEVELS:]
    extents = np.array([loop.extent for loop in loops], dtype=np.float64)
    block = np.zeros((N_LEVELS, len(LEVEL_FEATURES)), dtype=np.float64)
    rows = block[N_LEVELS - len(loops):]
    topdown = np.cumprod(extents)
    bottomup = np.cumprod(extents[::-1])[::-1]
    for j, loop in enumerate(loops):
        row = rows[j]
        row[_COLUMN["extent"]] = _log(loop.extent)
        row[_COLUMN[f"kind_{_kind(loop)}"]] = 1.0
        row[_COLUMN["topdown"]], row[_COLUMN["bottomup"]] = _log(topdown[j]), _log(bottomup[j])
    for b, (buf, index) in enumerate(site.accesses[:N_BUFFERS]):
        strides = _strides(index, loops)
        moving = np.where(strides != 0, extents, 1.0)
        still = np.where(strides == 0, extents, 1.0)
        touched = np.minimum(np.cumprod(moving[::-1])[::-1], buf.size) * DTYPE_BYTES.get(buf.dtype, 4)
        reuse = np.cumprod(still[::-1])[::-1]
        col = _COLUMN["buf0_stride"] + b * len(BUFFER_FEATURES)
        for j in range(len(loops)):
            rows[j, col:col + len(BUFFER_FEATURES)] = _signed_log(strides[j]), _log(touched[j]), _log(reuse[j])
    return block


def _vector_shares(sites: Sequence[StoreSite]) -> dict[str, float]:
    """{scope: share of the element accesses to buffers of that scope ('global', 'shared') made by
    unit-stride accesses in a vectorized innermost loop}, accesses counted over all iterations."""
    total = {"global": 0, "shared": 0}
    vector = dict.fromkeys(total, 0)
    for site in sites:
        inner = site.loops[-1] if site.loops and site.loops[-1].kind == "vectorized" else None
        for buf, index in site.accesses:
            if buf.scope in total:
                total[buf.scope] += site.iterations
                if inner is not None and _strides(index, [inner])[0] == 1:
                    vector[buf.scope] += site.iterations
    return {scope: vector[scope] / total[scope] if total[scope] else 0.0 for scope in total}


def _gpu_features(gpu: KernelResources, nest: LoopNest) -> dict[str, float]:
    """:data:`GPU_FEATURES` of a nest with loops bound to GPU indices (see the module docstring)."""
    launch, shared, threads = gpu.launch, gpu.shared, gpu.threads
    vector = _vector_shares(nest.sites)
    return {
        **{name: _log(launch[tag]) for tag, name in _LAUNCH_FEATURES.items()},
        "blocks": _log(gpu.blocks),
        "threads_per_block": _log(threads),
        "warp_fill": threads / round_up(threads, WARP),
        "shared_bytes": _log(shared.bytes),
        "n_shared": len(shared.sizes),
        "shared_fills": _log(shared.fills),
        "double_buffered": shared.doubled / len(shared.sizes) if shared.sizes else 0.0,
        "local_words": _log(gpu.local_words),
        "vec_global": vector["global"],
        "vec_shared": vector["shared"],
    }


def nest_features(func: PrimFunc, flop: float, double_buffered: Collection[int] = (),
                  limits: DeviceLimits | None = None) -> np.ndarray:
    """Features (N_FEATURES,) float32 of a loop nest lowered without passes; ``flop`` of the workload;
    ``double_buffered``: ids of the shared buffers of stages marked ``double_buffer()``; ``limits``:
    of the device a CUDA kernel is for: one exceeding them (``cuda.resources.check_limits``) gets only
    ``invalid = 1``."""
    nest = collect_loop_nest(func)
    out = np.zeros(N_FEATURES, dtype=np.float64)
    if not nest.sites:
        return out.astype(np.float32)
    gpu = None
    if any(loop.kind in GPU_TAGS for site in nest.sites for loop in site.loops):
        gpu = estimate_resources(func, nest, double_buffered)
        if limits is not None and not gpu.within(func.name, limits):
            return _invalid()
    main = max(nest.sites, key=lambda s: (s.iterations, len(s.loops)))
    out[:N_LEVELS * len(LEVEL_FEATURES)] = _level_block(main).reshape(-1)
    total_iters = sum(s.iterations for s in nest.sites)
    global_bytes = sum(p.size * DTYPE_BYTES.get(p.dtype, 4) for p in func.params)
    by_scope = {"local": [], "heap": []}
    for b in nest.allocations:
        by_scope.setdefault(b.scope, []).append(b.size * DTYPE_BYTES.get(b.dtype, 4))
    kinds = [loop.kind for loop in main.loops]
    totals = {
        "flop": _log(flop),
        "intensity": _log(flop / max(1, global_bytes)),
        "n_global": len(func.params),
        "n_local": len(by_scope["local"]),
        "n_heap": len(by_scope["heap"]),
        "local_bytes": _log(sum(by_scope["local"])),
        "heap_bytes": _log(sum(by_scope["heap"])),
        "total_iters": _log(total_iters),
        "main_share": main.iterations / max(1, total_iters),
        "n_nests": len({s.nest for s in nest.sites}),
        "parallel_extent": _log(math.prod(lp.extent for lp, k in zip(main.loops, kinds) if k == "parallel")),
        "vector_extent": _log(math.prod(lp.extent for lp, k in zip(main.loops, kinds) if k == "vectorized")),
        "unrolled_extent": _log(math.prod(lp.extent for lp, k in zip(main.loops, kinds) if k == "unrolled")),
        "guards": main.guards,
        "depth": len(main.loops),
        "main_is_local": float(main.store.buffer.scope == "local"),
    }
    if gpu is not None:
        totals.update(_gpu_features(gpu, nest))
    for name, value in totals.items():
        out[_TOTAL[name]] = value
    return out.astype(np.float32)


def _invalid() -> np.ndarray:
    out = np.zeros(N_FEATURES, dtype=np.float32)
    out[_TOTAL["invalid"]] = 1.0
    return out


def config_features(workload: ops.Workload, target: Target, config: ConfigEntity) -> np.ndarray:
    """Features (N_FEATURES,) float32 of one config; a config whose schedule does not lower, or whose
    CUDA kernel exceeds the limits of the target's architecture (``cuda.limits.limits_for``: threads,
    grid, shared memory or registers, as the verifier counts them), gets only ``invalid = 1``."""
    try:
        sch, args = workload.template(target.kind)(config, workload, target)
        func, buffers = lower_loop_nest(sch, args, workload.kernel_name(target))
    except ScheduleError:
        return _invalid()
    limits = limits_for(target) if target.kind == "cuda" else None
    return nest_features(func, workload.flop, double_buffered_buffers(sch, buffers), limits)


#: The fewest configs a Featurizer with workers splits among them: below this the pool's round
#: trip (milliseconds) is no longer small next to lowering them here (~2-8 ms each).
PARALLEL_MIN_CONFIGS = 16


def _features_of(workload: dict, target: str, indices: list[int]) -> np.ndarray:
    """(len(indices), N_FEATURES) float32 of configs of a workload JSON's space: a
    Featurizer's pool processes run this."""
    w, t, space = workload_space(workload, target)
    return np.stack([config_features(w, t, space.get(i)) for i in indices])


class Featurizer:
    """Features of configs and records, cached per (workload key, target, config index).

    ``cache_size``: configs kept (least recently used evicted first); at
    ~1 KB each, the default holds about 100 MB.

    ``workers``: with 2 or more, a batch of at least :data:`PARALLEL_MIN_CONFIGS`
    missing configs is split among that many processes (forked from the fork server,
    :mod:`.processes`, and pinned to ``cpus`` when given), which lower them side by side;
    otherwise they are lowered in this process. Lowering is most of a search's own time
    (a 64-trial tune of conv2d 512@7² on a 2-vCPU Intel Xeon, AVX-512, featurized about
    4300 configs at 4-8 ms each: 16 of its 62 s). Only for a caller whose CPUs are idle
    while it searches, as ``tune``'s are (:class:`.planner.InlinePlanner`): a service's
    planner runs beside the measurements, and its lowering would disturb them. The pool
    starts at the first split batch; :meth:`close` ends it. If it breaks (a process
    killed), the batch and those after it are lowered here.
    """

    def __init__(self, cache_size: int = 100_000, workers: int = 0, cpus: Sequence[int] | None = None):
        self.cache_size = cache_size
        self.workers = workers
        self.cpus = list(cpus) if cpus else None
        self._pool: ProcessPoolExecutor | None = None
        self._cache: OrderedDict[tuple[str, str, int], np.ndarray] = OrderedDict()

    def configs(self, workload: ops.Workload, target: Target, configs: Sequence[ConfigEntity]) -> np.ndarray:
        """(len(configs), N_FEATURES) float32."""
        keys = [(workload.key, str(target), c.index) for c in configs]
        missing = list(dict.fromkeys(k for k in keys if k not in self._cache))
        fresh = dict(zip(missing, self._compute(workload, target, [k[2] for k in missing])))
        rows = []
        for key in keys:
            row = fresh.get(key)
            if row is None:
                row = self._cache[key]
                self._cache.move_to_end(key)
            rows.append(row)
        self._cache.update(fresh)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)
        return np.stack(rows) if rows else np.zeros((0, N_FEATURES), np.float32)

    def _compute(self, workload: ops.Workload, target: Target, indices: list[int]) -> list[np.ndarray]:
        if self.workers >= 2 and len(indices) >= PARALLEL_MIN_CONFIGS:
            chunks = [[int(i) for i in c] for c in np.array_split(indices, min(self.workers, len(indices)))]
            try:
                futures = [self._executor().submit(_features_of, workload.to_json(), str(target), c) for c in chunks]
                return [row for f in futures for row in f.result()]
            except BrokenProcessPool:
                self.close()
                self.workers = 0
        return list(_features_of(workload.to_json(), str(target), indices)) if indices else []

    def _executor(self) -> ProcessPoolExecutor:
        if self._pool is None:
            self._pool = ProcessPoolExecutor(
                self.workers, mp_context=processes.context(), initializer=processes.init_worker,
                initargs=(processes.parent_state(), self.cpus, plugins.plugin_modules()))
        return self._pool

    def close(self) -> None:
        """End the pool's processes, if any (the features computed so far stay cached)."""
        if self._pool is not None:
            self._pool.shutdown(cancel_futures=True)
            self._pool = None

    def for_space(self, workload: ops.Workload, target: Target) -> Callable[[list[ConfigEntity]], np.ndarray]:
        """``featurize(configs)`` over one workload's space, as ModelGuidedSearch takes it."""
        return lambda configs: self.configs(workload, target, configs)

    def records(self, records: Sequence[Record]) -> np.ndarray:
        """(len(records), N_FEATURES) float32 of the records' configs (for transfer)."""
        out = np.zeros((len(records), N_FEATURES), np.float32)
        groups: dict[tuple[str, str], list[int]] = {}
        for n, r in enumerate(records):
            groups.setdefault((r.workload_key, r.target), []).append(n)
        for positions in groups.values():
            first = records[positions[0]]
            workload, target, space = workload_space(first.workload, first.target)
            out[positions] = self.configs(workload, target, [space.from_json(records[n].config) for n in positions])
        return out
