"""An ONNX model read for tuning: parsed with the `onnx` package (never evaluated), its input
shapes fixed (from the model or the caller), every tensor's shape and dtype inferred with
`onnx.shape_inference`.

The weights are never needed: a tensor's shape and dtype come from the model's type
information and its initializers' dims, so a model whose weights live in external files can be
read without them (they are not loaded).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import onnx

__all__ = ["Problem", "ModelError", "TensorInfo", "ModelGraph", "load_model",
           "parse_input_shape"]

#: Float weights of at most this many elements keep their values (see _drop_weight_values).
KEPT_WEIGHT_ELEMENTS = 1024


@functools.cache
def _dtype_names() -> dict[int, str]:
    """ONNX element types → numpy dtype names, for the types the report can name."""
    from onnx import TensorProto

    return {TensorProto.FLOAT: "float32", TensorProto.DOUBLE: "float64", TensorProto.FLOAT16: "float16",
            TensorProto.BFLOAT16: "bfloat16", TensorProto.INT8: "int8", TensorProto.UINT8: "uint8",
            TensorProto.INT32: "int32", TensorProto.INT64: "int64", TensorProto.BOOL: "bool"}


@dataclasses.dataclass(frozen=True)
class Problem:
    """Why one node (or graph input: `op_type` "input") of a model cannot be handled."""

    node: str
    op_type: str
    reason: str

    def __str__(self) -> str:
        return f"{self.node} ({self.op_type}): {self.reason}"


class ModelError(ValueError):
    """A model that cannot be tuned as given; `problems` lists each node and the reason (e.g. a
    dynamic input dimension without a given shape, a convolution in float16). A model that is
    not ONNX at all, or is over the size bound, gives one problem naming the model."""

    def __init__(self, problems: Sequence[Problem]):
        self.problems = list(problems)
        super().__init__("; ".join(map(str, self.problems)))


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    """A tensor's static `shape` (ints) and `dtype` (numpy name, or "onnx type <n>" for others)."""

    shape: tuple[int, ...]
    dtype: str


@dataclasses.dataclass
class ModelGraph:
    """A model after shape inference: its `nodes` in graph order (each named: unnamed nodes get
    "<op_type>_<index>"), `tensors` (name → TensorInfo, for every tensor whose shape is fully
    known), `constants` (names of initializers and Constant outputs), `consumers` (tensor name →
    the nodes reading it), `producers` (tensor name → the node writing it), `outputs` (the
    graph's output names), `order` (node name → its index in `nodes`) and the inferred `model`."""

    model: onnx.ModelProto
    nodes: list[onnx.NodeProto]
    tensors: dict[str, TensorInfo]
    constants: set[str]
    consumers: dict[str, list[onnx.NodeProto]]
    producers: dict[str, onnx.NodeProto]
    outputs: set[str]
    order: dict[str, int]

    def info(self, name: str) -> TensorInfo | None:
        return self.tensors.get(name)

    def ready_before(self, tensor: str, node: onnx.NodeProto) -> bool:
        """Whether `tensor` exists before `node` runs in graph order: a graph input, a constant,
        or the output of an earlier node."""
        producer = self.producers.get(tensor)
        return producer is None or self.order[producer.name] < self.order[node.name]


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """`"name=1,3,224,224"` → ("name", (1, 3, 224, 224)). Raises ValueError naming the problem."""
    name, sep, dims = text.rpartition("=")
    if not sep or not name:
        raise ValueError(f"input shape {text!r} is not NAME=D1,D2,...")
    try:
        shape = tuple(int(d) for d in dims.split(","))
    except ValueError:
        raise ValueError(f"input shape {text!r}: dimensions must be integers") from None
    if any(d < 1 for d in shape):
        raise ValueError(f"input shape {text!r}: dimensions must be >= 1")
    return name, shape


def load_model(source: str | os.PathLike | bytes, input_shapes: Mapping[str, Sequence[int]] | None = None, *,
               max_bytes: int) -> ModelGraph:
    """Parse an ONNX model (a file path or its bytes) of at most `max_bytes` bytes (the service's
    bound is Settings.max_model_bytes, TUNEFLEET_MAX_MODEL_BYTES), fix its input
    shapes (`input_shapes`: name → dims, overriding the model's, required for every dynamic
    dimension) and infer every tensor's shape.

    Raises ModelError listing each problem: the size bound, bytes that are not an ONNX model, an
    unknown input name, a dynamic input dimension without a given shape, or a shape the given
    one contradicts.
    """
    # onnx (and the ml_dtypes it loads) takes about a second to import: not at the service's start
    import onnx
    from onnx import shape_inference

    data, label = _read_bounded(source, max_bytes)
    try:
        model = onnx.load_model_from_string(data)
    except Exception as exc:  # protobuf's DecodeError and friends: not an ONNX model
        raise ModelError([Problem(label, "model", f"not an ONNX model: {exc}")]) from None
    _fix_inputs(model, dict(input_shapes or {}))
    _drop_weight_values(model)
    try:
        model = shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    except Exception as exc:  # onnx.shape_inference.InferenceError and friends
        raise ModelError([Problem(label, "model", f"shape inference failed: {exc}")]) from None
    return _graph(model)


