"""What a peer runtime (e.g. onnxruntime) needs to check a tuned kernel against the model: the
subgraph one match replaces as a model of its own, and random arrays for its inputs.

The subgraph model holds the match's nodes (the anchor and the nodes fused into it) with every
tensor a kernel argument reads as a graph input, so the peer and the kernel compute from the
same arrays: the kernel's arguments are those arrays as a model bundle's
`ModelBundle.arguments` makes them (reshaped to the kernel's shapes, or packed).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper

from .graph import ModelGraph
from .patterns import Match

__all__ = ["subgraph_model", "random_feeds"]

_ONNX_TYPES = {"float32": onnx.TensorProto.FLOAT, "float64": onnx.TensorProto.DOUBLE}


def subgraph_model(graph: ModelGraph, match: Match) -> onnx.ModelProto:
    """The model of `match`'s nodes alone: inputs the tensors of its input bindings, output the
    tensor of its output binding, the opsets of the whole model."""
    nodes = {n.name: n for n in graph.nodes}
    dtype = _ONNX_TYPES[match.workload.args["dtype"]]
    *inputs, output = match.bindings
    members = [nodes[name] for name in match.nodes]
    ordered = [n for n in graph.nodes if n in members]  # graph order: producers first
    shapes = {b.tensor: list(b.shape) for b in inputs}  # one input where two arguments read it (x + conv(x))
    body = helper.make_graph(
        ordered, f"{match.nodes[0]}_alone",
        [helper.make_tensor_value_info(tensor, dtype, shape) for tensor, shape in shapes.items()],
        [helper.make_tensor_value_info(output.tensor, dtype, list(output.shape))])
    return helper.make_model(body, opset_imports=list(graph.model.opset_import), ir_version=graph.model.ir_version)


def random_feeds(match: Match, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random inputs in [-1, 1) of `match`'s subgraph model (tensor name → array, ONNX shapes)."""
    dtype = match.workload.args["dtype"]
    return {b.tensor: (rng.random(b.shape) * 2 - 1).astype(dtype) for b in match.bindings[:-1]}
