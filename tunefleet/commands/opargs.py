"""Operator arguments on the command line, shared by `tunefleet build` and `tunefleet tune`.

Every argument of an operator's schema is an option: ``--M 1024``,
``--epilogue=relu``, ``--stride 2`` or ``--stride [2,1]`` (structured values
are JSON); a bool takes true/false/yes/no/1/0, or nothing (``--bias`` alone
means true). ``--workload FILE.json`` reads
``{"op": ..., "args": {...}}`` instead; options given beside it override the
file's arguments. A bad value exits with status 2 and one line naming the
field.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from tunefleet.compiler import ops
from tunefleet.tuner.plugins import PluginError, load_plugins

__all__ = ["ArgumentError", "OP_ARGS_SETTINGS", "workload_command", "workload_from_cli"]

#: click context settings of a command taking operator arguments as unknown options.
OP_ARGS_SETTINGS = {"ignore_unknown_options": True, "allow_extra_args": True}
_BOOLS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


class ArgumentError(click.ClickException):
    """A bad command-line value: printed as one line, exit status 2 (as click's usage errors)."""

    exit_code = 2


def _convert(arg: ops.ArgDef, text: str) -> Any:
    if arg.type == "int":
        try:
            return int(text)
        except ValueError:
            raise ops.WorkloadError(arg.name, f"must be an integer, got {text!r}") from None
    if arg.type == "float":
        try:
            return float(text)
        except ValueError:
            raise ops.WorkloadError(arg.name, f"must be a number, got {text!r}") from None
    if arg.type == "bool":
        if text.lower() not in _BOOLS:
            raise ops.WorkloadError(arg.name, f"must be true or false, got {text!r}")
        return _BOOLS[text.lower()]
    if arg.type == "str":
        return text
    try:  # "json", and structured types such as "int2": the value as JSON ([2, 1], 2, {...})
        return json.loads(text)
    except ValueError:
        if arg.type == "json":
            raise ops.WorkloadError(arg.name, f"is not JSON: {text!r}") from None
        return text  # the operator's own check names what it expected


def _parse(opdef: ops.OpDef, tokens: list[str]) -> dict[str, Any]:
    schema = {a.name: a for a in opdef.args}
    values: dict[str, Any] = {}
    i = 0
    while i < len(tokens):
        token = tokens[i]
        if not token.startswith("--") or len(token) == 2:
            raise ops.WorkloadError("args", f"unexpected argument {token!r}; operator arguments are --NAME VALUE")
        name, eq, text = token[2:].partition("=")
        if name not in schema:
            raise ops.WorkloadError(name, f"unknown argument of {opdef.name}; arguments: "
                                          f"{', '.join('--' + n for n in schema)}")
        if not eq:
            if schema[name].type == "bool" and (i + 1 == len(tokens) or tokens[i + 1].startswith("--")):
                text = "true"
            elif i + 1 == len(tokens):
                raise ops.WorkloadError(name, "needs a value")
            else:
                i += 1
                text = tokens[i]
        if name in values:
            raise ops.WorkloadError(name, "given twice; give it once")
        values[name] = _convert(schema[name], text)
        i += 1
    return values


def workload_command(name: str, target_help: str) -> Callable[[Callable[..., Any]], click.Command]:
    """The click command `name` whose workload is OP with its arguments (``op``, ``op_args``) or
    a ``--workload`` file (``workload_file``; see :func:`workload_from_cli`), with a
    ``--target`` option described by `target_help`, before the command's own options."""
    def decorate(function: Callable[..., Any]) -> click.Command:
        function = click.option("--target", help=target_help)(function)
        function = click.option("--workload", "workload_file", type=click.Path(dir_okay=False, path_type=Path),
                                help="a workload JSON file {\"op\": ..., \"args\": {...}} instead of OP and its "
                                     "arguments")(function)
        function = click.argument("op_args", nargs=-1, type=click.UNPROCESSED)(function)
        function = click.argument("op", required=False)(function)
        return click.command(name, context_settings=OP_ARGS_SETTINGS)(function)

    return decorate


def workload_from_cli(op: str | None, tokens: list[str], workload_file: Path | None) -> ops.Workload:
    """The workload named by an operator and its ``--NAME VALUE`` tokens and/or a workload file.

    Imports the operator plugins of ``$TUNEFLEET_OPS_PLUGINS`` first. Raises
    ArgumentError (one line, exit status 2) naming the bad field.
    """
    if op is not None and op.startswith("--"):  # no OP before the options (with --workload): click took one
        op, tokens = None, [op, *tokens]
    try:
        load_plugins()
        args: dict[str, Any] = {}
        if workload_file is not None:
            try:
                data = json.loads(workload_file.read_text())
            except (OSError, ValueError) as exc:
                raise ArgumentError(f"--workload: cannot read {workload_file}: {exc}") from None
            if not isinstance(data, dict) or not isinstance(data.get("args", {}), dict):
                raise ArgumentError(f"--workload: {workload_file} must hold {{\"op\": ..., \"args\": {{...}}}}")
            if op is not None and data.get("op") != op:
                raise ArgumentError(f"op: {op!r} differs from the workload file's {data.get('op')!r}")
            op, args = data.get("op"), dict(data.get("args", {}))
        if op is None:
            raise ArgumentError("op: name an operator (see `tunefleet ops`) or give --workload FILE.json")
        args.update(_parse(ops.get(op), tokens))
        return ops.make_workload(op, args)
    except (ops.WorkloadError, PluginError) as exc:
        raise ArgumentError(str(exc)) from None
