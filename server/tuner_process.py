"""The tuner process (``tunefleet tuner``): consumes the ``tune`` queue, one task at a time
(:func:`.tuner_job.run_task`), and sweeps the store so that no task is forgotten."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time

from sqlalchemy.exc import OperationalError

from tunefleet.base import redisconn
from tunefleet.base.settings import Settings
from tunefleet.server import model_job, queue, tuner_job

__all__ = ["RIDE_OUT_S", "serve"]

log = logging.getLogger(__name__)

#: Seconds the tuner's Redis commands are retried through an outage before it gives up and
#: exits (for its supervisor to restart it).
RIDE_OUT_S = 900.0


def serve(settings: Settings, *, burst: bool = False, heartbeat_s: float = 5.0) -> None:
    """Run a tuner process (``tunefleet tuner``): consume the ``tune`` queue one task at a
    time, and sweep the store every ``settings.reconcile_s`` (:func:`queue.reconcile`) so
    that tasks whose tuner died, or that no job announced, are enqueued again. With `burst`,
    return once the queue is empty. SIGTERM / Ctrl-C stop the running task within a poll
    (it is requeued) and then the process."""
    from tunefleet.base.rqworker import HeartbeatWorker
    from tunefleet.server.db import follow_outages, make_engine, make_sessionmaker

    engine = make_engine(settings.database_url)
    sessions = make_sessionmaker(engine)
    outages, sql_outages = redisconn.Outages(), redisconn.Outages("SQL database")
    follow_outages(engine, sql_outages)
    connection = queue.connect(settings, ride_out_s=RIDE_OUT_S, outages=outages)
    process = f"tuner@{socket.gethostname()}"
    redisconn.count_reconnects(lambda: connection, outages, process, "redis")
    redisconn.count_reconnects(lambda: connection, sql_outages, process, "sql")
    worker = HeartbeatWorker(
        [queue.tune_queue(connection)],
        connection=connection,
        name=f"tuner-{socket.gethostname()}.{os.getpid()}",
        serializer=queue.SERIALIZER,
        heartbeat_s=heartbeat_s,
    )
    tuner_job.bind(tuner_job.TunerContext(settings, sessions, connection, worker.stopping, outages=outages,
                                          sql_outages=sql_outages))
    sweeping = threading.Event()

    def sweep() -> None:
        while True:
            try:
                with sessions() as session:
                    enqueued = queue.reconcile(session, connection, settings,
                                               mark_lost=not sql_outages.recovering(settings.worker_lost_after_s))
                    model_job.advance_unfinished(session, settings, connection)
                if enqueued:
                    log.info("reconcile: enqueued tasks %s", enqueued)
            except OperationalError:  # the database is away: logged once by sql_outages
                pass
            except Exception:  # a sweep must never take the tuner down; the next one retries
                log.exception("reconcile sweep failed")
            if sweeping.wait(settings.reconcile_s):
                return

    sweeper = threading.Thread(target=sweep, name="reconcile", daemon=True)
    sweeper.start()
    try:
        if burst:
            time.sleep(0.5)  # let the first sweep enqueue what needs a tuner
        worker.work(burst=burst, logging_level=logging.getLevelName(logging.getLogger().level))
    finally:
        sweeping.set()
        sweeper.join(timeout=10)
        tuner_job.bind(None)
        engine.dispose()
        queue.disconnect(connection)
