"""Config spaces and knobs: what a schedule template may vary.

Define-by-run, as in AutoTVM (Chen et al., "Learning to Optimize Tensor
Programs", NeurIPS 2018; TVM's ``autotvm.task.space``). A schedule template is
a function ``template(cfg, workload, target) -> (Schedule, list[Tensor])``:

* The first call gets a :class:`ConfigSpace` in *define* mode. Each
  ``cfg.define_*`` registers a knob (`compiler.knobs`); ``cfg[name]`` returns the knob's
  default entity (choice 0), so the template runs through once.
* Later calls get a :class:`ConfigEntity` (one point of the space), for which
  ``define_*`` only check that the knob exists and ``cfg[name]`` returns the
  chosen entity.

A config is identified by its index in the mixed-radix product of the knobs
(first knob = least significant digit, as AutoTVM). Knob candidates are
computed eagerly and in a deterministic order, so the same template and
workload give the same space, hence the same indices, in every process.

A template with two ways to compute a workload (e.g. a convolution as an
im2col GEMM or as a direct NCHWc convolution) makes the space a union: one
choice knob is the *switch*, and ``cfg.branch(switch, value)`` defines the
knobs that matter only when the switch takes ``value``. A config's knobs
of other branches are inactive: they hold choice 0, ``to_json`` leaves them
out and the index ignores them, so the space holds no two configs that build
the same kernel. Its configs are numbered branch after branch (in the switch's
choice order), each branch's mixed radix over its active knobs; a space with
no switch numbers its configs exactly as before.

``cfg.define_constraint(check)`` marks configs the search should never propose
(e.g. a register tile larger than the register file): the samplers (``random``,
``mutate``, ``step``, ``neighbors``) return valid configs only, as Ansor's and
MetaSchedule's samplers reject programs that fail their checks, while the
numbering keeps every config, so records stay valid and any config still builds.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .knobs import ChoiceKnob, ConfigError, Knob, ReorderKnob, SplitKnob

__all__ = ["ConfigError", "ConfigSpace", "ConfigEntity", "Branch", "instantiate_space"]

#: Draws a sampler (random, mutate, step) makes per config it returns before it gives up on
#: finding one that meets the space's constraints.
_DRAWS_PER_CONFIG = 64


# --------------------------------------------------------------------------- space and entity


class _Config:
    """What templates see in both modes: ``define_*``, ``cfg[name]``, FLOP counting."""

    def __init__(self) -> None:
        self.flop = 0

    def add_flop(self, n: int | float) -> None:
        """Add ``n`` floating-point operations to ``flop`` (templates report their work here)."""
        self.flop += n

    def define_split(self, name: str, extent: int, num_outputs: int = 2, **options: Any) -> None:
        """Register a :class:`SplitKnob` of a loop of ``extent`` into ``num_outputs`` factors;
        ``options`` are its keyword arguments (policy, max_factor, filter, candidates; see there)."""
        self._define(name, lambda n: SplitKnob(n, extent, num_outputs, **options))

    def define_knob(self, name: str, choices: Sequence[Any], absent: Any = None) -> None:
        """Register a :class:`ChoiceKnob` over JSON scalars; ``absent``: the choice a config
        written before the knob existed takes (see ``ConfigSpace.from_json``)."""
        self._define(name, lambda n: ChoiceKnob(n, choices, absent))

    def define_reorder(self, name: str, axes: int | Sequence[str], **options: Any) -> None:
        """Register a :class:`ReorderKnob` over ``axes`` (a count or labels); ``options`` are its
        keyword arguments (policy, candidates; see there)."""
        self._define(name, lambda n: ReorderKnob(n, axes, **options))

    def define_constraint(self, check: Callable[[Any], bool]) -> None:
        """Register a constraint: ``check(cfg) -> bool``, reading knobs as ``cfg[name]``, is
        False for configs the search should never propose (``ConfigSpace.valid``); a picklable
        callable (spaces travel to featurizing processes). The configs stay in the space, so
        indices and records are unchanged, and each still builds when asked for by name."""
        self._constrain(check, None)

    def branch(self, switch: str, value: Any, prefix: str = "") -> Branch:
        """The view of this config through which a template defines and reads the knobs that
        matter only when choice knob ``switch`` is ``value`` (see the module docstring); their
        names get ``prefix`` in the space (where two branches share a knob name). Raises
        ConfigError when ``switch`` is not a choice knob with candidate ``value``."""
        knob = self._space()._knob(switch)
        if not isinstance(knob, ChoiceKnob):
            raise ConfigError(f"switch {switch!r} must be a choice knob")
        return Branch(self, switch, knob.index_of(value), prefix)

    def _define(self, name: str, make: Callable[[str], Knob], when: tuple[str, int] | None = None) -> None:
        raise NotImplementedError

    def _constrain(self, check: Callable[[Any], bool], scope: tuple[str, int, str] | None) -> None:
        """Define mode records the constraint (``scope``: switch, choice and prefix of the branch
        it holds in); a config ignores it."""

    def _space(self) -> ConfigSpace:
        raise NotImplementedError


class Branch:
    """A config seen from one branch of its space's switch (made by ``cfg.branch``): ``define_*``
    register knobs active only when the switch takes the branch's value, under the prefixed
    name; ``cfg[name]``, ``knobs`` (by unprefixed name: the branch's own knobs and those every
    branch shares), ``add_flop`` and ``is_fallback`` reach through to the config."""

    define_split = _Config.define_split
    define_knob = _Config.define_knob
    define_reorder = _Config.define_reorder
    define_constraint = _Config.define_constraint

    def __init__(self, cfg: _Config, switch: str, choice: int, prefix: str):
        self.cfg, self.switch, self.choice, self.prefix = cfg, switch, choice, prefix

    def _define(self, name: str, make: Callable[[str], Knob], when: tuple[str, int] | None = None) -> None:
        self.cfg._define(self.prefix + name, make, (self.switch, self.choice))

    def _constrain(self, check: Callable[[Any], bool], scope: tuple[str, int, str] | None) -> None:
        self.cfg._constrain(check, (self.switch, self.choice, self.prefix))

    def __getitem__(self, name: str) -> Any:
        return self.cfg[self.prefix + name]

    @property
    def knobs(self) -> dict[str, Knob]:
        space = self.cfg._space()
        own = {n[len(self.prefix):]: k for n, k in space.knobs.items()
               if space.when.get(n) == (self.switch, self.choice) and n.startswith(self.prefix)}
        return {**{n: k for n, k in space.knobs.items() if n not in space.when}, **own}

    @property
    def is_fallback(self) -> bool:
        return self.cfg.is_fallback

    def add_flop(self, n: int | float) -> None:
        self.cfg.add_flop(n)


class ConfigSpace(_Config):
    """The ordered knobs of a template for one workload and target (define mode).

    ``size`` (and ``len()`` when it fits in a machine int) is the number of
    configs: the product of the knob lengths, or with a switch the sum over its
    branches of the product of their active knobs' lengths; it may be huge, so
    nothing here enumerates the space. ``when``: knob name -> (switch name,
    choice index) for the knobs of one branch.
    """

    is_fallback = True  # a template running on a ConfigSpace sees default choices

    def __init__(self) -> None:
        super().__init__()
        self.knobs: dict[str, Knob] = {}
        self.when: dict[str, tuple[str, int]] = {}
        self.constraints: list[tuple[Callable[[Any], bool], tuple[str, int, str] | None]] = []
        self._frozen = False
        self._layout_cache: tuple[int | None, list[list[int]], list[int]] | None = None

    # -- define mode
    def _define(self, name: str, make: Callable[[str], Knob], when: tuple[str, int] | None = None) -> None:
        if self._frozen:
            raise ConfigError(f"knob {name!r} defined after the space was instantiated")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"knob name must be a non-empty str, got {name!r}")
        if name in self.knobs:
            raise ConfigError(f"knob {name!r} defined twice")
        if when is not None:
            switches = {w[0] for w in self.when.values()} | {when[0]}
            if len(switches) > 1:
                raise ConfigError(f"a space has at most one switch knob, got {sorted(switches)}")
            self.when[name] = when
        self.knobs[name] = make(name)
        self._layout_cache = None

    def _constrain(self, check: Callable[[Any], bool], scope: tuple[str, int, str] | None) -> None:
        if self._frozen:
            raise ConfigError("constraint defined after the space was instantiated")
        self.constraints.append((check, scope))

    def _space(self) -> ConfigSpace:
        return self

    def __getitem__(self, name: str) -> Any:
        """The default entity (choice 0) of knob ``name``."""
        return self._knob(name).entity(0)

    def freeze(self) -> None:
        """Forbid further ``define_*`` (called once the template has run)."""
        self._frozen = True

    # -- the space
    def _layout(self) -> tuple[int | None, list[list[int]], list[int]]:
        """(position of the switch or None, the active knob positions of each branch (the switch
        not among them), each branch's first index)."""
        if self._layout_cache is None:
            names, lengths = list(self.knobs), [len(k) for k in self.knobs.values()]
            switch = next((w[0] for w in self.when.values()), None)
            if switch is None:
                branches = [list(range(len(names)))]
            else:
                branches = [[i for i, n in enumerate(names) if n != switch and self.when.get(n, (switch, b))[1] == b]
                             for b in range(len(self.knobs[switch]))]
            offsets = [0]
            for active in branches:
                offsets.append(offsets[-1] + math.prod(lengths[i] for i in active))
            self._layout_cache = (None if switch is None else names.index(switch), branches, offsets)
        return self._layout_cache

    def _active(self, digits: Sequence[int]) -> list[int]:
        """Positions of the knobs active in a config with these digits (the switch included)."""
        switch, branches, _ = self._layout()
        if switch is None:
            return branches[0]
        return sorted(branches[digits[switch]] + [switch])

    @property
    def size(self) -> int:
        """Configs in the space, those that fail a constraint included."""
        return self._layout()[2][-1]

    def valid(self, entity: ConfigEntity) -> bool:
        """Whether ``entity`` meets every constraint of the branch it is in."""
        switch = self._layout()[0]  # a branch's constraint names the space's one switch
        for check, scope in self.constraints:
            if scope is None:
                view = entity
            elif entity.digits[switch] == scope[1]:
                view = Branch(entity, *scope)
            else:
                continue
            if not check(view):
                return False
        return True

    def __len__(self) -> int:
        """``size``; raises OverflowError beyond ``sys.maxsize`` (use ``size`` then)."""
        return self.size

    def get(self, index: int) -> ConfigEntity:
        """The config at ``index`` (mixed radix, first knob least significant; with a switch,
        branch after branch)."""
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < self.size:
            raise ConfigError(f"config index {index!r} out of range for a space of size {self.size}")
        index = int(index)
        switch, branches, offsets = self._layout()
        branch = bisect.bisect_right(offsets, index) - 1
        digits, t = [0] * len(self.knobs), index - offsets[branch]
        if switch is not None:
            digits[switch] = branch
        knobs = list(self.knobs.values())
        for i in branches[branch]:
            t, digits[i] = divmod(t, len(knobs[i]))
        return ConfigEntity(self, index, digits)

    def _index_of(self, digits: Sequence[int]) -> int:
        switch, branches, offsets = self._layout()
        branch = 0 if switch is None else digits[switch]
        knobs = list(self.knobs.values())
        index, radix = offsets[branch], 1
        for i in branches[branch]:
            index += digits[i] * radix
            radix *= len(knobs[i])
        return index

    def _entity(self, digits: Sequence[int]) -> ConfigEntity:
        """The config of these digits, those of knobs inactive in it set to 0."""
        active = set(self._active(digits))
        digits = [d if i in active else 0 for i, d in enumerate(digits)]
        return ConfigEntity(self, self._index_of(digits), digits)

    def from_json(self, d: dict) -> ConfigEntity:
        """Parse ``{"index": int (optional), "knobs": {name: value}}`` back into a config.

        A knob the JSON lacks takes its ``absent`` choice when it has one (a knob added
        to the template after the JSON was written); the JSON's index, computed in the older
        space, is then not checked. Knobs of branches other than the switch's (see the module
        docstring) may be left out, and are ignored when given.

        Raises :class:`ConfigError` for a missing knob without an ``absent`` choice, an
        unknown knob, a value that is not one of the knob's candidates (the message lists
        them, truncated), or an index that disagrees with the knobs (the template or
        workload changed since the JSON was written).
        """
        if not isinstance(d, dict) or not isinstance(d.get("knobs"), dict):
            raise ConfigError(f"config JSON must be an object with a 'knobs' object, got {d!r}")
        knobs = d["knobs"]
        unknown = sorted(set(knobs) - set(self.knobs))
        if unknown:
            raise ConfigError(f"unknown knob(s) {unknown}; the space has {list(self.knobs)}")
        absent = {n: getattr(k, "absent", None) for n, k in self.knobs.items() if n not in knobs}
        knobs = {**knobs, **{n: v for n, v in absent.items() if v is not None}}
        switch = self._layout()[0]
        names = list(self.knobs)
        if switch is not None and names[switch] in knobs:
            choice = self.knobs[names[switch]].index_of(knobs[names[switch]])
            inactive = {n for n, w in self.when.items() if w[1] != choice}
            absent = {n: v for n, v in absent.items() if n not in inactive}
            knobs = {n: v for n, v in knobs.items() if n not in inactive}
        missing = [n for n, value in absent.items() if value is None]
        if missing:
            raise ConfigError(f"config JSON lacks knob(s) {missing}")
        digits = [knob.index_of(knobs[n]) if n in knobs else 0 for n, knob in self.knobs.items()]
        entity = self._entity(digits)
        if "index" in d and d["index"] != entity.index and not absent:
            raise ConfigError(f"config index {d['index']!r} disagrees with its knobs, which give index {entity.index}")
        return entity

    def random(self, rng: np.random.Generator, n: int) -> list[ConfigEntity]:
        """Up to ``n`` distinct valid configs drawn with each knob's choice uniform (all of them,
        shuffled, when n >= size); with a switch, its branches are drawn alike whatever their
        sizes. Draws failing a constraint are rejected, at most _DRAWS_PER_CONFIG per config
        asked for, so fewer come back only from a space almost all invalid."""
        size = self.size
        if n >= size:
            return [c for c in (self.get(int(i)) for i in rng.permutation(size)) if self.valid(c)]
        seen: dict[int, ConfigEntity] = {}
        for _ in range(_DRAWS_PER_CONFIG * n):
            if len(seen) == n:
                break
            entity = self._entity([int(rng.integers(len(k))) for k in self.knobs.values()])
            if entity.index not in seen and self.valid(entity):
                seen[entity.index] = entity
        return list(seen.values())

    def mutate(self, entity: ConfigEntity, rng: np.random.Generator) -> ConfigEntity:
        """A valid copy of ``entity`` with one active knob (of those with >1 choice) changed to
        another random choice; a changed switch draws the knobs of its new branch at random.

        Returns ``entity`` itself when every knob has a single choice or no valid mutation
        turned up in _DRAWS_PER_CONFIG draws.
        """
        return self._first_valid(lambda: self._mutation(entity, rng), entity)

    def _mutation(self, entity: ConfigEntity, rng: np.random.Generator) -> ConfigEntity:
        knobs = list(self.knobs.values())
        movable = [i for i in self._active(entity.digits) if len(knobs[i]) > 1]
        if not movable:
            return entity
        pos = movable[int(rng.integers(len(movable)))]
        radix = len(knobs[pos])
        digits = list(entity.digits)
        digits[pos] = (digits[pos] + 1 + int(rng.integers(radix - 1))) % radix
        if pos == self._layout()[0]:
            for i in set(self._active(digits)) - set(self._active(entity.digits)):
                digits[i] = int(rng.integers(len(knobs[i])))
        return self._entity(digits)

    def step(self, entity: ConfigEntity, rng: np.random.Generator) -> ConfigEntity:
        """A valid copy of ``entity`` with one active knob, not the switch, moved to an adjacent
        choice (index ± 1): the smallest change to a knob whose candidates are ordered (split
        factors, sizes), where :meth:`mutate` may jump from the largest to the smallest. Stays
        within the config's branch. Returns ``entity`` itself when no such knob has more than
        one choice or no valid step turned up in _DRAWS_PER_CONFIG draws.
        """
        return self._first_valid(lambda: self._step(entity, rng), entity)

    def _step(self, entity: ConfigEntity, rng: np.random.Generator) -> ConfigEntity:
        knobs = list(self.knobs.values())
        switch = self._layout()[0]
        movable = [i for i in self._active(entity.digits) if i != switch and len(knobs[i]) > 1]
        if not movable:
            return entity
        pos = movable[int(rng.integers(len(movable)))]
        digits = list(entity.digits)
        d = digits[pos]
        digits[pos] = d - 1 if d == len(knobs[pos]) - 1 or (d > 0 and rng.random() < 0.5) else d + 1
        return self._entity(digits)

    def _first_valid(self, draw: Callable[[], ConfigEntity], fallback: ConfigEntity) -> ConfigEntity:
        for _ in range(_DRAWS_PER_CONFIG):
            entity = draw()
            if self.valid(entity):
                return entity
        return fallback

    def neighbors(self, entity: ConfigEntity) -> list[ConfigEntity]:
        """Every valid config that differs from ``entity`` in exactly one active knob (a changed
        switch takes choice 0 of its new branch's knobs)."""
        knobs = list(self.knobs.values())
        out = []
        for pos in self._active(entity.digits):
            for d in range(len(knobs[pos])):
                if d != entity.digits[pos]:
                    digits = list(entity.digits)
                    digits[pos] = d
                    out.append(self._entity(digits))
        return [c for c in out if self.valid(c)]

    def _knob(self, name: str) -> Knob:
        try:
            return self.knobs[name]
        except KeyError:
            raise ConfigError(f"no knob {name!r}; the space has {list(self.knobs)}") from None

    def __repr__(self) -> str:
        inner = ", ".join(f"{n}:{len(k)}" for n, k in self.knobs.items())
        return f"ConfigSpace(size={self.size}, {{{inner}}})"


class ConfigEntity(_Config):
    """One point of a :class:`ConfigSpace`: ``cfg[name]`` is the chosen entity of each knob.

    ``define_*`` only check that the knob exists in the space (a template that
    defines a different set of knobs than its space raises
    :class:`ConfigError`). Equal configs of one space compare equal and hash
    alike.
    """

    is_fallback = False

    def __init__(self, space: ConfigSpace, index: int, digits: Sequence[int]):
        super().__init__()
        self.space = space
        self.index = index
        self.digits = tuple(digits)

    def _define(self, name: str, make: Callable[[str], Knob], when: tuple[str, int] | None = None) -> None:
        self.space._knob(name)

    def _space(self) -> ConfigSpace:
        return self.space

    def __getitem__(self, name: str) -> Any:
        knob = self.space._knob(name)
        return knob.entity(self.digits[list(self.space.knobs).index(name)])

    def items(self) -> list[tuple[str, Any]]:
        """(knob name, chosen entity) pairs of the active knobs, in the space's order."""
        named = list(self.space.knobs.items())
        return [(named[i][0], named[i][1].entity(self.digits[i])) for i in self.space._active(self.digits)]

    def to_json(self) -> dict:
        """``{"index": int, "knobs": {name: JSON value}}``; ``space.from_json`` inverts it."""
        return {"index": self.index, "knobs": {n: e.to_json_value() for n, e in self.items()}}

    def knob_values(self) -> np.ndarray:
        """Flat float32 vector of the knob values, fixed width for a space.

        Split: its sizes; choice: the value if numeric (bools 0/1) else the
        choice index; reorder: the permutation; a knob inactive in this config: its choice 0.
        """
        entities = [k.entity(d) for k, d in zip(self.space.knobs.values(), self.digits)]
        return np.asarray([x for e in entities for x in e.numeric()], dtype=np.float32)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ConfigEntity) and other.space is self.space and other.index == self.index

    def __hash__(self) -> int:
        return hash(self.index)

    def __repr__(self) -> str:
        return f"ConfigEntity(index={self.index}, {self.to_json()['knobs']})"


def instantiate_space(template: Callable[..., Any], workload: Any, target: Any) -> ConfigSpace:
    """Run ``template(space, workload, target)`` once in define mode and return the frozen space."""
    space = ConfigSpace()
    template(space, workload, target)
    space.freeze()
    return space
