"""The operator library: compute definitions, numpy references and schedule templates.

`list()` gives every operator's argument schema and targets; `make_workload(op, args)`
validates arguments (WorkloadError names the field); `get(op)` returns the OpDef.
"""

from __future__ import annotations

from . import batch_matmul, conv2d, conv2d_nhwc, custom, dense, depthwise, matmul  # noqa: F401  (register the operators)
from . import gpu  # noqa: F401,E402  (the 'cuda' templates of the operators above)
from .registry import (ArgDef, OpDef, Workload, WorkloadError, config_space, default_config, get, list_ops,
                       make_workload, preferred_configs, random_inputs)

list = list_ops  # noqa: A001 - the public name the API and CLI use: ops.list()

__all__ = ["ArgDef", "OpDef", "Workload", "WorkloadError", "config_space", "default_config", "get", "list",
           "make_workload", "preferred_configs", "random_inputs"]
