"""Small ONNX models built with onnx.helper for the model-tuning tests (no downloads): a
ResNet-style block, a downsampling bottleneck, a depthwise-separable block and a transformer
encoder layer's GEMMs, with random float32 weights as initializers."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 20  # Gelu is an ONNX operator from opset 20


class Builder:
    """Collects nodes and random initializers; `model()` makes the checked ModelProto."""

    def __init__(self, seed: int = 0):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def weight(self, *shape: int) -> str:
        name = f"w{len(self.inits)}"
        self.inits.append(numpy_helper.from_array((self.rng.standard_normal(shape) * 0.2).astype(np.float32), name))
        return name

    def const(self, values, name: str) -> str:
        self.inits.append(numpy_helper.from_array(np.asarray(values), name))
        return name

    def node(self, op: str, inputs: list[str], **attrs) -> str:
        self.count += 1
        out = f"{op.lower()}{self.count}"
        self.nodes.append(helper.make_node(op, inputs, [out], name=f"{op}_{self.count}", **attrs))
        return out

    def model(self, inputs: list[tuple[str, list]], output: str | list[str]) -> onnx.ModelProto:
        outputs = [output] if isinstance(output, str) else output
        graph = helper.make_graph(
            self.nodes, "test", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
            [helper.make_value_info(o, helper.make_tensor_type_proto(TensorProto.FLOAT, None)) for o in outputs],
            self.inits)
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])


def resnet_block(batch: int | str = 1) -> onnx.ModelProto:
    """Two basic blocks (Conv+bias+Relu, Conv+bias Add, residual Add, Relu) of 8 channels at
    8×8, then global pooling and a Gemm classifier: the blocks' convolutions are 2 occurrences
    of one workload plus 2 of another (with the residual)."""
    b = Builder()
    x = "x"
    for _ in range(2):
        h = b.node("Conv", [x, b.weight(8, 8, 3, 3), b.weight(8)], pads=[1, 1, 1, 1])
        h = b.node("Relu", [h])
        h = b.node("Conv", [h, b.weight(8, 8, 3, 3)], pads=[1, 1, 1, 1])
        h = b.node("Add", [h, b.weight(8, 1, 1)])
        h = b.node("Add", [h, x])
        x = b.node("Relu", [h])
    h = b.node("GlobalAveragePool", [x])
    h = b.node("Flatten", [h])
    out = b.node("Gemm", [h, b.weight(10, 8), b.weight(10)], transB=1)
    return b.model([("x", [batch, 8, 8, 8])], out)


def bottleneck_block() -> onnx.ModelProto:
    """ResNet-50's downsampling bottleneck as torchvision exports it (1×1 Conv + Relu, 3×3
    stride-2 Conv + Relu, 1×1 Conv, then the shortcut's stride-2 1×1 Conv, the residual Add and
    a Relu), then a basic block whose shortcut is its input (3×3 Conv + bias, Add, Relu), 8 → 16
    channels from 8×8 to 4×4; biases are the Convs' third inputs (batch norm folded)."""
    b = Builder(4)
    h = b.node("Relu", [b.node("Conv", ["x", b.weight(4, 8, 1, 1), b.weight(4)])])
    h = b.node("Relu", [b.node("Conv", [h, b.weight(4, 4, 3, 3), b.weight(4)], pads=[1, 1, 1, 1], strides=[2, 2])])
    h = b.node("Conv", [h, b.weight(16, 4, 1, 1), b.weight(16)])
    shortcut = b.node("Conv", ["x", b.weight(16, 8, 1, 1), b.weight(16)], strides=[2, 2])
    x = b.node("Relu", [b.node("Add", [h, shortcut])])
    h = b.node("Conv", [x, b.weight(16, 16, 3, 3), b.weight(16)], pads=[1, 1, 1, 1])
    out = b.node("Relu", [b.node("Add", [x, h])])
    return b.model([("x", [1, 8, 8, 8])], out)


