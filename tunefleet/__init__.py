"""tunefleet: auto-tuning service for tensor kernels.

This package is the shell users touch: :func:`load` of an artifact, :class:`Client` of the
service's API, and the command line (``tunefleet.cli``, ``tunefleet.commands``). The shared
base every layer above the compiler may import is :mod:`tunefleet.base`; the layers are in
docs/architecture.md.
"""

from tunefleet.base.load import load
from tunefleet.base.version import __version__

__all__ = ["load", "Client", "__version__"]


def __getattr__(name: str) -> object:
    # tunefleet.Client needs httpx, which a worker host may lack: imported on first use.
    if name == "Client":
        from tunefleet.client import Client

        return Client
    raise AttributeError(f"module 'tunefleet' has no attribute {name!r}")
