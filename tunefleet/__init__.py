"""tunefleet: auto-tuning service for tensor kernels."""

__version__ = "0.1.0"

