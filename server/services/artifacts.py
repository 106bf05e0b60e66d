"""Artifacts: recording uploads, finding a task's artifact, the job that builds a multi-target
one (services.builds)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from tunefleet.compiler import ops
from tunefleet.compiler.target import DISPATCH_ISAS, Target, TargetError, cpu_features
from tunefleet.server.artifact_store import ArtifactStore
from tunefleet.server.db.models import Artifact, BestRecord, Trial
from tunefleet.server.errors import FieldError, NotFound
from tunefleet.server.services import tasks
from tunefleet.server.services.builds import BuildJob, build_key, timeout_s


def store_upload(session: Session, store: ArtifactStore, staged: Path, sha256: str) -> Artifact:
    """Move a staged upload into the store and record it (committed); an artifact already
    stored under the same sha256 is returned as it is."""
    relative, size = store.ingest(staged, sha256)
    query = select(Artifact).where(Artifact.sha256 == sha256)
    artifact = session.scalars(query).first()
    if artifact is not None:
        return artifact
    artifact = Artifact(sha256=sha256, size=size, path=relative)
    session.add(artifact)
    try:
        session.commit()
    except IntegrityError:  # the same content arrived concurrently
        session.rollback()
        return session.scalars(query).one()
    return artifact


def of_task(session: Session, task_id: int) -> Artifact:
    """The artifact a task produced (or reused); NotFound for an unknown task or one
    without an artifact yet."""
    task = tasks.get(session, task_id)
    if task.artifact is None:
        raise NotFound(f"task {task_id} has no artifact yet (status {task.status})")
    return task.artifact


def multi_target_job(session: Session, task_id: int, isas: Sequence[str]) -> BuildJob:
    """The worker job (tunefleet.worker.jobs.multi_target, on the task's device key) that builds
    a tar.gz of ONE library of the task's workload for the CPU ISAs `isas` (of
    target.DISPATCH_ISAS) that picks the best the CPU supports when loaded (compiler.multitarget),
    keyed ``multi-target-<task id>-<digest of the workload and each ISA's config>``. Each ISA
    gets the fastest best record stored for the workload and `cpu -isa=<isa>` on any device key,
    else the operator's default config.

    NotFound for an unknown task; FieldError (query `targets`) for no ISA or one that cannot be
    dispatched to, and for a workload carrying extern C sources (not part of multi-target
    libraries).
    """
    task = tasks.get(session, task_id)
    try:
        if not isas:
            raise TargetError(f"name at least one ISA of {', '.join(DISPATCH_ISAS)}, e.g. avx2,avx512")
        for isa in isas:
            cpu_features(isa)
    except TargetError as exc:
        raise FieldError(("query", "targets"), str(exc)) from None
    workload = ops.Workload.from_json(task.workload)
    if workload.args.get("micro_kernel") is not None:
        raise FieldError(("query", "targets"), f"task {task_id}'s workload carries an extern C micro-kernel, which "
                         "only workers compile (in their sandbox): build it with `tunefleet build --targets`")
    best = {isa: _best_record(session, task.workload_key, str(Target("cpu", isa))) for isa in dict.fromkeys(isas)}
    key = build_key("multi-target", task_id, {"workload": task.workload, "best": best})
    return BuildJob(key, task.device_key, "tunefleet.worker.jobs.multi_target",
                    (task_id, task.workload, best), timeout_s(len(best) + 1),
                    f"the multi-target library of task {task_id}", f"{workload.kernel_name()}.tar.gz")


def _best_record(session: Session, workload_key: str, target: str) -> dict | None:
    """The fastest best record of the workload on `target` (any device key) in
    tuner.apply.build_multi_target_artifact's form, or None."""
    row = session.execute(
        select(BestRecord, Trial.config).join(Trial, Trial.id == BestRecord.trial_id)
        .where(BestRecord.workload_key == workload_key, BestRecord.target == target)
        .order_by(BestRecord.latency_s, BestRecord.id).limit(1)
    ).first()
    if row is None:
        return None
    record, config = row
    return {"config": config, "device_key": record.device_key, "latency_s": record.latency_s,
            "gflops": record.gflops}
