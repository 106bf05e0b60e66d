"""`tunefleet.load`: call a tuned kernel artifact, or the kernels of a model bundle, from Python
over numpy (or DLPack) arrays."""

from __future__ import annotations

import ctypes
import json
import os
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from tunefleet.compiler.abi import ABI_VERSION, ArgSpec
from tunefleet.compiler.artifact import MODEL_MANIFEST, read_manifest
from tunefleet.compiler.dltensor import MANIFEST_MISMATCH, check_manifest_args
from tunefleet.compiler.target import Target


def load(path: str | os.PathLike) -> Kernel | ModelBundle:
    """Loads an artifact: its directory, or its `.so` with manifest.json beside it. A GPU
    artifact gives a `tunefleet.compiler.cuda.kernel.GpuKernel` (numpy inputs are copied to the
    current CUDA device and the outputs back); a model bundle (model_manifest.json beside the
    `.so`) a ModelBundle.

    Raises FileNotFoundError without a manifest, ValueError when the artifact's ABI
    version is newer than this tunefleet's or a CPU kernel's manifest lists other arguments
    (dtypes, shapes) than its library was compiled for, OSError when the library cannot be loaded.
    """
    path = Path(path)
    directory = path if path.is_dir() else path.parent
    if (directory / MODEL_MANIFEST).exists():
        return ModelBundle(directory)
    manifest = read_manifest(directory)
    _check_abi(path, manifest)
    so_path = path if path.is_file() else directory / f"{manifest['name']}.so"
    if str(manifest.get("build_target", manifest.get("target", ""))).startswith("cuda"):
        from tunefleet.compiler.cuda.kernel import GpuKernel  # a GPU artifact: numpy in, device copies, numpy out

        return GpuKernel(so_path, manifest)
    return Kernel(so_path, manifest)


def _check_abi(path: Path, manifest: dict) -> None:
    if manifest["abi_version"] > ABI_VERSION:
        raise ValueError(f"{path}: artifact ABI version {manifest['abi_version']} is newer than "
                         f"this tunefleet's ({ABI_VERSION}); upgrade tunefleet")


class ModelBundle:
    """A loaded model bundle (tuner/model/bundle.py): `manifest` (model_manifest.json),
    `kernels` (symbol → Kernel, all in the bundle's one library) and `nodes` (ONNX node name →
    its manifest entry: kernel symbol, fused nodes, and per kernel argument the ONNX tensor,
    its ONNX shape, the layout, and `pack` where the kernel takes a constant weight pre-packed).
    ``bundle.kernel_for(node)`` is the Kernel replacing ONNX node `node` (the anchor of its
    subgraph); call it with ``bundle.arguments(node, tensors)``: the node's tensors reshaped to
    the kernel's argument shapes (the same row-major memory) or packed to their layout."""

    def __init__(self, directory: str | os.PathLike) -> None:
        directory = Path(directory)
        self.manifest: dict = json.loads((directory / MODEL_MANIFEST).read_text())
        _check_abi(directory, self.manifest)
        so_path = directory / self.manifest["library"]
        self.kernels: dict[str, Kernel] = {
            symbol: Kernel(so_path, {**entry, "name": symbol, "abi_version": self.manifest["abi_version"],
                                     "build_target": self.manifest["target"]})
            for symbol, entry in self.manifest["kernels"].items()}
        self.nodes: dict[str, dict] = {entry["node"]: entry for entry in self.manifest["nodes"]}

    def kernel_for(self, node: str) -> Kernel:
        """The kernel replacing ONNX node `node`; KeyError naming the tuned nodes if none does."""
        if node not in self.nodes:
            raise KeyError(f"no kernel replaces node {node!r}; tuned nodes: {', '.join(self.nodes)}")
        return self.kernels[self.nodes[node]["kernel"]]

    def arguments(self, node: str, tensors) -> list[np.ndarray]:
        """The input arrays of `node`'s kernel from its ONNX tensors (`tensors`: tensor name →
        array in its ONNX shape, e.g. an InferenceSession feed or the model's initializers), in
        call order: each reshaped to its argument's shape, or packed to its `pack` layout (OIHW
        weights → OIHW<i>i<o>o, output channels zero-padded; B [K, N] → KN<nr>n, W [N, K] →
        NK<nr>n, column panels [ceil(N/nr), K, nr]; pack a constant once and keep it).
        KeyError names a tuned node or tensor that is missing."""
        kernel = self.kernel_for(node)
        arrays = []
        for entry, spec in zip(self.nodes[node]["args"], kernel.args):
            if entry["output"]:
                continue
            if entry["tensor"] not in tensors:
                raise KeyError(f"node {node!r} reads tensor {entry['tensor']!r}, which `tensors` lacks")
            array = np.asarray(tensors[entry["tensor"]])
            if "pack" in entry:
                from tunefleet.compiler.ops.prepacked import pack  # imports the operators: only when needed

                arrays.append(pack(array, entry["pack"]))
            else:
                arrays.append(np.ascontiguousarray(array).reshape(spec.shape))
        return arrays

    def __repr__(self) -> str:
        return (f"<tunefleet.ModelBundle {self.manifest['model']}: {len(self.kernels)} kernels for "
                f"{len(self.nodes)} nodes>")


