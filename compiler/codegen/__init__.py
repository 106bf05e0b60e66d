"""Code generators: the C-style renderer base (`cstyle`) and its backends, C99 for CPUs (`c`) and
CUDA C++ for NVIDIA GPUs (`compiler.cuda.codegen`, with the rest of the CUDA half)."""
