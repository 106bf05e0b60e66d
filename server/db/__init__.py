"""SQL store: models, engine/session factories and Alembic migrations."""

from tunefleet.server.db.base import Base, utcnow
from tunefleet.server.db.session import follow_outages, make_engine, make_sessionmaker

__all__ = ["Base", "follow_outages", "make_engine", "make_sessionmaker", "utcnow"]
