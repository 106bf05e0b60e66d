"""Alembic migrations of the SQL schema, shipped as `tunefleet.server.migrations`
(run them with `tunefleet db upgrade`)."""
