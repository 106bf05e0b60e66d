"""The `tunefleet` command line: one click group; each command lives in its own module
under `tunefleet/commands/` and is imported lazily, so `tunefleet --help` stays fast and a
worker host without the server extras can still run `tunefleet worker`."""

from __future__ import annotations

import importlib

import click

# The extra (pyproject's optional-dependencies) that holds everything a command needs beyond
# the base install (None: the base install suffices) -> its commands, each as
# name: "module:attribute" under tunefleet.commands.
_COMMANDS_BY_EXTRA: dict[str | None, dict[str, str]] = {
    None: {"ops": "ops:ops_command", "build": "build:build_command"},
    "tuner": {"tune": "tune:tune_command"},
    "model": {"tune-model": "tune_model:tune_model_command"},
    "server": {"db": "db:db_group", "token": "token:token_group", "server": "server:server_command"},
    "client": {"submit": "submit:submit_command", "status": "submit:status_command",
               "wait": "submit:wait_command", "download": "submit:download_command",
               "submit-model": "submit_model:submit_model_command"},
    "worker": {"worker": "worker:worker_command"},
    "all": {"tuner": "tuner:tuner_command", "up": "up:up_command", "demo": "demo:demo_command"},
}
# command name -> ("module:attribute" under tunefleet.commands, the extra it needs or None)
COMMANDS: dict[str, tuple[str, str | None]] = {
    name: (target, extra) for extra, commands in _COMMANDS_BY_EXTRA.items() for name, target in commands.items()
}


def missing_extra(name: str, exc: ModuleNotFoundError) -> click.ClickException:
    """The one-line error for command `name` failing to import a module of its extra.
    Re-raises `exc` when the command needs no extra or a tunefleet module is missing (a broken
    install, not a missing extra)."""
    extra = COMMANDS[name][1]
    if extra is None or (exc.name or "tunefleet").partition(".")[0] == "tunefleet":
        raise exc
    return click.ClickException(f"tunefleet {name} needs the '{extra}' extra (no module named {exc.name!r}): "
                                f"pip install 'tunefleet[{extra}]'")


def _unavailable(name: str, error: click.ClickException) -> click.Command:
    """Stands in for command `name` whose module cannot be imported: listed in the help, and
    fails with `error` whatever its arguments (--help included)."""

    def fail(args: tuple[str, ...]) -> None:
        raise error

    extra = COMMANDS[name][1]
    return click.Command(name, callback=fail, help=f"(not installed: pip install 'tunefleet[{extra}]')",
                         params=[click.Argument(["args"], nargs=-1, type=click.UNPROCESSED)],
                         context_settings={"ignore_unknown_options": True, "help_option_names": []})


class LazyGroup(click.Group):
    """Imports a command's module when the command is run or its help is shown. A command whose
    extra is not installed is still listed, and running it fails with one line naming the
    extra to install."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr = COMMANDS[name][0].split(":")
        try:
            return getattr(importlib.import_module(f"tunefleet.commands.{module}"), attr)
        except ModuleNotFoundError as exc:
            return _unavailable(name, missing_extra(name, exc))

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except ModuleNotFoundError as exc:  # imported when the command runs
            if ctx.invoked_subcommand is None:
                raise
            raise missing_extra(ctx.invoked_subcommand, exc) from None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tunefleet")
def main() -> None:
    """tunefleet: auto-tune tensor kernels and ship them as self-contained .so + C header."""
