"""Bodies of /ops and /targets: what can be tuned, and for what."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class OpArg(BaseModel):
    """One argument of an operator."""

    name: str
    type: str
    min: int | float | None = None
    default: Any = None
    choices: list[Any] | None = None


class OpOut(BaseModel):
    """An operator family of the compiler's operator library."""

    name: str
    description: str
    args: list[OpArg]
    targets: list[str]
