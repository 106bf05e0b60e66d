"""batch_matmul and dense (both on matmul's GEMM template), and matmul / dense taking B
pre-packed: random configs built with gcc and checked against numpy, over BERT-sized and odd
shapes."""

import os
import re
import shutil
import subprocess

import numpy as np
import pytest
from isa_targets import FAMILY, params, runs_here
from ops_check import failures, sample

from tunefleet.compiler import ops
from tunefleet.compiler.build import build_info
from tunefleet.compiler.driver import build_workload, lower_workload
from tunefleet.compiler.ops import WorkloadError, transpose_pack
from tunefleet.compiler.ops.common import knob_choices
from tunefleet.compiler.ops.matmul import b_panels, pack_panels_np, unpack_panels_np
from tunefleet.compiler.ops.prepacked import pack, packed_arguments, prepacked_layout, with_prepacked_weights
from tunefleet.compiler.target import Target


@pytest.mark.parametrize("transpose_b", [False, True])
def test_batch_matmul(transpose_b):
    """5 random configs per small shape and one on BERT's attention product, per transpose
    (over both: more than 20 random configs of the operator)."""
    small = [dict(batch=3, M=13, N=7, K=17), dict(batch=2, M=1, N=40, K=9)]
    cases = []
    for n, args in enumerate(small):
        cases += sample(ops.make_workload("batch_matmul", {**args, "transpose_b": transpose_b}), 5, seed=n)
    bert = ops.make_workload("batch_matmul", dict(batch=12, M=128, N=128, K=64, transpose_b=transpose_b))
    cases += sample(bert, 1, seed=9)
    assert not failures(cases)


def test_dense():
    small = [dict(M=13, N=37, K=19, epilogue="gelu"), dict(M=1, N=7, K=65, bias=False),
             dict(M=17, N=48, K=8, epilogue="relu")]
    cases = []
    for n, args in enumerate(small):
        cases += sample(ops.make_workload("dense", args), 7, seed=n)
    cases += sample(ops.make_workload("dense", dict(M=128, N=768, K=768, epilogue="gelu")), 0, seed=9)
    assert len(cases) >= 20
    assert not failures(cases)


@pytest.mark.parametrize("target", params(FAMILY))
def test_transposed_b_panels_are_packed_by_register_transposes(target):
    """Where B is given transposed (dense's W [N, K], batch_matmul's Bᵀ) and its panels need no
    zero padding, they are packed by the transposing micro-kernel (compiler.ops.transpose_pack):
    dense's default with each pack_b choice that packs, and random batch_matmul configs, K not a
    multiple of any ISA's vector (a partial block of columns) and N a multiple of every panel
    width, on each ISA of the host's family, checked against numpy."""
    dense = ops.make_workload("dense", dict(M=33, N=192, K=37, epilogue="relu"))
    default = ops.default_config(dense, target).to_json()["knobs"]
    space = ops.config_space(dense, target)
    cases = [(dense, space.from_json({"knobs": {**default, "pack_b": p, "dot_rows": 0}}))
             for p in knob_choices(space, "pack_b") if p]
    bmm = ops.make_workload("batch_matmul", dict(batch=2, M=5, N=192, K=21, transpose_b=True))
    cases += [c for c in sample(bmm, 16, seed=1, target=target) if c[1]["pack_b"].val]
    by_transposes = [transpose_pack.SOURCE in lower_workload(*c, target)[0].extern_sources for c in cases]
    assert all(by_transposes[:2]) and sum(by_transposes) >= 6
    assert not failures(cases, target=target)


@pytest.mark.parametrize("target", params(FAMILY))
def test_transposing_pack_rebuilds_without_warnings(target, tmp_path):
    """A user who rebuilds a library from its `<name>.c` with the recorded command sees no
    compiler warning where B's panels are packed by the transposing micro-kernel and K and N
    are whole vectors of every ISA (its tails never run: gcc -O3 once read them as undefined
    behaviour, -Waggressive-loop-optimizations)."""
    bmm = ops.make_workload("batch_matmul", dict(batch=2, M=5, N=192, K=32, transpose_b=True))
    case = next(c for c in sample(bmm, 16, seed=1, target=target)
                if transpose_pack.SOURCE in lower_workload(*c, target)[0].extern_sources)
    built = build_workload(*case, target)
    shutil.copy(built.so_path.with_suffix(".c"), tmp_path)
    rebuild = subprocess.run(build_info(built.so_path)["command"], shell=True, cwd=tmp_path, capture_output=True,
                             text=True, env={**os.environ, "LC_ALL": "C"})
    assert rebuild.returncode == 0 and (tmp_path / built.so_path.name).is_file(), rebuild.stderr
    assert "warning" not in rebuild.stderr, rebuild.stderr


