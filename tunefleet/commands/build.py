"""`tunefleet build`: build one config of an operator (its default, without tuning) into an artifact."""

from __future__ import annotations

import json
from pathlib import Path

import click

from tunefleet.compiler import ops
from tunefleet.compiler.build import BuildError
from tunefleet.compiler.schedule import ScheduleError
from tunefleet.compiler.space import ConfigError
from tunefleet.compiler.target import DISPATCH_ISAS, Target, TargetError, cpu_features

from .opargs import ArgumentError, workload_command, workload_from_cli
from .paths import OutputPath


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


@workload_command("build", "code generation target, e.g. 'cpu -isa=avx512'; 'cpu' or 'cuda' alone: this "
                           "machine's best of that kind [default: cpu]")
@click.option("--config", "config_text", metavar="JSON|FILE",
              help="the config to build ({\"knobs\": {...}}, as in a record file) [default: the operator's rule]")
@click.option("--targets", "targets_text", metavar="ISA,ISA",
              help="CPU ISAs (of avx512, avx2, generic) built into ONE library that runs the best "
              "this CPU supports, chosen when it is loaded (TUNEFLEET_ISA=<isa> forces one)")
@click.option("--records", "records_path", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="with --targets: a record file (as `tunefleet tune` writes); each ISA gets its best "
              "record there [default: the operator's rule]")
@click.option("--out", required=True, type=OutputPath(folder=True),
              help="artifact directory to write (.so, .h, .c, manifest.json)")
def build_command(op: str | None, op_args: tuple[str, ...], workload_file: Path | None, target: str | None,
                  config_text: str | None, targets_text: str | None, records_path: Path | None, out: Path) -> None:
    """Build OP with its arguments into an artifact, untuned or with a given config.

    E.g. `tunefleet build matmul --M 512 --N 512 --K 512 --out k/`. With --targets (e.g.
    `--targets avx2,avx512`), one library holding a kernel per ISA."""
    from tunefleet.tuner.apply import build_artifact

    workload = workload_from_cli(op, list(op_args), workload_file)
    if targets_text is not None or records_path is not None:
        _build_multi_target(workload, targets_text, records_path, target, config_text, out)
        return
    parsed = parse_target(target)
    config = _config(workload, parsed, config_text)
    try:
        path = build_artifact(workload, parsed, config, out)
    except (ScheduleError, BuildError) as exc:
        raise click.ClickException(f"the config does not build: {exc}") from None
    click.echo(f"{workload.kernel_name(parsed)}: wrote {path}")


def _build_multi_target(workload: ops.Workload, targets_text: str | None, records_path: Path | None,
                        target: str | None, config_text: str | None, out: Path) -> None:
    """`build --targets`: one multi-target library (tuner.apply.build_multi_target_artifact)."""
    from tunefleet.tuner import records
    from tunefleet.tuner.apply import best_of_records, build_multi_target_artifact

    if targets_text is None:
        raise ArgumentError("--records: only with --targets (a single target builds --config)")
    if target is not None or config_text is not None:
        raise ArgumentError("--targets: not with --target or --config (each ISA builds its best record "
                            "from --records, else the operator's rule)")
    isas = [isa.strip() for isa in targets_text.split(",") if isa.strip()]
    try:
        for isa in isas:
            cpu_features(isa)
        if not isas:
            raise TargetError(f"name at least one ISA of {', '.join(DISPATCH_ISAS)}, e.g. avx2,avx512")
        found = records.load(records_path) if records_path is not None else []
    except TargetError as exc:
        raise ArgumentError(f"--targets: {exc}") from None
    except (OSError, ValueError) as exc:
        raise ArgumentError(f"--records: {exc}") from None
    try:
        path = build_multi_target_artifact(workload, best_of_records(found, workload, isas), out)
    except ConfigError as exc:  # the operators' default configs fit their spaces: a record's does not
        raise ArgumentError(f"--records: a best record's config is not in its config space: {exc}") from None
    except (ScheduleError, BuildError) as exc:
        raise click.ClickException(f"a config does not build: {exc}") from None
    click.echo(f"{workload.kernel_name()} ({', '.join(isas)}): wrote {path}")
