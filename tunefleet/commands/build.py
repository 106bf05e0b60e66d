"""`tunefleet build`: build one config of an operator (its default, without tuning) into an artifact."""

from __future__ import annotations

import json
from pathlib import Path

import click

from tunefleet.compiler import ops
from tunefleet.compiler.build import BuildError
from tunefleet.compiler.schedule import ScheduleError
from tunefleet.compiler.space import ConfigError
from tunefleet.compiler.target import Target, TargetError

from .opargs import OP_ARGS_SETTINGS, ArgumentError, workload_from_cli


def parse_target(text: str | None) -> Target:
    """``--target``'s value; omitted or a kind alone ("cpu", "cuda"): this machine's best
    target of that kind (Target.local). Raises ArgumentError naming the option."""
    try:
        return Target.parse(text) if text else Target.host()
    except TargetError as exc:
        raise ArgumentError(f"--target: {exc}") from None


def _config(workload: ops.Workload, target: Target, text: str | None):
    if text is None:
        return ops.default_config(workload, target)
    try:
        data = json.loads(text if text.lstrip().startswith("{") else Path(text).read_text())
    except (OSError, ValueError) as exc:
        raise ArgumentError(f"--config: neither a JSON object nor a file holding one: {exc}") from None
    if not isinstance(data, dict):
        raise ArgumentError("--config: must be a JSON object: {\"knobs\": {...}} or the knobs themselves")
    try:
        return ops.config_space(workload, target).from_json(data if "knobs" in data else {"knobs": data})
    except ConfigError as exc:
        raise ArgumentError(f"--config: {exc}") from None


@click.command("build", context_settings=OP_ARGS_SETTINGS)
@click.argument("op", required=False)
@click.argument("op_args", nargs=-1, type=click.UNPROCESSED)
@click.option("--workload", "workload_file", type=click.Path(dir_okay=False, path_type=Path),
              help="a workload JSON file {\"op\": ..., \"args\": {...}} instead of OP and its arguments")
@click.option("--target", help="code generation target, e.g. 'cpu -isa=avx512'; 'cpu' or 'cuda' alone: this "
              "machine's best of that kind [default: cpu]")
@click.option("--config", "config_text", metavar="JSON|FILE",
              help="the config to build ({\"knobs\": {...}}, as in a record file) [default: the operator's rule]")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="artifact directory to write (.so, .h, .c, manifest.json)")
def build_command(op: str | None, op_args: tuple[str, ...], workload_file: Path | None, target: str | None,
                  config_text: str | None, out: Path) -> None:
    """Build OP with its arguments (e.g. `tunefleet build matmul --M 512 --N 512 --K 512 --out k/`)."""
    from tunefleet.tuner.apply import build_artifact

    workload = workload_from_cli(op, list(op_args), workload_file)
    parsed = parse_target(target)
    config = _config(workload, parsed, config_text)
    try:
        path = build_artifact(workload, parsed, config, out)
    except (ScheduleError, BuildError) as exc:
        raise click.ClickException(f"the config does not build: {exc}") from None
    click.echo(f"{workload.kernel_name(parsed)}: wrote {path}")