@pytest.mark.parametrize("target", params(FAMILY))
def test_dense_skinny_dot_products(target):
    """Dense at M = 1 and a few rows, K at least a vector of every ISA (so the space has the
    dot-product form), with and without a K tail: the default (dot products, `dot_rows` > 0,
    taken from the space) and random configs of the target's space, N and M not multiples of
    any tile, each ISA of the host's family built and checked against numpy where it runs."""
    cases = []
    for n, args in enumerate([dict(M=1, N=37, K=64), dict(M=5, N=21, K=133, epilogue="gelu"),
                              dict(M=1, N=130, K=51, bias=False, epilogue="relu")]):
        w = ops.make_workload("dense", args)
        space = ops.config_space(w, target)
        assert ops.default_config(w, target)["dot_rows"].val in knob_choices(space, "dot_rows")[1:]
        cases += sample(w, 8, seed=n, target=target)
    assert sum(config["dot_rows"].val > 0 for _, config in cases) >= 12
    assert not failures(cases, target=target)


@pytest.mark.parametrize("target", params(FAMILY))
def test_dense_whose_blocks_hold_one_tile_of_w_builds(target):
    """A regression head (N = 1) and N = 3, M within a tile: a block of one tile of W's rows has no
    next tile to prefetch; before, the default and other dot-product configs raised ScheduleError
    (found by random workloads at the edge's bounds)."""
    cases = []
    for n, args in enumerate([dict(M=1, N=1, K=512), dict(M=3, N=3, K=64, dtype="float64")]):
        cases += sample(ops.make_workload("dense", args), 6, seed=n, target=target)
    assert not failures(cases, target=target)


