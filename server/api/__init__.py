"""The REST API under /api/v1."""

from fastapi import FastAPI

from tunefleet.server.api.routes import catalog, health, tasks, workers


def include_routes(app: FastAPI) -> None:
    """Add every /api/v1 route to `app`."""
    for module in (tasks, workers, catalog, health):
        app.include_router(module.router)
