"""`tunefleet server`: run the REST API with uvicorn."""

from __future__ import annotations

import click


@click.command("server")
@click.option("--host", default=None, help="bind address [default: TUNEFLEET_HOST or 127.0.0.1]")
@click.option("--port", type=int, default=None, help="port [default: TUNEFLEET_PORT or 8000]")
def server_command(host: str | None, port: int | None) -> None:
    """Serve the API (and OpenAPI docs at /docs) on the configured database and artifact store."""
    import uvicorn

    from tunefleet.server.app import create_app
    from tunefleet.server.db import migrate
    from tunefleet.server.logs import configure_logging
    from tunefleet.base.settings import Settings

    settings = Settings()
    configure_logging(settings.log_level, settings.log_format)
    problem = migrate.schema_problem(settings.database_url)
    if problem:
        raise click.ClickException(problem)
    uvicorn.run(
        create_app(settings),
        host=host or settings.host,
        port=port if port is not None else settings.port,
        log_config=None,
    )
