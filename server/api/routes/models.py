"""/models: submit an ONNX model for whole-model tuning, follow it, download its bundle."""

from __future__ import annotations

import logging
from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, status
from fastapi.responses import Response
from redis.exceptions import RedisError
from starlette.concurrency import run_in_threadpool

from tunefleet.server import build_jobs, model_job
from tunefleet.server.api.routes import API_PREFIX
from tunefleet.server.db.models import Model
from tunefleet.server.errors import Forbidden
from tunefleet.server.api import downloads
from tunefleet.server.deps import ReadAuth, RedisDep, SettingsDep, StoreDep, UserAuth, in_session
from tunefleet.server.schemas.common import DB_INT_MAX, ONE_LINE_PATTERN, Page
from tunefleet.server.schemas.errors import errors
from tunefleet.server.schemas.models import ModelOut
from tunefleet.server.schemas.tasks import DEVICE_KEY_PATTERN, MAX_TRIALS
from tunefleet.server.services import access, model_bundle, models

log = logging.getLogger(__name__)

router = APIRouter(prefix=f"{API_PREFIX}/models", tags=["models"])
#: The path ONNX uploads go to (their body limit is the max_model_bytes setting).
UPLOADS = f"{API_PREFIX}/models"

ModelId = Annotated[int, Path(ge=1, le=DB_INT_MAX)]

_ONNX_BODY = {"requestBody": {"required": True, "content": {"application/octet-stream": {
    "schema": {"type": "string", "format": "binary", "description": "the ONNX model (a ModelProto's bytes)"}}}}}


@router.post("", status_code=status.HTTP_201_CREATED, response_model=ModelOut, openapi_extra=_ONNX_BODY,
             responses=errors(401, 403, 409, 413, 422, 429))
async def submit_model(
    request: Request,
    caller: UserAuth,
    name: Annotated[str, Query(min_length=1, max_length=256, pattern=ONE_LINE_PATTERN,
                               description="what the model is called (one line)")],
    trials: Annotated[int, Query(ge=1, le=MAX_TRIALS, description="the global trial budget, over all its "
                                 "tasks; at most the server's max_trials setting")] = 64,
    target: Annotated[str | None, Query(min_length=1, max_length=256, description="a CPU target; omitted: "
                                        "the best the device key's live hosts execute")] = None,
    device_key: Annotated[str | None, Query(min_length=1, max_length=64, pattern=DEVICE_KEY_PATTERN,
                                            description="omitted: the only pool of live CPU workers")] = None,
    protocol: Annotated[str | None, Query(min_length=2, max_length=1024, description="how workers time its "
                                          "candidates: a JSON object of the task protocol's fields, e.g. "
                                          '{"repeat": 3}; omitted: the workers\' defaults')] = None,
    input_shapes: Annotated[str | None, Query(min_length=1, max_length=4096, description="the shapes of graph "
                                              "inputs with dynamic dimensions: NAME=D1,D2,... separated by ';', "
                                              "e.g. input=1,3,224,224;mask=1,128")] = None,
    prepack: Annotated[bool, Query(description="convolutions (at most 14x14 output pixels) and linear layers (at "
                                   "least 16 rows) whose weights are constants of the model take them pre-packed "
                                   "in their kernel's blocked layout, which the bundle's model_manifest.json names "
                                   "per argument")] = True,
) -> ModelOut:
    """Tune a whole ONNX model (the body, application/octet-stream, at most the server's
    max_model_bytes; parsed, never evaluated): its Conv / Gemm / MatMul layers become tasks
    (identical layers once, weighted by their occurrences) over which `trials` are spent by a
    task scheduler, several tasks at once across the device key's workers; a layer with a
    stored best record costs nothing. 422 lists each node that cannot be handled and why (not
    ONNX, a dynamic input without `input_shapes`, an unsupported dtype, no tunable node)."""
    assert caller.name is not None
    settings = request.app.state.settings
    request.app.state.submissions.hit(caller.name)
    data = await request.body()
    shapes = [text for text in (input_shapes or "").split(";") if text.strip()]

    def submit(session) -> tuple[int, ModelOut]:
        access.check_queue(session, caller.name, settings.max_queued_tasks_per_user)
        timing = models.protocol(protocol, settings)
        extraction = models.parse(data, shapes, settings)
        model = models.submit(session, extraction, name=name, target=target, device_key=device_key, trials=trials,
                              protocol=timing, input_shapes=shapes, settings=settings, owner=caller.name,
                              prepack=prepack)
        return model.id, models.model_out(session, models.get(session, model.id))

    model_id, out = await in_session(request, submit)
    connection = request.app.state.redis.get()
    if connection is not None:
        try:
            await in_session(request, lambda session: model_job.advance(session, settings, connection, model_id))
            out = await in_session(request, lambda session: models.model_out(session, models.get(session, model_id)))
        except RedisError as exc:
            log.warning("model %s waits for a tuner's sweep: %s", model_id, exc)
    return out


