"""From a schedule to a loaded-ready shared library: lower → C → ABI wrappers → gcc."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from .abi import ArgSpec, arg_specs, entry_points_source, thread_api_source
from .build import compile_shared
from .codegen.c import generate_c
from .ir import PrimFunc
from .lower import lower
from .schedule import Schedule, ScheduleError
from .target import Target
from .te import Tensor
from .time_limit import time_limit


@dataclass
class BuiltKernel:
    """A compiled kernel: `so_path` (cached .so), `source` (the whole compiled translation
    unit: runtime, micro-kernels, kernel and ABI wrappers — what an artifact ships), `args` (ABI argument specs, inputs then outputs), `func` (the IR)."""

    name: str
    so_path: Path
    source: str
    args: list[ArgSpec]
    func: PrimFunc
    extern_sources: list[str] = field(default_factory=list)

    def run(self, *inputs: np.ndarray) -> list[np.ndarray]:
        """Call the kernel in this process on C-contiguous inputs (dtypes/shapes as `args`).

        Outputs are allocated filled with NaN, so an element the kernel fails to write shows.
        Raises ValueError for a mismatched input and RuntimeError for a nonzero return code.
        """
        ins = [a for a in self.args if not a.is_output]
        if len(inputs) != len(ins):
            raise ValueError(f"{self.name}: expected {len(ins)} inputs, got {len(inputs)}")
        arrays = []
        for spec, x in zip(ins, inputs):
            if x.shape != spec.shape or x.dtype != np.dtype(spec.dtype) or not x.flags.c_contiguous:
                raise ValueError(f"{self.name}: argument {spec.name!r} must be a C-contiguous {spec.dtype} "
                                 f"array of shape {list(spec.shape)}, got {x.dtype} {list(x.shape)}")
            arrays.append(x)
        outs = [np.full(a.shape, np.nan, a.dtype) for a in self.args if a.is_output]
        lib = ctypes.CDLL(str(self.so_path))
        rc = getattr(lib, self.name)(*[a.ctypes.data_as(ctypes.c_void_p) for a in arrays + outs])
        if rc != 0:
            lib.tunefleet_last_error.restype = ctypes.c_char_p
            raise RuntimeError(f"{self.name} returned {rc}: {lib.tunefleet_last_error().decode()}")
        return outs


def kernel_source(func: PrimFunc, specs: Sequence[ArgSpec]) -> str:
    """The C of a lowered function's library (its extern sources and the runtime aside): the
    kernel, its ABI entry points and its thread API."""
    return "\n".join([generate_c(func), entry_points_source(func.name, specs), thread_api_source(func.name)])


def build_func(func: PrimFunc, specs: Sequence[ArgSpec], target: Target) -> BuiltKernel:
    """Generate C for a lowered function, add the ABI entry points and compile it (cached).

    Raises BuildError (compiler message attached) if gcc rejects the source.
    """
    return _compile(func, specs, kernel_source(func, specs), target)


def _compile(func: PrimFunc, specs: Sequence[ArgSpec], source: str, target: Target) -> BuiltKernel:
    so = compile_shared([source], target, name=func.name, extra_sources=func.extern_sources)
    unit = so.with_suffix(".c").read_text()
    return BuiltKernel(func.name, so, unit, list(specs), func, list(func.extern_sources))


def build(sch: Schedule, args: Sequence[Tensor], target: Target, name: str,
          layouts: dict[str, str] | None = None, extern_sources: Sequence[str] = (),
          reference: Sequence[Tensor] | None = None) -> BuiltKernel:
    """Lower `sch` with arguments `args` (inputs, then outputs) and build it for `target`.
    `reference`: the operator's tensors, whose shapes the ABI takes when `args` are views of
    them (see abi.arg_specs).

    Raises ScheduleError for an illegal schedule, BuildError for a compiler failure.
    A cuda target builds with nvcc (`compiler.cuda.build`; InvalidConfig, a ScheduleError, for
    a kernel over the device's limits) and returns a CudaBuiltKernel.
    """
    if target.kind == "cuda":
        from .cuda.build import build_cuda

        if extern_sources:
            raise ScheduleError("extern C micro-kernel sources cannot run in a CUDA kernel")
        return build_cuda(sch, args, target, name, specs=arg_specs(args, layouts, reference))
    func = lower(sch, args, name, lanes=target.lanes("float32"))
    func.extern_sources = list(dict.fromkeys([*func.extern_sources, *extern_sources]))
    return build_func(func, arg_specs(args, layouts, reference), target)


def build_workload(workload, config, target: Target, lowering_limit_s: float | None = None) -> BuiltKernel:
    """Build `workload` (a compiler.ops Workload) with `config` (a ConfigEntity of its space)
    for `target`, as kernel `workload.kernel_name(target)`.

    `lowering_limit_s`: wall seconds that lowering and code generation may take (see
    `time_limit.time_limit`: only in a process's main thread); the compiler has its own.
    Raises ScheduleError / BuildError (TimeLimitError past the limit); WorkloadError when
    the target kind has no template.
    A cuda target gives a CudaBuiltKernel (`compiler.cuda.build.build_cuda_workload`).
    """
    if target.kind == "cuda":
        from .cuda.build import build_cuda_workload

        return build_cuda_workload(workload, config, target, lowering_limit_s=lowering_limit_s)
    with time_limit(lowering_limit_s, "lowering and C generation"):
        func, specs = lower_workload(workload, config, target)
        source = kernel_source(func, specs)
    return _compile(func, specs, source, target)


def lower_workload(workload, config, target: Target) -> tuple[PrimFunc, list[ArgSpec]]:
    """`workload` (a compiler.ops Workload) with `config` lowered for a cpu `target` as kernel
    `workload.kernel_name(target)`, and its ABI argument specs (the operator's shapes).
    Raises ScheduleError for a config whose schedule does not lower."""
    sch, tensors = workload.template(target.kind)(config, workload, target)
    func = lower(sch, tensors, workload.kernel_name(target), lanes=target.lanes("float32"))
    func.extern_sources = list(dict.fromkeys(func.extern_sources))
    return func, arg_specs(tensors, workload.layouts(), workload.tensors())
