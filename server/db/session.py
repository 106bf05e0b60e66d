"""Engines and sessions: SQLite (WAL, foreign keys on) by default, PostgreSQL in production."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event, make_url
from sqlalchemy.engine import ExceptionContext
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from tunefleet.base.redisconn import Outages


def make_engine(url: str) -> Engine:
    """An engine for `url`; an SQLite file gets its folder created, WAL journaling,
    foreign-key enforcement and a busy timeout so several processes can share it."""
    parsed = make_url(url)
    if parsed.get_backend_name() != "sqlite":
        return create_engine(url, pool_pre_ping=True)
    if parsed.database and parsed.database != ":memory:":
        Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(url, connect_args={"check_same_thread": False})
    event.listen(engine, "connect", _sqlite_pragmas)
    return engine


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=10000")
    cursor.close()


def make_sessionmaker(engine: Engine) -> sessionmaker[Session]:
    """Session factory; objects stay readable after commit (responses are built from them)."""
    return sessionmaker(engine, expire_on_commit=False)


def follow_outages(engine: Engine, outages: Outages) -> None:
    """Tell `outages` when `engine`'s database stops answering (a statement or a connection
    attempt fails with an OperationalError: a restart, a cut connection) and when a new
    connection to it succeeds again. The pool's pre-ping replaces the dead connections."""

    def failed(context: ExceptionContext) -> None:
        if isinstance(context.sqlalchemy_exception, OperationalError) or context.is_disconnect:
            outages.failed(context.original_exception)

    def connected(*_args: Any) -> None:
        outages.answered()

    event.listen(engine, "handle_error", failed)
    event.listen(engine, "connect", connected)
