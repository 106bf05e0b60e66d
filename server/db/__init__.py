"""SQL store: models, engine/session factories and Alembic migrations."""

from tunefleet.server.db.base import Base, utcnow
from tunefleet.server.db.session import make_engine, make_sessionmaker

__all__ = ["Base", "make_engine", "make_sessionmaker", "utcnow"]
