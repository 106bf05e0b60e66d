"""Every GPU template's generated CUDA code compiles with nvcc, for sm_80 and sm_90, over at
least 20 random configs each (the configs the verifier rejects are skipped: they never reach
nvcc). The kernels of one template go in one translation unit (with their launchers and
entry points) compiled for both architectures in one nvcc run, so the test stays short."""

from __future__ import annotations

import itertools

import pytest

from tunefleet.compiler.cuda.build import cuda_unit, workload_kernel
from tunefleet.compiler.cuda.nvcc import check_compiles

from cuda_helpers import SM90, TEMPLATE_WORKLOADS, needs_nvcc, random_valid_configs

pytestmark = needs_nvcc
CONFIGS = 20


@pytest.mark.timeout(300)
@pytest.mark.parametrize("template", sorted(TEMPLATE_WORKLOADS))
def test_random_configs_compile_for_sm80_and_sm90(template):
    parts = []
    names = itertools.count()
    shapes = TEMPLATE_WORKLOADS[template]
    for s, (op, args) in enumerate(shapes):
        n = CONFIGS // len(shapes) + (1 if s < CONFIGS % len(shapes) else 0)
        built, _ = random_valid_configs(
            op, args, SM90, n, seed=s,
            build=lambda w, cfg: workload_kernel(w, cfg, SM90, name=f"{template}_k{next(names)}"))
        parts += built
    assert len(parts) >= CONFIGS
    assert len({p.kernel for p in parts}) > CONFIGS // 2  # the configs really differ
    check_compiles([cuda_unit(parts)], ["sm_80", "sm_90"])
