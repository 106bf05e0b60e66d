"""Artifacts: the directory a user downloads for one tuned kernel.

Contents of an artifact directory for kernel `<name>`:

- `<name>.so`: the library (soname `<name>.so`; link with ``-l:<name>.so``);
- `<name>.h`: the public header (abi.header_text);
- `<name>.c`: the self-contained translation unit, runtime included (`<name>.cu` for a
  CUDA kernel, whose `.so` embeds the device code and links the CUDA runtime statically);
- `manifest.json`: what was built, for what, how, and how fast (see write_artifact).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import tarfile
import uuid
from collections.abc import Sequence
from pathlib import Path

from tunefleet.compiler.abi import ABI_VERSION, ArgSpec, header_text
from tunefleet.compiler.build import build_info
from tunefleet.compiler.target import Target

MANIFEST = "manifest.json"
#: The manifest of a model bundle (tuner/model/bundle.py): one kernel library for a whole model.
MODEL_MANIFEST = "model_manifest.json"


def write_artifact(out_dir: str | os.PathLike, *, name: str, source: str,
                   so_path: str | os.PathLike, args: Sequence[ArgSpec], manifest: dict) -> Path:
    """Writes the artifact of kernel `name` into `out_dir` (created if needed) and returns it.

    source: the translation unit `so_path` was built from (compile_shared and
    build_multi_target leave it beside the library as `<name>.c`). so_path: a library built by
    one of them with this `name`.
    args: the kernel's arguments in call order. manifest: caller fields (e.g. workload,
    target, device_key, config, latency_s, gflops); manifest.json holds them plus name,
    abi_version, target and flags of the build, libs, toolchain, build_command (rebuilds
    `<name>.so` from `<name>.c` in the artifact directory), so_sha256 and args; for a
    multi-target library (compiler.multitarget) also build_targets, the targets inside, the
    most capable first, and a header that documents the dispatch.
    Raises ValueError if so_path was built under another name.
    """
    info = build_info(so_path)
    gpu = info.get("kind") == "cuda"  # a CUDA build (compiler.cuda.build): .cu source, GPU header
    if info["name"] != name:
        raise ValueError(f"{so_path} was built as {info['name']!r}, not {name!r}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    library = out / f"{name}.so"
    temp = out / f".{name}.{uuid.uuid4().hex}.so"
    shutil.copyfile(so_path, temp)
    os.replace(temp, library)
    (out / f"{name}.{'cu' if gpu else 'c'}").write_text(source)
    full = {
        **manifest,
        "name": name,
        "abi_version": ABI_VERSION,
        "build_target": info["target"],
        **({"build_targets": info["targets"]} if "targets" in info else {}),
        "flags": info["flags"],
        "libs": info["libs"],
        "toolchain": info["toolchain"],
        "build_command": info["command"],
        "so_sha256": hashlib.sha256(library.read_bytes()).hexdigest(),
        "args": [a.to_dict() for a in args],
    }
    if gpu:
        from tunefleet.compiler.cuda.entry_points import header_text as cuda_header_text

        header = cuda_header_text(name, args, doc=_header_doc(full, "cu"))
    else:
        isas = [Target.parse(t).isa for t in info.get("targets", ())]  # a multi-target library
        header = header_text(name, args, doc=_header_doc(full), dispatch=isas)
    (out / f"{name}.h").write_text(header)
    (out / MANIFEST).write_text(json.dumps(full, indent=2, sort_keys=True) + "\n")
    return out


def pack_artifact(artifact_dir: str | os.PathLike, arcname: str | None = None) -> bytes:
    """The artifact directory as a tar.gz (what the server stores and serves): its files under
    one folder, `arcname` or else named after the kernel (`<name>/<name>.so`, ...)."""
    folder = Path(artifact_dir)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(folder, arcname=arcname or read_manifest(folder)["name"])
    return buffer.getvalue()


def read_manifest(artifact_dir: str | os.PathLike) -> dict:
    """The manifest.json of an artifact directory. Raises FileNotFoundError if absent."""
    return json.loads((Path(artifact_dir) / MANIFEST).read_text())


def _header_doc(manifest: dict, suffix: str = "c") -> str:
    """The header's opening lines: what was tuned for what, how fast, how to rebuild."""
    lines = []
    for key, label in (("workload", "Workload"), ("target", "Target"),
                       ("device_key", "Device key"), ("latency_s", "Latency (s)"),
                       ("gflops", "GFLOP/s"), ("disturbance", "Disturbance while measured (fraction)")):
        if key in manifest:
            value = manifest[key]
            if not isinstance(value, str | int | float):
                value = json.dumps(value, sort_keys=True)
            lines.append(f"{label}: {value}")
    lines.append(f"Rebuild from {manifest['name']}.{suffix}: {manifest['build_command']}")
    return "\n".join(lines)
