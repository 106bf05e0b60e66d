"""The model bundle of a tuned model: its spec (`bundle_spec`, JSON a worker builds from) and,
on this machine, the bundle itself (`write_bundle`). The bundle's contents and the building
are tuner.kernel_bundle's, which needs neither onnx nor XGBoost (workers build bundles).

`tunefleet.load(directory)` loads a bundle (a `tunefleet.load.ModelBundle`).
"""

from __future__ import annotations

import os
from pathlib import Path

from tunefleet.tuner import kernel_bundle
from tunefleet.tuner.kernel_bundle import library_name

from .tune_model import ModelTuneResult

__all__ = ["bundle_spec", "library_name", "write_bundle"]


def bundle_spec(tuned: ModelTuneResult, *, model_name: str) -> dict:
    """The JSON spec (tuner.kernel_bundle's module docstring) of the bundle of model
    `model_name` (its file name) with each task of `tuned` built with its chosen config."""
    extraction = tuned.extraction
    return {
        "model": model_name, "target": str(tuned.target), "device_key": tuned.device_key,
        "estimated_latency_s": tuned.estimated_latency_s, "untuned_flop_share": extraction.untuned_share,
        "untuned": [{"node": u.node, "op_type": u.op_type, "reason": u.reason, "flop": u.flop}
                    for u in extraction.untuned],
        "kernels": [{"workload": r.task.workload.to_json(), "config": r.config, "source": r.source,
                     "latency_s": r.latency_s, "gflops": r.gflops, "trials": r.trials,
                     "matches": [{"nodes": list(m.nodes), "op_types": list(m.op_types),
                                  "bindings": [{"arg": b.arg, "tensor": b.tensor, "shape": list(b.shape)}
                                               for b in m.bindings]}
                                 for m in r.task.matches]}
                    for r in tuned.results],
    }


def write_bundle(out_dir: str | os.PathLike, tuned: ModelTuneResult, *, model_name: str) -> Path:
    """Build the kernel library of `tuned` (each task with its chosen config) and write the
    bundle of model `model_name` into `out_dir` (created if needed; tuner.kernel_bundle).
    Returns the directory. Raises ScheduleError / BuildError when a kernel does not build."""
    return kernel_bundle.write_bundle(out_dir, bundle_spec(tuned, model_name=model_name))
