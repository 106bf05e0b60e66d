"""`python -m tunefleet`: the command line (as the `tunefleet` script)."""

from tunefleet.cli import main

main()
