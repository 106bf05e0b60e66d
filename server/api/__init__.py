"""The REST API under /api/v1."""

from collections.abc import Callable

from fastapi import FastAPI

from tunefleet.base.settings import Settings
from tunefleet.server.api.routes import API_PREFIX, catalog, health, models, tasks, workers


def include_routes(app: FastAPI) -> None:
    """Add every /api/v1 route to `app`."""
    for module in (tasks, models, workers, catalog, health):
        app.include_router(module.router)


def body_limits(settings: Settings) -> Callable[[str], int]:
    """The body limit of a request path: `settings.max_artifact_bytes` for artifact
    uploads, `settings.max_model_bytes` for ONNX models, `settings.max_body_bytes` for
    everything else."""
    uploads = f"{API_PREFIX}{workers.ARTIFACT_UPLOADS}/"

    def limit_for(path: str) -> int:
        if path.startswith(uploads):
            return settings.max_artifact_bytes
        return settings.max_model_bytes if path.rstrip("/") == models.UPLOADS else settings.max_body_bytes

    return limit_for
