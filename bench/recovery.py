"""How fast the service recovers from each kind of fault.

Runs `tunefleet up` (SQLite, or PostgreSQL behind a proxy with --database-url; Redis: a
private redis-server of this script's own, or the embedded one with --embedded-redis) on a
long task (matmul 64x64x64, one trial measuring ~0.15 s) and, --repeat times each, injects:

- ``kill-<child>``: SIGKILL of the worker, the tuner, the server (and the embedded Redis);
- ``redis-outage``: the private Redis shut down for --outage-s seconds, then started again
  with its data;
- ``sql-outage`` (with --database-url): every connection to PostgreSQL cut and new ones
  refused for --outage-s seconds, by a TCP proxy.

For each it prints the median and the spread of two times, counted from the kill (or from the
end of the outage): *back*, until the killed process is running again and answers (server:
/healthz; worker: a heartbeat newer than the kill; tuner and Redis: running), and
*progress*, until the task stores its next trial (read from SQL directly). A fault waits for
the previous one's progress before it is injected.

    python bench/recovery.py [--repeat 3] [--outage-s 10] [--embedded-redis]
    python bench/recovery.py --database-url postgresql+psycopg://postgres@127.0.0.1:5432/test  # (a schema of its own)

Not part of the test run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import signal
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import httpx
from sqlalchemy import create_engine, make_url, text

TESTS = Path(__file__).resolve().parent.parent / "tests"
sys.path.insert(0, str(TESTS))

from outage_helpers import CuttableProxy, PrivateRedis  # noqa: E402
from service_helpers import PROTOCOL, free_port, start_up, up_child, wait_for  # noqa: E402

from tunefleet.client import Client  # noqa: E402

class Run:
    """`tunefleet up` on a task that outlasts the faults."""

    def __init__(self, root: Path, database_url: str | None, redis_url: str | None) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {}
        if database_url:
            env["TUNEFLEET_DATABASE_URL"] = database_url
        if redis_url:
            env["TUNEFLEET_REDIS_URL"] = redis_url
        self.up, self.token = start_up(root / "home", self.port, root / "up.log", env=env)
        with Client(self.url, self.token) as client:
            self.task = client.submit("matmul", {"M": 64, "N": 64, "K": 64}, trials=2000,
                                      protocol={**PROTOCOL, "repeat": 3, "min_repeat_ms": 50})["id"]
        self.sql = create_engine(database_url or f"sqlite:///{root / 'home' / 'tunefleet.db'}", pool_pre_ping=True)

    def stored(self) -> int:
        with self.sql.connect() as conn:
            return conn.execute(text("SELECT count(*) FROM trials WHERE task_id = :t AND status NOT IN "
                                     "('queued', 'running')"), {"t": self.task}).scalar_one()

    def stop(self) -> None:
        self.up.send_signal(signal.SIGTERM)
        self.up.wait(timeout=300)
        self.sql.dispose()


def until(predicate: Callable[[], object], timeout_s: float = 600) -> float:
    """Seconds until `predicate()` is truthy (polled every 50 ms)."""
    t0 = time.monotonic()
    wait_for(predicate, timeout_s, "recovery", poll_s=0.05)
    return time.monotonic() - t0


def healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/api/v1/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def worker_beat_after(run: Run, since: dt.datetime) -> bool:
    try:
        workers = httpx.get(f"{run.url}/api/v1/workers", timeout=2,
                            headers={"Authorization": f"Bearer {run.token}"}).json()["items"]
    except (httpx.TransportError, ValueError, KeyError):
        return False
    return any(dt.datetime.fromisoformat(w["last_heartbeat"]) > since for w in workers)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--outage-s", type=float, default=10.0)
    parser.add_argument("--embedded-redis", action="store_true", help="kill the embedded Redis instead of an outage")
    parser.add_argument("--database-url", help="PostgreSQL to put behind a cuttable proxy (adds sql-outage)")
    args = parser.parse_args()

    root = Path(tempfile.mkdtemp(prefix="tunefleet-recovery-"))
    redis = None if args.embedded_redis else PrivateRedis(root / "redis")
    proxy = None
    database_url = None
    schema = f"tf_recovery_{uuid.uuid4().hex[:12]}"  # an empty store of its own, dropped at the end
    if args.database_url:
        from tunefleet.server.db.migrate import upgrade

        with create_engine(args.database_url, isolation_level="AUTOCOMMIT").connect() as conn:
            conn.execute(text(f'CREATE SCHEMA "{schema}"'))
        direct = make_url(args.database_url).update_query_dict({"options": f"-csearch_path={schema}"})
        proxy = CuttableProxy((direct.host or "127.0.0.1", direct.port or 5432))
        proxy.restore()
        database_url = direct.set(host="127.0.0.1", port=proxy.port).render_as_string(hide_password=False)
        upgrade(database_url)
    if redis:
        redis.start()
    try:
        run = Run(root, database_url, redis.url if redis else None)
    except BaseException:
        _clean_up(None, redis, proxy, args.database_url, schema)
        raise
    faults = ["kill-worker", "kill-tuner", "kill-server"] + (["kill-redis"] if args.embedded_redis else ["redis-outage"])
    if proxy:
        faults.append("sql-outage")
    times: dict[str, list[tuple[float, float]]] = {f: [] for f in faults}
    try:
        for _ in range(args.repeat):
            for fault in faults:
                before = run.stored()
                wait_for(lambda: run.stored() > before, 600, "progress before the fault", poll_s=0.1)
                before = run.stored()
                if fault.startswith("kill-"):
                    name = fault.removeprefix("kill-")
                    victim = wait_for(lambda: up_child(run.up.pid, name), 60, name)
                    killed_at = dt.datetime.now(dt.UTC)
                    os.kill(victim, signal.SIGKILL)
                    t0 = time.monotonic()
                    ready = {"server": lambda: healthy(run.url), "worker": lambda: worker_beat_after(run, killed_at)}
                    respawned = lambda: up_child(run.up.pid, name) not in (None, victim)  # noqa: E731
                    until(lambda: respawned() and ready.get(name, lambda: True)())
                    back = time.monotonic() - t0
                elif fault == "redis-outage":
                    redis.stop()
                    time.sleep(args.outage_s)
                    redis.start()
                    t0, back = time.monotonic(), 0.0
                else:
                    proxy.cut()
                    time.sleep(args.outage_s)
                    proxy.restore()
                    t0, back = time.monotonic(), 0.0
                until(lambda: run.stored() > before)
                times[fault].append((back, time.monotonic() - t0))
                print(f"{fault}: back {back:.1f} s, progress {times[fault][-1][1]:.1f} s", flush=True)
    finally:
        _clean_up(run, redis, proxy, args.database_url, schema)
    print(f"\nrecovery after each fault, {args.repeat} times each (median [min-max]; outages {args.outage_s:g} s):")
    for fault, got in times.items():
        backs, progress = [b for b, _ in got], [p for _, p in got]
        print(f"  {fault:13s} back {statistics.median(backs):5.1f} s [{min(backs):.1f}-{max(backs):.1f}]   "
              f"next trial stored {statistics.median(progress):5.1f} s [{min(progress):.1f}-{max(progress):.1f}]")


def _clean_up(run: Run | None, redis: PrivateRedis | None, proxy: CuttableProxy | None, database_url: str | None,
              schema: str) -> None:
    if run is not None:
        run.stop()
    if redis:
        redis.stop()
    if proxy:
        proxy.cut()
    if database_url:
        with create_engine(database_url, isolation_level="AUTOCOMMIT").connect() as conn:
            conn.execute(text(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'))


if __name__ == "__main__":
    main()
