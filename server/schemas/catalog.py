"""Bodies of /ops and /targets: what can be tuned, and for what."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class OpArg(BaseModel):
    """One argument of an operator."""

    name: str
    type: str
    default: Any = None
    min: int | float | None = None
    max: int | float | None = None
    choices: list[Any] | None = None
    required: bool = False
    description: str = ""


class OpOut(BaseModel):
    """An operator family of the compiler's operator library."""

    name: str
    description: str
    family: str
    args: list[OpArg]
    targets: list[str]
