"""The response to a request for an archive that a worker builds on request (server.build_jobs):
the stored tar.gz, or 202 while it is being built."""

from __future__ import annotations

from typing import Any

from fastapi.responses import FileResponse, JSONResponse, Response

from tunefleet.server.artifact_store import ArtifactStore
from tunefleet.server.db.models import Artifact
from tunefleet.server.schemas.artifacts import BuildingOut
from tunefleet.server.schemas.errors import errors
from tunefleet.server.build_jobs import RETRY_AFTER_S, Building
from tunefleet.server.services.builds import BuildJob

#: The OpenAPI responses of a route answering with `archive`.
RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"application/gzip": {}}, "description": "The archive; `X-Content-SHA256` is its digest."},
    202: {"model": BuildingOut, "description": "A worker is building it; ask again after `Retry-After` seconds."},
    **errors(401, 403, 404, 409, 422),
}


def archive(found: Artifact | Building, job: BuildJob, store: ArtifactStore) -> Response:
    """The stored archive `found` as application/gzip with its `X-Content-SHA256`, or 202 with
    a BuildingOut body and `Retry-After` while `job` builds it."""
    if isinstance(found, Building):
        body = BuildingOut(build=found.key, state=found.state, retry_after_s=RETRY_AFTER_S,
                           detail=f"{job.what} is being built by a worker; ask again in {RETRY_AFTER_S} s")
        return JSONResponse(body.model_dump(), status_code=202, headers={"Retry-After": str(RETRY_AFTER_S)})
    return FileResponse(store.path(found.path), media_type="application/gzip", filename=job.file_name,
                        headers={"X-Content-SHA256": found.sha256})
