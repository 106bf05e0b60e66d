"""From a config (or the best record) to an artifact directory a user can download and call."""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path

from tunefleet.compiler import ops
from tunefleet.compiler.artifact import write_artifact
from tunefleet.compiler.driver import build_workload
from tunefleet.compiler.multitarget import build_multi_target
from tunefleet.compiler.space import ConfigEntity
from tunefleet.compiler.target import Target

from . import records as records_mod
from .measure import MeasureResult, workload_key
from .records import Record

__all__ = ["build_artifact", "apply_best", "measured_manifest", "best_of_records", "build_multi_target_artifact"]


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


def build_multi_target_artifact(workload: ops.Workload, best: Mapping[str, dict | None], out_dir: str | os.PathLike,
                                manifest: dict | None = None) -> Path:
    """Build ONE library of ``workload`` for the CPU ISAs of ``best`` (of target.DISPATCH_ISAS),
    choosing between them at load time (compiler.multitarget), into an artifact in ``out_dir``.

    ``best[isa]``: the best record of that ISA as ``{"config": config JSON, "device_key",
    "latency_s" (median, seconds), "gflops"}``, or None for the operator's default config (see
    best_of_records). The manifest's ``targets`` lists, the most capable first, each ``target``,
    its ``kernel`` name, the ``config``, where it came from (``source``: "best record" or
    "default config") and a record's other fields; plus ``manifest``'s fields. Raises
    TargetError for an ISA that cannot be dispatched to, ScheduleError / BuildError /
    ConfigError when a config does not build.
    """
    configs, entries = {}, {}
    for isa, record in best.items():
        target = Target("cpu", isa)
        entry = {"target": str(target), "kernel": workload.kernel_name(target)}
        if record is None:
            configs[isa] = ops.default_config(workload, target)
            entry["source"] = "default config"
        else:
            configs[isa] = ops.config_space(workload, target).from_json(record["config"])
            entry.update({k: v for k, v in record.items() if k != "config"}, source="best record")
        entries[isa] = {**entry, "config": configs[isa].to_json()}
    built = build_multi_target(workload, configs)
    fields = {"workload": workload.to_json(), "targets": [entries[isa] for isa in built.isas], **(manifest or {})}
    return write_artifact(out_dir, name=built.name, source=built.source, so_path=built.so_path, args=built.args,
                          manifest=fields)


def best_of_records(records: Iterable[Record], workload: ops.Workload, isas: Iterable[str],
                    device_key: str | None = None) -> dict[str, dict | None]:
    """{isa: the best record (``records.best``, restricted to ``device_key`` when given) of
    ``workload`` for ``cpu -isa=<isa>`` in build_multi_target_artifact's form, or None}."""
    records = list(records)
    key = workload_key(workload.to_json())
    best = {}
    for isa in dict.fromkeys(isas):
        found = records_mod.best(records, key, str(Target("cpu", isa)), device_key)
        best[isa] = None if found is None else {
            "config": found.config, "device_key": found.device_key, "latency_s": found.result.median,
            "gflops": found.result.gflops(workload.flop)}
    return best


def apply_best(records: Iterable[Record] | str | os.PathLike, workload: ops.Workload, target: Target | str,
               out_dir: str | os.PathLike, device_key: str | None = None) -> Path:
    """Build the best record (``records.best``) of ``workload`` on ``target`` into an artifact in ``out_dir``.

    ``records``: records, or the path of a record file. The manifest adds the
    fields of :func:`measured_manifest`. Raises LookupError when no correct record exists
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
    manifest = measured_manifest(workload, found.device_key, found.result)
    return build_artifact(workload, target, config, out_dir, manifest)


def measured_manifest(workload: ops.Workload, device_key: str, result: MeasureResult) -> dict:
    """The manifest fields of a tuned artifact (``tunefleet tune`` and a service task's export alike):
    the device key, median latency (``latency_s``, seconds), ``gflops``, per-repeat ``costs``
    (seconds), their coefficient of variation ``cv`` and interquartile range over the median
    ``spread`` (fractions; ``spread`` ignores single outlying repeats), where (``measured_on``) and when
    (``measured_at``, Unix seconds) the winning measurement was taken, and how disturbed it was
    (``disturbance``, a fraction, and ``disturbed``: see :class:`~.measure.MeasureResult`)."""
    return {
        "device_key": device_key,
        "latency_s": result.median,
        "gflops": result.gflops(workload.flop),
        "costs": result.costs,
        "cv": result.cv,
        "spread": result.spread,
        "measured_on": result.host,
        "measured_at": result.timestamp,
        "disturbance": result.disturbance,
        "disturbed": result.disturbed,
    }
