"""The `tunefleet` command line: one click group; each command lives in its own module
under `tunefleet/commands/` and is imported lazily, so `tunefleet --help` stays fast and a
worker host without the server extras can still run `tunefleet worker`."""

from __future__ import annotations

import importlib

import click

# command name -> "module:attribute" under tunefleet.commands
COMMANDS: dict[str, str] = {}


def register(name: str, target: str) -> None:
    """Register a lazily imported command (`target` is "module:attribute" in tunefleet.commands)."""
    COMMANDS[name] = target


class LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module, attr = COMMANDS[name].split(":")
        return getattr(importlib.import_module(f"tunefleet.commands.{module}"), attr)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="tunefleet")
def main() -> None:
    """tunefleet: auto-tune tensor kernels and ship them as self-contained .so + C header."""


register("ops", "ops:ops_command")
register("build", "build:build_command")
register("db", "db:db_group")
register("token", "token:token_group")
register("server", "server:server_command")
register("submit", "submit:submit_command")
register("status", "submit:status_command")
register("wait", "submit:wait_command")
register("download", "submit:download_command")
register("tuner", "tuner:tuner_command")
register("worker", "worker:worker_command")
register("up", "up:up_command")
register("demo", "demo:demo_command")

register("tune", "tune:tune_command")
