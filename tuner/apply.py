"""From a config (or the best record) to an artifact directory a user can download and call."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from tunefleet.compiler import ops
from tunefleet.compiler.artifact import write_artifact
from tunefleet.compiler.driver import build_workload
from tunefleet.compiler.multitarget import build_multi_target
from tunefleet.compiler.space import ConfigEntity
from tunefleet.compiler.target import Target

from . import records as records_mod
from .measure import workload_key
from .records import Record

__all__ = ["build_artifact", "apply_best", "build_multi_target_artifact"]


def build_artifact(workload: ops.Workload, target: Target, config: ConfigEntity, out_dir: str | os.PathLike,
                   manifest: dict | None = None) -> Path:
    """Build ``config`` of ``workload`` for ``target`` and write the artifact into ``out_dir``.

    The manifest holds the workload, target and config, plus ``manifest``'s
    fields (e.g. device_key, latency_s, gflops). Raises ScheduleError /
    BuildError when the config does not build.
    """
    built = build_workload(workload, config, target)
    fields = {"workload": workload.to_json(), "target": str(target), "config": config.to_json(), **(manifest or {})}
    return write_artifact(out_dir, name=built.name, source=built.source, so_path=built.so_path, args=built.args,
                          manifest=fields)


def build_multi_target_artifact(workload: ops.Workload, isas: Iterable[str], out_dir: str | os.PathLike,
                                records: Iterable[Record] = (), device_key: str | None = None,
                                manifest: dict | None = None) -> Path:
    """Build ONE library of ``workload`` for the CPU ISAs ``isas`` (of target.DISPATCH_ISAS),
    choosing between them at load time (compiler.multitarget), into an artifact in ``out_dir``.

    Each ISA gets its best record among ``records`` (``records.best``, restricted to
    ``device_key`` when given), else the operator's default config. The manifest's
    ``targets`` lists, the most capable first, each ``target``, its ``kernel`` name, the
    ``config``, where it came from (``source``: "best record" or "default config") and, for a
    record, its ``device_key``, ``latency_s`` (median, seconds) and ``gflops``; plus
    ``manifest``'s fields. Raises TargetError for an ISA that cannot be dispatched to,
    ScheduleError / BuildError / ConfigError when a config does not build.
    """
    records = list(records)
    key = workload_key(workload.to_json())
    configs, entries = {}, {}
    for isa in dict.fromkeys(isas):
        target = Target("cpu", isa)
        found = records_mod.best(records, key, str(target), device_key)
        space = ops.config_space(workload, target)
        entry = {"target": str(target), "kernel": workload.kernel_name(target)}
        if found is None:
            configs[isa] = ops.default_config(workload, target)
            entry["source"] = "default config"
        else:
            configs[isa] = space.from_json(found.config)
            entry.update(source="best record", device_key=found.device_key, latency_s=found.result.median,
                         gflops=found.result.gflops(workload.flop))
        entries[isa] = {**entry, "config": configs[isa].to_json()}
    built = build_multi_target(workload, configs)
    fields = {"workload": workload.to_json(), "targets": [entries[isa] for isa in built.isas], **(manifest or {})}
    return write_artifact(out_dir, name=built.name, source=built.source, so_path=built.so_path, args=built.args,
                          manifest=fields)


def apply_best(records: Iterable[Record] | str | os.PathLike, workload: ops.Workload, target: Target | str,
               out_dir: str | os.PathLike, device_key: str | None = None) -> Path:
    """Build the best record (``records.best``) of ``workload`` on ``target`` into an artifact in ``out_dir``.

    ``records``: records, or the path of a record file. The manifest adds the
    record's device key, median latency (``latency_s``, seconds), ``gflops``,
    per-repeat ``costs``, their coefficient of variation ``cv``, and where and
    when it was measured. Raises LookupError when no correct record exists
    (naming the workload, target and device key), ScheduleError / BuildError
    / ConfigError when the record's config no longer builds.
    """
    target = Target.parse(target) if isinstance(target, str) else target
    if isinstance(records, (str, os.PathLike)):
        records = records_mod.load(records)
    found = records_mod.best(records, workload_key(workload.to_json()), str(target), device_key)
    if found is None:
        where = f" on device key {device_key!r}" if device_key else ""
        raise LookupError(f"no correct record of {workload!r} for target {str(target)!r}{where}")
    config = ops.config_space(workload, target).from_json(found.config)
    result = found.result
    return build_artifact(workload, target, config, out_dir, {
        "device_key": found.device_key,
        "latency_s": result.median,
        "gflops": result.gflops(workload.flop),
        "costs": result.costs,
        "cv": result.cv,
        "measured_on": result.host,
        "measured_at": result.timestamp,
    })
