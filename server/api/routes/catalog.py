"""/ops and /targets: what the compiler can tune, and for which targets."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from tunefleet.server.api.routes import API_PREFIX
from tunefleet.server.deps import ReadAuth, SessionDep, SettingsDep
from tunefleet.server.schemas.catalog import OpOut
from tunefleet.server.schemas.errors import errors
from tunefleet.server.services import catalog, pools

router = APIRouter(prefix=API_PREFIX, tags=["catalog"])


@router.get("/ops", response_model=list[OpOut], responses=errors(401, 403))
def list_ops(_caller: ReadAuth) -> list[dict[str, Any]]:
    """Operator families with their arguments (types, bounds, defaults, choices) and targets."""
    return catalog.operators()


@router.get("/targets", responses=errors(401, 403))
def list_targets(session: SessionDep, settings: SettingsDep, _caller: ReadAuth) -> list[dict[str, Any]]:
    """Target kinds the compiler generates code for, with their options, and under `pools`
    each device key with live workers of that kind: the best target its hosts execute (a
    task's default there) and every target they support."""
    return catalog.targets(pools.live_pools(session, settings.worker_lost_after_s))
