"""Random ONNX graphs against onnxruntime: whether the fusions that task extraction makes are
the graph's own arithmetic.

Each graph chains Conv, Gemm or MatMul anchors with per-channel bias Adds, residual Adds of two
tensors of one shape (earlier or later ones, the same one twice), Relu and Gelu; tensors are read
by one node or several, and some intermediate ones are graph outputs too. The graph is evaluated
node by node in graph order: each match (an anchor and the nodes fused into it) by its workload's
numpy reference over its bindings, every other node by onnxruntime alone. Every graph output must
equal onnxruntime's run of the whole model. A fusion that took in an Add whose other input is not
ready before the anchor, a node whose result another node also reads, or an intermediate graph
output would give another output or lose one."""

from __future__ import annotations

import random
from collections import Counter

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx_models import OPSET, Builder  # noqa: E402

from tunefleet.tuner.model import extract_tasks, load_model  # noqa: E402

GRAPHS = 300


def random_graph(seed: int):
    """A model of 2-8 random steps over input "x", and x's shape: NCHW with Conv anchors (3×3, pad
    1, so residuals of the anchor's shape exist), or [M, K] with Gemm and MatMul anchors. A step
    is an anchor, often followed by what a pattern fuses (bias Add, residual Add, activation),
    or one of those nodes alone on the latest tensor or any earlier one."""
    rng, b = random.Random(seed), Builder(seed)
    matrices = rng.random() < 0.3
    side = rng.randint(2, 6)
    shapes = {"x": [rng.randint(1, 4), rng.choice([3, 4, 8])] if matrices else [1, rng.choice([2, 4]), side, side]}
    outputs = []

    def add(kind: str, source: str, other: str | None = None) -> str:
        shape = shapes[source]
        if kind == "bias":  # per channel (column), mostly; else a broadcast that is not
            per_channel = [[shape[1]], [1, shape[1]]] if matrices else [[shape[1], 1, 1], [1, shape[1], 1, 1]]
            other = b.weight(*rng.choice(per_channel * 3 + [[1], shape, [shape[-1]]]))
        elif other is None:
            other = rng.choice([t for t, s in shapes.items() if s == shape])
        shapes[out := b.node("Add", rng.sample([source, other], 2))] = shape
        return out

    def activation(source: str) -> str:
        shapes[out := b.node(rng.choice(["Relu", "Gelu"]), [source])] = shapes[source]
        return out

    for _ in range(rng.randint(2, 8)):
        source = list(shapes)[-1] if rng.random() < 0.5 else rng.choice(list(shapes))
        shape = shapes[source]
        if rng.random() < 0.4:
            if matrices:
                n, trans_b = rng.choice([3, 4, 8]), rng.random() < 0.5
                weight = b.weight(*([n, shape[1]] if trans_b else [shape[1], n]))
                if trans_b or rng.random() < 0.5:
                    inputs = [source, weight] + ([b.weight(n)] if rng.random() < 0.5 else [])
                    out = b.node("Gemm", inputs, transB=int(trans_b))
                else:
                    out = b.node("MatMul", [source, weight])
                shape = [shape[0], n]
            else:
                co, group = (shape[1], shape[1]) if rng.random() < 0.25 else (rng.choice([2, 4]), 1)
                bias = [b.weight(co)] if rng.random() < 0.3 else []
                inputs = [source, b.weight(co, shape[1] // group, 3, 3), *bias]
                out, shape = b.node("Conv", inputs, pads=[1, 1, 1, 1], group=group), [1, co, *shape[2:]]
            shapes[out] = shape
            if rng.random() < 0.4:
                out = add("bias", out)
            if rng.random() < 0.4:  # a shortcut: an earlier tensor, or one computed after the anchor
                same = [t for t, s in shapes.items() if s == shapes[out] and t != out]
                out = add("residual", out, activation(rng.choice(same)) if same and rng.random() < 0.3 else None)
            if rng.random() < 0.5:
                out = activation(out)
        else:
            kind = rng.choice(["bias", "residual", "activation"])
            out = activation(source) if kind == "activation" else add(kind, source)
        if rng.random() < 0.15:
            outputs.append(out)
    return b.model([("x", shapes["x"])], outputs if out in outputs else [*outputs, out]), shapes["x"]


def _node_alone(node, values):
    """onnxruntime's outputs of `node` run alone on `values` (tensor name → array)."""
    inputs = [name for name in dict.fromkeys(node.input) if name]
    graph = helper.make_graph([node], "alone",
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, values[n].shape) for n in inputs],
                              [helper.make_value_info(o, helper.make_tensor_type_proto(TensorProto.FLOAT, None))
                               for o in node.output])
    session = ort.InferenceSession(helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
                                   .SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, {n: values[n] for n in inputs})


def _evaluate_with_matches(graph, matches, values):
    """`values` (the graph's inputs and initializers) grown by every node's outputs in graph
    order, each match computed by its workload's reference."""
    fused = {name for m in matches.values() for name in m.nodes[1:]}
    for node in graph.nodes:
        if node.name in matches:
            match = matches[node.name]
            *inputs, output = match.bindings
            arrays = [values[b.tensor].reshape(t.shape) for b, t in zip(inputs, match.workload.tensors())]
            values[output.tensor] = match.workload.reference(*arrays)[0].reshape(output.shape)
        elif node.name not in fused:
            values.update(zip(node.output, _node_alone(node, values)))
    return values


def test_random_graphs_with_their_fusions_give_onnxruntimes_outputs():
    fusions = Counter()
    for seed in range(GRAPHS):
        model, x_shape = random_graph(seed)
        graph = load_model(model.SerializeToString(), max_bytes=1 << 20)
        matches = {m.nodes[0]: m for t in extract_tasks(graph).tasks for m in t.matches}
        for match in matches.values():
            residual = ["residual"] if match.workload.args.get("residual") else []
            fusions.update([match.workload.op, *match.op_types[1:], *residual])
        x = np.random.default_rng(seed).uniform(-1, 1, x_shape).astype(np.float32)
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        expected = dict(zip([o.name for o in session.get_outputs()], session.run(None, {"x": x})))
        values = _evaluate_with_matches(graph, matches, {"x": x, **{
            init.name: numpy_helper.to_array(init) for init in model.graph.initializer}})
        for name, want in expected.items():
            np.testing.assert_allclose(values[name], want, rtol=1e-4, atol=1e-4, err_msg=f"seed {seed}, output {name}")
    # the graphs exercise every anchor's operator and every fusion: bias and residual Adds, both activations
    assert min(fusions[op] for op in ("conv2d_nchw", "depthwise_conv2d_nchw", "matmul", "dense")) > 20, fusions
    assert fusions["Add"] - fusions["residual"] > 50 and fusions["residual"] > 20, fusions
    assert fusions["Relu"] > 20 and fusions["Gelu"] > 20, fusions
