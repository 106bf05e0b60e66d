"""The artifact store: a directory of artifact tarballs named by their sha256."""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
import tempfile
from pathlib import Path, PurePosixPath

from tunefleet.compiler.artifact import MANIFEST, MODEL_MANIFEST
from tunefleet.server.errors import FieldError

CHUNK = 1 << 20


def file_sha256(path: Path) -> str:
    """Hex sha256 of a file's contents."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


#: How many times its own size an artifact may unpack to, beyond UNPACKED_SLACK_BYTES: artifacts
#: unpack to about 3 times (kernels of matmul, dense, custom: 2.9-3.0); a gzip of zeros to a
#: thousand times (a few MiB uploaded would fill the disk of each user who downloads it).
UNPACKED_RATIO = 16
UNPACKED_SLACK_BYTES = 1 << 20
#: Members an artifact may hold (a model bundle holds a handful).
MAX_MEMBERS = 1000


def check_tarball(path: Path) -> None:
    """Raise FieldError unless `path` is a gzip tar holding exactly one manifest, a kernel's
    manifest.json or a model bundle's model_manifest.json, and exactly one shared library, with
    only relative member names that stay inside the archive, at most MAX_MEMBERS members, and
    at most UNPACKED_RATIO times its size + UNPACKED_SLACK_BYTES bytes of them in all. Reading
    stops at the first member past a bound, so a bomb costs no more than that to decompress."""
    max_unpacked_bytes = UNPACKED_RATIO * path.stat().st_size + UNPACKED_SLACK_BYTES
    members, unpacked = [], 0
    try:
        with tarfile.open(path, "r:gz") as tar:
            for member in tar:
                members.append(member)
                unpacked += member.size
                if unpacked > max_unpacked_bytes:
                    raise FieldError(("body",), f"artifact unpacks to more than {max_unpacked_bytes} bytes "
                                                f"({UNPACKED_RATIO} times its size + {UNPACKED_SLACK_BYTES})")
                if len(members) > MAX_MEMBERS:
                    raise FieldError(("body",), f"artifact holds more than {MAX_MEMBERS} members")
    except (tarfile.TarError, OSError, EOFError) as exc:
        raise FieldError(("body",), f"artifact is not a tar.gz archive: {exc}") from exc
    for member in members:
        name = PurePosixPath(member.name)
        if name.is_absolute() or ".." in name.parts:
            raise FieldError(("body",), f"artifact member {member.name!r} escapes the archive")
    files = [PurePosixPath(m.name) for m in members if m.isfile()]
    manifests = [f for f in files if f.name in (MANIFEST, MODEL_MANIFEST)]
    if len(manifests) != 1:
        raise FieldError(("body",), f"artifact must hold exactly one {MANIFEST} (a kernel) or {MODEL_MANIFEST} "
                         f"(a model bundle), found {len(manifests)}")
    libraries = [f for f in files if f.suffix == ".so"]
    if len(libraries) != 1:
        raise FieldError(("body",), f"artifact must hold exactly one .so, found {len(libraries)}")


def shared_library(path: Path) -> tuple[str, bytes]:
    """File name and contents of the one `.so` in the artifact tarball at `path`."""
    with tarfile.open(path, "r:gz") as tar:
        member = next(m for m in tar.getmembers() if m.isfile() and m.name.endswith(".so"))
        f = tar.extractfile(member)
        assert f is not None
        return PurePosixPath(member.name).name, f.read()


def header(path: Path) -> tuple[str, str]:
    """File name and text of the C header (`.h`) in the artifact tarball at `path`;
    FieldError if it has none."""
    with tarfile.open(path, "r:gz") as tar:
        member = next((m for m in tar.getmembers() if m.isfile() and m.name.endswith(".h")), None)
        if member is None:
            raise FieldError(("path", "task_id"), "the task's artifact has no C header")
        f = tar.extractfile(member)
        assert f is not None
        return PurePosixPath(member.name).name, f.read().decode("utf-8", "replace")


def header_prototype(text: str, kernel: str) -> str:
    """The part of an artifact header a caller needs: its argument table (shape, dtype,
    layout of each) and the declarations of the kernel's entry points (`<kernel>`,
    `<kernel>_checked`, `<kernel>_packed`)."""
    lines = text.splitlines()
    table: list[str] = []
    for i, line in enumerate(lines):
        if line.startswith(" * Arguments, in call order"):
            table = [line]
            for following in lines[i + 1:]:
                if not following.startswith(" *   "):
                    break
                table.append(following)
            break
    declarations = re.findall(
        rf"^[A-Za-z_][\w \t*]*?\b{re.escape(kernel)}(?:_checked|_packed)?\s*\([^;]*\);",
        text,
        re.MULTILINE,
    )
    parts = []
    if table:
        parts.append("/*\n" + "\n".join(table) + "\n */")
    parts.extend(declarations)
    return "\n".join(parts)


class ArtifactStore:
    """Artifact tarballs under `root`, each at `<sha[:2]>/<sha>.tar.gz`; storing the same
    content twice keeps one file."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def staging_file(self) -> Path:
        """A new empty file on the store's filesystem to receive an upload into."""
        staging = self.root / "staging"
        staging.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(dir=staging, suffix=".tar.gz")
        os.close(fd)
        return Path(name)

    def ingest(self, staged: Path, sha256: str) -> tuple[str, int]:
        """Move a staged upload into the store after checking it hashes to `sha256` and is a
        valid artifact; returns its path relative to the root and its size. The staged
        file is gone afterwards either way."""
        try:
            actual = file_sha256(staged)
            if actual != sha256:
                raise FieldError(
                    ("path", "sha256"), f"uploaded content has sha256 {actual}, not {sha256}"
                )
            check_tarball(staged)
            relative = f"{sha256[:2]}/{sha256}.tar.gz"
            final = self.root / relative
            final.parent.mkdir(parents=True, exist_ok=True)
            size = staged.stat().st_size
            os.replace(staged, final)
            return relative, size
        finally:
            staged.unlink(missing_ok=True)

    def path(self, relative: str) -> Path:
        """Absolute path of a stored artifact."""
        return self.root / relative
