"""Targets that match the workers, as real processes (`tunefleet server`, `tuner`, `worker`
over SQLite and the tests' Redis): a task submitted through the client without a target is
built for this host's best ISA; a target the device key's workers cannot execute is a 422;
a worker whose host disagrees with its key's live hosts is refused and exits with one
line; a worker that still receives a target it cannot execute answers
`unsupported_target`, building nothing, and the task fails at once.

No ISA is written down: "this host's best" is Target.host() and "one it lacks" the first
CPU ISA it cannot execute (neon on x86, avx512 on Arm)."""

from __future__ import annotations

import json
import shutil
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from service_helpers import CPU_A, PROTOCOL, Service, start_service, wait_for, wait_status

from tunefleet.client import Client, ServiceError
from tunefleet.compiler.target import CPU_ISAS, Target

pytestmark = pytest.mark.timeout(300)

HOST = Target.host()
FOREIGN = Target("cpu", next(isa for isa in CPU_ISAS if not Target("cpu", isa).runs_on(HOST)))
MATMUL = {"M": 64, "N": 64, "K": 64}


@pytest.fixture(scope="module")
def service(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
            redis_url: str) -> Iterator[Service]:
    """A server on SQLite with a tuner and one worker of device key test-cpu."""
    root = tmp_path_factory.mktemp("service-targets")
    shutil.copyfile(request.getfixturevalue("_migrated_sqlite"), root / "tunefleet.db")
    service = start_service(root, f"sqlite:///{root / 'tunefleet.db'}", redis_url)
    try:
        service.start_tuner()
        service.start_worker("worker0", CPU_A)
        wait_for(lambda: service.workers().get("test-worker0", {}).get("state") == "idle", 60, "worker0")
        yield service
    finally:
        service.stop_all()


def test_a_task_without_a_target_is_built_for_the_hosts_best_isa(service: Service, tmp_path: Path) -> None:
    with Client(service.url, service.user_token) as client:
        task = client.submit("matmul", MATMUL, trials=4, protocol=PROTOCOL)  # no target, no device key
        assert (task["target"], task["device_key"]) == (str(HOST), "test-cpu")
        done = client.wait(task["id"], timeout_s=240)
        assert done["status"] == "done", done["error"]
        folder = client.download(task["id"], tmp_path)
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["target"] == str(HOST) and manifest["device_key"] == "test-cpu"


def test_a_target_the_workers_cannot_execute_is_422(service: Service) -> None:
    with Client(service.url, service.user_token) as client, pytest.raises(ServiceError) as refused:
        client.submit("matmul", MATMUL, target=str(FOREIGN), device_key="test-cpu")
    assert refused.value.status_code == 422
    (error,) = refused.value.detail
    assert error["loc"] == ["body", "target"]
    assert all(word in error["msg"] for word in (repr(str(FOREIGN)), "'test-cpu'", str(HOST)))


def test_a_worker_whose_host_disagrees_with_its_keys_live_hosts_is_refused(service: Service) -> None:
    """A (registered, heartbeating) host of another best target holds key test-mixed; the
    real worker of this host then registering there exits 1 with one line naming both."""
    auth = {"Authorization": f"Bearer {service.worker_token}"}
    other = {"name": "foreign-host", "device_key": "test-mixed", "host": {"cpu_isa": FOREIGN.isa}}
    registered = httpx.post(f"{service.url}/api/v1/workers/register", json=other, headers=auth, timeout=30)
    assert registered.status_code == 200, registered.text
    stop = threading.Event()

    def keep_alive() -> None:  # the server counts a host live while it heartbeats
        while not stop.wait(0.5):
            httpx.post(f"{service.url}/api/v1/workers/{registered.json()['id']}/heartbeat",
                       json={"state": "idle"}, headers=auth, timeout=30)

    beats = threading.Thread(target=keep_alive, daemon=True)
    beats.start()
    try:
        worker = service.start_worker("worker-mixed", CPU_A, device_key="test-mixed")
        assert worker.wait(timeout=120) == 1
    finally:
        stop.set()
        beats.join()
    errors = [line for line in service.logs["worker-mixed"].read_text().splitlines() if line.startswith("Error")]
    assert len(errors) == 1, errors
    assert all(word in errors[0] for word in ("409", "'test-mixed'", str(HOST), str(FOREIGN), "'foreign-host'"))
    assert "test-worker-mixed" not in service.workers()


def test_a_worker_answers_unsupported_target_and_the_task_fails_at_once(service: Service) -> None:
    """No host of test-later is live at submission, so the named target is kept; the worker
    that then serves the key cannot execute it."""
    with Client(service.url, service.user_token) as client:
        task = client.submit("matmul", MATMUL, target=str(FOREIGN), device_key="test-later", trials=50,
                             protocol=PROTOCOL)
    assert task["target"] == str(FOREIGN)
    service.start_worker("worker-later", CPU_A, device_key="test-later")
    failed = wait_status(service, task["id"], {"done", "failed"}, timeout_s=120)
    assert failed["status"] == "failed"
    assert failed["error"].startswith("unsupported_target:") and str(FOREIGN) in failed["error"]
    assert str(HOST) in failed["error"] and "test-worker-later" in failed["error"]
    trials = service.trials(task["id"])  # the ones in flight when the first answer came, not the budget
    assert 1 <= len(trials) <= 2 and failed["trials_done"] < 50
    recorded = [t for t in trials if t["status"] == "unsupported_target"]
    assert recorded and all(t["build_s"] == 0 and t["costs"] == [] for t in recorded)
