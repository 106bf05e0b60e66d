"""Whole models: an ONNX upload parsed and split into tasks (tunefleet.tuner.model), stored
with its budget; the queries the API serves. The rounds that tune it are
:mod:`tunefleet.server.model_job`'s.

The upload is parsed with the `onnx` package and never evaluated: shapes come from
`onnx.shape_inference`, weights are never read.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError
from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from tunefleet.base.settings import Settings
from tunefleet.server.db import utcnow
from tunefleet.server.db.models import Model, ModelRound, ModelStatus, ModelTask, RoundStatus, TaskStatus
from tunefleet.server.errors import Conflict, FieldError, FieldErrors, NotFound
from tunefleet.server.schemas.models import EstimatePoint, ModelOut, ModelTaskOut, UntunedOut
from tunefleet.server.schemas.tasks import Protocol
from tunefleet.server.services import bounds, catalog, pools, tasks
from tunefleet.compiler import ops
from tunefleet.compiler.target import Target
from tunefleet.tuner.model import (Binding, Extraction, Match, ModelError, Task, extract_tasks, load_model_isolated,
                                    parse_input_shape, prepack_weights)

#: Wall seconds to read an uploaded model and infer its shapes (a 976 MiB one takes 4 s on Zen 4).
PARSE_TIMEOUT_S = 120.0


def parse_memory_bytes(settings: Settings) -> int:
    """Address space of the child process that reads an uploaded model: twice max_model_bytes
    (the bytes and the parsed model; the weights' values are dropped before shape inference)
    and 2 GiB for the interpreter and the rest (a 976 MiB model was read in 3 GiB)."""
    return 2 * settings.max_model_bytes + (2 << 30)


def parse(data: bytes, input_shapes: Sequence[str], settings: Settings) -> Extraction:
    """The tasks and untuned nodes of the ONNX model `data` with graph inputs fixed by
    `input_shapes` ("NAME=D1,D2,..." each). FieldError on query `input_shapes` for a shape that
    does not parse; FieldErrors listing every node and its reason for a model that cannot be
    tuned (not ONNX, over max_model_bytes, a dynamic input without a given shape, an
    unsupported dtype, no node an operator runs; reading it took more than parse_memory_bytes
    of memory or PARSE_TIMEOUT_S seconds, or crashed the parser: tuner.model.isolate)."""
    shapes = {}
    for text in input_shapes:
        try:
            name, shape = parse_input_shape(text)
        except ValueError as exc:
            raise FieldError(("query", "input_shapes"), str(exc)) from None
        shapes[name] = shape
    try:
        graph = load_model_isolated(data, shapes, max_bytes=settings.max_model_bytes,
                                    memory_bytes=parse_memory_bytes(settings), timeout_s=PARSE_TIMEOUT_S)
        extraction = extract_tasks(graph)
    except ModelError as exc:
        raise FieldErrors([(("body", p.node), f"{p.op_type}: {p.reason}", p.node) for p in exc.problems]) from None
    if not extraction.tasks:
        raise FieldErrors([(("body", u.node), f"{u.op_type}: {u.reason}", u.node) for u in extraction.untuned]
                          or [(("body",), "the model has no node", None)])
    for task in extraction.tasks:
        try:
            bounds.check_workload(task.workload, settings)
        except FieldError as exc:
            raise FieldError(("body", task.matches[0].nodes[0]), exc.message) from None
    return extraction


def protocol(text: str | None, settings: Settings) -> Protocol:
    """The measurement protocol of a model's tasks from its JSON `text` (None: the workers'
    defaults), within the server's bounds; FieldError on query `protocol` otherwise."""
    try:
        parsed = Protocol.model_validate_json(text) if text is not None else Protocol()
    except ValidationError as exc:
        first = exc.errors()[0]
        raise FieldError(("query", "protocol", *map(str, first["loc"])), first["msg"]) from None
    bounds.check_protocol(parsed, settings, ("query", "protocol"))
    return parsed


def submit(session: Session, extraction: Extraction, *, name: str, target: str | None, device_key: str | None,
           trials: int, protocol: Protocol, input_shapes: Sequence[str], settings: Settings,
           owner: str | None, prepack: bool = True) -> Model:
    """Store model `name` with the tasks of `extraction`, a global budget of `trials` and the
    measurement `protocol` of its tasks (committed, status queued; its rounds start with
    model_job.advance); with `prepack`, the constant weights of its convolutions and linear
    layers pre-packed for the target (tunefleet.tuner.model.prepack).

    The device key and target default as for a task (services.tasks.submit): the only pool
    of live workers, their best target; a model bundle is one CPU library, so the target
    must be a CPU one. FieldError on the query field otherwise; nothing is written then.
    """
    if trials > settings.max_trials:
        raise FieldError(("query", "trials"),
                         f"must be at most {settings.max_trials} on this server (max_trials), got {trials}")
    try:
        kind, parsed = catalog.requested_target(target or "cpu")
        if kind != "cpu":
            raise FieldError(("body", "target"), f"a model bundle is one CPU library; {target} is not a CPU target")
        key = device_key or tasks.default_device_key(session, kind, settings.worker_lost_after_s)
        resolved = pools.task_target(session, key, kind, parsed, settings.worker_lost_after_s)
    except FieldError as exc:  # the task's checks name body fields; here they are query fields
        raise FieldError(("query", *exc.loc[1:]), exc.message) from None
    if prepack:
        extraction = prepack_weights(extraction, Target.parse(resolved))
    model = Model(
        name=name, owner=owner, target=resolved, device_key=key, trials=trials, protocol=protocol.model_dump(),
        input_shapes=dict(parse_input_shape(s) for s in input_shapes),
        untuned=[{"node": u.node, "op_type": u.op_type, "reason": u.reason, "flop": u.flop}
                 for u in extraction.untuned],
        total_flop=extraction.total_flop, status=ModelStatus.QUEUED, events=0, scheduled_all=False,
    )
    model.tasks = [
        ModelTask(index=i, workload=t.workload.to_json(), workload_key=t.workload.key, flop=t.flop,
                  occurrences=t.occurrences, reused=False, trials_given=0,
                  matches=[{"nodes": list(m.nodes), "op_types": list(m.op_types),
                            "bindings": [{"arg": b.arg, "tensor": b.tensor, "shape": list(b.shape),
                                          "constant": b.constant} for b in m.bindings]} for m in t.matches])
        for i, t in enumerate(extraction.tasks)
    ]
    session.add(model)
    session.commit()
    return model


