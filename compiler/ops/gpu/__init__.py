"""CUDA schedule templates of the operator library, registered as each operator's 'cuda' template.

Each operator keeps its compute definition and numpy reference; the CUDA template builds the
same computation (possibly over flat views of the arguments, e.g. OIHW weights as
[CO, CI·KH·KW], with the same memory layout) and schedules it for a GPU. The operator's
default-config rule dispatches to the CUDA rule for cuda targets.
"""

from __future__ import annotations

from ..registry import get
from . import conv2d, depthwise, gemm

#: operator -> (template, default-config rule)
CUDA_TEMPLATES = {
    "matmul": (gemm.matmul_template, gemm.matmul_default),
    "batch_matmul": (gemm.batch_matmul_template, gemm.batch_matmul_default),
    "conv2d_nchw": (conv2d.conv2d_nchw_template, conv2d.conv2d_nchw_default),
    "depthwise_conv2d_nchw": (depthwise.depthwise_template, depthwise.depthwise_default),
}


def _dispatch(cpu_rule, cuda_rule):
    def rule(space, workload, target):
        if target.kind == "cuda":
            return cuda_rule(space, workload, target)
        return cpu_rule(space, workload, target) if cpu_rule is not None else space.get(0).to_json()["knobs"]

    rule.cuda_rule = cuda_rule
    rule.__doc__ = getattr(cpu_rule, "__doc__", None)
    return rule


def register_cuda_templates() -> None:
    for name, (template, default) in CUDA_TEMPLATES.items():
        op = get(name)
        op.templates["cuda"] = template
        if getattr(op.default_config, "cuda_rule", None) is None:
            op.default_config = _dispatch(op.default_config, default)


register_cuda_templates()
