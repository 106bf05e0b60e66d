"""Targets that match the workers, at the API (real SQL, the tests' Redis): the hosts of a
device key agree on their best target (a mismatching registration is a 409); a task gets
the best target its key's live hosts execute when it names none (or a kind alone); a
target they cannot execute is a 422; with no live host the target waits for the tuner;
GET /targets lists each live pool's default and marks pools whose hosts disagree."""

from __future__ import annotations

import datetime as dt
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from tunefleet.compiler.target import Target
from tunefleet.server.db.models import Task, Worker
from tunefleet.server.errors import FieldError
from tunefleet.server.services import pools

MATMUL = {"op": "matmul", "args": {"M": 32, "N": 16, "K": 8}}
AVX2 = {"cpu_model": "AMD EPYC 7B13", "cpu_isa": "avx2", "isa": ["avx2", "fma"], "cores": 2}
AVX512 = {"cpu_model": "Intel Xeon 8375C", "cpu_isa": "avx512",
          "isa": ["avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512dq"], "cores": 2}


def register(api, tokens, name: str, device_key: str, host: dict):
    return api.post("/api/v1/workers/register", json={"name": name, "device_key": device_key, "host": host},
                    headers=tokens["worker"])


def submit(api, tokens, **body):
    return api.post("/api/v1/tasks", json={**MATMUL, **body}, headers=tokens["user"])


def silence(db, settings, name: str) -> None:
    """Make worker `name` lost (no heartbeat for longer than the server waits)."""
    worker = db.query(Worker).filter(Worker.name == name).one()
    worker.last_heartbeat = dt.datetime.now(dt.UTC) - dt.timedelta(seconds=settings.worker_lost_after_s + 1)
    db.commit()


def test_a_host_whose_best_target_differs_from_the_live_hosts_of_its_key_is_refused(api, tokens, db, settings,
                                                                                     snapshot) -> None:
    assert register(api, tokens, "zen3", "cpu-pool", AVX2).status_code == 200
    before = snapshot()
    refused = register(api, tokens, "xeon", "cpu-pool", AVX512)
    assert refused.status_code == 409
    message = refused.json()["detail"]
    assert all(word in message for word in ("'cpu-pool'", "'xeon'", "cpu -isa=avx512", "'zen3'", "cpu -isa=avx2"))
    assert snapshot() == before  # nothing stored
    # the same host restarting may change; another key, or the key once its host is lost, takes it
    assert register(api, tokens, "zen3", "cpu-pool", AVX512).status_code == 200
    assert register(api, tokens, "zen3", "cpu-pool", AVX2).status_code == 200
    assert register(api, tokens, "xeon", "cpu-pool-avx512", AVX512).status_code == 200
    silence(db, settings, "zen3")
    assert register(api, tokens, "xeon", "cpu-pool", AVX512).status_code == 200
    # a GPU host agrees on its architecture, not on its CPU
    gpu = {**AVX2, "kind": "cuda", "compute_capability": "9.0"}
    assert register(api, tokens, "h100-a", "cuda-h100", gpu).json()["host"]["cuda_arch"] == "sm_90"
    assert register(api, tokens, "h100-b", "cuda-h100", {**gpu, **AVX512, "cuda_arch": "sm_90"}).status_code == 200
    other = register(api, tokens, "a100", "cuda-h100", {**gpu, "compute_capability": "8.0"})
    assert other.status_code == 409 and "cuda -arch=sm_80" in other.json()["detail"]


