"""`tunefleet worker`: the measurement daemon of a target host."""

from __future__ import annotations

import logging
import os

import click

from tunefleet.credentials import token_file_option


@click.command("worker")
@click.option("--redis", "redis_url", envvar="TUNEFLEET_REDIS_URL", required=True,
              help="Redis URL of the service, e.g. redis://host:6379/0 [env TUNEFLEET_REDIS_URL]")
@click.option("--server", "server_url", envvar="TUNEFLEET_URL", default="http://127.0.0.1:8000",
              show_default=True, help="the API server's URL [env TUNEFLEET_URL]")
@token_file_option("TUNEFLEET_WORKER_TOKEN", "a worker-scope token (`tunefleet token create --scope worker`)",
                   required=True)
@click.option("--device-key", default=None,
              help="pool of identical hosts this worker serves [default: cpu-<model>-<n>c of this host and CPUs]")
@click.option("--cpus", default=None, help="CPUs to measure on, taskset syntax (e.g. 2-3) [default: all allowed]")
@click.option("--name", default=None, help="worker name, unique per host and CPU set [default: <host>/cpu<cpus>]")
@click.option("--gpu", type=click.IntRange(min=0), default=None,
              help="measure CUDA candidates on this GPU (nvidia-smi's index) [default: CPU worker]")
@click.option("--heartbeat-s", type=click.FloatRange(min=0.1), default=5.0, show_default=True,
              help="seconds between heartbeats; a job is retried elsewhere after three missed ones")
@click.option("--redis-wait-s", type=click.FloatRange(min=1), default=900.0, show_default=True,
              help="seconds Redis may stay unreachable, at start or later, before the worker exits 1")
@click.option("--no-sandbox", is_flag=True, envvar="TUNEFLEET_NO_SANDBOX",
              help="build and run candidates WITHOUT the bubblewrap sandbox (only where every user is trusted); "
                   "the registration and the dashboard show it [env TUNEFLEET_NO_SANDBOX=1]")
def worker_command(redis_url: str, server_url: str, token: str, device_key: str | None, cpus: str | None,
                   name: str | None, gpu: int | None, heartbeat_s: float, redis_wait_s: float,
                   no_sandbox: bool) -> None:
    """Measure candidates for the tuners: register with the server, then build, check and time
    each job from measure:<device key> in an isolated process pinned to --cpus. Every compiler
    run and every candidate runs in a sandbox (tunefleet.compiler.sandbox): a worker that cannot
    make one refuses to start (exit status 2) unless --no-sandbox is given. An unreachable
    Redis is reported at once and retried (exit status 1 after --redis-wait-s). SIGTERM or
    Ctrl-C stops it after the current job."""
    from tunefleet.server.logs import configure_logging
    from tunefleet.tuner.host import parse_cpus
    from tunefleet.worker.daemon import RedisUnavailable, RegistrationError, WorkerDaemon

    configure_logging(os.environ.get("TUNEFLEET_LOG_LEVEL", "INFO"),
                      "json" if os.environ.get("TUNEFLEET_LOG_FORMAT") == "json" else "text")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per heartbeat otherwise
    try:
        cpu_list = parse_cpus(cpus) if cpus else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--cpus") from exc
    isolation = _sandbox(no_sandbox)
    try:
        daemon = WorkerDaemon(redis_url, server_url, token, device_key=device_key, cpus=cpu_list, name=name,
                              heartbeat_s=heartbeat_s, ride_out_s=redis_wait_s, gpu=gpu, sandbox=isolation)
        daemon.run()
    except (RegistrationError, RedisUnavailable) as exc:
        raise click.ClickException(str(exc)) from exc
    except RuntimeError as exc:  # GpuNotFound: no such GPU, no driver
        if type(exc).__name__ != "GpuNotFound":
            raise
        raise click.ClickException(f"--gpu {gpu}: {exc}") from exc


def _sandbox(no_sandbox: bool) -> str:
    """Turn the sandbox on for this process and its children (off with `no_sandbox`) and return
    what the registration reports; exit status 2 with one line when no sandbox can be made."""
    from tunefleet.compiler import sandbox

    if no_sandbox:
        sandbox.enable(False)
        logging.getLogger(__name__).warning("--no-sandbox: candidates are built and run unsandboxed")
        return sandbox.UNSANDBOXED
    try:
        found = sandbox.detect()
    except sandbox.SandboxUnavailable as exc:
        click.echo(f"tunefleet worker: cannot sandbox candidates: {exc}; refusing to start "
                   f"(--no-sandbox runs them unsandboxed, for trusted users only)", err=True)
        raise SystemExit(2) from exc
    sandbox.enable(True)
    return found.describe()
