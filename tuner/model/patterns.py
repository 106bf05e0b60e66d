"""The ONNX subgraphs that map onto an operator of the library, one function per anchor node.

A pattern starts at an anchor node (`Conv`, `Gemm`, `MatMul`) and takes in the nodes that the
operator can fuse after it: a per-channel bias `Add` (when the anchor has no bias yet), for
conv2d_nchw a residual `Add` (a ResNet block's shortcut: a tensor of the result's shape that
exists before the anchor runs, so a kernel run in the anchor's place can read it), then an
activation the operators apply as their epilogue (`Relu`; `Gelu` with approximate="none"). A
node is taken in only when it is the sole reader of the anchor's result, which is not a graph
output (nothing else may see the intermediate value). Of a block whose shortcut is a
convolution too (ResNet's downsampling blocks), the Add goes with whichever of the two
convolutions comes later in graph order.

Each pattern gives a `Match` (the workload and which ONNX tensor each kernel argument is) or
raises `Untuned` with the reason the anchor cannot run on an operator (e.g. asymmetric
padding, a transposed Gemm input).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from tunefleet.compiler import ops

from .graph import ModelGraph, TensorInfo

if TYPE_CHECKING:
    import onnx

__all__ = ["Binding", "Match", "Untuned", "Unhandled", "ANCHORS", "TUNABLE_DTYPES", "match_at"]

#: The dtypes the operators compute in.
TUNABLE_DTYPES = ("float32", "float64")
#: Activations fused as an operator epilogue: ONNX op type → (epilogue, required attributes).
ACTIVATIONS = {"Relu": ("relu", {}), "Gelu": ("gelu", {"approximate": "none"})}


class Untuned(Exception):
    """An anchor node that no operator runs; the message is the reason."""


class Unhandled(Exception):
    """An anchor node the model cannot be tuned with: a shape unknown after shape inference, or a
    dtype the operators do not compute in; the message is the reason."""


@dataclasses.dataclass(frozen=True)
class Binding:
    """Kernel argument `arg` is ONNX tensor `tensor`, whose ONNX shape is `shape` (the same
    row-major memory as the kernel's shape, e.g. a [1, 512] Gemm bias passed as b[512], unless
    the workload takes the argument packed: compiler.ops.prepacked.packed_arguments); `constant`:
    the tensor is an initializer or a Constant's output, fixed for the model's life."""

    arg: str
    tensor: str
    shape: tuple[int, ...]
    constant: bool = False


@dataclasses.dataclass(frozen=True)
class Match:
    """One occurrence of a workload: the `nodes` it replaces (anchor first, then the fused ones,
    by name), their `op_types`, and `bindings`, one per kernel argument in call order."""

    workload: ops.Workload
    nodes: tuple[str, ...]
    op_types: tuple[str, ...]
    bindings: tuple[Binding, ...]


def _attrs(node: onnx.NodeProto) -> dict:
    from onnx import helper  # imported once a model is read (graph.load_model)

    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _known(graph: ModelGraph, name: str) -> TensorInfo:
    info = graph.info(name)
    if info is None:
        raise Unhandled(f"the shape of {name!r} is unknown after shape inference (give the input shapes)")
    return info


def _sole_reader(graph: ModelGraph, tensor: str) -> onnx.NodeProto | None:
    """The one node reading `tensor`, if exactly one does and it is not a graph output."""
    readers = graph.consumers.get(tensor, [])
    return readers[0] if len(readers) == 1 and tensor not in graph.outputs else None


def _bias_shape_ok(shape: tuple[int, ...], channels: int, trailing: int) -> bool:
    """A per-channel bias: `channels` values followed by `trailing` ones (broadcast over the
    spatial dims), with any number of leading ones."""
    core = list(shape)
    while core and core[0] == 1 and len(core) > 1 + trailing:
        core.pop(0)
    return core == [channels] + [1] * trailing


class _Builder:
    """Grows a match from its anchor: takes in a bias Add and an activation when they fit."""

    def __init__(self, graph: ModelGraph, anchor: onnx.NodeProto):
        self.graph = graph
        self.nodes = [anchor]
        self.result = anchor.output[0]

    def take_bias(self, channels: int, trailing: int) -> tuple[str, tuple[int, ...]] | None:
        reader = _sole_reader(self.graph, self.result)
        if reader is None or reader.op_type != "Add" or len(reader.input) != 2:
            return None
        other = reader.input[1] if reader.input[0] == self.result else reader.input[0]
        info = self.graph.info(other)
        if other not in self.graph.constants or info is None or not _bias_shape_ok(info.shape, channels, trailing):
            return None
        self.nodes.append(reader)
        self.result = reader.output[0]
        return other, info.shape

    def take_residual(self) -> str | None:
        """The other input of a sole-reader Add of the result's shape and dtype that exists before
        the anchor runs (`ModelGraph.ready_before`), taken in; None where there is none."""
        anchor, reader = self.nodes[0], _sole_reader(self.graph, self.result)
        if reader is None or reader.op_type != "Add" or len(reader.input) != 2:
            return None
        other = reader.input[1] if reader.input[0] == self.result else reader.input[0]
        info = self.graph.info(other)
        if other == self.result or info is None or info != self.graph.info(self.result) \
                or not self.graph.ready_before(other, anchor):
            return None
        self.nodes.append(reader)
        self.result = reader.output[0]
        return other

    def take_activation(self) -> str:
        reader = _sole_reader(self.graph, self.result)
        if reader is None or reader.op_type not in ACTIVATIONS:
            return "none"
        epilogue, required = ACTIVATIONS[reader.op_type]
        attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in _attrs(reader).items()}
        if any(attrs.get(k, v) != v for k, v in required.items()):
            return "none"
        self.nodes.append(reader)
        self.result = reader.output[0]
        return epilogue

    def match(self, op: str, args: dict, bindings: list[tuple[str, str]]) -> Match:
        """The match of workload (op, args); `bindings` (kernel arg, tensor) in call order, the
        result last (the output tensor of the last node taken in)."""
        try:
            workload = ops.make_workload(op, args)
        except ops.WorkloadError as exc:
            raise Untuned(f"{op}: {exc}") from None
        names = [t.name for t in workload.tensors()]
        pairs = [*bindings, (names[-1], self.result)]
        if [a for a, _ in pairs] != names:
            raise AssertionError(f"{op}: bindings {[a for a, _ in pairs]} are not its arguments {names}")
        return Match(workload, tuple(n.name for n in self.nodes), tuple(n.op_type for n in self.nodes),
                     tuple(Binding(a, t, _known(self.graph, t).shape, t in self.graph.constants) for a, t in pairs))


def _check_dtype(graph: ModelGraph, node: onnx.NodeProto) -> str:
    dtype = _known(graph, node.input[0]).dtype
    if dtype not in TUNABLE_DTYPES:
        raise Unhandled(f"dtype {dtype}: the operators compute in {', '.join(TUNABLE_DTYPES)}")
    return dtype


def _conv_padding(attrs: dict, in_hw: tuple[int, int], kernel: tuple[int, int], strides, dilations) -> list[int]:
    """The symmetric [ph, pw] of a Conv's auto_pad / pads; Untuned for an asymmetric one."""
    auto = attrs.get("auto_pad", b"NOTSET")
    auto = auto.decode() if isinstance(auto, bytes) else auto
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        pads = []
        for size, k, s, d in zip(in_hw, kernel, strides, dilations):
            total = max((math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size, 0)
            pads.append((total // 2, total - total // 2) if auto == "SAME_UPPER" else (total - total // 2, total // 2))
        begin, end = [p[0] for p in pads], [p[1] for p in pads]
    elif auto == "VALID":
        begin, end = [0, 0], [0, 0]
    else:
        p = list(attrs.get("pads", [0, 0, 0, 0]))
        begin, end = p[:2], p[2:]
    if begin != end:
        raise Untuned(f"asymmetric padding (begin {begin}, end {end}): the convolutions pad both sides alike")
    return begin


def conv(graph: ModelGraph, node: onnx.NodeProto) -> Match:
    """Conv (2-D, NCHW) [+ bias Add] [+ activation] → depthwise_conv2d_nchw when group == input
    channels == output channels, else conv2d_nchw with its `groups` (1 for an ordinary one) and
    a residual Add before the activation where there is one. Untuned where the Conv is no valid
    one, which shape inference lets pass and onnxruntime refuses to run: weights [CO, CI / group,
    KH, KW] of other input channels, a kernel_shape other than [KH, KW], a bias B other than [CO]."""
    dtype = _check_dtype(graph, node)
    x, w = _known(graph, node.input[0]).shape, _known(graph, node.input[1]).shape
    if len(x) != 4:
        raise Untuned(f"a {len(x) - 2}-D convolution: the operators are 2-D")
    if len(w) != 4:
        raise Untuned(f"weights of shape {list(w)}: a 2-D convolution's are [CO, CI / group, KH, KW]")
    attrs = _attrs(node)
    n, ci, h, wd = x
    co, ci_per_group, kh, kw = w
    group = attrs.get("group", 1)
    if group < 1 or ci_per_group * group != ci:
        raise Untuned(f"weights of shape {list(w)}: {ci} input channels in group={group} take [CO, {ci} / {group}, "
                      f"KH, KW]")
    if list(attrs.get("kernel_shape", [kh, kw])) != [kh, kw]:
        raise Untuned(f"kernel_shape {list(attrs['kernel_shape'])} is not the weights' [KH, KW] = {[kh, kw]}")
    strides, dilations = list(attrs.get("strides", [1, 1])), list(attrs.get("dilations", [1, 1]))
    if len(strides) != 2 or len(dilations) != 2 or min(strides + dilations) < 1:
        raise Untuned(f"strides {strides}, dilations {dilations}: a 2-D convolution steps by at least 1 in each")
    padding = _conv_padding(attrs, (h, wd), (kh, kw), strides, dilations)
    has_bias = len(node.input) > 2 and bool(node.input[2])
    if has_bias and (b := _known(graph, node.input[2]).shape) != (co,):
        raise Untuned(f"B of shape {list(b)}: a Conv's bias is [CO] = [{co}]")
    build = _Builder(graph, node)
    bias = (node.input[2], None) if has_bias else build.take_bias(co, 2)
    depthwise = group == ci == co > 1
    residual = None if depthwise else build.take_residual()
    epilogue = build.take_activation()
    geometry = {"N": n, "H": h, "W": wd, "KH": kh, "KW": kw, "stride": strides, "padding": padding,
                "dilation": dilations, "bias": bias is not None, "epilogue": epilogue, "dtype": dtype}
    inputs = [("data", node.input[0]), ("weight", node.input[1])] + ([("bias", bias[0])] if bias else [])
    if depthwise:
        return build.match("depthwise_conv2d_nchw", {**geometry, "C": ci}, inputs)
    args = {**geometry, "CI": ci, "CO": co, "groups": group, "residual": residual is not None}
    return build.match("conv2d_nchw", args, inputs + ([("residual", residual)] if residual else []))


def gemm(graph: ModelGraph, node: onnx.NodeProto) -> Match:
    """Gemm (alpha = beta = 1, A not transposed) [+ activation] → dense when transB (W [N, K]),
    matmul otherwise; a C of N values (per column) is the bias."""
    dtype = _check_dtype(graph, node)
    attrs = _attrs(node)
    if attrs.get("transA", 0):
        raise Untuned("transA=1: the operators take A row-major [M, K]")
    has_c = len(node.input) > 2 and bool(node.input[2])
    if attrs.get("alpha", 1.0) != 1.0 or (has_c and attrs.get("beta", 1.0) != 1.0):
        raise Untuned(f"alpha={attrs.get('alpha', 1.0)}, beta={attrs.get('beta', 1.0)}: the operators compute A·B + C")
    a, b = _known(graph, node.input[0]).shape, _known(graph, node.input[1]).shape
    if len(a) != 2 or len(b) != 2:
        raise Untuned(f"A of shape {list(a)}, B of shape {list(b)}: Gemm multiplies two matrices")
    m, k = a
    transposed = bool(attrs.get("transB", 0))
    n = b[0] if transposed else b[1]
    if has_c and not _bias_shape_ok(_known(graph, node.input[2]).shape, n, 0):
        raise Untuned(f"C of shape {list(_known(graph, node.input[2]).shape)} is not one value per column ({n})")
    build = _Builder(graph, node)
    epilogue = build.take_activation()
    args = {"M": m, "N": n, "K": k, "bias": has_c, "epilogue": epilogue, "dtype": dtype}
    if transposed:
        return build.match("dense", args, [("X", node.input[0]), ("W", node.input[1])]
                           + ([("b", node.input[2])] if has_c else []))
    return build.match("matmul", args, [("A", node.input[0]), ("B", node.input[1])]
                       + ([("bias", node.input[2])] if has_c else []))


def _transposed_source(graph: ModelGraph, tensor: str) -> onnx.NodeProto | None:
    """The Transpose node producing `tensor` when it swaps the last two axes only and this
    MatMul is its sole reader (then the MatMul can read its input as Bᵀ)."""
    producer = graph.producers.get(tensor)
    if producer is None or producer.op_type != "Transpose" or _sole_reader(graph, tensor) is None:
        return None
    perm = list(_attrs(producer).get("perm", []))
    rank = len(perm)
    return producer if rank >= 2 and perm == [*range(rank - 2), rank - 1, rank - 2] else None


def matmul(graph: ModelGraph, node: onnx.NodeProto) -> Match:
    """MatMul of A [..., M, K] by a 2-D B [K, N] [+ bias Add] [+ activation] → matmul (the leading
    dims of A folded into M); of two tensors with the same leading dims → batch_matmul (B read
    transposed when it comes from a Transpose of its last two axes)."""
    dtype = _check_dtype(graph, node)
    a = _known(graph, node.input[0]).shape
    b = _known(graph, node.input[1]).shape
    if len(a) < 2 or len(b) < 2:
        raise Untuned(f"a matrix-vector product (shapes {list(a)}, {list(b)})")
    build = _Builder(graph, node)
    if len(b) == 2:
        m, k, n = math.prod(a[:-1]), a[-1], b[1]
        bias = build.take_bias(n, 0)
        epilogue = build.take_activation()
        args = {"M": m, "N": n, "K": k, "bias": bias is not None, "epilogue": epilogue, "dtype": dtype}
        return build.match("matmul", args, [("A", node.input[0]), ("B", node.input[1])]
                           + ([("bias", bias[0])] if bias else []))
    if a[:-2] != b[:-2]:
        raise Untuned(f"batch dims {list(a[:-2])} and {list(b[:-2])} differ (broadcast): batch_matmul needs equal ones")
    transpose = _transposed_source(graph, node.input[1])
    b_tensor = node.input[1]
    if transpose is not None:
        build.nodes.append(transpose)
        b_tensor = transpose.input[0]
    args = {"batch": math.prod(a[:-2]), "M": a[-2], "N": b[-1], "K": a[-1], "transpose_b": transpose is not None,
            "dtype": dtype}
    return build.match("batch_matmul", args, [("A", node.input[0]), ("B", b_tensor)])


#: Anchor op type → its pattern.
ANCHORS: dict[str, Callable[[ModelGraph, onnx.NodeProto], Match]] = {"Conv": conv, "Gemm": gemm, "MatMul": matmul}


#: Per anchor, as the ONNX operator defines it: its fewest and most inputs (the first ones
#: required), and the type of each attribute it reads (AttributeProto: 1 FLOAT, 2 INT, 3 STRING, 7 INTS).
SIGNATURES: dict[str, tuple[int, int, dict[str, int]]] = {
    "Conv": (2, 3, {"strides": 7, "pads": 7, "dilations": 7, "kernel_shape": 7, "group": 2, "auto_pad": 3}),
    "Gemm": (2, 3, {"alpha": 1, "beta": 1, "transA": 2, "transB": 2}),
    "MatMul": (2, 2, {}),
}


def _check_signature(node: onnx.NodeProto) -> None:
    """Untuned for a node that is no valid ONNX operator of its type: the wrong number of inputs,
    or an attribute of the wrong type (an uploaded model is not checked otherwise)."""
    from onnx import AttributeProto

    fewest, most, types = SIGNATURES[node.op_type]
    if not fewest <= len(node.input) <= most or not all(node.input[:fewest]):
        raise Untuned(f"{len(node.input)} inputs {list(node.input)}: ONNX {node.op_type} takes {fewest} to {most}")
    for a in node.attribute:
        if a.name in types and a.type != types[a.name]:
            raise Untuned(f"attribute {a.name} is of type {AttributeProto.AttributeType.Name(a.type)}, "
                          f"not {AttributeProto.AttributeType.Name(types[a.name])}")


def match_at(graph: ModelGraph, node: onnx.NodeProto) -> Match | None:
    """The match anchored at `node`; None when `node` is no anchor. Raises Untuned, Unhandled."""
    pattern = ANCHORS.get(node.op_type)
    if pattern is None:
        return None
    _check_signature(node)
    return pattern(graph, node)
