"""Whole-model tuning end to end on small ONNX models built in the test: `tunefleet tune-model`
and tune_model + write_bundle tune every task, write one kernel library, and each tuned node's
kernel (loaded with tunefleet.load) gives onnxruntime's output of that node alone, run as a
one-node model, within float32 tolerance."""

from __future__ import annotations

import json
import subprocess

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

from click.testing import CliRunner  # noqa: E402
from onnx_models import (Builder, bottleneck_block, check_against_onnxruntime, conv_pair, depthwise_block,  # noqa: E402
                         encoder_layer, resnet_block)

import tunefleet  # noqa: E402
from tunefleet.cli import main  # noqa: E402
from tunefleet.compiler.ops.conv2d import pack_weight, prepacked_layout  # noqa: E402
from tunefleet.compiler.ops.prepacked import pack, packed_arguments  # noqa: E402
from tunefleet.compiler.target import Target  # noqa: E402
from tunefleet.tuner.features import Featurizer  # noqa: E402
from tunefleet.tuner.measure import MeasureProtocol  # noqa: E402
from tunefleet.tuner.model import extract_tasks, load_model, prepack_weights  # noqa: E402
from tunefleet.tuner.model.bundle import write_bundle  # noqa: E402
from tunefleet.tuner.model.scheduler import ProportionalScheduler, make_scheduler  # noqa: E402
from tunefleet.tuner.model.tune_model import tune_model  # noqa: E402

FAST = MeasureProtocol(repeat=1, min_repeat_ms=1, timeout_s=20)


def packed_in_c(tmp_path, header, symbol: str, size: int, packed_size: int) -> np.ndarray:
    """What the bundle header's `<symbol>_pack_weight` makes of the float32 weights i / 7
    (i = 0 .. size - 1), in a C program built with gcc -Wall -Werror: packed_size floats."""
    program = tmp_path / "pack.c"
    program.write_text("\n".join([
        "#include <stdio.h>", f'#include "{header.name}"', "int main(void) {",
        f"  static float w[{size}], packed[{packed_size}];",
        f"  for (int i = 0; i < {size}; ++i) w[i] = (float)i / 7;",
        f"  {symbol}_pack_weight(w, packed);",
        "  fwrite(packed, sizeof packed, 1, stdout);", "  return 0;", "}"]))
    subprocess.run(["gcc", "-O1", "-Wall", "-Werror", str(program), "-I", str(header.parent), "-o",
                    str(tmp_path / "pack")], check=True)
    return np.frombuffer(subprocess.run([str(tmp_path / "pack")], capture_output=True, check=True).stdout, np.float32)


def test_cli_tunes_a_resnet_block_into_one_bundle(tmp_path, monkeypatch):
    monkeypatch.setenv("TUNEFLEET_HOME", str(tmp_path / "home"))  # its model-records.jsonl: the default records
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
    assert check_against_onnxruntime(out, graph) == 5  # 4 convolutions and the classifier
    assert (tmp_path / "home" / "model-records.jsonl").exists()
    again = CliRunner().invoke(main, ["tune-model", str(model), "--trials", "4", "--repeat", "1", "--out",
                                      str(tmp_path / "again")])
    assert again.exit_code == 0, again.output
    assert "0 trials measured" in again.output  # every layer's trials are in the user's records
    assert json.loads((tmp_path / "again" / "model_manifest.json").read_text())["kernels"] == manifest["kernels"]


@pytest.mark.parametrize("build", [encoder_layer, depthwise_block, bottleneck_block])
def test_bundle_kernels_match_onnxruntime_node_by_node(tmp_path, build):
    graph = load_model(build().SerializeToString(), max_bytes=1 << 20)
    extraction = extract_tasks(graph)
    rounds = []
    tuned = tune_model(extraction, Target.host(), trials=len(extraction.tasks), records_path=tmp_path / "r.jsonl",
                       protocol=FAST, on_round=lambda task, result: rounds.append(task))
    assert len(rounds) == len(extraction.tasks) and all(r.source == "best record" for r in tuned.results)
    out = write_bundle(tmp_path / "bundle", tuned, model_name=f"{build.__name__}.onnx")
    assert check_against_onnxruntime(out, graph) == sum(t.occurrences for t in extraction.tasks)
    manifest = json.loads((out / "model_manifest.json").read_text())
    symbol, kernel = next(iter(manifest["kernels"].items()))
    kernel["args"][-1]["shape"][-1] += 1  # edited after the build: calls would size the output from it
    (out / "model_manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match=f"{symbol}: the manifest's arguments are not those the library was "
                                         f"compiled for: {symbol}_checked: argument '.*': expected shape"):
        tunefleet.load(out)