def test_of_disagreeing_hosts_registering_at_once_exactly_one_kind_is_accepted(api, tokens, db) -> None:
    """Registrations race on each key from threads (each request on its own connection);
    the agreement check and the write are one transaction under the key's lock."""
    hosts = [(f"{key}-{i}", key, AVX512 if i % 2 else AVX2) for key in ("race-a", "race-b", "race-c")
             for i in range(8)]
    start = threading.Barrier(len(hosts))

    def race(name: str, key: str, host: dict):
        start.wait()
        return register(api, tokens, name, key, host)

    with ThreadPoolExecutor(len(hosts)) as threads:
        responses = list(threads.map(lambda args: race(*args), hosts))
    for key in ("race-a", "race-b", "race-c"):
        mine = [r for (_, k, _), r in zip(hosts, responses, strict=True) if k == key]
        accepted = {r.json()["host"]["cpu_isa"] for r in mine if r.status_code == 200}
        refused = [r for r in mine if r.status_code != 200]
        assert len(accepted) == 1 and len(refused) == 4, [r.text for r in mine]
        for response in refused:
            assert response.status_code == 409
            assert all(t in response.json()["detail"] for t in ("cpu -isa=avx2", "cpu -isa=avx512"))
        stored = {w.host["cpu_isa"] for w in db.query(Worker).filter(Worker.device_key == key)}
        assert stored == accepted


def test_a_host_without_cpu_isa_gets_it_from_its_raw_flags(api, tokens) -> None:
    old = {k: v for k, v in AVX512.items() if k != "cpu_isa"}
    assert register(api, tokens, "old", "cpu-x", old).json()["host"]["cpu_isa"] == "avx512"
    bad = register(api, tokens, "bad", "cpu-x", {**AVX2, "cpu_isa": "sse9"})
    assert bad.status_code == 422 and bad.json()["detail"][0]["loc"] == ["body", "host", "cpu_isa"]
    gpu = register(api, tokens, "gpu", "cuda-x", {**AVX2, "kind": "cuda"})
    assert gpu.status_code == 422 and "cuda_arch" in gpu.json()["detail"][0]["msg"]


@pytest.mark.parametrize("target", [None, "cpu", " cpu "])
def test_a_task_without_a_target_gets_the_best_its_hosts_execute(api, tokens, target) -> None:
    register(api, tokens, "xeon", "cpu-xeon", AVX512)
    body = {"device_key": "cpu-xeon"} if target is None else {"device_key": "cpu-xeon", "target": target}
    response = submit(api, tokens, **body)
    assert response.status_code == 201, response.text
    assert response.json()["target"] == "cpu -isa=avx512"
    # no device key either: the only live pool, of any kind
    assert submit(api, tokens).json()["target"] == "cpu -isa=avx512"


def test_a_target_the_hosts_cannot_execute_is_422_naming_it_the_key_and_what_they_support(
        api, tokens, snapshot) -> None:
    register(api, tokens, "zen3", "cpu-zen3", AVX2)
    register(api, tokens, "h100", "cuda-h100", {**AVX2, "kind": "cuda", "cuda_arch": "sm_90"})
    before = snapshot()
    for target, key, words in (
        ("cpu -isa=avx512", "cpu-zen3", ("'cpu -isa=avx512'", "'cpu-zen3'", "cpu -isa=avx2, cpu -isa=generic")),
        ("cuda -arch=sm_80", "cuda-h100", ("'cuda -arch=sm_80'", "'cuda-h100'", "cuda -arch=sm_90")),
        ("cuda", "cpu-zen3", ("a cuda target", "'cpu-zen3'", "cpu -isa=avx2")),
    ):
        response = submit(api, tokens, target=target, device_key=key)
        assert response.status_code == 422, response.text
        assert response.json()["detail"][0]["loc"] == ["body", "target"]
        assert all(w in response.json()["detail"][0]["msg"] for w in words), response.json()
    assert snapshot() == before
    # what they execute is accepted: a lesser ISA, the GPU's arch (and its arch-specific variant)
    assert submit(api, tokens, target="cpu -isa=generic", device_key="cpu-zen3").status_code == 201
    assert submit(api, tokens, target="cuda", device_key="cuda-h100").json()["target"] == "cuda -arch=sm_90"
    assert submit(api, tokens, target="cuda -arch=sm_90a", device_key="cuda-h100").status_code == 201


