"""/ops and /targets: what the compiler can tune, and for which targets."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter

from tunefleet.server.api.routes import API_PREFIX
from tunefleet.server.schemas.catalog import OpOut
from tunefleet.server.services import catalog

router = APIRouter(prefix=API_PREFIX, tags=["catalog"])


@router.get("/ops", response_model=list[OpOut])
def list_ops() -> list[dict[str, Any]]:
    """Operator families with their arguments (types, bounds, defaults, choices) and targets."""
    return catalog.operators()


@router.get("/targets")
def list_targets() -> list[dict[str, Any]]:
    """Target kinds the compiler generates code for, with their options."""
    return catalog.targets()
