"""HeartbeatWorker against a real Redis: one enqueue of a job runs once, while real enqueues
(a new one, RQ's retry) run again."""

from __future__ import annotations

import time

from redis import Redis
from rq import Queue, Retry, get_current_job
from rq.job import JobStatus

from tunefleet.base.rqworker import SERIALIZER, HeartbeatWorker


def count_runs(key: str) -> int:
    """The tests' job: counts its runs in Redis under `key`."""
    return get_current_job().connection.incr(key)


def fail_first_run(key: str) -> int:
    """Raises on its first run, then counts like :func:`count_runs`."""
    runs = count_runs(key)
    if runs == 1:
        raise RuntimeError("first run fails")
    return runs


def _queue(redis: Redis) -> Queue:
    return Queue("measure:rqworker-test", connection=redis, serializer=SERIALIZER)


def _work(redis: Redis, queue: Queue) -> None:
    HeartbeatWorker([queue], connection=redis, serializer=SERIALIZER, heartbeat_s=1).work(burst=True)


def test_a_queue_entry_sent_twice_runs_the_job_once(redis: Redis) -> None:
    """What a re-sent enqueue pipeline leaves (seen in Redis's append-only file after an
    outage): the job once, its id twice in the queue."""
    queue = _queue(redis)
    job = queue.enqueue(count_runs, "runs", job_id="measure-1-7")
    redis.rpush(queue.key, job.id)
    assert queue.count == 2

    _work(redis, queue)
    job.refresh()
    assert int(redis.get("runs")) == 1
    assert job.get_status() == JobStatus.FINISHED and job.return_value() == 1
    assert queue.count == 0 and redis.llen(queue.intermediate_queue_key) == 0


def test_a_retry_and_a_new_enqueue_of_the_same_job_id_run_again(redis: Redis) -> None:
    queue = _queue(redis)
    job = queue.enqueue(fail_first_run, "flaky", job_id="measure-1-8", retry=Retry(max=1))
    _work(redis, queue)
    job.refresh()
    assert int(redis.get("flaky")) == 2 and job.get_status() == JobStatus.FINISHED

    for expected in (1, 2):  # as the tuner enqueues a trial again when its job was stopped
        queue.enqueue(count_runs, "again", job_id="measure-1-9")
        _work(redis, queue)
        assert int(redis.get("again")) == expected


def test_unsubscribe_does_not_wait_for_the_pubsub_read(redis: Redis) -> None:
    """What a warm shutdown does last, in the order that made a worker sent SIGTERM take a
    minute to exit: the main thread loses the CPU right after sending UNSUBSCRIBE, so the
    pub/sub thread takes the reply and starts its next read (up to RQ's 60 s) before it is
    told to stop. Unsubscribing must still return at once and end the thread."""
    worker = HeartbeatWorker([_queue(redis)], connection=redis, serializer=SERIALIZER, heartbeat_s=1)
    worker.subscribe()
    send_unsubscribe = worker.pubsub.unsubscribe

    def send_then_lose_the_cpu(*args, **kwargs):
        sent = send_unsubscribe(*args, **kwargs)
        time.sleep(0.5)
        return sent

    worker.pubsub.unsubscribe = send_then_lose_the_cpu
    time.sleep(0.3)  # the thread is in its read
    start = time.monotonic()
    worker.unsubscribe()
    assert time.monotonic() - start < 10
    assert not worker.pubsub_thread.is_alive()