def test_constant_convolution_weights_are_prepacked_and_the_bundle_packs_them_for_the_caller(tmp_path):
    """For the host's target, a 3×3 convolution whose weights are an initializer takes them in
    its NCHWc default's blocked layout; the same layer with its weights a graph input keeps
    OIHW, and a 1×1 convolution over 16 pixels the layout prepacked_layout gives its ISA (OIHW, a
    GEMM over the weights in place, but on AVX2, where its panel GEMM reads them pre-packed). The
    bundle's manifest names the layout of each packed argument, ModelBundle.arguments packs the
    ONNX weights to it, and every node then gives onnxruntime's output; from C, the header's
    <kernel>_pack_weight packs them alike."""
    b = Builder(5)
    h = b.node("Relu", [b.node("Conv", ["x", b.weight(8, 8, 3, 3), b.weight(8)], pads=[1, 1, 1, 1])])
    h = b.node("Conv", [h, "w"], pads=[1, 1, 1, 1], strides=[2, 2])
    out = b.node("Conv", [h, b.weight(16, 8, 1, 1)])
    graph = load_model(b.model([("x", [1, 8, 8, 8]), ("w", [8, 8, 3, 3])], out).SerializeToString(), max_bytes=1 << 20)
    plain = extract_tasks(graph)
    target = Target.host()
    extraction = prepack_weights(plain, target)
    layouts = [t.workload.args["weight_layout"] for t in extraction.tasks]
    assert layouts[0] == prepacked_layout(plain.tasks[0].workload, target) and layouts[0].startswith("OIHW")
    pointwise = prepacked_layout(plain.tasks[2].workload, target)
    assert layouts[0] != "OIHW" and layouts[1:] == ["OIHW", pointwise or "OIHW"]
    assert [t.matches[0].nodes for t in extraction.tasks] == [t.matches[0].nodes for t in plain.tasks]
    tuned = tune_model(extraction, target, trials=3, records_path=tmp_path / "r.jsonl", protocol=FAST)
    out_dir = write_bundle(tmp_path / "bundle", tuned, model_name="prepacked.onnx")
    manifest = json.loads((out_dir / "model_manifest.json").read_text())
    packs = {n["node"]: {a["arg"]: a["pack"] for a in n["args"] if "pack" in a} for n in manifest["nodes"]}
    assert packs == {"Conv_1": {"weight": layouts[0]}, "Conv_3": {}, "Conv_4": {"weight": pointwise} if pointwise else {}}
    assert check_against_onnxruntime(out_dir, graph) == 3
    with pytest.raises(KeyError, match="reads tensor 'w', which `tensors` lacks"):
        tunefleet.load(out_dir).arguments("Conv_3", {"relu2": np.zeros((1, 8, 8, 8), np.float32)})
    # a C caller packs the weights with the header's <kernel>_pack_weight, as pack_weight_np does
    expected = pack_weight((np.arange(8 * 8 * 3 * 3, dtype=np.float32) / 7).reshape(8, 8, 3, 3), layouts[0])
    packed = packed_in_c(tmp_path, out_dir / manifest["header"], manifest["nodes"][0]["kernel"], 8 * 8 * 3 * 3,
                         expected.size)
    np.testing.assert_array_equal(packed, expected.ravel())


def test_constant_gemm_weights_are_prepacked_into_panels_and_the_bundle_packs_them(tmp_path):
    """A MatMul by an initializer B [K, N] and a Gemm (transB) by an initializer W [N, K], 16 rows
    each, take them in the column panels of their default's register tile (KN<nr>n / NK<nr>n);
    a MatMul whose B is a graph input keeps B row-major. Every node through bundle.arguments
    gives onnxruntime's output; from C, the header's <kernel>_pack_weight packs W alike."""
    b = Builder(6)
    h = b.node("Add", [b.node("MatMul", ["x", b.weight(24, 40)]), b.weight(40)])
    h = b.node("Gemm", [h, b.weight(36, 40), b.weight(36)], transB=1)
    out = b.node("MatMul", [h, "y"])
    graph = load_model(b.model([("x", [16, 24]), ("y", [36, 12])], out).SerializeToString(), max_bytes=1 << 20)
    target = Target.host()
    extraction = prepack_weights(extract_tasks(graph), target)
    packed = [packed_arguments(t.workload) for t in extraction.tasks]
    assert [t.workload.op for t in extraction.tasks] == ["matmul", "dense", "matmul"]
    assert [list(p) for p in packed] == [["B"], ["W"], []]
    assert packed[0]["B"].startswith("KN") and packed[1]["W"].startswith("NK")
    tuned = tune_model(extraction, target, trials=3, records_path=tmp_path / "r.jsonl", protocol=FAST)
    out_dir = write_bundle(tmp_path / "bundle", tuned, model_name="linear.onnx")
    manifest = json.loads((out_dir / "model_manifest.json").read_text())
    packs = {n["node"]: {a["arg"]: a["pack"] for a in n["args"] if "pack" in a} for n in manifest["nodes"]}
    assert packs == {"MatMul_1": packed[0], "Gemm_3": packed[1], "MatMul_4": {}}
    assert check_against_onnxruntime(out_dir, graph) == 3
    symbol = next(n["kernel"] for n in manifest["nodes"] if n["node"] == "Gemm_3")
    expected = pack(np.arange(36 * 40, dtype=np.float32).reshape(36, 40) / 7, packed[1]["W"])
    got = packed_in_c(tmp_path, out_dir / manifest["header"], symbol, 36 * 40, expected.size)
    np.testing.assert_array_equal(got, expected.ravel())