def extraction_task(t: ModelTask) -> Task:
    """The stored model task `t` as the tuner's extract.Task (its workload and every match)."""
    workload = ops.Workload.from_json(t.workload)
    return Task(workload, [Match(workload, tuple(m["nodes"]), tuple(m["op_types"]),
                                 tuple(Binding(b["arg"], b["tensor"], tuple(b["shape"]), b.get("constant", False))
                                       for b in m["bindings"]))
                           for m in t.matches])


def get(session: Session, model_id: int) -> Model:
    """The model with `model_id`, its tasks and their service tasks loaded; NotFound if none."""
    model = session.get(Model, model_id, options=(selectinload(Model.tasks).selectinload(ModelTask.task),))
    if model is None:
        raise NotFound(f"model {model_id} not found")
    return model


def list_models(session: Session, *, limit: int, offset: int) -> tuple[Sequence[Model], int]:
    """One page of models, newest first, and their count."""
    total = session.scalar(select(func.count()).select_from(Model)) or 0
    page = (select(Model).options(selectinload(Model.tasks).selectinload(ModelTask.task))
            .order_by(Model.id.desc()).limit(limit).offset(offset))
    return session.scalars(page).all(), total


def cancel(session: Session, model: Model) -> Model:
    """Cancel an unfinished model and its unfinished tasks (committed; tuners stop them within
    a check, as any cancelled task); Conflict when it has finished. Its done tasks and their
    best records stay."""
    if model.status in (ModelStatus.DONE, ModelStatus.FAILED, ModelStatus.CANCELLED):
        raise Conflict(f"model {model.id} is already {model.status}; only unfinished models can be cancelled")
    for t in model.tasks:
        if t.task is not None and t.task.status not in tasks.FINAL:
            tasks.transition(t.task, TaskStatus.CANCELLED)
    model.status, model.finished_at = ModelStatus.CANCELLED, utcnow()
    session.commit()
    return model


def estimate_s(model: Model) -> float | None:
    """Σ occurrences × best latency (seconds) over the model's tasks; None while one has none."""
    latencies = [(t.occurrences, t.task.best_latency_s if t.task else None) for t in model.tasks]
    if any(latency is None for _, latency in latencies):
        return None
    return sum(n * latency for n, latency in latencies)


def model_out(session: Session, model: Model) -> ModelOut:
    """`model` as the API shows it: per task its progress and best, the untuned nodes, the
    estimate now and after each round."""
    total = max(1, model.total_flop)
    layers = []
    for t in model.tasks:
        task = t.task
        layers.append(ModelTaskOut(
            index=t.index, op=t.workload["op"], workload=t.workload, workload_key=t.workload_key, flop=t.flop,
            flop_share=t.flop * t.occurrences / total, occurrences=t.occurrences,
            nodes=[m["nodes"] for m in t.matches], task_id=t.task_id,
            status=task.status if task else "pending", reused=t.reused, trials_given=t.trials_given,
            trials_done=task.trials_done if task and not t.reused else 0,
            best_latency_s=task.best_latency_s if task else None, best_gflops=task.best_gflops if task else None,
            best_disturbance=task.best_disturbance if task else None,
        ))
    rounds = session.execute(
        select(ModelRound.finished_at, ModelRound.estimate_s)
        .where(ModelRound.model_id == model.id, ModelRound.status == RoundStatus.DONE,
               ModelRound.estimate_s.is_not(None))
        .order_by(ModelRound.updated_at)
    ).all()
    untuned = [UntunedOut(**u) for u in model.untuned]
    return ModelOut(
        id=model.id, name=model.name, owner=model.owner, target=model.target, device_key=model.device_key,
        trials=model.trials, trials_done=sum(layer.trials_done for layer in layers), status=model.status,
        error=model.error, created_at=model.created_at, finished_at=model.finished_at, tasks=layers,
        untuned=untuned, untuned_flop_share=sum(u.flop for u in untuned) / total,
        estimated_latency_s=estimate_s(model),
        history=[EstimatePoint(at=at, estimate_s=value) for at, value in rounds],
    )
