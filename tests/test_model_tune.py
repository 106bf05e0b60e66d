"""Whole-model tuning end to end on small ONNX models built in the test: `tunefleet tune-model`
and tune_model + write_bundle tune every task, write one kernel library, and each tuned node's
kernel (loaded with tunefleet.load) gives onnxruntime's output of that node alone, run as a
one-node model, within float32 tolerance."""

from __future__ import annotations

import json

import numpy as np
import pytest

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from click.testing import CliRunner  # noqa: E402
from onnx_models import depthwise_block, encoder_layer, resnet_block  # noqa: E402

import tunefleet  # noqa: E402
from tunefleet.cli import main  # noqa: E402
from tunefleet.compiler.target import Target  # noqa: E402
from tunefleet.tuner.measure import MeasureProtocol  # noqa: E402
from tunefleet.tuner.model import extract_tasks, load_model  # noqa: E402
from tunefleet.tuner.model.bundle import write_bundle  # noqa: E402
from tunefleet.tuner.model.peer import kernel_inputs, random_feeds, subgraph_model  # noqa: E402
from tunefleet.tuner.model.scheduler import ProportionalScheduler  # noqa: E402
from tunefleet.tuner.model.tune_model import tune_model  # noqa: E402

FAST = MeasureProtocol(repeat=1, min_repeat_ms=1, timeout_s=20)


def _check_against_onnxruntime(bundle_dir, graph) -> int:
    """Every tuned node's kernel against onnxruntime's one-node model; returns the nodes checked."""
    bundle = tunefleet.load(bundle_dir)
    matches = {m.nodes[0]: m for t in extract_tasks(graph).tasks for m in t.matches}
    assert set(bundle.nodes) == set(matches)
    rng = np.random.default_rng(0)
    for node, match in matches.items():
        kernel = bundle.kernel_for(node)
        feeds = random_feeds(match, rng)
        session = ort.InferenceSession(subgraph_model(graph, match).SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        [expected] = session.run(None, feeds)
        got = kernel(*kernel_inputs(match, feeds, kernel.args))
        np.testing.assert_allclose(got.reshape(expected.shape), expected, rtol=1e-4, atol=1e-4, err_msg=node)
    return len(matches)


def test_cli_tunes_a_resnet_block_into_one_bundle(tmp_path):
    model = tmp_path / "resnet-block.onnx"
    model.write_bytes(resnet_block().SerializeToString())
    out = tmp_path / "bundle"
    result = CliRunner().invoke(main, ["tune-model", str(model), "--trials", "4", "--repeat", "1", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "conv2d_nchw" in result.output and "GlobalAveragePool" in result.output
    manifest = json.loads((out / "model_manifest.json").read_text())
    assert manifest["library"] == "resnet_block_kernels.so" and len(manifest["kernels"]) == 3
    assert sum(k["trials"] for k in manifest["kernels"].values()) == 4
    header = (out / "resnet_block_kernels.h").read_text()
    assert all(f"int {symbol}(" in header for symbol in manifest["kernels"])
    assert manifest["estimated_latency_s"] == pytest.approx(sum(
        k["occurrences"] * k["latency_s"] for k in manifest["kernels"].values()))
    graph = load_model(model, max_bytes=1 << 20)
    assert _check_against_onnxruntime(out, graph) == 5  # 4 convolutions and the classifier


@pytest.mark.parametrize("build", [encoder_layer, depthwise_block])
def test_bundle_kernels_match_onnxruntime_node_by_node(tmp_path, build):
    graph = load_model(build().SerializeToString(), max_bytes=1 << 20)
    extraction = extract_tasks(graph)
    rounds = []
    tuned = tune_model(extraction, Target.host(), trials=len(extraction.tasks), records_path=tmp_path / "r.jsonl",
                       protocol=FAST, on_round=lambda task, result: rounds.append(task))
    assert len(rounds) == len(extraction.tasks) and all(r.source == "best record" for r in tuned.results)
    out = write_bundle(tmp_path / "bundle", tuned, model_name=f"{build.__name__}.onnx")
    assert _check_against_onnxruntime(out, graph) == sum(t.occurrences for t in extraction.tasks)


def test_cli_lists_tasks_and_explains_what_cannot_be_tuned(tmp_path):
    model = tmp_path / "dynamic.onnx"
    model.write_bytes(resnet_block(batch="N").SerializeToString())
    failed = CliRunner().invoke(main, ["tune-model", str(model), "--list"])
    assert failed.exit_code == 1 and "x (input): dynamic shape" in failed.output
    listed = CliRunner().invoke(main, ["tune-model", str(model), "--list", "--input-shape", "x=2,8,8,8"])
    assert listed.exit_code == 0, listed.output
    assert "conv2d_nchw N=2" in listed.output and "Untuned nodes" in listed.output


def test_proportional_scheduler_splits_the_budget_by_flops_times_occurrences():
    scheduler = ProportionalScheduler([10.0, 5.0, 1.0], 16)
    rounds = []
    while (chosen := scheduler.next_round()) is not None:
        rounds.append(chosen)
        scheduler.update(chosen[0], 1e-3)
    assert rounds == [(0, 9), (1, 5), (2, 2)]
    assert ProportionalScheduler([3.0, 1.0], 1).trials == [1, 1]  # every task at least once
