"""Shapes shared by several resources."""

from __future__ import annotations

from typing import Generic, TypeVar

from pydantic import BaseModel

T = TypeVar("T")


class Page(BaseModel, Generic[T]):
    """One page of a list: `items` from `offset`, at most `limit`, out of `total`."""

    items: list[T]
    total: int
    limit: int
    offset: int