def test_cli_lists_tasks_and_explains_what_cannot_be_tuned(tmp_path):
    model = tmp_path / "dynamic.onnx"
    model.write_bytes(resnet_block(batch="N").SerializeToString())
    failed = CliRunner().invoke(main, ["tune-model", str(model), "--list"])
    assert failed.exit_code == 1 and "x (input): dynamic shape" in failed.output
    listed = CliRunner().invoke(main, ["tune-model", str(model), "--list", "--input-shape", "x=2,8,8,8"])
    assert listed.exit_code == 0, listed.output
    assert "conv2d_nchw N=2" in listed.output and "Untuned nodes" in listed.output


def test_cli_with_a_damaged_record_file_exits_2_naming_it_before_it_measures(tmp_path):
    """Before, a traceback. The record file is the one every model of a user shares by default."""
    model = tmp_path / "block.onnx"
    model.write_bytes(resnet_block().SerializeToString())
    records = tmp_path / "r.jsonl"
    records.write_text('{"schema": 1}\n{}\n')
    result = CliRunner().invoke(main, ["tune-model", str(model), "--trials", "2", "--records", str(records),
                                       "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert result.stderr.strip().splitlines() == [f"Error: --records: {records}:1: record fields ['schema'] differ "
                                                  "from ['config', 'device_key', 'result', 'schema', 'target', "
                                                  "'toolchain', 'workload', 'workload_key'] (missing ['config', "
                                                  "'device_key', 'result', 'target', 'toolchain', 'workload', "
                                                  "'workload_key'], unknown [])"]
    assert records.read_text() == '{"schema": 1}\n{}\n' and not (tmp_path / "out").exists()


def test_proportional_scheduler_splits_the_budget_by_flops_times_occurrences():
    scheduler = ProportionalScheduler([10.0, 5.0, 1.0], 16)
    rounds = []
    while (chosen := scheduler.next_round()) is not None:
        rounds.append(chosen)
        scheduler.update(chosen[0], 1e-3)
    assert rounds == [(0, 9), (1, 5), (2, 2)]
    assert ProportionalScheduler([3.0, 1.0], 1).trials == [1, 1]  # every task at least once


def _tune_pair(out_channels: int, trials: int, records, round_trials: int = 2):
    extraction = extract_tasks(load_model(conv_pair(out_channels).SerializeToString(), max_bytes=1 << 20))
    scheduler = make_scheduler("gradient", extraction.tasks, trials, round_trials=round_trials)
    rounds = []
    tuned = tune_model(extraction, Target.host(), trials=trials, records_path=records, scheduler=scheduler,
                       protocol=FAST, on_round=lambda task, done: rounds.append((task.workload.key, done)))
    return tuned, rounds


def test_gradient_rounds_and_records_reused_by_a_second_run_and_a_model_sharing_a_layer(tmp_path):
    records = tmp_path / "records.jsonl"
    tuned, rounds = _tune_pair(16, 8, records)
    assert len(rounds) == 4 and tuned.measured == 8 and sum(r.trials for r in tuned.results) == 8
    assert [done.allotted for _, done in rounds[:2]] == [2, 2]  # a warm-up round each, then the gradient's
    assert all(r.source == "best record" and r.latency_s > 0 for r in tuned.results)
    # the same model on the same records: the same rounds, nothing measured, the same kernels
    again, replayed = _tune_pair(16, 8, records)
    assert again.measured == 0 and all(done.measured == 0 for _, done in replayed)
    assert [(key, done.allotted, done.latency_s) for key, done in replayed] == \
        [(key, done.allotted, done.latency_s) for key, done in rounds]
    assert [r.config for r in again.results] == [r.config for r in tuned.results]
    # another model sharing the 3x3 layer: only its new 1x1 layer is measured
    other, _ = _tune_pair(8, 4, records)
    shared, new = other.results
    assert shared.task.workload.key == tuned.results[0].task.workload.key
    assert shared.measured == 0 and new.measured == 2


def test_one_featurizer_serves_every_round_of_every_task(tmp_path):
    extraction = extract_tasks(load_model(conv_pair(8).SerializeToString(), max_bytes=1 << 20))
    featurizer = Featurizer()
    tuned = tune_model(extraction, Target.host(), trials=4, records_path=tmp_path / "r.jsonl", protocol=FAST,
                       featurizer=featurizer)
    assert tuned.measured == 4
    # the features the search learned from, of both tasks, stay in the one given featurizer
    assert {key for key, _, _ in featurizer._cache} == {task.workload.key for task in extraction.tasks}
