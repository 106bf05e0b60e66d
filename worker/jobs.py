"""The jobs a measurement worker runs: measure one trial, export a task's best config, build a
model's bundle or a multi-target library.

Tuners enqueue the first two by name on ``measure:<device_key>`` (``tunefleet.worker.jobs.measure``,
``tunefleet.worker.jobs.export``), the API server the builds (``tunefleet.worker.jobs.bundle``,
``tunefleet.worker.jobs.multi_target``: nothing is compiled on the server), with JSON arguments; the worker daemon runs them in its
own process (:class:`~tunefleet.base.rqworker.HeartbeatWorker`) with the context it
:func:`bind`\\ s: its measurer (the tuner's isolated runner pinned to the worker's CPUs),
its server registration and an HTTP client for uploads.

A job returns plain JSON. A failed candidate is a result (``compile_error``, ``timeout``...),
not an exception; a job raises only when the worker itself cannot do it. A trial for a
target the worker's host cannot execute (:meth:`Target.runs_on` its best target, e.g.
avx512 code on an AVX2 host) is answered ``unsupported_target`` at once, with nothing
built or run: never a SIGILL per trial.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import tempfile
import threading
from pathlib import Path
from typing import Any

import httpx

from tunefleet.base.rqworker import JobContext
from tunefleet.compiler.artifact import pack_artifact, read_manifest
from tunefleet.compiler import ops
from tunefleet.compiler.target import Target, TargetError
from tunefleet.tuner import validation
from tunefleet.tuner.apply import build_artifact, build_multi_target_artifact, measured_manifest
from tunefleet.tuner.kernel_bundle import library_name, write_bundle
from tunefleet.tuner.measure import MeasureInput, MeasureProtocol, MeasureResult
from tunefleet.tuner.resolve import resolve
from tunefleet.tuner.runner import LocalMeasurer

__all__ = ["WorkerContext", "ExportError", "bind", "current", "unsupported", "measure", "export", "bundle",
           "multi_target"]

log = logging.getLogger(__name__)


@dataclasses.dataclass
class WorkerContext:
    """What a worker's jobs use: its registration (`worker_id`, `name`, `device_key`), its
    `measurer`, an HTTP client on the server's API with the worker token (`http`), the best
    target its host executes (`host_target`: Target.host(), or its GPU's architecture), and
    the task it is working on (reported by the daemon's heartbeats)."""

    worker_id: int
    name: str
    device_key: str
    measurer: LocalMeasurer
    http: httpx.Client
    host_target: Target = dataclasses.field(default_factory=Target.host)
    current_task_id: int | None = None
    lock: threading.Lock = dataclasses.field(default_factory=threading.Lock)


class ExportError(RuntimeError):
    """The export or a build job could not produce an artifact (no candidate measured
    correctly again, or the server refused the upload)."""


_context: JobContext[WorkerContext] = JobContext("tunefleet worker jobs run only inside `tunefleet worker`")
#: Set (or clear) the context this process's jobs run with (the worker daemon does).
bind = _context.bind
#: The bound context; RuntimeError outside a worker daemon.
current = _context.current


class _Working:
    """Marks the worker busy with a task for the daemon's heartbeats."""

    def __init__(self, context: WorkerContext, task_id: int) -> None:
        self.context, self.task_id = context, task_id

    def __enter__(self) -> WorkerContext:
        with self.context.lock:
            self.context.current_task_id = self.task_id
        return self.context

    def __exit__(self, *_exc: object) -> None:
        with self.context.lock:
            self.context.current_task_id = None


def unsupported(context: WorkerContext, target: str) -> str | None:
    """Why this worker's host cannot execute `target` (None when it can, or when the target
    does not parse: the builder reports that as a compile error)."""
    try:
        parsed = Target.parse(target)
    except TargetError:
        return None
    if parsed.runs_on(context.host_target):
        return None
    return (f"worker {context.name} of device key {context.device_key} executes {context.host_target} at best "
            f"and cannot run {parsed} code; its host runs {', '.join(map(str, context.host_target.executable()))}")


def measure(task_id: int, trial_id: int, workload: dict, target: str, config: dict, protocol: dict) -> dict:
    """Build, check and time one candidate config; returns ``{"result": MeasureResult JSON,
    "worker_id": ..., "worker": name}``. A target the host cannot execute gives an
    ``unsupported_target`` result without a build."""
    context = current()
    with _Working(context, task_id):
        reason = unsupported(context, target)
        if reason is not None:
            result = MeasureResult("unsupported_target", error=reason, host=context.name)
        else:
            inp = MeasureInput(workload, target, config)
            result = context.measurer.measure_batch([inp], MeasureProtocol.from_json(protocol))[0]
    log.info(
        "measured trial %s of task %s: %s", trial_id, task_id, result.status,
        extra={"event": "measured", "task_id": task_id, "trial_id": trial_id, "status": result.status,
               "median_s": result.median if result.ok else None},
    )
    return {"result": result.to_json(), "worker_id": context.worker_id, "worker": context.name}


def export(
    task_id: int,
    workload: dict,
    target: str,
    device_key: str,
    candidates: list[dict],
    protocol: dict,
    validation_repeat: int,
) -> dict:
    """Re-measure the task's best `candidates` (``{"trial_id", "config"}``, fastest first)
    with `validation_repeat` repeats in interleaved rounds (:func:`validation.validation_protocol`,
    as ``tunefleet tune`` does), choose the winner (:func:`validation.best`, confirmed by
    :func:`validation.settle`), build it into an artifact, upload it to the server's artifact
    store (checked by sha256 there) and return ``{"trial_id", "result", "artifact":
    ArtifactOut JSON, "validation": [...]}`` (every measurement).

    Raises ExportError when the host cannot execute `target`, no candidate measures
    correctly again or the upload fails.
    """
    context = current()
    reason = unsupported(context, target)
    if reason is not None:
        raise ExportError(f"unsupported_target: {reason}")
    longer = validation.validation_protocol(MeasureProtocol.from_json(protocol), validation_repeat)
    with _Working(context, task_id):
        inputs = [MeasureInput(workload, target, c["config"]) for c in candidates]
        load = context.measurer.baseline  # the host's before the validation, whose measurements join it
        # (candidate index, result) of every measurement; the winner is its position in this list
        measured = list(enumerate(context.measurer.measure_batch(inputs, longer)))

        def again(n: int) -> None:
            measured.append((measured[n][0], context.measurer.measure_batch([inputs[measured[n][0]]], longer)[0]))

        best = validation.settle(lambda: validation.best((i, n, r) for n, (i, r) in enumerate(measured)),
                                 lambda n: measured[n][1], again, load)
        summary = [{"trial_id": candidates[i]["trial_id"], "status": r.status, "median_s": r.median if r.ok else None,
                    "disturbance": r.disturbance, "disturbed": r.disturbed} for i, r in measured]
        if best is None:
            raise ExportError(f"none of the {len(candidates)} best configs of task {task_id} measured "
                              f"correctly again: {[(v['trial_id'], v['status']) for v in summary]}")
        winner, result = measured[best]
        archive, name = _build_archive(task_id, workload, target, device_key, candidates[winner]["config"], result)
        artifact = _upload(context.http, archive)
    log.info(
        "exported task %s: %s", task_id, artifact["sha256"],
        extra={"event": "exported", "task_id": task_id, "kernel": name, "sha256": artifact["sha256"]},
    )
    return {"trial_id": candidates[winner]["trial_id"], "result": result.to_json(), "artifact": artifact,
            "validation": summary}


def _build_archive(task_id: int, workload: dict, target: str, device_key: str, config: dict,
                   result: MeasureResult) -> tuple[bytes, str]:
    wl, tgt, cfg = resolve(workload, target, config)
    manifest = {**measured_manifest(wl, device_key, result), "task_id": task_id}
    with tempfile.TemporaryDirectory(prefix="tunefleet-export-") as tmp:
        folder = build_artifact(wl, tgt, cfg, Path(tmp) / "artifact", manifest)
        return pack_artifact(folder), read_manifest(folder)["name"]


def bundle(model_id: int, spec: dict) -> dict:
    """Build model `model_id`'s bundle from `spec` (tuner.kernel_bundle: every kernel with its
    config, nothing measured) and upload it to the server's artifact store as a tar.gz of one
    folder, `<library name>/`; returns ``{"artifact": ArtifactOut JSON}``. Raises
    ScheduleError / BuildError / ConfigError when a kernel does not build, ExportError when
    the upload fails."""
    context = current()
    name = library_name(spec["model"])
    with tempfile.TemporaryDirectory(prefix="tunefleet-bundle-") as tmp:
        archive = pack_artifact(write_bundle(Path(tmp) / name, spec), arcname=name)
    artifact = _upload(context.http, archive)
    log.info("built the bundle of model %s: %s", model_id, artifact["sha256"],
             extra={"event": "bundled", "model_id": model_id, "sha256": artifact["sha256"]})
    return {"artifact": artifact}


def multi_target(task_id: int, workload: dict, best: dict[str, dict | None]) -> dict:
    """Build task `task_id`'s workload into ONE library for the CPU ISAs of `best` ({isa: its
    best record or None: tuner.apply.build_multi_target_artifact}) and upload it to the server's
    artifact store; returns ``{"artifact": ArtifactOut JSON}``. Raises TargetError,
    ScheduleError / BuildError / ConfigError when a config does not build, ExportError when the
    upload fails."""
    context = current()
    with tempfile.TemporaryDirectory(prefix="tunefleet-multi-target-") as tmp:
        folder = build_multi_target_artifact(ops.Workload.from_json(workload), best, Path(tmp) / "artifact",
                                             {"task_id": task_id})
        archive = pack_artifact(folder)
    artifact = _upload(context.http, archive)
    log.info("built a multi-target library of task %s: %s", task_id, artifact["sha256"],
             extra={"event": "multi_target", "task_id": task_id, "sha256": artifact["sha256"]})
    return {"artifact": artifact}


def _upload(http: httpx.Client, archive: bytes) -> dict[str, Any]:
    sha256 = hashlib.sha256(archive).hexdigest()
    try:
        response = http.put(f"/workers/artifacts/{sha256}", content=archive,
                            headers={"Content-Type": "application/gzip"})
    except httpx.TransportError as exc:
        raise ExportError(f"the artifact upload to the server failed: {exc}") from exc
    if response.is_error:
        raise ExportError(f"the server refused the artifact upload: HTTP {response.status_code}: {response.text}")
    return response.json()