def test_with_no_live_host_the_target_is_the_kind_until_the_tuner_resolves_it(api, tokens, db, settings) -> None:
    named = submit(api, tokens, target="cpu -isa=avx512", device_key="cpu-later").json()
    pending = submit(api, tokens, device_key="cpu-later").json()
    assert (named["target"], pending["target"]) == ("cpu -isa=avx512", "cpu")
    register(api, tokens, "zen3", "cpu-later", AVX2)
    task = db.get(Task, pending["id"])
    assert pools.resolve_pending(db, task, settings.worker_lost_after_s) == "cpu -isa=avx2"
    db.expire_all()
    assert db.get(Task, pending["id"]).target == "cpu -isa=avx2"
    assert api.get(f"/api/v1/tasks/{pending['id']}").json()["target"] == "cpu -isa=avx2"
    # hosts of another kind than the pending target's cannot resolve it: the tuner fails the task
    other = submit(api, tokens, target="cpu", device_key="cuda-later").json()
    register(api, tokens, "h100-later", "cuda-later", {**AVX2, "kind": "cuda", "cuda_arch": "sm_90"})
    with pytest.raises(FieldError, match="a cpu target cannot run on device key 'cuda-later'"):
        pools.resolve_pending(db, db.get(Task, other["id"]), settings.worker_lost_after_s)
    # a key that only ever had GPU workers resolves an omitted target to its kind, cuda
    register(api, tokens, "h100", "cuda-gone", {**AVX2, "kind": "cuda", "cuda_arch": "sm_90"})
    silence(db, settings, "h100")
    assert submit(api, tokens, device_key="cuda-gone").json()["target"] == "cuda"


def test_targets_lists_each_live_pool_with_its_default(api, tokens) -> None:
    register(api, tokens, "xeon", "cpu-xeon", AVX512)
    register(api, tokens, "h100", "cuda-h100", {**AVX2, "kind": "cuda", "cuda_arch": "sm_90"})
    kinds = {t["kind"]: t for t in api.get("/api/v1/targets").json()}
    assert kinds["cpu"]["default"] == "cpu" and kinds["cuda"]["default"] == "cuda"
    assert kinds["cpu"]["pools"] == [{"device_key": "cpu-xeon", "hosts": 1, "default": "cpu -isa=avx512",
                                      "supports": ["cpu -isa=avx512", "cpu -isa=avx2", "cpu -isa=generic"],
                                      "agree": True}]
    assert [p["default"] for p in kinds["cuda"]["pools"]] == ["cuda -arch=sm_90"]


def test_targets_marks_a_pool_whose_live_hosts_disagree(api, tokens, db) -> None:
    """Hosts stored before registration checked agreement (written here directly) show up
    with their best targets, for the operator to split the pool."""
    register(api, tokens, "zen3", "cpu-mixed", AVX2)
    db.add(Worker(name="xeon", device_key="cpu-mixed", host=AVX512, state="idle", trials_done=0))
    db.commit()
    pool, = {t["kind"]: t for t in api.get("/api/v1/targets").json()}["cpu"]["pools"]
    assert pool["agree"] is False and pool["default"] == "cpu -isa=avx2"
    assert pool["targets"] == {"xeon": "cpu -isa=avx512", "zen3": "cpu -isa=avx2"}


def test_what_a_host_executes() -> None:
    avx512, avx2, generic = (Target("cpu", isa) for isa in ("avx512", "avx2", "generic"))
    neon, sm90 = Target("cpu", "neon"), Target("cuda", "sm_90")
    assert avx2.runs_on(avx512) and generic.runs_on(avx2) and generic.runs_on(neon)
    assert not avx512.runs_on(avx2) and not neon.runs_on(avx512) and not avx2.runs_on(generic)
    assert Target("cuda", "sm_90a").runs_on(sm90) and not Target("cuda", "sm_80").runs_on(sm90)
    assert not generic.runs_on(sm90)
    assert Target.common_best([avx512, avx2]) == avx2 and Target.common_best([neon, avx2]) == generic
    assert Target.common_best([sm90, avx2]) is None and Target.common_best([]) is None
    assert Target.host().runs_on(Target.host())
