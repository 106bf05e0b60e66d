"""One router module per resource. Each router carries the full /api/v1 prefix itself, so
a route's `path` is the whole URL template (metrics label requests by it)."""

API_PREFIX = "/api/v1"
