"""The model bundle: one directory a user downloads for a tuned model, built from a JSON spec.

This module is the building half and imports neither onnx nor the search side (XGBoost), so a
measurement worker builds bundles with it (``tunefleet.worker.jobs.bundle``);
``tuner.model.bundle.bundle_spec`` makes the spec from a tuned model.

Contents, for library `<name>`:

- `<name>.so`: every kernel of the model, one exported symbol per workload
  (compiler.kernel_library; soname `<name>.so`);
- `<name>.h`: their prototypes, argument shapes and layouts, and the runtime API;
- `<name>.c`: the one C file the library is built from (`build_command` rebuilds it);
- `model_manifest.json`: `kernels` (symbol → workload, config, its source, latency_s,
  gflops, occurrences, args: the ABI argument specs in call order), `nodes` (one entry per
  occurrence: the ONNX `node` it replaces with the `fused` nodes taken into it, the `kernel`
  symbol, and `args`: per kernel argument in call order the ONNX `tensor`, its ONNX `shape`
  (the same row-major memory as the argument's shape, unless `pack` names the layout the
  kernel takes it in: constant weights pre-packed, tuner.model.prepack, which the header's
  `<symbol>_pack_weight` packs from the ONNX layout) and the kernel's `layout`), `untuned`
  (node, op_type, reason, flop), `estimated_latency_s` (Σ occurrences × latency),
  `untuned_flop_share`, and the build (target, flags, toolchain, build_command, so_sha256).

`tunefleet.load(directory)` loads it (a `tunefleet.load.ModelBundle`).

The spec (JSON): ``{"model": file name, "target": target string, "device_key",
"estimated_latency_s" (seconds or null), "untuned_flop_share" (0..1), "untuned": [{node,
op_type, reason, flop}], "kernels": [{"workload": workload JSON, "config": config JSON,
"source", "latency_s", "gflops", "trials", "matches": [{"nodes": [anchor, fused...],
"op_types": [...], "bindings": [{"arg", "tensor", "shape"}]}]}]}``, one kernel per distinct
workload.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
from pathlib import Path

from tunefleet.compiler import ops
from tunefleet.compiler.abi import ABI_VERSION
from tunefleet.compiler.artifact import MODEL_MANIFEST
from tunefleet.compiler.build import build_info
from tunefleet.compiler.kernel_library import build_kernel_library, library_header_text
from tunefleet.compiler.ops.prepacked import pack_c, packed_arguments
from tunefleet.compiler.target import Target

__all__ = ["library_name", "write_bundle"]


def library_name(model_name: str) -> str:
    """A C identifier for the library of model `model_name` (e.g. "resnet-18.onnx" →
    "resnet_18_kernels")."""
    stem = re.sub(r"\W", "_", Path(model_name).stem) or "model"
    return f"{'m' if stem[0].isdigit() else ''}{stem}_kernels"


def write_bundle(out_dir: str | os.PathLike, spec: dict) -> Path:
    """Build the kernel library of `spec` (see the module docstring: each kernel with its
    config) and write the bundle into `out_dir` (created if needed). Returns the directory.
    Raises KeyError / ValueError for a malformed spec, ConfigError for a config outside its
    space, ScheduleError / BuildError when a kernel does not build."""
    target = Target.parse(spec["target"])
    model_name = spec["model"]
    name = library_name(model_name)
    workloads = [ops.Workload.from_json(k["workload"]) for k in spec["kernels"]]
    configs = [(w, ops.config_space(w, target).from_json(k["config"])) for w, k in zip(workloads, spec["kernels"])]
    library = build_kernel_library(name, configs, target)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    staged = out / f".{name}.so.new"
    shutil.copyfile(library.so_path, staged)
    os.replace(staged, out / f"{name}.so")  # a new file: a process that loaded the old one keeps it intact
    (out / f"{name}.c").write_text(library.source)
    info = build_info(library.so_path)
    kernels, nodes, helpers = {}, [], []
    for workload, kernel in zip(workloads, spec["kernels"]):
        symbol = workload.kernel_name(target)
        specs = library.kernels[symbol]
        kernels[symbol] = {"workload": workload.to_json(), "config": kernel["config"], "source": kernel["source"],
                           "latency_s": kernel["latency_s"], "gflops": kernel["gflops"], "trials": kernel["trials"],
                           "occurrences": len(kernel["matches"]), "flop": workload.flop,
                           "args": [s.to_dict() for s in specs]}
        packed = packed_arguments(workload)
        helpers += [pack_c(symbol, workload)] if packed else []
        for match in kernel["matches"]:
            nodes.append({"node": match["nodes"][0], "fused": list(match["nodes"][1:]),
                          "op_types": list(match["op_types"]), "kernel": symbol,
                          "args": [{"arg": b["arg"], "tensor": b["tensor"], "shape": list(b["shape"]),
                                    "layout": s.layout, "output": s.is_output,
                                    **({"pack": packed[b["arg"]]} if b["arg"] in packed else {})}
                                   for b, s in zip(match["bindings"], specs)]})
    manifest = {
        "model": model_name, "name": name, "abi_version": ABI_VERSION, "library": f"{name}.so", "header": f"{name}.h",
        "target": str(target), "device_key": spec["device_key"], "flags": info["flags"], "libs": info["libs"],
        "toolchain": info["toolchain"], "build_command": info["command"],
        "so_sha256": hashlib.sha256((out / f"{name}.so").read_bytes()).hexdigest(),
        "estimated_latency_s": spec["estimated_latency_s"], "untuned_flop_share": spec["untuned_flop_share"],
        "kernels": kernels, "nodes": nodes, "untuned": spec["untuned"],
    }
    doc = (f"Model: {model_name}; target: {target}; device key: {spec['device_key']}\n"
           f"{MODEL_MANIFEST} maps each ONNX node to its kernel and argument order.\n"
           f"Rebuild from {name}.c: {info['command']}")
    (out / f"{name}.h").write_text(library_header_text(name, library.kernels, doc=doc, helpers=helpers))
    (out / MODEL_MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return out
