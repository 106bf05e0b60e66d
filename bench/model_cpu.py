"""Benchmark: whole-model tuning of ResNet-18 on this machine against onnxruntime, node by node.

ResNet-18's graph is built with onnx.helper at its real layer shapes (batch 1, 3×224×224,
batch norm folded into the convolutions' biases as inference graphs have it; random weights;
no download): 20 convolutions (+ bias, + Relu where the network has one), the residual Adds,
max and global pooling and the 1000-way Gemm. `tune_model` tunes its tasks with one small
global budget (spent by the default task scheduler, Ansor's gradient scheduler; the numbers
below were measured when it was split by FLOPs × occurrences) and `write_bundle` builds the one
kernel library.

Printed per task: the workload, its occurrences, the bundle kernel's median latency
(Kernel.time: the runtime's timer, 10 repeats of at least 50 ms) × occurrences, its nodes' time
in model order (`chained_seconds`: whole runs of the model, each kernel called through the C ABI
on what the nodes before it produced, so every layer's weights come from memory as in a model
run, not from the caches), and onnxruntime's
time for the same nodes: its profiler's per-node kernel times (the median over the profiled
runs) at graph optimization level "extended", where it fuses Conv + Relu into FusedConv named
after the Conv, as the kernels fuse them, so each profiled node is one ONNX node of ours. Then
the totals: Σ occurrences × kernel latency beside onnxruntime's sum for the same nodes, its time
for the untuned nodes, and, at level "all" (its default, NCHWc layouts, the residual Add + Relu
fused into the convolutions, so its nodes no longer map one to one onto ours), the sum of its
Conv and Gemm kernels and its whole-model run time; and the tuning wall time. onnxruntime runs
as many intra-op threads as this process has CPUs.

    python bench/model_cpu.py [--trials 48] [--runs 20] [--out DIR]

Measured once (AMD EPYC Zen 3, AVX2 only, 2 cores shared with other engineers' builds and tests,
load average 9-15 during the run, so every number here is inflated and noisy, onnxruntime's as
much as ours): 48 trials for 16 tasks (21 nodes) in 1,281 s; Σ occurrences × kernel latency
337 ms against onnxruntime's 528 ms for the same nodes (extended) and 414 ms for its Conv + Gemm
kernels (all); the 3×3 convolutions 0.34-0.90× onnxruntime's time, the 1×1 stride-2
convolutions (1-2 trials, the NCHWc path) and the 1000×512 Gemm at M=1 (1 trial) 8-10× it.

AMD EPYC Zen 5 (family 26 model 2, AVX-512, 2 vCPUs, quiet), 16 trials in 23 s: Σ occurrences ×
kernel latency 7.69 ms against onnxruntime's 11.17 ms for the same nodes (extended: 0.69); in
model order 8.92 ms (0.80); onnxruntime at level "all" (NCHWc between its layers, the residual
Add + Relu fused) spends 8.24 ms in its Conv and Gemm kernels, 8.64 ms in its whole run: ours
in model order 1.08 × its kernels' time.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

from tunefleet.compiler.target import Target
from tunefleet.tuner.host import affinity
from tunefleet.tuner.model import extract_tasks, load_model, prepack_weights
from tunefleet.tuner.model.bundle import write_bundle
from tunefleet.tuner.model.peer import random_feeds
from tunefleet.tuner.model.tune_model import tune_model

import tunefleet


class Graph:
    """Nodes named n000_<Op>, n001_<Op>, ... (fixed width: no name is a prefix of another, so a
    profiler event named after a fused node still names one node) and random initializers."""

    def __init__(self):
        self.rng = np.random.default_rng(0)
        self.nodes, self.inits = [], []

    def weight(self, *shape: int) -> str:
        name = f"w{len(self.inits)}"
        scale = (2.0 / max(1, int(np.prod(shape[1:])))) ** 0.5
        self.inits.append(numpy_helper.from_array((self.rng.standard_normal(shape) * scale).astype(np.float32), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        name = f"n{len(self.nodes):03d}_{op}"
        self.nodes.append(helper.make_node(op, inputs, [name], name=name, **attrs))
        return name

    def conv(self, x: str, ci: int, co: int, k: int, stride: int, relu: bool, group: int = 1) -> str:
        """A k × k Conv (padding k // 2) of `group` groups with a bias, then a Relu if `relu`."""
        pad = k // 2
        h = self.node("Conv", [x, self.weight(co, ci // group, k, k), self.weight(co)], kernel_shape=[k, k],
                      strides=[stride, stride], pads=[pad] * 4, group=group)
        return self.node("Relu", [h]) if relu else h


def resnet18() -> onnx.ModelProto:
    g = Graph()
    x = g.conv("input", 3, 64, 7, 2, relu=True)
    x = g.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    channels = 64
    for stage, width in enumerate((64, 128, 256, 512)):
        for block in range(2):
            stride = 2 if stage and block == 0 else 1
            h = g.conv(x, channels, width, 3, stride, relu=True)
            h = g.conv(h, width, width, 3, 1, relu=False)
            shortcut = g.conv(x, channels, width, 1, stride, relu=False) if stride == 2 else x
            x = g.node("Relu", [g.node("Add", [h, shortcut])])
            channels = width
    x = g.node("Flatten", [g.node("GlobalAveragePool", [x])])
    out = g.node("Gemm", [x, g.weight(1000, 512), g.weight(1000)], transB=1)
    graph = helper.make_graph(g.nodes, "resnet18", [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                                                 [1, 3, 224, 224])],
                              [helper.make_tensor_value_info(out, TensorProto.FLOAT, [1, 1000])], g.inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def onnxruntime_profile(model: onnx.ModelProto, feed: dict[str, np.ndarray], runs: int, threads: int,
                        level: str) -> tuple[dict[str, float], dict[str, str], float]:
    """`model` run on `feed` (input name → array) at graph optimization `level` ("disable",
    "basic", "extended", "all"): ({profiled node name: median seconds per run}, {profiled node
    name: its operator}, median seconds of a whole run)."""
    session, wall = _onnxruntime_runs(model, feed, runs, threads, level, profile=True)
    events = json.loads(Path(session.end_profiling()).read_text())
    per_node: dict[str, list[float]] = {}
    ops: dict[str, str] = {}
    for e in events:
        if e.get("cat") == "Node" and e["name"].endswith("_kernel_time"):
            name = e["name"][:-len("_kernel_time")]
            per_node.setdefault(name, []).append(e["dur"] * 1e-6)
            ops[name] = e["args"].get("op_name", "")
    medians = {name: statistics.median(d[1:] if len(d) > runs else d) for name, d in per_node.items()}
    return medians, ops, wall


def onnxruntime_seconds(model: onnx.ModelProto, feed: dict[str, np.ndarray], runs: int, threads: int,
                        level: str = "all") -> float:
    """Median seconds of a whole run of `model` on `feed` (`runs` runs after a warm-up, not
    profiled) at graph optimization `level`; "all" is onnxruntime's default, where its layout
    transformer runs convolutions in its blocked NCHWc layout between the nodes."""
    return _onnxruntime_runs(model, feed, runs, threads, level, profile=False)[1]


def _onnxruntime_runs(model: onnx.ModelProto, feed: dict[str, np.ndarray], runs: int, threads: int, level: str, *,
                      profile: bool) -> tuple[ort.InferenceSession, float]:
    """(the session, median seconds of a whole run over `runs` runs after a warm-up)."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.graph_optimization_level = getattr(
        ort.GraphOptimizationLevel, "ORT_DISABLE_ALL" if level == "disable" else f"ORT_ENABLE_{level.upper()}")
    if profile:
        options.enable_profiling = True
        options.profile_file_prefix = os.path.join(tempfile.mkdtemp(), "ort")
    session = ort.InferenceSession(model.SerializeToString(), options, providers=["CPUExecutionProvider"])
    session.run(None, feed)  # warm-up, left out below
    walls = []
    for _ in range(runs):
        start = time.perf_counter()
        session.run(None, feed)
        walls.append(time.perf_counter() - start)
    return session, statistics.median(walls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=48, help="global trial budget for the model")
    parser.add_argument("--runs", type=int, default=20, help="profiled onnxruntime runs")
    parser.add_argument("--out", type=Path, default=None, help="bundle directory [default: a temporary one]")
    args = parser.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="resnet18-"))
    model = resnet18()
    graph = load_model(model.SerializeToString(), max_bytes=1 << 30)
    extraction = prepack_weights(extract_tasks(graph), Target.host())
    threads = len(affinity())
    print(f"ResNet-18: {len(extraction.tasks)} tasks for {sum(t.occurrences for t in extraction.tasks)} nodes, "
          f"untuned {extraction.untuned_share:.2%} of {extraction.total_flop / 1e9:.2f} GFLOP; "
          f"{args.trials} trials; {threads} CPUs")
    tuned = tune_model(extraction, Target.host(), trials=args.trials, records_path=out / "records.jsonl",
                       on_round=lambda task, r: print(f"  tuned {task.workload.kernel_name()}: "
                                                      f"{r.gflops(task.flop):.1f} GFLOP/s after {r.allotted} trials "
                                                      f"({r.measured} measured now), {r.elapsed_s:.0f} s", flush=True))
    directory = write_bundle(out, tuned, model_name="resnet18.onnx")
    bundle = tunefleet.load(directory)
    feed = {"input": np.random.default_rng(1).random((1, 3, 224, 224), dtype=np.float32)}
    profile, _, ort_run_extended = onnxruntime_profile(model, feed, args.runs, threads, "extended")
    profile_all, ops_all, ort_run_all = onnxruntime_profile(model, feed, args.runs, threads, "all")
    in_order = chained_seconds(bundle, directory, model, feed, args.runs)
    ours_total, order_total, ort_total = compare_tasks(tuned, bundle, profile, in_order, profile_all)
    untuned = node_time(profile, [u.node for u in extraction.untuned])
    conv_all = sum(t for name, t in profile_all.items() if ops_all[name] in ("Conv", "FusedConv", "Gemm"))
    print(f"\nΣ occurrences × kernel latency: {ours_total * 1e3:.2f} ms; onnxruntime (extended), same nodes: "
          f"{ort_total * 1e3:.2f} ms (ratio {ours_total / ort_total:.2f}); in model order {order_total * 1e3:.2f} ms "
          f"(ratio {order_total / ort_total:.2f}); its untuned nodes {untuned * 1e3:.2f} ms, "
          f"whole run {ort_run_extended * 1e3:.2f} ms")
    print(f"onnxruntime (all: NCHWc, residual Add + Relu fused): Conv + Gemm kernels {conv_all * 1e3:.2f} ms "
          f"(ratio {ours_total / conv_all:.2f}; in model order {order_total / conv_all:.2f}), "
          f"whole run {ort_run_all * 1e3:.2f} ms")
    print(f"tuning wall time {tuned.elapsed_s:.0f} s for {args.trials} trials; bundle {out}")


def node_time(profile: dict[str, float], node_names) -> float:
    """Seconds of onnxruntime's profiled nodes among `node_names`."""
    names = set(node_names)
    return sum(t for name, t in profile.items() if name in names)


def chained_seconds(bundle, directory: str | os.PathLike, model: onnx.ModelProto, feed: dict[str, np.ndarray],
                    passes: int) -> dict[str, float]:
    """Per tuned node (the anchor of each fused subgraph): the median over `passes` runs of the
    whole model of the seconds its bundle kernel took, each run executing the nodes in graph
    order on what the nodes before produced: each tuned subgraph's kernel through the C ABI
    (constant weights packed once beforehand), every other node, untimed, in a single-threaded
    onnxruntime session of that one node. So a kernel finds its input where the previous
    kernel's threads left it and its weights where the run left them; its output goes into an
    array freed by a tensor that is no longer read, in this run or an earlier one (a memory
    plan's reuse, as onnxruntime's arena keeps its buffers between runs: a fresh array per run
    faults its pages in during the timed call, 0.05-0.06 ms of a 0.55 ms 1×1 layer at 56² on an
    AMD Zen 4). The first run warms up and is left out."""
    library = ctypes.CDLL(str(Path(directory) / bundle.manifest["library"]))
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v.type for v in [*inferred.graph.value_info, *inferred.graph.input, *inferred.graph.output]}
    constants = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    steps = []  # (anchor or None, node, inputs read, outputs written)
    fused = {n for entry in bundle.nodes.values() for n in entry["fused"]}
    for node in model.graph.node:
        if node.name in bundle.nodes:
            args = bundle.nodes[node.name]["args"]
            steps.append((node.name, node, [a["tensor"] for a in args if not a["output"]],
                          [a["tensor"] for a in args if a["output"]]))
        elif node.name not in fused:
            steps.append((None, node, [i for i in node.input if i], list(node.output)))
    last_read = {t: i for i, (_, _, reads, _) in enumerate(steps) for t in reads}
    kept = {o.name for o in model.graph.output}
    calls = {}
    for anchor, node, reads, _ in steps:
        if anchor is None:
            elem_types = {t: types[t].tensor_type.elem_type if t in types else
                          helper.np_dtype_to_tensor_dtype(constants[t].dtype) for t in [*reads, *node.output]}
            calls[node.name] = _node_session(model, node, reads, elem_types)
        else:
            kernel = bundle.kernel_for(anchor)
            inputs = [a for a in bundle.nodes[anchor]["args"] if not a["output"]]
            dummies = {t: constants[t] if t in constants else np.zeros(a["shape"], np.float32)
                       for t, a in zip(reads, inputs)}
            packed = bundle.arguments(anchor, dummies)
            function = getattr(library, kernel.name)
            function.argtypes = [ctypes.c_void_p] * len(kernel.args)
            function.restype = ctypes.c_int
            calls[anchor] = (function, [p if t in constants else None for t, p in zip(reads, packed)],
                             [spec for spec in kernel.args if not spec.is_output],
                             [spec for spec in kernel.args if spec.is_output],
                             # the outputs' ONNX shapes (a batch_matmul's [batch, M, N] is [1, heads, M, N] there)
                             [a["shape"] for a in bundle.nodes[anchor]["args"] if a["output"]])
    seconds: dict[str, list[float]] = {anchor: [] for anchor, *_ in steps if anchor is not None}
    free: dict[tuple, list[np.ndarray]] = {}  # (elements, dtype) -> arrays no tensor holds

    def release(array: np.ndarray) -> None:
        pool = free.setdefault((array.size, array.dtype.name), [])
        if all(a is not array for a in pool):
            pool.append(array)

    def take(spec) -> np.ndarray:
        pool = free.get((int(np.prod(spec.shape)), np.dtype(spec.dtype).name))
        return (pool.pop() if pool else np.empty(spec.shape, spec.dtype)).reshape(spec.shape)

    for _ in range(passes + 1):
        tensors = dict(feed)
        for i, (anchor, node, reads, writes) in enumerate(steps):
            if anchor is None:
                session = calls[node.name]
                results = session.run(None, {t: tensors[t] if t in tensors else constants[t] for t in reads})
                tensors.update(zip(writes, results))
            else:
                function, fixed, in_specs, out_specs, out_shapes = calls[anchor]
                arrays = [f if f is not None else np.ascontiguousarray(tensors[t]).reshape(spec.shape)
                          for t, f, spec in zip(reads, fixed, in_specs)]
                outs = [take(spec) for spec in out_specs]
                pointers = [a.ctypes.data for a in [*arrays, *outs]]
                start = time.perf_counter()
                if function(*pointers) != 0:
                    raise RuntimeError(f"the kernel of node {anchor} failed")
                seconds[anchor].append(time.perf_counter() - start)
                tensors.update(zip(writes, (o.reshape(shape) for o, shape in zip(outs, out_shapes))))
            for t in set(reads):
                if last_read.get(t) == i and t not in kept and t in tensors:
                    release(tensors.pop(t))
        for t, array in tensors.items():
            if t not in feed:
                release(array)
    return {anchor: statistics.median(times[1:]) for anchor, times in seconds.items()}


def _node_session(model: onnx.ModelProto, node: onnx.NodeProto, inputs: list[str],
                  elem_types: dict[str, int]) -> ort.InferenceSession:
    """A single-threaded onnxruntime session running `node` of `model` alone, its `inputs` fed
    (`elem_types`: ONNX element type of each input and output). One thread: a pool of its own
    would spin on the CPUs our kernels run on (ResNet-50 in model order took 1008 ms)."""
    info = lambda t: helper.make_tensor_value_info(t, elem_types[t], None)  # noqa: E731
    one = helper.make_model(helper.make_graph([node], node.name, [info(t) for t in inputs],
                                              [info(t) for t in node.output]), opset_imports=model.opset_import)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    return ort.InferenceSession(one.SerializeToString(), options, providers=["CPUExecutionProvider"])


def compare_tasks(tuned, bundle, profile: dict[str, float], in_order: dict[str, float],
                  profile_all: dict[str, float] | None = None) -> tuple[float, float, float]:
    """Print per task of `tuned` (a ModelTuneResult) its bundle kernel's median latency
    (Kernel.time: 10 repeats of at least 50 ms, one layer's data warm in the caches) ×
    occurrences, its nodes' seconds in model order (`in_order`, from `chained_seconds`)
    and onnxruntime's `profile` (seconds per node) of the same nodes; with `profile_all`
    (onnxruntime profiled at its default level "all") also that level's time of the nodes
    (`default_level_time`) and the in-order time over it. Returns the first three sums
    (seconds)."""
    rng = np.random.default_rng(2)
    ours_total = order_total = ort_total = 0.0
    print(f"\n{'workload':<58} {'occ':>3} {'tunefleet ms':>12} {'in order ms':>11} {'onnxruntime ms':>14} "
          f"{'ratio':>6} {'in order':>8}" + (f" {'all ms':>8} {'in order/all':>12}" if profile_all else ""))
    for result in tuned.results:
        task = result.task
        match = task.matches[0]
        kernel = bundle.kernel_for(match.nodes[0])
        latency = float(np.median(kernel.time(*bundle.arguments(match.nodes[0], random_feeds(match, rng)),
                                              repeat=10, min_repeat_ms=50)))
        nodes = [n for m in task.matches for n in m.nodes]
        theirs = node_time(profile, nodes)
        ordered = sum(in_order[m.nodes[0]] for m in task.matches)
        ours = task.occurrences * latency
        ours_total, order_total, ort_total = ours_total + ours, order_total + ordered, ort_total + theirs
        line = (f"{task.workload.op + ' ' + task.workload.key[:8] + ' ' + _shape(task.workload):<58} "
                f"{task.occurrences:>3} {ours * 1e3:>12.3f} {ordered * 1e3:>11.3f} {theirs * 1e3:>14.3f} "
                f"{ours / theirs if theirs else 0:>6.2f} {ordered / theirs if theirs else 0:>8.2f}")
        if profile_all:
            at_all = default_level_time(profile_all, [m.nodes for m in task.matches])
            line += f" {at_all * 1e3:>8.3f} {ordered / at_all:>12.2f}" if at_all else f" {'-':>8} {'-':>12}"
        print(line)
    return ours_total, order_total, ort_total


def default_level_time(profile_all: dict[str, float], matches: list[list[str]]) -> float:
    """Seconds of onnxruntime's nodes at its "all" level that stand for the nodes of `matches`
    (each a tuned subgraph's node names, its anchor first): its NCHWc convolutions are named
    after the last node they fused + "_nchwc" (a Conv + Relu as "<Relu>_nchwc"), other nodes
    keep their names; 0 where a subgraph's anchor is fused into a node of another name and no
    "_nchwc" node stands for it (e.g. BERT's MatMul + Add + Gelu, whose Gelu alone keeps its
    name there). Where onnxruntime fuses a residual Add into the other convolution of a block
    than `tune-model` does, that convolution's time counts here with the Add's nodes."""
    total = 0.0
    for nodes in matches:
        if nodes[0] not in profile_all and not any(n + "_nchwc" in profile_all for n in nodes):
            return 0.0
        total += sum(profile_all.get(n + "_nchwc", profile_all.get(n, 0.0)) for n in nodes)
    return total


def _shape(workload) -> str:
    a = workload.args
    if "CI" in a or "C" in a:
        channels = f"{a['CI']}->{a['CO']}" if "CI" in a else f"dw {a['C']}"
        residual = " +residual" if a.get("residual") else ""
        return f"{channels} {a['H']}x{a['W']} k{a['KH']} s{a['stride'][0]}{residual} {a['epilogue']}"
    return f"{'b' + str(a['batch']) + ' ' if 'batch' in a else ''}M{a['M']} N{a['N']} K{a['K']} {a.get('epilogue', '')}"


if __name__ == "__main__":
    main()
