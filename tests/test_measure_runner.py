"""The service's runner against a real Redis, without workers: what it does with a job that
Redis lost."""

from __future__ import annotations

import time

from rq.job import Job, JobStatus

from tunefleet.base.rqworker import measure_queue
from tunefleet.compiler import ops
from tunefleet.compiler.target import Target
from tunefleet.server import queue
from tunefleet.server.measure_runner import DistributedRunner
from tunefleet.tuner.interfaces import Candidate
from tunefleet.tuner.measure import MeasureProtocol


def test_a_job_left_queued_in_no_queue_is_enqueued_again(redis) -> None:
    """A worker's BLPOP that took a job as Redis went down lost its reply; redis-py sent it again
    once Redis was back, and the job stayed queued in no queue, never run: the tuner waited for
    it forever (seen in CI, test_redis_stopped_for_a_minute_mid_task). After lost_after_s it is
    enqueued again; a job in its queue is left as it is."""
    workload = ops.make_workload("matmul", {"M": 8, "N": 8, "K": 8})
    target = Target.host()
    measure = measure_queue(redis, "test-lost")
    runner = DistributedRunner(measure, 7, workload.to_json(), str(target), MeasureProtocol(), lambda: 1,
                               poll_s=0.1, check_s=0.1, lost_after_s=0.5)
    lost, kept = runner.submit([Candidate(ops.default_config(workload, target), ref=1),
                                Candidate(ops.config_space(workload, target).get(1), ref=2)], MeasureProtocol())
    assert measure.job_ids == [lost.job_id, kept.job_id]
    assert redis.lpop(measure.key).decode() == lost.job_id  # the popped job whose worker never heard of it
    runner.poll([lost, kept])
    assert measure.job_ids == [kept.job_id]  # not yet: a worker that pops a job may be about to start it
    time.sleep(0.6)
    runner.poll([lost, kept])
    assert measure.job_ids == [kept.job_id, lost.job_id]
    assert Job.fetch(lost.job_id, connection=redis, serializer=queue.SERIALIZER).get_status() == JobStatus.QUEUED
    runner.poll([lost, kept])
    assert measure.job_ids == [kept.job_id, lost.job_id]  # each once
