"""The compiler's CUDA half: from a GPU schedule to a verified kernel, a built `.so`, and its use.

- `lower`: a Schedule with GPU bindings becomes a `GpuFunc` (kernel PrimFunc plus launch);
  `shared_memory`: its barrier and double-buffering passes;
- `resources`: GPU resource accounting (threads, shared memory, registers) of a lowered
  kernel or, without the passes, of its loop nest (the cost model's features);
  `limits`: what a device allows (`DeviceLimits`, `limits_for`) and `InvalidConfig`;
  `verify`: the check every kernel passes before a build;
- `entry_points`: the exported launchers and the artifact header; `build`: the translation
  unit and the cached build; `nvcc`: the toolkit;
- `emulate`: running a kernel on the CPU (tests without a GPU); `kernel`: calling a built
  kernel from Python; `device`: what the installed GPUs are.

The CUDA code generator is `compiler.codegen.cuda`, a backend of the C-style renderer.
"""
