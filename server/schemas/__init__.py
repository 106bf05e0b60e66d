"""Pydantic request and response bodies of the API."""
