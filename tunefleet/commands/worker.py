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
def worker_command(redis_url: str, server_url: str, token: str, device_key: str | None, cpus: str | None,
                   name: str | None, gpu: int | None, heartbeat_s: float) -> None:
    """Measure candidates for the tuners: register with the server, then build, check and time
    each job from measure:<device key> in an isolated process pinned to --cpus. SIGTERM or
    Ctrl-C stops it after the current job."""
    from tunefleet.server.logs import configure_logging
    from tunefleet.tuner.host import parse_cpus
    from tunefleet.worker.daemon import RegistrationError, WorkerDaemon

    configure_logging(os.environ.get("TUNEFLEET_LOG_LEVEL", "INFO"),
                      "json" if os.environ.get("TUNEFLEET_LOG_FORMAT") == "json" else "text")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per heartbeat otherwise
    try:
        cpu_list = parse_cpus(cpus) if cpus else None
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="--cpus") from exc
    try:
        daemon = WorkerDaemon(redis_url, server_url, token, device_key=device_key, cpus=cpu_list, name=name,
                              heartbeat_s=heartbeat_s, gpu=gpu)
        daemon.run()
    except RegistrationError as exc:
        raise click.ClickException(str(exc)) from exc
    except RuntimeError as exc:  # GpuNotFound: no such GPU, no driver
        if type(exc).__name__ != "GpuNotFound":
            raise
        raise click.ClickException(f"--gpu {gpu}: {exc}") from exc