@router.get("", response_model=Page[ModelOut], responses=errors(401, 403, 422))
async def list_models(
    request: Request, _caller: ReadAuth,
    limit: Annotated[int, Query(ge=1, le=500)] = 50, offset: Annotated[int, Query(ge=0, le=DB_INT_MAX)] = 0,
) -> Page[ModelOut]:
    """Models, newest first, with their layers' progress."""

    def page(session) -> Page[ModelOut]:
        items, total = models.list_models(session, limit=limit, offset=offset)
        return Page[ModelOut](items=[models.model_out(session, m) for m in items], total=total, limit=limit,
                              offset=offset)

    return await in_session(request, page)


@router.get("/{model_id}", response_model=ModelOut, responses=errors(401, 403, 404, 422))
async def get_model(model_id: ModelId, request: Request, _caller: ReadAuth) -> ModelOut:
    """One model: per layer its progress and best, the untuned nodes and their FLOPs share,
    the estimated model latency (Σ occurrences × best latency) and its history."""
    return await in_session(request, lambda session: models.model_out(session, models.get(session, model_id)))


@router.post("/{model_id}/cancel", response_model=ModelOut, responses=errors(401, 403, 404, 409, 422))
async def cancel_model(model_id: ModelId, request: Request, caller: UserAuth) -> ModelOut:
    """Cancel an unfinished model and its unfinished tasks (its owner or an admin); 409 if it
    already finished. Layers already tuned keep their best records."""

    def cancel(session) -> ModelOut:
        model = _owned(session, model_id, caller)
        return models.model_out(session, models.cancel(session, model))

    return await in_session(request, cancel)


def _owned(session, model_id: int, caller) -> Model:
    """Model `model_id` for its owner or an admin: NotFound without it, Forbidden for anyone else."""
    model = models.get(session, model_id)
    if not caller.owns(model.owner):
        raise Forbidden(f"model {model_id} belongs to another user; only its owner or an admin may do this")
    return model


@router.get("/{model_id}/bundle", response_class=Response, responses=downloads.RESPONSES)
async def download_bundle(model_id: ModelId, request: Request, caller: UserAuth, settings: SettingsDep,
                          store: StoreDep, redis: RedisDep) -> Response:
    """The model bundle (its owner or an admin), a tar.gz of one directory: one .so holding
    every kernel (one symbol per workload), its header and model_manifest.json mapping each
    ONNX node to its kernel; `tunefleet.load` opens it. A worker of the model's device key
    builds it once, at the first request (202 with `Retry-After` while it builds); later ones
    get the stored archive. 409 until the model is done, without a live worker to build it,
    or with the error of a build that failed."""

    def fetch(session):
        job = model_bundle.build_job(_owned(session, model_id, caller))
        return job, build_jobs.fetch(session, redis, settings, job)

    job, found = await in_session(request, fetch)
    return downloads.archive(found, job, store)
