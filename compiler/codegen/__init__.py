"""Code generators: C99 for CPUs (`c`), CUDA C++ for NVIDIA GPUs."""
