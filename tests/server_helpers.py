"""Building artifact tarballs for server tests (a real layout, a stand-in library)."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path


def tarball(files: dict[str, bytes]) -> bytes:
    """A tar.gz holding `files` (archive name -> contents), the same bytes in every process (a
    gzip header's time is 0): tests parametrized by its hash are collected alike by each
    pytest-xdist process."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(buffer.getvalue(), mtime=0)


def artifact_files(name: str = "matmul_32x16x8", library: bytes = b"\x7fELF stand-in") -> dict[str, bytes]:
    """The files of an artifact directory `name/` as compiler.artifact lays it out."""
    manifest = {"name": name, "so_sha256": hashlib.sha256(library).hexdigest(), "abi_version": 1}
    return {
        f"{name}/manifest.json": json.dumps(manifest).encode(),
        f"{name}/{name}.so": library,
        f"{name}/{name}.h": b"int matmul_32x16x8(const float*, const float*, float*);\n",
        f"{name}/{name}.c": b"/* source */\n",
    }


def real_artifact(workload_args: dict, out_dir: Path) -> tuple[bytes, str]:
    """A real matmul artifact (default config, host target) as a tar.gz, and its kernel name."""
    from tunefleet.compiler import ops
    from tunefleet.compiler.artifact import write_artifact
    from tunefleet.compiler.driver import build_workload
    from tunefleet.compiler.target import Target

    workload = ops.make_workload("matmul", workload_args)
    target = Target.host()
    built = build_workload(workload, ops.default_config(workload, target), target)
    folder = write_artifact(out_dir / built.name, name=built.name, source=built.source,
                            so_path=built.so_path, args=built.args,
                            manifest={"workload": workload.to_json(), "target": str(target)})
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(folder, arcname=built.name)
    return buffer.getvalue(), built.name


def run_worker_jobs(api, worker_headers: dict[str, str], redis_url: str, device_key: str) -> bool:
    """Run every job queued on `device_key`'s queue in this process, as `tunefleet worker` runs
    them (the real job functions under its HeartbeatWorker, uploads to `api`, the in-process app,
    with `worker_headers`); returns whether any job ran."""
    from fastapi.testclient import TestClient

    http = TestClient(api.app, base_url="http://testserver/api/v1", headers=worker_headers)
    return run_worker_jobs_over(http, redis_url, device_key)


def run_worker_jobs_over(http, redis_url: str, device_key: str) -> bool:
    """`run_worker_jobs` with the worker's HTTP client given (`http`: an httpx.Client whose base
    URL is a server's /api/v1, with a worker token), e.g. one to a live server process."""
    from redis import Redis

    from tunefleet.base.rqworker import SERIALIZER, HeartbeatWorker, measure_queue
    from tunefleet.worker import jobs

    connection = Redis.from_url(redis_url)
    jobs.bind(jobs.WorkerContext(worker_id=0, name="in-test", device_key=device_key, measurer=None, http=http))
    try:
        worker = HeartbeatWorker([measure_queue(connection, device_key)], connection=connection,
                                 serializer=SERIALIZER)
        return worker.work(burst=True)
    finally:
        jobs.bind(None)
        connection.close()
