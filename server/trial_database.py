"""The service's :class:`~tunefleet.tuner.interfaces.Database`: a task's trial rows in SQL.

A config becomes a ``queued`` trial before its measure job is enqueued (unique per task and
config index, so each config is measured at most once even across tuners), ``running``
when a worker takes the job, and carries its result the moment it comes back, counted in
the task's progress (:mod:`.services.tuning`, whose functions commit).
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from tunefleet.compiler.space import ConfigEntity
from tunefleet.server.db.models import TrialStatus
from tunefleet.server.services import tuning
from tunefleet.tuner.interfaces import Candidate, Database, RunnerResult, StoredTrial

__all__ = ["SqlDatabase"]


class SqlDatabase(Database):
    """The trials of task ``task_id``; a candidate's ``ref`` is its trial's id."""

    def __init__(self, session: Session, task_id: int) -> None:
        self.session = session
        self.task_id = task_id

    def trials(self) -> list[StoredTrial]:
        return [
            StoredTrial(t.config, None if t.status in tuning.UNFINISHED_TRIAL else tuning.trial_result(t), t.id,
                        t.status == TrialStatus.RUNNING)
            for t in tuning.trials_of(self.session, self.task_id)
        ]

    def add(self, configs: Sequence[ConfigEntity]) -> list[Candidate]:
        by_index = {c.index: c for c in configs}
        trials = tuning.add_trials(self.session, self.task_id, [(c.index, c.to_json()) for c in configs])
        return [Candidate(by_index[t.config_index], t.id) for t in trials]

    def record(self, candidate: Candidate, measured: RunnerResult) -> bool:
        """Store the result; False when the trial was recorded already or is gone."""
        return tuning.record_result(self.session, candidate.ref, measured.result, attempts=measured.attempts,
                                    worker_id=measured.worker_id)

    def mark_running(self, candidates: Sequence[Candidate]) -> None:
        tuning.mark_running(self.session, [c.ref for c in candidates])

    def drop_unmeasured(self) -> None:
        tuning.delete_unfinished(self.session, self.task_id)
