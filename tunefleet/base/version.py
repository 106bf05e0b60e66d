"""The version of tunefleet (pyproject's ``version``), recorded in trial records and shown by
the API and the dashboard."""

__version__ = "0.1.0"
