"""The FastAPI application factory."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI
from prometheus_client import CollectorRegistry

from tunefleet.base.redisconn import Outages, count_reconnects
from tunefleet.base.settings import Settings
from tunefleet.base.version import __version__
from tunefleet.server.api import body_limits, include_routes
from tunefleet.server.api.error_handlers import install_error_handlers, one_value_per_query_parameter
from tunefleet.server.artifact_store import ArtifactStore
from tunefleet.server.body_limit import BodyLimit
from tunefleet.server.dashboard import mount_dashboard
from tunefleet.server.db import follow_outages, make_engine, make_sessionmaker
from tunefleet.server.metrics import MetricsMiddleware, QueueCollector, StoreCollector
from tunefleet.server.queue import LazyConnection, server_name
from tunefleet.server.ratelimit import SubmissionLimiter


def create_app(settings: Settings | None = None) -> FastAPI:
    """The tunefleet API over the database and artifact store named in `settings`
    (default: read from the environment). The schema must already be migrated
    (`tunefleet db upgrade`). Everything lives on the app, so several apps can run in one
    process, as tests do."""
    settings = settings or Settings()
    engine = make_engine(settings.database_url)
    redis = LazyConnection(settings)
    sql_outages = Outages("SQL database")
    follow_outages(engine, sql_outages)
    count_reconnects(redis.get, sql_outages, server_name(), "sql")

    @asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        yield
        engine.dispose()
        redis.close()

    app = FastAPI(
        title="tunefleet",
        version=__version__,
        summary="Auto-tuning service for tensor kernels.",
        lifespan=lifespan,
        dependencies=[Depends(one_value_per_query_parameter)],
    )
    sessions = make_sessionmaker(engine)
    registry = CollectorRegistry()
    registry.register(StoreCollector(sessions, settings.worker_lost_after_s))
    registry.register(QueueCollector(redis))
    app.state.settings = settings
    app.state.sessionmaker = sessions
    app.state.artifact_store = ArtifactStore(settings.artifacts)
    app.state.redis = redis
    app.state.submissions = SubmissionLimiter(settings.max_submissions_per_minute, redis)
    app.state.metrics_registry = registry
    app.add_middleware(BodyLimit, limit_for=body_limits(settings))
    app.add_middleware(MetricsMiddleware, registry=registry)  # outermost: counts 413s too
    install_error_handlers(app)
    include_routes(app)
    mount_dashboard(app)
    return app
