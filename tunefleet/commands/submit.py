"""Client commands: `tunefleet submit`, `status`, `wait`, `download`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from tunefleet.client import Client, ServerUnreachable, ServiceError, best_text
from tunefleet.credentials import token_file_option

from .paths import OutputPath

_url = click.option(
    "--url", envvar="TUNEFLEET_URL", default="http://127.0.0.1:8000", show_default=True,
    help="server URL [env TUNEFLEET_URL]",
)
_token = token_file_option("TUNEFLEET_TOKEN", "a user token", required=False)


def _client_command(func: Callable[..., Any]) -> Callable[..., Any]:
    """Add --url/--token-file, pass a Client, and turn service errors into CLI errors (one
    line, exit 1): the server's refusal, or no server at the URL."""

    @_url
    @_token
    @click.pass_context
    def wrapper(ctx: click.Context, url: str, token: str | None, **kwargs: Any) -> Any:
        with Client(url, token) as client:
            try:
                return ctx.invoke(func, client, **kwargs)
            except ServiceError as exc:
                raise click.ClickException(str(exc)) from exc
            except ServerUnreachable as exc:
                raise click.ClickException(f"{exc} (is it running? `tunefleet up` starts one here; "
                                           f"--url or TUNEFLEET_URL names another)") from None

    wrapper.__doc__ = func.__doc__
    return wrapper


def _parse_arg(_ctx: click.Context, _param: click.Parameter, values: tuple[str, ...]) -> dict[str, Any]:
    """KEY=VALUE pairs; VALUE is read as JSON when it parses (64, [1, 1], true), else as text."""
    args: dict[str, Any] = {}
    for item in values:
        key, sep, raw = item.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{item!r} is not KEY=VALUE", param_hint="--arg")
        try:
            args[key] = json.loads(raw)
        except json.JSONDecodeError:
            args[key] = raw
    return args


def _print_task(task: dict[str, Any]) -> None:
    click.echo(
        f"task {task['id']}: {task['status']}  {task['op']} on {task['device_key']} ({task['target']})  "
        f"trials {task['trials_done']}/{task['budget']['trials']}  best {best_text(task)}"
    )
    if task["error"]:
        click.echo(f"  error: {task['error']}")


def _show(task: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(task, indent=2))
    else:
        _print_task(task)


@click.command("submit")
@click.argument("op")
@click.option("-a", "--arg", "args", multiple=True, callback=_parse_arg, metavar="KEY=VALUE",
              help="operator argument, repeatable (VALUE as JSON: -a M=64 -a layout=NCHW)")
@click.option("--te", "te_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="tensor-expression JSON file (with OP 'custom')")
@click.option("--device-key", default=None,
              help="pool of measurement workers, e.g. cpu-epyc-2c [default: the only pool of live workers]")
@click.option("--target", default=None,
              help="e.g. 'cpu -isa=avx2', 'cuda -arch=sm_90' [default, or 'cpu'/'cuda' alone: the best target "
              "the device key's hosts execute]")
@click.option("--trials", type=int, default=64, show_default=True)
@click.option("--wall-time", "wall_time_s", type=float, help="stop after this many seconds")
@click.option("--early-stopping", type=int, help="stop after this many trials without a new best")
@click.option("--reuse", is_flag=True, help="answer with the stored best when there is one")
@click.option("--wait", "wait_", is_flag=True, help="wait for the task to finish, with progress")
@click.option("--json", "as_json", is_flag=True, help="print the task as JSON")
@_client_command
def submit_command(
    client: Client,
    op: str,
    args: dict[str, Any],
    te_file: Path | None,
    device_key: str | None,
    target: str | None,
    trials: int,
    wall_time_s: float | None,
    early_stopping: int | None,
    reuse: bool,
    wait_: bool,
    as_json: bool,
) -> None:
    """Submit a tuning task for operator OP (see `tunefleet ops`)."""
    if te_file is not None:
        args = {**args, "te": json.loads(te_file.read_text())}
    task = client.submit(
        op, args, device_key=device_key, target=target, trials=trials,
        wall_time_s=wall_time_s, early_stopping=early_stopping, reuse=reuse,
    )
    if len(task["target"].split()) == 1 and not as_json:  # a kind alone: no host of the key is live yet
        click.echo(f"target: the best {task['target']} target of {task['device_key']}'s hosts, chosen when "
                   f"one is live and the task starts")
    if wait_:
        task = client.wait(task["id"], progress=not as_json)
    _show(task, as_json)


@click.command("status")
@click.argument("task_id", type=int, required=False)
@click.option("--status", "status_filter", help="only tasks with this status")
@click.option("--device-key", help="only tasks on this device key")
@click.option("--limit", type=int, default=20, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print JSON")
@_client_command
def status_command(
    client: Client, task_id: int | None, status_filter: str | None, device_key: str | None,
    limit: int, as_json: bool,
) -> None:
    """Show task TASK_ID, or the newest tasks."""
    if task_id is not None:
        _show(client.get(task_id), as_json)
        return
    filters = {k: v for k, v in {"status": status_filter, "device_key": device_key}.items() if v}
    page = client.tasks(limit=limit, **filters)
    if as_json:
        click.echo(json.dumps(page, indent=2))
        return
    for task in page["items"]:
        _print_task(task)
    click.echo(f"{len(page['items'])} of {page['total']} tasks")


@click.command("wait")
@click.argument("task_id", type=int)
@click.option("--timeout", "timeout_s", type=float, help="give up after this many seconds")
@_client_command
def wait_command(client: Client, task_id: int, timeout_s: float | None) -> None:
    """Wait for task TASK_ID to finish, showing progress; exits 1 unless it is done."""
    task = client.wait(task_id, timeout_s=timeout_s)
    _print_task(task)
    if task["status"] != "done":
        raise SystemExit(1)


@click.command("download")
@click.argument("task_id", type=int)
@click.option("-o", "--out", "out_dir", type=OutputPath(folder=True),
              default=Path("."), show_default=True, help="folder to extract the artifact into")
@click.option("--targets", "targets_text", metavar="ISA,ISA",
              help="instead: ONE library of the task's workload for these CPU ISAs (e.g. avx2,avx512), each "
              "from its best record, running the best the CPU supports (built by a worker at the first request)")
@_client_command
def download_command(client: Client, task_id: int, out_dir: Path, targets_text: str | None) -> None:
    """Download and check the artifact (.so, .h, manifest, source) of task TASK_ID."""
    targets = None if targets_text is None else [isa.strip() for isa in targets_text.split(",")]
    click.echo(client.download(task_id, out_dir, targets=targets, progress=True))
