"""Config spaces and knobs: enumeration, index <-> config <-> JSON, validation."""

import itertools
import json
import math
import subprocess
import sys

import numpy as np
import pytest

from tunefleet.compiler.knobs import SplitKnob
from tunefleet.compiler.space import (
    ConfigEntity,
    ConfigError,
    ConfigSpace,
    instantiate_space,
)


def matmul_template(cfg, workload, target):
    """A define-by-run template shaped like a real one (no schedule needed to build a space)."""
    m, n, k = workload["M"], workload["N"], workload["K"]
    cfg.define_split("tile_m", m, 3)
    cfg.define_split("tile_n", n, 3, policy="power2", max_factor=64)
    cfg.define_split("tile_k", k, 2, filter=lambda s: s[1] <= 16)
    cfg.define_reorder("order", ["mo", "no", "ko", "mi"], policy="all")
    cfg.define_knob("unroll", [0, 4, 16])
    cfg.define_knob("vectorize", [True, False])
    cfg.define_knob("layout", ["NK", "KN"])
    cfg.add_flop(2 * m * n * k)
    return cfg["tile_m"].size, cfg["order"].perm, cfg["unroll"].val


WORKLOAD = {"M": 96, "N": 100, "K": 48}


@pytest.fixture
def space():
    return instantiate_space(matmul_template, WORKLOAD, "cpu")


