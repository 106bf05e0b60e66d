"""A done model's bundle, built by a worker of its device key (services.builds): its tasks'
best configs linked into one kernel library (tuner.kernel_bundle), stored as a tar.gz of one
directory."""

from __future__ import annotations

from sqlalchemy.orm import Session

from tunefleet.compiler import ops
from tunefleet.compiler.target import Target
from tunefleet.server.db.models import Model, ModelStatus, ModelTask
from tunefleet.server.errors import Conflict
from tunefleet.server.services.builds import BuildJob, build_key, timeout_s
from tunefleet.server.services.models import extraction_task
from tunefleet.tuner.model import Extraction, Task, UntunedNode
from tunefleet.tuner.model.bundle import bundle_spec, library_name
from tunefleet.tuner.model.tune_model import ModelTuneResult, TaskResult


def _result(t: ModelTask, task: Task, target: Target) -> TaskResult:
    best = t.task.best_trial if t.task is not None else None
    if best is None or t.task.best_latency_s is None:
        return TaskResult(task, ops.default_config(task.workload, target).to_json(), "default config", None,
                          t.trials_given)
    return TaskResult(task, best.config, "best record", t.task.best_latency_s, t.trials_given)


def build_job(model: Model) -> BuildJob:
    """The worker job that builds `model`'s bundle (folder `<library name>/`: `.so`, `.h`, `.c`,
    model_manifest.json; tunefleet.worker.jobs.bundle), keyed ``bundle-<model id>-<spec
    digest>``. A task without a correct kernel gets its operator's default config (its manifest
    entry says "default config", latency null). Conflict while the model is not done."""
    if model.status != ModelStatus.DONE:
        raise Conflict(f"model {model.id} is {model.status}; its bundle is built once it is done")
    targets = [t.task.target for t in model.tasks if t.task is not None and " " in t.task.target]
    target = Target.parse(targets[0] if targets else model.target)
    tasks = [extraction_task(t) for t in model.tasks]
    extraction = Extraction(tasks, [UntunedNode(**u) for u in model.untuned])
    tuned = ModelTuneResult(extraction, [_result(t, task, target) for t, task in zip(model.tasks, tasks)],
                            target, model.device_key, elapsed_s=0.0)
    spec = bundle_spec(tuned, model_name=model.name)
    return BuildJob(build_key("bundle", model.id, spec), model.device_key, "tunefleet.worker.jobs.bundle",
                    (model.id, spec), timeout_s(len(tasks)), f"the bundle of model {model.id}",
                    f"{library_name(model.name)}.tar.gz")
