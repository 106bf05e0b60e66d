"""Whole-model tuning through the service, as real processes (`tunefleet server`, `tuner`
and two `worker`s on SQLite, over the tests' Redis): a two-layer ONNX model tuned with a small
global budget, several tasks at once; its bundle built by a worker (the server has no C
compiler), downloaded with the client, loaded with tunefleet.load, and each tuned node checked
against onnxruntime running that node alone; a second model sharing a layer reuses it at no
trials."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from onnx_models import Builder, check_against_onnxruntime
from service_helpers import PROTOCOL, Service, ensure_fleet, service_on, wait_for

import tunefleet
from tunefleet.base.load import ModelBundle
from tunefleet.cli import main
from tunefleet.client import Client
from tunefleet.compiler.target import Target
from tunefleet.tuner.model import load_model

pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.timeout(400)


@pytest.fixture(scope="module")
def service(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory,
            redis_url: str) -> Iterator[Service]:
    yield from service_on(request, tmp_path_factory, redis_url, "sqlite")


def convs(second: int) -> bytes:
    """A Conv+bias+Relu layer (8→8 channels, 3×3, 6×6) twice, then a 1×1 Conv to `second`
    channels: two tasks, the first one shared by every `second`."""
    b = Builder(second)
    h = "x"
    for _ in range(2):
        h = b.node("Relu", [b.node("Conv", [h, b.weight(8, 8, 3, 3), b.weight(8)], pads=[1, 1, 1, 1])])
    return b.model([("x", [1, 8, 6, 6])], b.node("Conv", [h, b.weight(second, 8, 1, 1)])).SerializeToString()


def tune(client: Client, data: bytes, trials: int) -> dict:
    model = client.submit_model(data, name=f"convs-{trials}.onnx", trials=trials, device_key="test-cpu",
                                target=str(Target.host()), protocol=PROTOCOL)
    return wait_for(lambda: (m := client.get_model(model["id"]))["status"] in ("done", "failed") and m, 300,
                    f"model {model['id']} to finish", poll_s=0.5)


def test_a_model_is_tuned_bundled_and_matches_onnxruntime(fleet: Service, tmp_path: Path) -> None:
    data = convs(4)
    with Client(fleet.url, fleet.user_token) as client:
        model = tune(client, data, trials=5)
        assert model["status"] == "done", model
        assert sum(t["trials_given"] for t in model["tasks"]) == 5
        assert all(t["trials_done"] == t["trials_given"] >= 1 and t["status"] == "done" for t in model["tasks"])
        assert model["estimated_latency_s"] == pytest.approx(
            sum(t["occurrences"] * t["best_latency_s"] for t in model["tasks"]))
        assert model["history"][-1]["estimate_s"] == pytest.approx(model["estimated_latency_s"])
    fleet.kill("server", signal.SIGTERM)
    fleet.start_server(env={"CC": str(tmp_path / "no-such-cc")})  # compiles nothing: a worker builds the bundle
    ensure_fleet(fleet)
    with Client(fleet.url, fleet.user_token) as client:
        folder = client.download_bundle(model["id"], tmp_path / "bundle")
        again = client._http.get(f"/models/{model['id']}/bundle")  # stored: at once, not built again
        assert again.status_code == 200 and again.headers["content-type"] == "application/gzip"
    graph = load_model(data, max_bytes=1 << 20)
    assert check_against_onnxruntime(folder, graph) == 3  # Conv_1, Conv_3, Conv_5

    # a second model sharing the 3×3 layer, through the CLI: that layer costs nothing, its task
    # no new trials
    shared = model["tasks"][0]
    onnx_file = tmp_path / "convs-16.onnx"
    onnx_file.write_bytes(convs(16))
    result = CliRunner().invoke(main, [
        "submit-model", str(onnx_file), "--trials", "3", "--device-key", "test-cpu", "--target", str(Target.host()),
        "--repeat", "2", "--wait", "--out", str(tmp_path / "second"), "--url", fleet.url,
    ], env={"TUNEFLEET_TOKEN": fleet.user_token})
    assert result.exit_code == 0, result.output
    model_id = int(re.match(r"model (\d+):", result.output).group(1))
    assert f"model {model_id} done: trials 3/3, 2/2 layers tuned" in result.output
    assert isinstance(tunefleet.load(tmp_path / "second" / "convs_16_kernels"), ModelBundle)
    with Client(fleet.url, fleet.user_token) as client:
        again = client.get_model(model_id)
        reused = again["tasks"][0]
        assert reused["workload_key"] == shared["workload_key"]
        assert reused["reused"] and reused["trials_given"] == reused["trials_done"] == 0
        assert client.get(shared["task_id"])["trials_done"] == shared["trials_done"]
        assert again["tasks"][1]["trials_given"] == 3 and not again["tasks"][1]["reused"]


def test_a_model_survives_its_tuner_being_killed(fleet: Service) -> None:
    """SIGKILL the tuner while the model's first rounds measure: a new tuner resumes them from
    SQL (the scheduler replayed, the tasks' trials kept) and spends exactly the budget."""
    with Client(fleet.url, fleet.user_token) as client:
        model = client.submit_model(convs(8), name="restart.onnx", trials=8, device_key="test-cpu",
                                    target=str(Target.host()), protocol={**PROTOCOL, "repeat": 20})
        wait_for(lambda: client.get_model(model["id"])["trials_done"] >= 1, 120, "a first measured trial",
                 poll_s=0.2)
        fleet.kill("tuner")
        fleet.start_tuner()
        done = wait_for(lambda: (m := client.get_model(model["id"]))["status"] in ("done", "failed") and m, 300,
                        f"model {model['id']} to finish", poll_s=0.5)
    assert done["status"] == "done", done
    assert sum(t["trials_given"] for t in done["tasks"]) == 8
    assert all(t["trials_done"] == t["trials_given"] for t in done["tasks"]), done["tasks"]
    for t in done["tasks"]:  # nothing measured twice
        assert sorted(fleet.measured_events(t["task_id"])) == sorted(tr["id"] for tr in fleet.trials(t["task_id"]))