def ordered_factorizations(n, parts):
    if parts == 1:
        return [(n,)]
    return [(d, *rest) for d in range(1, n + 1) if n % d == 0 for rest in ordered_factorizations(n // d, parts - 1)]


# --------------------------------------------------------------------------- split


def test_split_factors_12_into_3_is_all_18_ordered_factorizations():
    knob = SplitKnob("s", 12, 3)
    sizes = [tuple(knob.entity(i).size) for i in range(len(knob))]
    assert len(sizes) == 18 == len(set(sizes))
    assert set(sizes) == set(ordered_factorizations(12, 3))
    assert sizes[0] == (12, 1, 1)


@pytest.mark.parametrize("extent,parts", [(1, 3), (7, 2), (64, 4), (360, 3), (1024, 2)])
def test_split_factors_match_brute_force(extent, parts):
    knob = SplitKnob("s", extent, parts)
    assert sorted(tuple(knob.entity(i).size) for i in range(len(knob))) == sorted(ordered_factorizations(extent, parts))


def test_split_power2_allows_tails_with_concrete_outer():
    knob = SplitKnob("s", 100, 3, policy="power2")
    sizes = [knob.entity(i).size for i in range(len(knob))]
    allowed_inner = {1 << k for k in range(7)} | {d for d in range(1, 101) if 100 % d == 0}
    for outer, a, b in sizes:
        assert a in allowed_inner and b in allowed_inner and a * b <= 100
        assert outer == math.ceil(100 / (a * b))
    assert [2, 8, 8] in sizes  # 64 inner, tail of 36
    assert [1, 4, 25] in sizes  # divisors stay available
    assert [1, 1, 100] in sizes
    assert len({tuple(s) for s in sizes}) == len(sizes)


def test_split_max_factor_and_filter():
    knob = SplitKnob("s", 64, 3, max_factor=8, filter=lambda s: s[0] >= 2)
    sizes = [knob.entity(i).size for i in range(len(knob))]
    assert sizes
    assert all(s[1] <= 8 and s[2] <= 8 and s[0] >= 2 and math.prod(s) == 64 for s in sizes)
    expected = [f for f in ordered_factorizations(64, 3) if f[1] <= 8 and f[2] <= 8 and f[0] >= 2]
    assert sorted(map(tuple, sizes)) == sorted(expected)


def test_split_candidates_resolve_minus_one_and_validate():
    knob = SplitKnob("s", 100, 2, policy="candidates", candidates=[[-1, 8], [25, 4], [-1, 100]])
    assert [knob.entity(i).size for i in range(3)] == [[13, 8], [25, 4], [1, 100]]
    with pytest.raises(ConfigError, match="outermost 13"):
        SplitKnob("s", 100, 2, policy="candidates", candidates=[[12, 8]])
    with pytest.raises(ConfigError, match="2 ints"):
        SplitKnob("s", 100, 2, policy="candidates", candidates=[[1, 2, 50]])
    with pytest.raises(ConfigError, match="product above"):
        SplitKnob("s", 100, 2, policy="candidates", candidates=[[-1, 128]])
    with pytest.raises(ConfigError, match="duplicate"):
        SplitKnob("s", 100, 2, policy="candidates", candidates=[[-1, 8], [13, 8]])


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"extent": 0}, "extent"),
        ({"extent": 8, "num_outputs": 0}, "num_outputs"),
        ({"extent": 8, "policy": "bogus"}, "unknown policy 'bogus'.*factors"),
        ({"extent": 8, "policy": "candidates"}, "needs candidates"),
        ({"extent": 8, "candidates": [[4, 2]]}, "needs policy='candidates'"),
        ({"extent": 8, "filter": lambda s: False}, "no candidates"),
    ],
)
def test_split_bad_definitions(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        SplitKnob("s", **kwargs)


def test_split_and_reorder_apply_on_a_real_schedule():
    from tunefleet.compiler import te
    from tunefleet.compiler.schedule import create_schedule

    a = te.placeholder((100, 24), name="A")
    b = te.compute((100, 24), lambda i, j: a[i, j] * 2.0, name="B")

    def template(cfg, workload, target):
        sch = create_schedule(b)
        stage = sch[b]
        i, j = stage.op.axes
        cfg.define_split("tile_i", 100, 3, policy="power2", max_factor=8)
        cfg.define_split("tile_j", 24, 2)
        cfg.define_reorder("order", ["io", "ii", "iii", "jo", "ji"], policy="candidates",
                           candidates=[["io", "ii", "iii", "jo", "ji"], ["io", "jo", "ii", "ji", "iii"]])
        axes = cfg["tile_i"].apply(sch, stage, i) + cfg["tile_j"].apply(sch, stage, j)
        cfg["order"].apply(sch, stage, axes)
        return sch, [a, b]

    space = instantiate_space(template, {}, "cpu")
    cfg = space.from_json({"knobs": {"tile_i": [4, 4, 8], "tile_j": [4, 6], "order": [0, 3, 1, 4, 2]}})
    sch, _ = template(cfg, {}, "cpu")
    leaves = sch[b].leaf_iter_vars
    assert [v.name for v in leaves] == ["i_o_o", "j_o", "i_o_i", "j_i", "i_i"]
    assert [v.extent for v in leaves] == [4, 4, 4, 6, 8]  # 4 * 4 * 8 = 128 >= 100: a tail


# --------------------------------------------------------------------------- other knobs


def test_reorder_all_and_candidates_by_label():
    space = ConfigSpace()
    space.define_reorder("all", 4)
    space.define_reorder("some", ["i", "j", "k"], policy="candidates", candidates=[["k", "i", "j"], [0, 1, 2]])
    assert len(space.knobs["all"]) == 24
    assert [space.knobs["all"].entity(i).perm for i in range(24)] == [list(p) for p in itertools.permutations(range(4))]
    assert [space.knobs["some"].entity(i).perm for i in range(2)] == [[2, 0, 1], [0, 1, 2]]
    with pytest.raises(ConfigError, match="not a permutation"):
        space.define_reorder("bad", 3, policy="candidates", candidates=[[0, 0, 1]])
    with pytest.raises(ConfigError, match="policy='candidates' beyond 8"):
        space.define_reorder("huge", 9)


def test_choice_knob_keeps_json_types_apart():
    space = ConfigSpace()
    space.define_knob("k", [1, True, "1", None, 2.5])
    knob = space.knobs["k"]
    assert [knob.index_of(json.loads(json.dumps(v))) for v in [1, True, "1", None, 2.5]] == [0, 1, 2, 3, 4]
    with pytest.raises(ConfigError, match="not a JSON scalar"):
        space.define_knob("bad", [[1, 2]])
    with pytest.raises(ConfigError, match="duplicate"):
        space.define_knob("dup", [4, 4])
    with pytest.raises(ConfigError, match="not finite"):
        space.define_knob("nan", [float("nan")])


# --------------------------------------------------------------------------- the space


def test_space_size_is_product_and_define_mode_returns_defaults(space):
    lengths = [len(k) for k in space.knobs.values()]
    assert space.size == len(space) == math.prod(lengths)
    assert list(space.knobs) == ["tile_m", "tile_n", "tile_k", "order", "unroll", "vectorize", "layout"]
    assert space.is_fallback and space.flop == 2 * 96 * 100 * 48
    assert space["tile_m"].size == [96, 1, 1] and space["unroll"].val == 0


def test_round_trip_index_config_json_for_random_indices(space):
    rng = np.random.default_rng(0)
    for index in [0, space.size - 1, *map(int, rng.integers(space.size, size=300))]:
        cfg = space.get(index)
        assert cfg.index == index and not cfg.is_fallback
        text = json.dumps(cfg.to_json())
        back = space.from_json(json.loads(text))
        assert back == cfg and back.index == index and back.to_json() == cfg.to_json()
        # running the template on the entity sees exactly the chosen entities
        tile_m, perm, unroll = matmul_template(cfg, WORKLOAD, "cpu")
        assert tile_m == cfg["tile_m"].size and perm == cfg["order"].perm and unroll == cfg["unroll"].val
        assert cfg.flop == space.flop


def test_mixed_radix_first_knob_is_least_significant(space):
    first = space.knobs["tile_m"]
    assert space.get(1)["tile_m"].size == first.entity(1).size
    assert space.get(len(first)).digits[:2] == (0, 1)


def test_json_is_stable_across_processes(space):
    index = space.size // 3 + 7
    code = (
        "import json, sys; sys.path.insert(0, 'tests');"
        "from test_space import matmul_template, WORKLOAD;"
        "from tunefleet.compiler.space import instantiate_space;"
        f"print(json.dumps(instantiate_space(matmul_template, WORKLOAD, 'cpu').get({index}).to_json()))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=_repo_root())
    assert json.loads(out.stdout) == space.get(index).to_json()


def _repo_root():
    import pathlib

    return pathlib.Path(__file__).resolve().parents[1]


def test_bad_json_names_the_knob_and_lists_allowed_values(space):
    good = space.get(5).to_json()
    bad_value = json.loads(json.dumps(good))
    bad_value["knobs"]["tile_m"] = [5, 5, 5]
    with pytest.raises(ConfigError, match=r"knob 'tile_m': \[5, 5, 5\] is not a candidate; allowed: \[\[96, 1, 1\].*more\)"):
        space.from_json(bad_value)
    bad_choice = json.loads(json.dumps(good))
    bad_choice["knobs"]["layout"] = "NCHW"
    with pytest.raises(ConfigError, match=r"knob 'layout'.*allowed: \[\"NK\", \"KN\"\]$"):
        space.from_json(bad_choice)
    unknown = json.loads(json.dumps(good))
    unknown["knobs"]["tile_z"] = [1, 1]
    with pytest.raises(ConfigError, match="unknown knob.*tile_z"):
        space.from_json(unknown)
    missing = json.loads(json.dumps(good))
    del missing["knobs"]["order"]
    with pytest.raises(ConfigError, match="lacks knob.*order"):
        space.from_json(missing)
    stale = dict(good, index=good["index"] + 1)
    with pytest.raises(ConfigError, match="disagrees"):
        space.from_json(stale)
    with pytest.raises(ConfigError, match="'knobs' object"):
        space.from_json({"index": 3})
    assert isinstance(ConfigError("x"), ValueError)


def test_get_rejects_out_of_range(space):
    for bad in [-1, space.size, True, 1.0]:
        with pytest.raises(ConfigError, match="out of range"):
            space.get(bad)


def test_random_is_distinct_and_covers_small_spaces(space):
    rng = np.random.default_rng(1)
    picks = space.random(rng, 200)
    assert len(picks) == 200 == len({c.index for c in picks})
    small = ConfigSpace()
    small.define_split("s", 12, 3)
    small.define_knob("k", [1, 2])
    assert sorted(c.index for c in small.random(rng, 100)) == list(range(36))


def test_mutate_changes_exactly_one_knob_and_neighbors_are_complete(space):
    rng = np.random.default_rng(2)
    cfg = space.get(12345)
    for _ in range(50):
        other = space.mutate(cfg, rng)
        assert sum(a != b for a, b in zip(cfg.digits, other.digits)) == 1
        assert space.get(other.index).digits == other.digits
    neighbors = space.neighbors(cfg)
    assert len(neighbors) == sum(len(k) - 1 for k in space.knobs.values()) == len(set(neighbors))
    assert all(sum(a != b for a, b in zip(cfg.digits, n.digits)) == 1 for n in neighbors)
    single = ConfigSpace()
    single.define_knob("only", [1])
    assert single.mutate(single.get(0), rng) == single.get(0)


def test_step_moves_one_knob_to_an_adjacent_choice_and_reaches_both_sides(space):
    rng = np.random.default_rng(4)
    cfg = space.get(12345)
    moved = set()
    for _ in range(200):
        other = space.step(cfg, rng)
        changed = [i for i, (a, b) in enumerate(zip(cfg.digits, other.digits)) if a != b]
        assert len(changed) == 1 and abs(cfg.digits[changed[0]] - other.digits[changed[0]]) == 1
        assert space.get(other.index).digits == other.digits
        moved.add((changed[0], other.digits[changed[0]] - cfg.digits[changed[0]]))
    inner = [i for i, k in enumerate(space.knobs.values()) if 0 < cfg.digits[i] < len(k) - 1]
    assert inner and all({(i, -1), (i, 1)} <= moved for i in inner)
    first, last = space.get(0), space.get(space.size - 1)  # every knob at its first / last choice
    assert all(b - a == 1 for a, b in zip(first.digits, space.step(first, rng).digits) if a != b)
    assert all(b - a == -1 for a, b in zip(last.digits, space.step(last, rng).digits) if a != b)
    single = ConfigSpace()
    single.define_knob("only", [1])
    assert single.step(single.get(0), rng) == single.get(0)


def test_knob_values_is_a_fixed_width_numeric_vector(space):
    cfg = space.get(777)
    vec = cfg.knob_values()
    assert vec.dtype == np.float32 and vec.shape == (3 + 3 + 2 + 4 + 1 + 1 + 1,)
    assert list(vec[:3]) == cfg["tile_m"].size
    assert vec[12] == cfg["unroll"].val and vec[13] == float(cfg["vectorize"].val)
    assert vec[14] == ["NK", "KN"].index(cfg["layout"].val)


def test_define_rules(space):
    with pytest.raises(ConfigError, match="after the space was instantiated"):
        space.define_knob("late", [1])
    fresh = ConfigSpace()
    fresh.define_knob("a", [1])
    with pytest.raises(ConfigError, match="defined twice"):
        fresh.define_knob("a", [2])
    with pytest.raises(ConfigError, match="no knob 'zzz'"):
        fresh["zzz"]
    cfg = space.get(0)
    cfg.define_knob("unroll", [0, 4, 16])  # no-op in entity mode
    with pytest.raises(ConfigError, match="no knob 'other'"):
        cfg.define_knob("other", [1])
    assert isinstance(cfg, ConfigEntity)


def test_huge_spaces_are_never_enumerated():
    space = ConfigSpace()
    for i in range(30):
        space.define_split(f"s{i}", 1 << 12, 4)
    assert space.size == 455**30
    cfg = space.get(space.size - 1)
    assert space.from_json(cfg.to_json()).index == space.size - 1
    assert len(space.random(np.random.default_rng(0), 10)) == 10
    with pytest.raises(OverflowError):
        len(space)


def test_a_knob_added_later_gives_configs_written_before_it_their_old_meaning():
    """A config JSON written before a knob was added (its index computed in the smaller space)
    parses, taking the knob's `absent` choice; a knob without one is still required, and
    `absent` must be one of the choices."""
    def template(extra):
        space = ConfigSpace()
        space.define_knob("tile", [1, 2, 4])
        if extra:
            space.define_knob("kc", [512, 256, 128], absent=512)
        space.freeze()
        return space

    old = template(False).get(2).to_json()
    new = template(True).from_json(old)
    assert new.to_json()["knobs"] == {"tile": 4, "kc": 512}
    assert template(True).get(new.index).to_json() == new.to_json()
    with pytest.raises(ConfigError, match="disagrees"):
        template(True).from_json(dict(new.to_json(), index=new.index + 1))
    with pytest.raises(ConfigError, match="'kc': 64 is not a candidate"):
        ConfigSpace().define_knob("kc", [512, 256], absent=64)


# --------------------------------------------------------------------------- switch (a union of spaces)


def union_template(cfg, workload, target):
    """Two methods of one workload: a shared knob, then each method's own (one name in both)."""
    cfg.define_knob("threads", [1, 2])
    cfg.define_knob("method", ["tiles", "direct"], absent="tiles")
    tiles = cfg.branch("method", "tiles")
    tiles.define_split("tile", 12, 2)
    tiles.define_knob("order", ["mn", "nm", "mnk"])
    direct = cfg.branch("method", "direct", prefix="direct_")
    direct.define_knob("order", ["a", "b"])
    direct.define_knob("unroll", [False, True])
    return cfg["method"].val


@pytest.fixture
def union():
    return instantiate_space(union_template, WORKLOAD, "cpu")


def all_configs(space):
    """Every config of a small space as (knob JSON, index)."""
    return [(json.dumps(space.get(i).to_json()["knobs"], sort_keys=True), i) for i in range(space.size)]


def test_a_switch_makes_the_space_the_union_of_its_branches(union):
    """Each branch counts the product of its own and the shared knobs, no more: a config holds
    only its branch's knobs (to_json), the others stay at choice 0, and every index decodes to a
    distinct config that encodes back to it, across processes alike."""
    assert union.size == 2 * (6 * 3) + 2 * (2 * 2)
    configs = all_configs(union)
    assert len({k for k, _ in configs}) == union.size
    for knobs, index in configs:
        assert union.from_json({"index": index, "knobs": json.loads(knobs)}).index == index
    tiles, direct = union.get(0), union.get(union.size - 1)
    assert tiles.to_json()["knobs"] == {"threads": 1, "method": "tiles", "tile": [12, 1], "order": "mn"}
    assert direct.to_json()["knobs"] == {"threads": 2, "method": "direct", "direct_order": "b", "direct_unroll": True}
    assert direct["tile"].size == [12, 1] and direct.knob_values().shape == tiles.knob_values().shape
    assert direct.branch("method", "direct", prefix="direct_")["order"].val == "b"
    assert union_template(direct, WORKLOAD, "cpu") == "direct"


def test_a_switch_knob_parses_configs_that_name_other_branches_or_predate_it(union):
    """Knobs of another branch in a config's JSON are ignored; a config written before the
    switch existed takes its `absent` branch; a missing knob of the config's own branch is an
    error naming it."""
    direct = {"threads": 1, "method": "direct", "direct_order": "a", "direct_unroll": False}
    assert union.from_json({"knobs": {**direct, "order": "nm"}}).to_json()["knobs"] == direct
    old = union.from_json({"index": 3, "knobs": {"threads": 2, "tile": [2, 6], "order": "nm"}})
    assert old.to_json()["knobs"] == {"threads": 2, "method": "tiles", "tile": [2, 6], "order": "nm"}
    with pytest.raises(ConfigError, match=r"lacks knob\(s\) \['direct_unroll'\]"):
        union.from_json({"knobs": {"threads": 1, "method": "direct", "direct_order": "a"}})
    with pytest.raises(ConfigError, match="'method': 'other' is not a candidate"):
        union.from_json({"knobs": {**direct, "method": "other"}})


def test_random_mutate_and_neighbors_stay_inside_the_union(union):
    """Random configs draw each branch alike and enumerate a small union exactly; a mutation
    changes one active knob (a switched config draws its new branch's knobs); a step changes one
    knob of the config's own branch; neighbours differ
    in one active knob, each a distinct config of the space."""
    rng = np.random.default_rng(3)
    assert sorted(c.index for c in union.random(rng, union.size)) == list(range(union.size))
    picks = union.random(rng, 12)
    assert len({c.index for c in picks}) == 12
    for _ in range(100):
        c = union.get(int(rng.integers(union.size)))
        m = union.mutate(c, rng)
        assert m != c and union.get(m.index).digits == m.digits
        if m["method"].val == c["method"].val:
            assert sum(a != b for a, b in zip(c.digits, m.digits)) == 1
    cfg = union.from_json({"knobs": {"threads": 1, "method": "tiles", "tile": [2, 6], "order": "nm"}})
    steps = {union.step(cfg, rng) for _ in range(100)}
    assert {s["method"].val for s in steps} == {"tiles"}  # a step stays within the config's branch
    assert all(sum(a != b for a, b in zip(cfg.digits, s.digits)) == 1 for s in steps)
    neighbors = union.neighbors(cfg)
    assert len(neighbors) == len(set(neighbors)) == 1 + 1 + 5 + 2
    assert {n["method"].val for n in neighbors} == {"tiles", "direct"}


def test_switch_rules():
    """One switch per space (a knob of a branch is no switch), a choice knob; a branch value
    must be one of its choices."""
    space = ConfigSpace()
    space.define_knob("a", [1, 2])
    space.define_knob("b", [1, 2])
    space.branch("a", 1).define_knob("x", [0, 1])
    with pytest.raises(ConfigError, match="at most one switch"):
        space.branch("b", 2).define_knob("y", [0, 1])
    with pytest.raises(ConfigError, match="'a': 3 is not a candidate"):
        space.branch("a", 3)
    with pytest.raises(ConfigError, match="at most one switch"):
        space.branch("x", 0).define_knob("z", [0])
    space.define_split("s", 4, 2)
    with pytest.raises(ConfigError, match="must be a choice knob"):
        space.branch("s", [1, 4])


# --------------------------------------------------------------------------- constraints


class _FewerThan:
    """rows × cols < limit (a register tile's bound), on the knobs as `cfg` names them."""

    def __init__(self, rows: str, cols: str, limit: int):
        self.rows, self.cols, self.limit = rows, cols, limit

    def __call__(self, cfg) -> bool:
        return cfg[self.rows].val * cfg[self.cols].val < self.limit


def constrained_template(cfg, workload, target):
    """A shared constraint, and one in the branch "direct" naming that branch's own knobs."""
    cfg.define_knob("rows", [1, 2, 3, 4])
    cfg.define_knob("cols", [1, 2, 4])
    cfg.define_constraint(_FewerThan("rows", "cols", 8))
    cfg.define_knob("method", ["tiles", "direct"])
    direct = cfg.branch("method", "direct", prefix="direct_")
    direct.define_knob("reg_n", [1, 2, 3])
    direct.define_knob("vec", [1, 2])
    direct.define_constraint(_FewerThan("reg_n", "vec", 4))


def brute_force_valid(space) -> set[int]:
    """Indices of the configs meeting both constraints, checked knob by knob here."""
    valid = set()
    for i in range(space.size):
        knobs = space.get(i).to_json()["knobs"]
        direct = knobs["method"] != "direct" or knobs["direct_reg_n"] * knobs["direct_vec"] < 4
        if knobs["rows"] * knobs["cols"] < 8 and direct:
            valid.add(i)
    return valid


def test_samplers_propose_only_configs_that_meet_the_constraints_and_every_config_keeps_its_index():
    """random (also of the whole space), mutate, step and neighbors return valid configs only,
    a branch's constraint reading its prefixed knobs and holding in that branch alone; configs
    that fail stay in the numbering: get and from_json give them back (records of them load)."""
    space = instantiate_space(constrained_template, WORKLOAD, "cpu")
    assert space.size == 12 * (1 + 6)
    valid = brute_force_valid(space)
    assert 0 < len(valid) < space.size
    assert {c.index for c in map(space.get, range(space.size)) if space.valid(c)} == valid
    rng = np.random.default_rng(5)
    assert sorted(c.index for c in space.random(rng, space.size)) == sorted(valid)
    assert {c.index for c in space.random(rng, 10)} <= valid
    assert sorted(c.index for c in space.random(rng, space.size - 1)) == sorted(valid)
    for _ in range(200):
        c = space.get(sorted(valid)[int(rng.integers(len(valid)))])
        assert space.mutate(c, rng).index in valid and space.step(c, rng).index in valid
        assert {n.index for n in space.neighbors(c)} <= valid
    spilling = space.from_json({"knobs": {"rows": 4, "cols": 4, "method": "direct", "direct_reg_n": 3,
                                          "direct_vec": 2}})
    assert not space.valid(spilling) and space.get(spilling.index) == spilling


def test_a_constraint_is_defined_with_the_knobs():
    space = instantiate_space(constrained_template, WORKLOAD, "cpu")
    with pytest.raises(ConfigError, match="constraint defined after the space was instantiated"):
        space.define_constraint(_FewerThan("rows", "cols", 2))
    config = space.get(0)
    constrained_template(config, WORKLOAD, "cpu")  # a config running the template ignores it
    assert len(space.constraints) == 2
