"""tunefleet.server: REST API, SQL store, orchestration, artifact store, dashboard."""
