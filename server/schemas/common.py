"""Shapes and bounds shared by several resources."""

from __future__ import annotations

from typing import Annotated, Generic, TypeVar

from pydantic import BaseModel, Field

T = TypeVar("T")

#: The largest id or count the API takes: PostgreSQL's INTEGER (int4) maximum; SQLite's
#: integers go to 2^63 - 1, and a larger value reaches neither (422, not a database error).
DB_INT_MAX = 2**31 - 1

#: One line of text, for names: no control character (PostgreSQL's text holds no NUL either).
ONE_LINE_PATTERN = r"^[^\x00-\x1f\x7f]+$"

#: A row id in a body (tasks, workers, trials): 1 .. DB_INT_MAX.
Id = Annotated[int, Field(ge=1, le=DB_INT_MAX)]


class Page(BaseModel, Generic[T]):
    """One page of a list: `items` from `offset`, at most `limit`, out of `total`."""

    items: list[T]
    total: int
    limit: int
    offset: int