class Kernel:
    """A loaded kernel: ``kernel(*inputs)`` returns the output array (a tuple if there are
    several), allocated for the call. The outputs may be given instead, positionally after
    the inputs as in the C ABI (``kernel(a, b, c)``), or as ``out=`` (the array, or a sequence
    of arrays); then they are written and returned.

    Arguments are numpy arrays or objects with ``__dlpack__`` (CPU), matching the manifest's
    dtype and shape exactly, C-contiguous; outputs must be writeable and must not overlap
    other arguments. A wrong number of arguments raises TypeError naming the inputs and
    outputs; a mismatched argument ValueError naming it and what is expected; a nonzero
    return of the kernel RuntimeError with the runtime's error text. Constructing one raises
    ValueError when `manifest` lists other arguments than the library's kernel takes.
    """

    def __init__(self, so_path: str | os.PathLike, manifest: dict) -> None:
        self.manifest = manifest
        self.name: str = manifest["name"]
        self.args = [ArgSpec.from_dict(a) for a in manifest["args"]]
        self._inputs = [a for a in self.args if not a.is_output]
        self._lib = ctypes.CDLL(str(Path(so_path).resolve()))
        self._fn = getattr(self._lib, self.name)
        self._fn.argtypes = [ctypes.c_void_p] * len(self.args)
        self._fn.restype = ctypes.c_int
        self._packed = ctypes.cast(getattr(self._lib, f"{self.name}_packed"), ctypes.c_void_p)
        self._lib.tunefleet_last_error.restype = ctypes.c_char_p
        self._lib.tunefleet_set_num_threads.argtypes = [ctypes.c_int]
        self._lib.tunefleet_timer.argtypes = [
            ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p), *[ctypes.c_int] * 5,
            ctypes.POINTER(ctypes.c_double)]
        self._check_manifest_against_library()

    def _check_manifest_against_library(self) -> None:
        """ValueError unless the library was compiled for exactly the manifest's arguments
        (`check_manifest_args`: its entry point refuses the probe for the first output
        overlapping the first argument, so the kernel never runs)."""
        outputs = [a for a in self.args if a.is_output]
        if not (self._inputs and outputs):  # no probe without an overlap for the entry point to refuse
            raise ValueError(f"{self.name}: {MANIFEST_MISMATCH}: it lists no {'inputs' if outputs else 'outputs'}; "
                             "every tunefleet kernel has both")
        check_manifest_args(self._lib, self.name, self.args,
                            f"{self.name}_checked: output '{outputs[0].name}' overlaps argument "
                            f"'{self.args[0].name}' in memory; outputs must not alias")

    def __repr__(self) -> str:
        sig = ", ".join(f"{a.name}: {a.dtype}{list(a.shape)}" for a in self._inputs)
        outs = ", ".join(f"{a.name}: {a.dtype}{list(a.shape)}" for a in self.args if a.is_output)
        return f"<tunefleet.Kernel {self.name}({sig}) -> ({outs})>"

    def __call__(self, *arrays, out=None):
        arrays = self._arrays(arrays, out)
        self._check(self._fn(*[a.ctypes.data for a in arrays]))
        outputs = arrays[len(self._inputs):]
        return outputs[0] if len(outputs) == 1 else tuple(outputs)

    def set_num_threads(self, n: int) -> int:
        """Sets this library's requested pool size (n <= 0: one per CPU of the affinity
        mask) and returns the thread count calls from this thread will use now: n clamped to
        the calling thread's affinity mask and the cgroup CPU quota, with a message on stderr
        naming the limit. The request is kept; the pool follows later changes of the mask."""
        return self._lib.tunefleet_set_num_threads(n)

    @property
    def isa(self) -> str:
        """The CPU ISA the kernel runs: of a multi-target library (manifest ``build_targets``),
        the one it chose when loaded (the best this CPU supports, or $TUNEFLEET_ISA); else the
        ISA it was built for. Raises RuntimeError with the library's reason when a
        multi-target library could choose none (then every call raises it too)."""
        if "build_targets" not in self.manifest:
            return Target.parse(self.manifest["build_target"]).isa
        chosen = getattr(self._lib, f"{self.name}_isa")
        chosen.restype = ctypes.c_char_p
        isa = chosen()
        if isa is None:
            raise RuntimeError(self._lib.tunefleet_last_error().decode(errors="replace"))
        return isa.decode()

    @property
    def num_threads(self) -> int:
        """Threads this library's parallel loops use when called from this thread now (its
        current affinity mask and the cgroup CPU quota)."""
        return self._lib.tunefleet_get_num_threads()

    def time(self, *arrays, number: int = 1, repeat: int = 5, min_repeat_ms: int = 50,
             cooldown_ms: int = 0, flush_cache: bool = False) -> np.ndarray:
        """Times the kernel with the runtime's timer; `arrays` are the inputs, or all arguments.

        A warm-up call, then `repeat` repeats of `number` back-to-back calls (number grows
        until a repeat lasts min_repeat_ms milliseconds), cooldown_ms milliseconds of sleep
        between repeats, a flush of the caches before each repeat if flush_cache. Returns
        float64 seconds per call, shape (repeat,). Raises like __call__.
        """
        buffers = self._arrays(arrays, None)
        pointers = (ctypes.c_void_p * len(buffers))(*[a.ctypes.data for a in buffers])
        seconds = np.empty(repeat, dtype=np.float64)
        self._check(self._lib.tunefleet_timer(
            self._packed, pointers, number, repeat, min_repeat_ms, cooldown_ms,
            int(flush_cache), seconds.ctypes.data_as(ctypes.POINTER(ctypes.c_double))))
        return seconds

    def _check(self, rc: int) -> None:
        if rc != 0:
            error = self._lib.tunefleet_last_error().decode(errors="replace")
            raise RuntimeError(f"{self.name} failed (code {rc}): {error}")

    def _arrays(self, given: Sequence, out) -> list[np.ndarray]:
        """Validated arrays of all arguments in call order, from the positional arguments
        `given` (the inputs, or all arguments as in the C ABI) and `out`; outputs allocated
        when neither gives them."""
        outputs = [a for a in self.args if a.is_output]
        n = len(self._inputs)
        if len(given) == len(self.args) and out is None:
            given, out = given[:n], list(given[n:])
        elif len(given) != n:
            both = " (outputs go positionally or in out=, not both)" if len(given) == len(self.args) else ""
            raise TypeError(f"{self.name} takes {n} inputs ({', '.join(a.name for a in self._inputs)}), "
                            f"optionally followed by its {len(outputs)} output(s) "
                            f"({', '.join(a.name for a in outputs)}); got {len(given)} arguments{both}")
        arrays = [_as_array(spec, x, writeable=False) for spec, x in zip(self._inputs, given)]
        if out is None:
            return arrays + [np.empty(a.shape, dtype=a.dtype) for a in outputs]
        out = list(out) if isinstance(out, list | tuple) else [out]
        if len(out) != len(outputs):
            raise TypeError(f"{self.name} has {len(outputs)} outputs "
                            f"({', '.join(a.name for a in outputs)}), got {len(out)} in out")
        arrays += [_as_array(spec, x, writeable=True) for spec, x in zip(outputs, out)]
        for i, spec in enumerate(self.args):
            for j, other in enumerate(self.args[:i]):
                if spec.is_output and np.may_share_memory(arrays[i], arrays[j]):
                    raise ValueError(f"argument {spec.name!r}: output overlaps argument "
                                     f"{other.name!r} in memory")
        return arrays


