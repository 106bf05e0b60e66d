"""`tunefleet up`: the whole service on this machine, in one command."""

from __future__ import annotations

import faulthandler
import signal
import time

import click


@click.command("up")
@click.option("--port", type=int, default=None, help="server port [default: TUNEFLEET_PORT or 8000]")
@click.option("--cpus", default=None, help="the worker's CPUs, taskset syntax [default: all allowed]")
@click.option("--no-sandbox", is_flag=True,
              help="start the worker with --no-sandbox: candidates unsandboxed (only where every user is trusted)")
def up_command(port: int | None, cpus: str | None, no_sandbox: bool) -> None:
    """Run server, tuner and worker here: the API on 127.0.0.1:8000, SQLite and the artifact
    store under TUNEFLEET_HOME (default ~/.tunefleet), a private Redis unless
    TUNEFLEET_REDIS_URL is set, one worker pinned to the available CPUs. Prints the URL and a
    user token. A process that dies is restarted (the reason is printed); one that keeps
    dying as it starts stops the service (exit status 1). Ctrl-C or SIGTERM stops
    everything, and the next `tunefleet up` resumes unfinished tasks; SIGUSR1 prints the
    stack of each of its threads (where a stop hangs)."""
    from tunefleet.server.embedded import EmbeddedService, ServiceError
    from tunefleet.base.settings import Settings
    from tunefleet.tuner.host import parse_cpus

    try:
        cpu_list = parse_cpus(cpus) if cpus else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--cpus") from exc
    settings = Settings()
    service = EmbeddedService(settings, port=port, cpus=cpu_list, sandbox=not no_sandbox)
    # SIGINT (also when a shell started us in the background with it ignored) and SIGTERM
    # stop everything in order
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    click.echo(f"tunefleet: starting under {settings.home} ...")
    try:
        service.start()
    except ServiceError as exc:
        raise click.ClickException(str(exc)) from exc
    except KeyboardInterrupt:
        click.echo("tunefleet: stopped")
        return
    click.echo(
        f"tunefleet is up at {service.url}  (dashboard {service.url}/, API docs {service.url}/docs)\n"
        f"  user token: {service.user_token}\n"
        f"  try:  TUNEFLEET_TOKEN={service.user_token} tunefleet submit matmul -a M=512 -a N=512 -a K=512 "
        f"--wait --url {service.url}\n"
        f"  logs: {service.logs}    Ctrl-C stops everything; nothing is lost."
    )
    failure = None
    try:
        while True:
            events, failure = service.watch()
            for event in events:
                click.echo(f"tunefleet: {event}", err=True)
            if failure is not None:
                break
            time.sleep(0.5)
        click.echo(f"tunefleet: {failure}; stopping", err=True)
    except KeyboardInterrupt:
        click.echo("\ntunefleet: stopping (the worker finishes its current measurement) ...")
    finally:
        service.stop()
    if failure is not None:
        raise SystemExit(1)
    click.echo("tunefleet: stopped")
