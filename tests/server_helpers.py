"""Building artifact tarballs for server tests (a real layout, a stand-in library)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile


def tarball(files: dict[str, bytes]) -> bytes:
    """A tar.gz holding `files` (archive name -> contents)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


def artifact_files(name: str = "matmul_32x16x8", library: bytes = b"\x7fELF stand-in") -> dict[str, bytes]:
    """The files of an artifact directory `name/` as compiler.artifact lays it out."""
    manifest = {"name": name, "so_sha256": hashlib.sha256(library).hexdigest(), "abi_version": 1}
    return {
        f"{name}/manifest.json": json.dumps(manifest).encode(),
        f"{name}/{name}.so": library,
        f"{name}/{name}.h": b"int matmul_32x16x8(const float*, const float*, float*);\n",
        f"{name}/{name}.c": b"/* source */\n",
    }