def depthwise_block() -> onnx.ModelProto:
    """MobileNet-style: a depthwise 3×3 Conv (group = channels) + Relu, a pointwise 1×1 Conv
    with bias, and a grouped Conv (group=2: conv2d_nchw with groups)."""
    b = Builder(1)
    h = b.node("Conv", ["x", b.weight(8, 1, 3, 3)], group=8, pads=[1, 1, 1, 1], strides=[2, 2])
    h = b.node("Relu", [h])
    h = b.node("Conv", [h, b.weight(16, 8, 1, 1), b.weight(16)])
    out = b.node("Conv", [h, b.weight(16, 8, 3, 3)], group=2, pads=[1, 1, 1, 1])
    return b.model([("x", [1, 8, 12, 12])], out)


def encoder_layer(seq: int = 8, hidden: int = 32, heads: int = 2, ffn: int = 64) -> onnx.ModelProto:
    """A BERT-style encoder layer's GEMMs: Q, K, V projections (MatMul + bias Add), Q·Kᵀ and
    attention·V (batched MatMul, Kᵀ by a Transpose), the output projection and the feed-forward
    MatMuls (+ bias Add, + Gelu)."""
    b = Builder(2)
    d = hidden // heads
    heads_shape = b.const(np.array([1, seq, heads, d], np.int64), "heads_shape")
    flat_shape = b.const(np.array([1, seq, hidden], np.int64), "flat_shape")

    def projection(x: str, n: int) -> str:
        return b.node("Add", [b.node("MatMul", [x, b.weight(hidden if n != hidden or x == "x" else n, n)]),
                              b.weight(n)])

    def split_heads(t: str) -> str:
        return b.node("Transpose", [b.node("Reshape", [t, heads_shape])], perm=[0, 2, 1, 3])

    q, k, v = (split_heads(projection("x", hidden)) for _ in range(3))
    scores = b.node("MatMul", [q, b.node("Transpose", [k], perm=[0, 1, 3, 2])])
    attention = b.node("Softmax", [scores], axis=-1)
    context = b.node("MatMul", [attention, v])
    context = b.node("Reshape", [b.node("Transpose", [context], perm=[0, 2, 1, 3]), flat_shape])
    h = b.node("Add", [projection(context, hidden), "x"])
    up = b.node("Gelu", [b.node("Add", [b.node("MatMul", [h, b.weight(hidden, ffn)]), b.weight(ffn)])])
    out = b.node("Add", [b.node("MatMul", [up, b.weight(ffn, hidden)]), b.weight(hidden)])
    return b.model([("x", [1, seq, hidden])], out)


def conv_pair(out_channels: int = 16) -> onnx.ModelProto:
    """Two tasks: a 3×3 Conv (8 → 8 channels at 8×8, + bias, + Relu), then a 1×1 Conv to
    `out_channels`; two such models of different `out_channels` share the first layer."""
    b = Builder(3)
    h = b.node("Relu", [b.node("Conv", ["x", b.weight(8, 8, 3, 3), b.weight(8)], pads=[1, 1, 1, 1])])
    out = b.node("Conv", [h, b.weight(out_channels, 8, 1, 1)])
    return b.model([("x", [1, 8, 8, 8])], out)


def check_against_onnxruntime(bundle_dir, graph) -> int:
    """Every tuned node's kernel in the model bundle at `bundle_dir` (loaded with tunefleet.load)
    against onnxruntime running that node alone (a one-node model of `graph`, a ModelGraph) on
    random inputs, within float32 tolerance, the kernel called with `bundle.arguments` (the
    ONNX tensors reshaped, or packed where it takes them pre-packed); returns the nodes checked."""
    import onnxruntime as ort

    import tunefleet
    from tunefleet.tuner.model import extract_tasks
    from tunefleet.tuner.model.peer import random_feeds, subgraph_model

    bundle = tunefleet.load(bundle_dir)
    matches = {m.nodes[0]: m for t in extract_tasks(graph).tasks for m in t.matches}
    assert set(bundle.nodes) == set(matches)
    rng = np.random.default_rng(0)
    for node, match in matches.items():
        kernel = bundle.kernel_for(node)
        feeds = random_feeds(match, rng)
        session = ort.InferenceSession(subgraph_model(graph, match).SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        [expected] = session.run(None, feeds)
        got = kernel(*bundle.arguments(node, feeds))
        np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=1e-4, atol=1e-4, err_msg=node)
    return len(matches)
