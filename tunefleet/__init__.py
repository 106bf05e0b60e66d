"""tunefleet: auto-tuning service for tensor kernels."""

__version__ = "0.1.0"

# Imported eagerly: the submodule tunefleet.load would otherwise shadow the function.
from tunefleet.load import load  # noqa: E402
