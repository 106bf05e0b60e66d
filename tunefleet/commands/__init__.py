"""CLI commands, one module each (see tunefleet/cli.py)."""
