"""`tunefleet submit-model`: submit an ONNX model to the service for whole-model tuning,
optionally wait for it and download its bundle."""

from __future__ import annotations

import json
from pathlib import Path

import click

from tunefleet.client import Client, model_line

from .opargs import ArgumentError
from .paths import OutputPath
from .submit import _client_command


def _shapes(texts: tuple[str, ...]) -> dict[str, list[int]]:
    """--input-shape NAME=D1,D2,... values as name → dims; ArgumentError (exit 2) naming the bad one."""
    shapes = {}
    for text in texts:
        name, sep, dims = text.rpartition("=")
        try:
            shapes[name] = [int(d) for d in dims.split(",")]
        except ValueError:
            name = ""
        if not sep or not name:
            raise ArgumentError(f"--input-shape: {text!r} is not NAME=D1,D2,... with integer dimensions")
    return shapes


@click.command("submit-model")
@click.argument("model", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--input-shape", "input_shapes", multiple=True, metavar="NAME=D1,D2,...",
              help="the shape of a graph input with dynamic dimensions (repeatable)")
@click.option("--trials", type=click.IntRange(min=1), default=64, show_default=True,
              help="trials for the whole model, spread over its layers by the server's task scheduler")
@click.option("--device-key", default=None, help="pool of workers [default: the only pool of live CPU workers]")
@click.option("--target", default=None, help="a CPU target, e.g. 'cpu -isa=avx2' [default: the best the hosts run]")
@click.option("--repeat", type=click.IntRange(min=1), help="timed repeats per candidate [default: the workers']")
@click.option("--prepack/--no-prepack", default=True, show_default=True,
              help="convolutions and linear layers whose weights are constants of the model take them pre-packed "
                   "in their kernel's blocked layout (the bundle's model_manifest.json names it; "
                   "tunefleet.load(OUT).arguments packs)")
@click.option("--wait", "wait_", is_flag=True, help="wait for the model to finish, printing its progress")
@click.option("--out", "out_dir", type=OutputPath(folder=True),
              help="with --wait: download the model bundle into this folder (tunefleet.load opens it)")
@click.option("--json", "as_json", is_flag=True, help="print the model as JSON")
@_client_command
def submit_model_command(client: Client, model: Path, input_shapes: tuple[str, ...], trials: int,
                         device_key: str | None, target: str | None, repeat: int | None, prepack: bool, wait_: bool,
                         out_dir: Path | None, as_json: bool) -> None:
    """Tune the layers of the ONNX MODEL on the service's workers, e.g.
    `tunefleet submit-model resnet18.onnx --trials 256 --wait --out resnet18/`."""
    if out_dir is not None and not wait_:
        raise ArgumentError("--out: needs --wait (the bundle exists once the model is done)")
    submitted = client.submit_model(model, trials=trials, target=target, device_key=device_key,
                                    input_shapes=_shapes(input_shapes),
                                    protocol=None if repeat is None else {"repeat": repeat}, prepack=prepack)
    if not as_json:
        click.echo(f"model {submitted['id']}: {len(submitted['tasks'])} layers, "
                   f"{submitted['untuned_flop_share']:.1%} of the FLOPs untuned")
    done = client.wait_model(submitted["id"], progress=not as_json) if wait_ else submitted
    if as_json:
        click.echo(json.dumps(done, indent=2))
    elif not wait_:
        click.echo(model_line(done))
    if wait_ and done["status"] != "done":
        raise click.ClickException(f"model {done['id']} is {done['status']}: {done['error'] or 'no bundle'}")
    if out_dir is not None:
        click.echo(f"bundle {client.download_bundle(done['id'], out_dir, progress=True)}")
