"""The compiler's CUDA half: from a GPU schedule to a verified kernel, a built `.so`, and its use.

- `codegen`: the CUDA C++ source of a `GpuFunc`, a backend of the C-style renderer
  (`compiler.codegen.cstyle`);
- `lower`: a Schedule with GPU bindings becomes a `GpuFunc` (kernel PrimFunc plus launch);
  `shared_memory`: its barrier and double-buffering passes;
- `resources`: GPU resource accounting (threads, shared memory, registers) of a lowered
  kernel or, without the passes, of its loop nest (the cost model's features);
  `limits`: what a device allows (`DeviceLimits`, `limits_for`) and `InvalidConfig`;
  `verify`: the check every kernel passes before a build;
- `entry_points`: the exported launchers and the artifact header; `build`: the translation
  unit and the cached build; `nvcc`: the toolkit;
- `emulate`: running a kernel on the CPU (tests without a GPU); `kernel`: calling a built
  kernel from Python.

What the installed GPUs are is `compiler.cuda_device`, below `compiler.target` (whose
`Target.local("cuda")` reads GPU 0's architecture there) and this package alike.
"""