@pytest.mark.parametrize("target", params(FAMILY))
def test_dense_at_one_row_prefetches_the_rows_of_the_next_tile(target):
    """Where one tile of X's rows covers M, W streams once per call: each step of a tile's loop
    over K prefetches, per row of W of the next tile, the 64-byte lines that step reads (the
    default at M = 1, as a classifier's), and the result matches numpy. With more rows of X
    than a tile, W is read again per tile of rows and nothing is prefetched."""
    one = ops.make_workload("dense", dict(M=1, N=1000, K=512))
    config = ops.default_config(one, target)
    rows, ku, lanes = config["dot_rows"].val, config["ku"].val, target.lanes("float32")
    step = re.search(r"for \(int64_t ko_o = 0;.*?\n(.*?)\n *Y_part_0 = ", build_workload(one, config, target).source,
                     re.S)[1]
    assert step.count("__builtin_prefetch(") == rows * -(-ku * lanes * 4 // 64)
    many = ops.make_workload("dense", dict(M=config["mr"].val + 1, N=1000, K=512))
    many_config = ops.config_space(many, target).from_json({"knobs": config.to_json()["knobs"]})
    assert "__builtin_prefetch" not in build_workload(many, many_config, target).source
    assert not failures([(one, config), (many, many_config)], target=target)


def _hsum_helpers(source: str) -> dict[int, str]:
    """The horizontal-sum helpers of a generated source by width (1: `tf_hsum_*`), each its text."""
    helpers, lines = {}, source.splitlines()
    for n, line in enumerate(lines):
        if (m := re.match(r"static inline \S+ tf_hsum(\d*)_", line)):
            end = n if line.endswith("}") else lines.index("}", n)
            helpers[int(m[1] or 1)] = "\n".join(lines[n:end + 1])
    return helpers


@pytest.mark.parametrize("target", params(FAMILY))
def test_dot_products_sum_each_accumulator_by_one_shuffle_tree(target):
    """The outputs of a dot-product tile are the sums of its accumulators' lanes, taken
    together: dot_rows outputs by one `tf_hsum<w>_*` call (w = dot_rows up to the vector's
    lanes; 2(w - 1) two-source shuffles transposing while adding, log2(lanes / w) within the
    groups and one gather) whose vector of w sums takes the bias and epilogue and is stored
    at once; at N's edge the tile cut short sums 4 outputs at once where at least 4 are left
    (5 of 8 rows: 4, then 1), and an output alone by one `tf_hsum_*` call (log2(lanes)
    shuffles), not a tree of scalar lane extracts (about 40 instructions per
    16 lanes from GCC, more than the FMAs of a short reduction). The register tile stays in
    vector registers in both, never an array in memory; float32 and float64, with K tails and
    both tile widths, match numpy."""
    cases = [(w, ops.config_space(w, target).from_json({"knobs": {
        **ops.default_config(w, target).to_json()["knobs"], "dot_rows": rows}})) for rows in (4, 8) for w in (
        ops.make_workload("dense", dict(M=1, N=37, K=75, epilogue="relu")),
        ops.make_workload("dense", dict(M=3, N=11, K=40, dtype="float64")))]
    for w, config in cases:
        source = build_workload(w, config, target).source
        lanes, rows = target.lanes(w.args["dtype"]), config["dot_rows"].val
        width = min(rows, lanes)
        helpers = _hsum_helpers(source)
        assert {1, width} <= set(helpers) <= {1, 4, width}
        assert helpers[1].count("__builtin_shuffle") == lanes.bit_length() - 1
        for group in set(helpers) - {1}:
            shuffles = 2 * (group - 1) + (lanes // group).bit_length() - 1 + (group < lanes)
            assert helpers[group].count("__builtin_shuffle") == shuffles
        body = source.split(helpers[width])[1]
        assert f"tf_hsum{width}_" in body and "tf_hsum_" in body  # full tiles, and the edge tile's last output
        assert not re.search(r"Y_part_\d+\[\d+\]", source)  # no lane extracted alone
        assert "Y_part[" not in source  # no register tile in memory
    assert not failures(cases, target=target)


@pytest.mark.parametrize("target", params(FAMILY))
def test_gemm_with_b_pre_packed_into_the_default_panels(target):
    """matmul (B [K, N] → KN<nr>n) and dense (W [N, K] → NK<nr>n) taking B in the column panels
    of the default's register tile for the target, N not a multiple of nr: the space keeps that
    nr, blocks of panels that divide the panel count and no packing of B; its default and random
    configs against numpy (the reference reads the panels back). A caller's B packed with
    `pack` gives numpy's product from the default."""
    cases = []
    for n, (op, args) in enumerate([("matmul", dict(M=37, N=100, K=24, bias=True, epilogue="relu")),
                                    ("dense", dict(M=20, N=70, K=33, epilogue="gelu")),
                                    ("dense", dict(M=16, N=200, K=8, bias=False))]):
        plain = ops.make_workload(op, args)
        w = with_prepacked_weights(plain, target)
        nr = ops.default_config(plain, target)["nr"].val
        assert b_panels(w.args) == nr and prepacked_layout(w, target) is None  # packed once only
        assert packed_arguments(w) == {"B" if op == "matmul" else "W": f"{'KN' if op == 'matmul' else 'NK'}{nr}n"}
        space = ops.config_space(w, target)
        assert knob_choices(space, "nr") == [nr] and knob_choices(space, "pack_b") == [False]
        assert all(-(-args["N"] // nr) % bn == 0 for bn in knob_choices(space, "bn"))
        cases += sample(w, 6, seed=n, target=target)
    assert not failures(cases, target=target)
    if runs_here(target):
        w = with_prepacked_weights(ops.make_workload("dense", dict(M=20, N=70, K=33)), target)
        rng = np.random.default_rng(0)
        X, W, b = (rng.standard_normal(shape).astype(np.float32) for shape in [(20, 33), (70, 33), (70,)])
        (Y,) = build_workload(w, ops.default_config(w, target), target).run(X, pack(W, packed_arguments(w)["W"]), b)
        np.testing.assert_allclose(Y, X @ W.T + b, rtol=1e-4, atol=1e-4)


def test_panel_layouts_pack_round_trip_and_bad_layouts_are_named():
    B = np.arange(5 * 7, dtype=np.float32).reshape(5, 7)  # [K, N]
    panels = pack_panels_np(B, "KN4n")
    assert panels.shape == (2, 5, 4) and panels[1, 2, 0] == B[2, 4] and not panels[1, :, 3:].any()
    np.testing.assert_array_equal(unpack_panels_np(panels, 7, False), B)
    np.testing.assert_array_equal(pack_panels_np(B.T, "NK4n"), panels)
    np.testing.assert_array_equal(unpack_panels_np(panels, 7, True), B.T)
    for op, arg, bad in [("matmul", "b_layout", "NK16n"), ("matmul", "b_layout", "KN0n"),
                         ("dense", "weight_layout", "KN16n"), ("dense", "weight_layout", "NK128n")]:
        with pytest.raises(WorkloadError, match=arg):
            ops.make_workload(op, {"M": 32, "N": 64, "K": 8, arg: bad})
    assert "b_layout" not in ops.make_workload("matmul", {"M": 4, "N": 4, "K": 4}).args  # earlier keys unchanged
    skinny = ops.make_workload("dense", dict(M=1, N=1000, K=512))
    assert prepacked_layout(skinny, Target.host()) is None  # a GEMV-like dense reads W in place
