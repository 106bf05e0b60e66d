"""Record files: every trial, one JSON object per line (JSON Lines).

A line is ``Record.to_json()``::

    {"schema": 1, "workload_key": "<sha256>", "workload": {...}, "target": "...",
     "device_key": "...", "config": {"index": ..., "knobs": {...}},
     "result": {MeasureResult}, "toolchain": {"compiler": "gcc",
     "compiler_version": "12.2.0", "tunefleet": "0.1.0"}}

:func:`append` writes and fsyncs one line per call, so a crash loses at most
the line being written; :func:`load` skips such a torn last line with a
warning. One writer per file.

:class:`RecordFile` is the tuning loop's :class:`~.interfaces.Database` over such a file.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings
from collections.abc import Iterable, Sequence
from pathlib import Path

from tunefleet.base.version import __version__
from tunefleet.compiler.build import toolchain_versions

from tunefleet.compiler.space import ConfigEntity

from . import validation
from .interfaces import Candidate, Database, RunnerResult, StoredTrial
from .measure import MeasureInput, MeasureResult, canonical_json, workload_key

__all__ = [
    "SCHEMA_VERSION",
    "RecordError",
    "TornRecordWarning",
    "Toolchain",
    "Record",
    "append",
    "load",
    "best",
    "host_toolchain",
    "RecordFile",
]

SCHEMA_VERSION = 1
_TAIL_CHUNK = 1 << 16


class RecordError(ValueError):
    """A record or a record file is malformed or of an unknown schema version."""


class TornRecordWarning(UserWarning):
    """A record file ends with an incomplete line (a writer crashed mid-line); the line was skipped."""


@dataclasses.dataclass(frozen=True)
class Toolchain:
    """What built a trial: the C/CUDA compiler, its version, and tunefleet's version."""

    compiler: str
    compiler_version: str
    tunefleet: str = __version__

    def __post_init__(self) -> None:
        for name in ("compiler", "compiler_version", "tunefleet"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise RecordError(f"Toolchain.{name} must be a non-empty str, got {value!r}")


@dataclasses.dataclass(frozen=True)
class Record:
    """One stored trial. ``workload_key`` must equal ``measure.workload_key(workload)``."""

    workload_key: str
    workload: dict
    target: str
    device_key: str
    config: dict
    result: MeasureResult
    toolchain: Toolchain
    schema: int = SCHEMA_VERSION

    def __post_init__(self) -> None:
        if self.schema != SCHEMA_VERSION:
            raise RecordError(
                f"record schema version {self.schema!r} is not supported; this tunefleet ({__version__}) "
                f"reads version {SCHEMA_VERSION}"
            )
        for name in ("target", "device_key"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise RecordError(f"Record.{name} must be a non-empty str, got {value!r}")
        if not isinstance(self.workload, dict) or workload_key(self.workload) != self.workload_key:
            raise RecordError(f"Record.workload_key {self.workload_key!r} is not the key of its workload")
        if not isinstance(self.config, dict) or not isinstance(self.config.get("knobs"), dict):
            raise RecordError(f"Record.config must be an object with a 'knobs' object, got {self.config!r}")

    @classmethod
    def of(cls, inp: MeasureInput, result: MeasureResult, device_key: str, toolchain: Toolchain) -> Record:
        """The record of measuring ``inp`` on a host of ``device_key``."""
        return cls(inp.workload_key, inp.workload, inp.target, device_key, inp.config, result, toolchain)

    def to_json(self) -> dict:
        return {
            "schema": self.schema,
            "workload_key": self.workload_key,
            "workload": self.workload,
            "target": self.target,
            "device_key": self.device_key,
            "config": self.config,
            "result": self.result.to_json(),
            "toolchain": dataclasses.asdict(self.toolchain),
        }

    @classmethod
    def from_json(cls, d: dict) -> Record:
        """Inverse of :meth:`to_json`; raises :class:`RecordError` (schema first, then fields)."""
        if not isinstance(d, dict):
            raise RecordError(f"a record must be a JSON object, got {type(d).__name__}")
        if d.get("schema") != SCHEMA_VERSION:
            raise RecordError(
                f"record schema version {d.get('schema')!r} is not supported; this tunefleet ({__version__}) "
                f"reads version {SCHEMA_VERSION} (record written by tunefleet "
                f"{(d.get('toolchain') or {}).get('tunefleet', 'unknown')})"
            )
        fields = {f.name for f in dataclasses.fields(cls)}
        if set(d) != fields:
            raise RecordError(
                f"record fields {sorted(d)} differ from {sorted(fields)} "
                f"(missing {sorted(fields - set(d))}, unknown {sorted(set(d) - fields)})"
            )
        if not isinstance(d["toolchain"], dict):
            raise RecordError(f"Record.toolchain must be an object, got {type(d['toolchain']).__name__}")
        try:
            result = MeasureResult.from_json(d["result"])
            toolchain = Toolchain(**d["toolchain"])
        except (TypeError, ValueError) as e:
            raise RecordError(str(e)) from e
        return cls(**{**d, "result": result, "toolchain": toolchain})


def append(path: str | os.PathLike, record: Record) -> None:
    """Append ``record`` as one line to ``path`` (created if absent), then flush and fsync.

    If the file ends in a torn line (a previous writer crashed mid-line), that
    partial line is cut off first, with a :class:`TornRecordWarning`, so the
    new record starts on a line of its own.
    """
    line = (canonical_json(record.to_json()) + "\n").encode()
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        size = os.fstat(fd).st_size
        if size and os.pread(fd, 1, size - 1) != b"\n":
            keep = _end_of_last_line(fd, size)
            warnings.warn(f"{path}: cutting a torn last line ({size - keep} bytes)", TornRecordWarning, stacklevel=2)
            os.ftruncate(fd, keep)
        os.write(fd, line)
        os.fsync(fd)
    finally:
        os.close(fd)


def _end_of_last_line(fd: int, size: int) -> int:
    """Offset just past the last b"\\n" in the file (0 if none), reading backwards in chunks."""
    end = size
    while end > 0:
        start = max(0, end - _TAIL_CHUNK)
        pos = os.pread(fd, end - start, start).rfind(b"\n")
        if pos >= 0:
            return start + pos + 1
        end = start
    return 0


def _not_json(constant: str):
    raise ValueError(f"{constant} is not a JSON value")


def load(path: str | os.PathLike) -> list[Record]:
    """All records of ``path``, in file order.

    A last line without its newline that does not parse is a torn write: it is
    skipped with a :class:`TornRecordWarning`. Any other bad line (NaN and Infinity are not
    JSON: :func:`append` never writes them), and any unknown schema version, raises
    :class:`RecordError` naming ``path:line``.
    """
    data = Path(path).read_bytes()
    lines = data.split(b"\n")
    records = []
    for lineno, raw in enumerate(lines, 1):
        if not raw.strip():
            continue
        torn = lineno == len(lines)  # the piece after the last newline
        try:
            d = json.loads(raw, parse_constant=_not_json)
        except ValueError as e:
            if torn:
                warnings.warn(f"{path}:{lineno}: skipping a torn last line", TornRecordWarning, stacklevel=2)
                continue
            raise RecordError(f"{path}:{lineno}: not JSON: {e}") from e
        try:
            records.append(Record.from_json(d))
        except RecordError as e:
            raise RecordError(f"{path}:{lineno}: {e}") from e
    return records


def best(records: Iterable[Record], workload_key: str, target: str, device_key: str | None = None) -> Record | None:
    """The fastest correct record of a workload on a target (restricted to ``device_key`` when
    given), by the one rule of :func:`.validation.best`: configs ever wrong are out, the most
    repeated (validated) measurements compete, the fastest by the lower quartile of its
    repeats wins (or the highest own throughput among those measured with clearly more
    disturbance than it). ``None`` when no record qualifies."""
    return validation.best((canonical_json(r.config["knobs"]), r, r.result) for r in records
                           if r.workload_key == workload_key and r.target == target
                           and (not device_key or r.device_key == device_key))


def host_toolchain() -> Toolchain:
    """The toolchain builds on this host use: ``$CC`` (default gcc) and its version line."""
    versions = toolchain_versions()
    return Toolchain(Path(versions["cc"][0]).name, versions["cc_version"] or "unknown")


class RecordFile(Database):
    """The trials of ``workload`` (JSON) on ``target`` and ``device_key`` in the record file
    ``path`` (absent until the first record), among any other records it holds. Each
    measurement is appended as a :class:`Record` built with ``toolchain`` (default
    :func:`host_toolchain`)."""

    def __init__(self, path: str | os.PathLike, workload: dict, target: str, device_key: str,
                 toolchain: Toolchain | None = None) -> None:
        self.path = Path(path)
        self.workload = workload
        self.workload_key = workload_key(workload)
        self.target = target
        self.device_key = device_key
        self.toolchain = toolchain or host_toolchain()

    def load(self) -> list[Record]:
        """Every record of the file (of any tuning); [] while it does not exist."""
        return load(self.path) if self.path.exists() else []

    def mine(self, records: Iterable[Record]) -> list[Record]:
        """The records of this tuning among ``records``."""
        return [r for r in records if r.workload_key == self.workload_key and r.target == self.target
                and r.device_key == self.device_key]

    def trials(self) -> list[StoredTrial]:
        first: dict[str, Record] = {}
        for r in self.mine(self.load()):
            first.setdefault(canonical_json(r.config["knobs"]), r)
        return [StoredTrial(r.config, r.result) for r in first.values()]

    def add(self, configs: Sequence[ConfigEntity]) -> list[Candidate]:
        """Candidates of ``configs``: a record file keeps measurements only."""
        return [Candidate(c) for c in configs]

    def record(self, candidate: Candidate, measured: RunnerResult) -> Record:
        record = Record.of(MeasureInput(self.workload, self.target, candidate.config.to_json()), measured.result,
                           self.device_key, self.toolchain)
        append(self.path, record)
        return record

    def best(self) -> Record | None:
        """The best record of this tuning in the file (:func:`best`)."""
        return best(self.load(), self.workload_key, self.target, self.device_key)
