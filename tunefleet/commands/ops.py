"""`tunefleet ops`: the operators this installation knows, and their arguments."""

from __future__ import annotations

import json

import click

from tunefleet.compiler import ops
from tunefleet.tuner.plugins import load_plugins


def _describe(arg: dict) -> str:
    text = f"  --{arg['name']} {arg['type']}"
    if arg["required"]:
        text += " (required)"
    elif arg["default"] is not None:
        text += f" = {json.dumps(arg['default'])}"
    if arg["min"] is not None or arg["max"] is not None:
        text += f" [{'' if arg['min'] is None else arg['min']}..{'' if arg['max'] is None else arg['max']}]"
    if arg["choices"]:
        text += f" {{{', '.join(map(str, arg['choices']))}}}"
    return f"{text}  {arg['description']}".rstrip()


@click.command("ops")
@click.option("--json", "as_json", is_flag=True, help="print the schemas as JSON")
def ops_command(as_json: bool) -> None:
    """List the operators (with $TUNEFLEET_OPS_PLUGINS imported), their targets and arguments."""
    load_plugins()
    schemas = ops.list()
    if as_json:
        click.echo(json.dumps(schemas, indent=2))
        return
    for n, schema in enumerate(schemas):
        if n:
            click.echo()
        click.echo(f"{schema['name']}: {schema['description']}")
        click.echo(f"  family {schema['family']}; targets: {', '.join(schema['targets']) or 'none'}")
        for arg in schema["args"]:
            click.echo(_describe(arg))