def _as_array(spec: ArgSpec, x, *, writeable: bool) -> np.ndarray:
    """`x` as a numpy array checked against `spec`. Raises ValueError naming the argument."""
    if not isinstance(x, np.ndarray):
        if not hasattr(x, "__dlpack__"):
            raise ValueError(f"argument {spec.name!r}: expected a numpy array or an object with "
                             f"__dlpack__, got {type(x).__name__}")
        try:
            x = np.from_dlpack(x)
        except (BufferError, TypeError, RuntimeError) as exc:
            raise ValueError(f"argument {spec.name!r}: cannot import it as a CPU array through "
                             f"__dlpack__: {exc}") from exc
    if x.dtype != np.dtype(spec.dtype):
        raise ValueError(f"argument {spec.name!r}: expected dtype {spec.dtype}, got {x.dtype}")
    if x.shape != spec.shape:
        raise ValueError(f"argument {spec.name!r}: expected shape {list(spec.shape)}, "
                         f"got {list(x.shape)}")
    if not (x.flags.c_contiguous and x.flags.aligned):
        raise ValueError(f"argument {spec.name!r}: expected a C-contiguous, aligned "
                         "(row-major) array; numpy.ascontiguousarray makes one")
    if writeable and not x.flags.writeable:
        raise ValueError(f"argument {spec.name!r}: the output array is read-only")
    return x
