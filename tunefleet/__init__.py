"""tunefleet: auto-tuning service for tensor kernels."""

__version__ = "0.1.0"

# Imported eagerly: the submodule tunefleet.load would otherwise shadow the function.
from tunefleet.load import load  # noqa: E402


def __getattr__(name: str) -> object:
    # tunefleet.Client needs httpx, which a worker host may lack: imported on first use.
    if name == "Client":
        from tunefleet.client import Client

        return Client
    raise AttributeError(f"module 'tunefleet' has no attribute {name!r}")