def _read_bounded(source: str | os.PathLike | bytes, max_bytes: int) -> tuple[bytes, str]:
    if isinstance(source, bytes):
        data, label = source, "model"
    else:
        path = Path(source)
        label = path.name
        size = path.stat().st_size
        if size > max_bytes:
            raise ModelError([Problem(label, "model", f"{size} bytes is over the bound of {max_bytes} bytes")])
        data = path.read_bytes()
    if len(data) > max_bytes:
        raise ModelError([Problem(label, "model", f"{len(data)} bytes is over the bound of {max_bytes} bytes")])
    return data, label


def _drop_weight_values(model: onnx.ModelProto) -> None:
    """Clear the values of the float initializers and Constant tensors of more than
    KEPT_WEIGHT_ELEMENTS elements (their dims stay). They are most of a model's bytes and nothing
    here reads them, while shape inference copies the model several times: a 976 MiB model did
    not fit in 5 GiB of address space before. Data propagation reads the small integer tensors
    (shapes, axes), which are kept."""
    from onnx import TensorProto

    floats = {TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16}
    constants = [a.t for node in model.graph.node if node.op_type == "Constant" for a in node.attribute
                 if a.name == "value"]
    for tensor in [*model.graph.initializer, *constants]:
        if tensor.data_type in floats and math.prod(tensor.dims) > KEPT_WEIGHT_ELEMENTS:
            for field in ("raw_data", "float_data", "double_data", "int32_data"):
                tensor.ClearField(field)


def _fix_inputs(model: onnx.ModelProto, given: dict[str, Sequence[int]]) -> None:
    """Write the given shapes into the graph's inputs; ModelError for an unknown name, a rank or
    fixed dimension the given shape contradicts, or a dynamic dimension left without one."""
    weights = {t.name for t in model.graph.initializer}
    inputs = {i.name: i for i in model.graph.input if i.name not in weights}
    problems = [Problem(name, "input", f"no such graph input; inputs: {', '.join(inputs) or 'none'}")
                for name in given if name not in inputs]
    for name, value in inputs.items():
        dims = value.type.tensor_type.shape.dim
        if name in given:
            shape = list(given[name])
            if len(dims) and len(dims) != len(shape):
                problems.append(Problem(name, "input", f"has rank {len(dims)}, the given shape {shape} rank {len(shape)}"))
                continue
            fixed = [d.dim_value if d.HasField("dim_value") else None for d in dims] or [None] * len(shape)
            clash = [(i, f) for i, (f, g) in enumerate(zip(fixed, shape)) if f is not None and f != g]
            if clash:
                problems.append(Problem(name, "input", f"dimension {clash[0][0]} is {clash[0][1]} in the model, "
                                                       f"{shape[clash[0][0]]} in the given shape"))
                continue
            value.type.tensor_type.shape.Clear()
            for d in shape:
                value.type.tensor_type.shape.dim.add().dim_value = int(d)
        elif not value.type.tensor_type.HasField("shape") or any(not d.HasField("dim_value") for d in dims):
            shown = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in dims]
            problems.append(Problem(name, "input", f"dynamic shape {shown}: give it, e.g. --input-shape "
                                                   f"{name}={','.join(str(d) if isinstance(d, int) else '1' for d in shown) or '1'}"))
    if problems:
        raise ModelError(problems)


def _dtype(elem_type: int) -> str:
    return _dtype_names().get(elem_type, f"onnx type {elem_type}")


def _graph(model: onnx.ModelProto) -> ModelGraph:
    graph = model.graph
    tensors: dict[str, TensorInfo] = {}
    for value in [*graph.input, *graph.value_info, *graph.output]:
        t = value.type.tensor_type
        if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
            tensors[value.name] = TensorInfo(tuple(d.dim_value for d in t.shape.dim), _dtype(t.elem_type))
    for init in graph.initializer:
        tensors[init.name] = TensorInfo(tuple(init.dims), _dtype(init.data_type))
    constants = {init.name for init in graph.initializer}
    nodes, consumers, producers = [], {}, {}
    for i, node in enumerate(graph.node):
        if not node.name:
            node.name = f"{node.op_type}_{i}"
        nodes.append(node)
        if node.op_type == "Constant":
            constants.update(node.output)
        for name in node.input:
            if name:
                consumers.setdefault(name, []).append(node)
        producers.update((name, node) for name in node.output)
    return ModelGraph(model, nodes, tensors, constants, consumers, producers, {o.name for o in graph.output},
                      {node.name: i for i, node in enumerate(nodes)})
