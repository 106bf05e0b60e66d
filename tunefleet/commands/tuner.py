"""`tunefleet tuner`: run tuning tasks from the `tune` queue."""

from __future__ import annotations

import click


@click.command("tuner")
@click.option("--burst", is_flag=True, help="exit once the tune queue is empty")
@click.option("--heartbeat-s", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
              help="seconds between the tuner's heartbeats to RQ")
def tuner_command(burst: bool, heartbeat_s: float) -> None:
    """Tune tasks one at a time: run the cost-model-guided search of each task, with its
    candidates measured by the workers of its device key, then have one of them export the
    best. Uses TUNEFLEET_DATABASE_URL and TUNEFLEET_REDIS_URL (or the embedded Redis under
    TUNEFLEET_HOME). SIGTERM or Ctrl-C requeue the running task and stop."""
    from tunefleet.base.settings import Settings
    from tunefleet.server.db import migrate
    from tunefleet.server.logs import configure_logging
    from tunefleet.server.tuner_process import serve

    settings = Settings()
    configure_logging(settings.log_level, settings.log_format)
    problem = migrate.schema_problem(settings.database_url)
    if problem:
        raise click.ClickException(problem)
    serve(settings, burst=burst, heartbeat_s=heartbeat_s)
