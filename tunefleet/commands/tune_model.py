"""`tunefleet tune-model`: tune every tunable layer of an ONNX model on this machine and write one
model bundle (one kernel library, its header and model_manifest.json)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from tunefleet.tuner.model.scheduler import SCHEDULERS

from .build import parse_target
from .opargs import ArgumentError
from .paths import OutputPath
from .tune import cpus_option, executable_here

#: The default record file of `tune-model` under TUNEFLEET_HOME: every model a user tunes
#: shares it, so a layer tuned for one model costs no trial in the next.
MODEL_RECORDS = "model-records.jsonl"


def _describe(workload) -> str:
    """A workload in one short line: its operator and the arguments that are not off or default."""
    shown = []
    for name, value in workload.args.items():
        if name == "dtype" and value == "float32" or value is False or value == "none":
            continue
        if isinstance(value, list) and len(set(value)) == 1:
            value = value[0]
        shown.append(name if value is True else f"{name}={value}")
    return f"{workload.op} {' '.join(shown)}"


def _report(console: Console, extraction) -> None:
    tasks = Table(title="Tasks", title_justify="left")
    for column in ("#", "workload", "occurrences", "FLOPs share"):
        tasks.add_column(column, justify="right" if column != "workload" else "left")
    for i, task in enumerate(extraction.tasks, 1):
        tasks.add_row(str(i), _describe(task.workload), str(task.occurrences), f"{extraction.share(task):.1%}")
    console.print(tasks)
    groups: dict[tuple[str, str], list] = {}
    for node in extraction.untuned:
        groups.setdefault((node.op_type, node.reason), []).append(node)
    untuned = Table(title=f"Untuned nodes: {extraction.untuned_share:.1%} of the FLOPs", title_justify="left")
    for column in ("op", "nodes", "FLOPs share", "reason"):
        untuned.add_column(column)
    total = max(1, extraction.total_flop)
    for (op_type, reason), nodes in sorted(groups.items(), key=lambda g: -sum(n.flop for n in g[1])):
        names = ", ".join(n.node for n in nodes[:3]) + (f" (+{len(nodes) - 3})" if len(nodes) > 3 else "")
        untuned.add_row(op_type, names, f"{sum(n.flop for n in nodes) / total:.1%}", reason)
    console.print(untuned)


@click.command("tune-model")
@click.argument("model", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=D1,D2,...",
              help="the shape of a graph input with dynamic dimensions, e.g. input=1,3,224,224 (repeatable)")
@click.option("--trials", type=click.IntRange(min=1), default=64, show_default=True,
              help="trials for the whole model (at least 1 per task), the record file's own counting toward each "
                   "task's share")
@click.option("--scheduler", type=click.Choice(SCHEDULERS), default=SCHEDULERS[0], show_default=True,
              help="how the trials are split: gradient (Ansor's: the next round to the task that lowers the "
                   "model's latency most), proportional (to FLOPs × occurrences), round-robin")
@click.option("--out", type=OutputPath(folder=True),
              help="bundle directory to write (required unless --list)")
@click.option("--records", "records_path", type=OutputPath(folder=False),
              help="record file (JSON lines) of all tasks [default: TUNEFLEET_HOME/model-records.jsonl, one per "
                   "user, ~/.tunefleet]; the trials it holds of a layer (from any model) are not measured again")
@click.option("--target", help="a CPU target this machine executes, e.g. 'cpu -isa=avx2' [default: its best]")
@click.option("--cpus", "cpus_text", metavar="LIST", help="CPUs to measure on, e.g. 0-1 [default: all allowed]")
@click.option("--repeat", type=click.IntRange(min=1), default=10, show_default=True,
              help="timed repeats per candidate (each at least 2 ms)")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), default=10.0, show_default=True,
              help="seconds one candidate may execute (check + timing)")
@click.option("--prepack/--no-prepack", default=True, show_default=True,
              help="convolutions (at most 14x14 output pixels) and linear layers (at least 16 rows) whose weights "
                   "are constants of the model take them pre-packed in their kernel's blocked layout, which the "
                   "caller packs once (model_manifest.json names it per argument; tunefleet.load(OUT).arguments "
                   "packs)")
@click.option("--list", "list_only", is_flag=True, help="print the tasks and untuned nodes, tune nothing")
def tune_model_command(model, input_shapes, trials, scheduler, out, records_path, target, cpus_text, repeat,
                       timeout, prepack, list_only) -> None:
    """Tune the layers of the ONNX MODEL on this machine and write one kernel library for them to OUT.

    E.g. `tunefleet tune-model resnet18.onnx --input-shape input=1,3,224,224 --trials 256 --out resnet18/`.
    Conv (+ bias) (+ Relu/Gelu), Gemm and MatMul (+ bias Add) (+ activation), batched MatMul
    become tasks (identical layers once, weighted by their occurrences); the other nodes are
    listed as untuned with their share of the FLOPs. `tunefleet.load(OUT)` loads the bundle;
    OUT/model_manifest.json maps each ONNX node to its kernel symbol and argument order, and
    names the layout of each pre-packed weight (`bundle.arguments(node, tensors)` packs it).
    """
    from tunefleet.base.settings import Settings
    from tunefleet.tuner.measure import MeasureProtocol
    from tunefleet.tuner.model import ModelError, extract_tasks, load_model, parse_input_shape, prepack_weights
    from tunefleet.tuner.model.bundle import write_bundle
    from tunefleet.tuner.model.scheduler import make_scheduler
    from tunefleet.tuner.model.tune_model import tune_model
    from tunefleet.tuner.records import RecordError

    if out is None and not list_only:
        raise ArgumentError("--out: required to tune (or --list to only list the tasks)")
    shapes = {}
    for text in input_shapes:
        try:
            name, shape = parse_input_shape(text)
        except ValueError as exc:
            raise ArgumentError(f"--input-shape: {exc}") from None
        shapes[name] = shape
    try:
        extraction = extract_tasks(load_model(model, shapes, max_bytes=Settings().max_model_bytes))
    except ModelError as exc:
        lines = "\n".join(f"  {p}" for p in exc.problems)
        raise click.ClickException(f"{model} cannot be tuned as given:\n{lines}") from None
    parsed = executable_here(parse_target(target or "cpu"))
    if parsed.kind != "cpu":
        raise ArgumentError(f"--target: a model bundle is one CPU library; {parsed} is not a CPU target")
    if prepack:
        extraction = prepack_weights(extraction, parsed)
    console = Console()
    _report(console, extraction)
    if list_only:
        return
    if not extraction.tasks:
        raise click.ClickException(f"{model} has no node that an operator runs")
    records_path = records_path or Settings().home / MODEL_RECORDS

    def round_done(task, done) -> None:
        console.print(f"{_describe(task.workload)}: {done.gflops(task.flop):.2f} GFLOP/s "
                      f"({done.latency_s * 1e3:.4g} ms) after {done.allotted} trials, {done.measured} measured now",
                      highlight=False)

    try:
        tuned = tune_model(extraction, parsed, trials=trials, records_path=records_path, on_round=round_done,
                           scheduler=make_scheduler(scheduler, extraction.tasks, trials),
                           protocol=MeasureProtocol(repeat=repeat, timeout_s=timeout), cpus=cpus_option(cpus_text))
    except RecordError as exc:
        raise ArgumentError(f"--records: {exc}") from None
    path = write_bundle(out, tuned, model_name=model.name)
    estimate = tuned.estimated_latency_s
    console.print(f"estimated model latency (Σ occurrences × kernel latency, tuned nodes): "
                  f"{estimate * 1e3:.4g} ms" if estimate is not None else
                  "some tasks had no correct config: their default config is in the bundle, unmeasured", highlight=False)
    click.echo(f"bundle {path} ({len(tuned.results)} kernels, {tuned.measured} trials measured in "
               f"{tuned.elapsed_s:.0f} s); records {records_path}")
