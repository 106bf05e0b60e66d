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
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .knobs import ChoiceKnob, ConfigError, Knob, ReorderKnob, SplitKnob

__all__ = ["ConfigError", "ConfigSpace", "ConfigEntity", "instantiate_space"]


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
        self._define(name, lambda: SplitKnob(name, extent, num_outputs, **options))

    def define_knob(self, name: str, choices: Sequence[Any], absent: Any = None) -> None:
        """Register a :class:`ChoiceKnob` over JSON scalars; ``absent``: the choice a config
        written before the knob existed takes (see ``ConfigSpace.from_json``)."""
        self._define(name, lambda: ChoiceKnob(name, choices, absent))

    def define_reorder(self, name: str, axes: int | Sequence[str], **options: Any) -> None:
        """Register a :class:`ReorderKnob` over ``axes`` (a count or labels); ``options`` are its
        keyword arguments (policy, candidates; see there)."""
        self._define(name, lambda: ReorderKnob(name, axes, **options))

    def _define(self, name: str, make: Callable[[], Knob]) -> None:
        raise NotImplementedError


class ConfigSpace(_Config):
    """The ordered knobs of a template for one workload and target (define mode).

    ``size`` (and ``len()`` when it fits in a machine int) is the product of
    the knob lengths; it may be huge, so nothing here enumerates the space.
    """

    is_fallback = True  # a template running on a ConfigSpace sees default choices

    def __init__(self) -> None:
        super().__init__()
        self.knobs: dict[str, Knob] = {}
        self._frozen = False

    # -- define mode
    def _define(self, name: str, make: Callable[[], Knob]) -> None:
        if self._frozen:
            raise ConfigError(f"knob {name!r} defined after the space was instantiated")
        if not isinstance(name, str) or not name:
            raise ConfigError(f"knob name must be a non-empty str, got {name!r}")
        if name in self.knobs:
            raise ConfigError(f"knob {name!r} defined twice")
        self.knobs[name] = make()

    def __getitem__(self, name: str) -> Any:
        """The default entity (choice 0) of knob ``name``."""
        return self._knob(name).entity(0)

    def freeze(self) -> None:
        """Forbid further ``define_*`` (called once the template has run)."""
        self._frozen = True

    # -- the space
    @property
    def size(self) -> int:
        return math.prod(len(k) for k in self.knobs.values())

    def __len__(self) -> int:
        """``size``; raises OverflowError beyond ``sys.maxsize`` (use ``size`` then)."""
        return self.size

    def get(self, index: int) -> ConfigEntity:
        """The config at ``index`` (mixed radix, first knob least significant)."""
        if isinstance(index, bool) or not isinstance(index, (int, np.integer)) or not 0 <= index < self.size:
            raise ConfigError(f"config index {index!r} out of range for a space of size {self.size}")
        index = int(index)
        digits, t = [], index
        for knob in self.knobs.values():
            t, d = divmod(t, len(knob))
            digits.append(d)
        return ConfigEntity(self, index, digits)

    def _index_of(self, digits: Sequence[int]) -> int:
        index, radix = 0, 1
        for d, knob in zip(digits, self.knobs.values()):
            index += d * radix
            radix *= len(knob)
        return index

    def from_json(self, d: dict) -> ConfigEntity:
        """Parse ``{"index": int (optional), "knobs": {name: value}}`` back into a config.

        A knob the JSON lacks takes its ``absent`` choice when it has one (a knob added
        to the template after the JSON was written); the JSON's index, computed in the older
        space, is then not checked.

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
        missing = [n for n, value in absent.items() if value is None]
        if missing:
            raise ConfigError(f"config JSON lacks knob(s) {missing}")
        knobs = {**knobs, **absent}
        digits = [knob.index_of(knobs[n]) for n, knob in self.knobs.items()]
        index = self._index_of(digits)
        if "index" in d and d["index"] != index and not absent:
            raise ConfigError(f"config index {d['index']!r} disagrees with its knobs, which give index {index}")
        return ConfigEntity(self, index, digits)

    def random(self, rng: np.random.Generator, n: int) -> list[ConfigEntity]:
        """Up to ``n`` distinct configs drawn uniformly (all of them, shuffled, when n >= size)."""
        size = self.size
        if n >= size:
            return [self.get(int(i)) for i in rng.permutation(size)]
        seen: dict[int, ConfigEntity] = {}
        while len(seen) < n:
            digits = [int(rng.integers(len(k))) for k in self.knobs.values()]
            index = self._index_of(digits)
            if index not in seen:
                seen[index] = ConfigEntity(self, index, digits)
        return list(seen.values())

    def mutate(self, entity: ConfigEntity, rng: np.random.Generator) -> ConfigEntity:
        """A copy of ``entity`` with one knob (of those with >1 choice) changed to another random choice.

        Returns ``entity`` itself when every knob has a single choice.
        """
        movable = [i for i, k in enumerate(self.knobs.values()) if len(k) > 1]
        if not movable:
            return entity
        pos = movable[int(rng.integers(len(movable)))]
        radix = len(list(self.knobs.values())[pos])
        digits = list(entity.digits)
        digits[pos] = (digits[pos] + 1 + int(rng.integers(radix - 1))) % radix
        return ConfigEntity(self, self._index_of(digits), digits)

    def neighbors(self, entity: ConfigEntity) -> list[ConfigEntity]:
        """Every config that differs from ``entity`` in exactly one knob (sum of (len-1) over knobs)."""
        out = []
        for pos, knob in enumerate(self.knobs.values()):
            for d in range(len(knob)):
                if d != entity.digits[pos]:
                    digits = list(entity.digits)
                    digits[pos] = d
                    out.append(ConfigEntity(self, self._index_of(digits), digits))
        return out

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

    def _define(self, name: str, make: Callable[[], Knob]) -> None:
        self.space._knob(name)

    def __getitem__(self, name: str) -> Any:
        knob = self.space._knob(name)
        return knob.entity(self.digits[list(self.space.knobs).index(name)])

    def items(self) -> list[tuple[str, Any]]:
        """(knob name, chosen entity) pairs in the space's order."""
        return [(n, k.entity(d)) for (n, k), d in zip(self.space.knobs.items(), self.digits)]

    def to_json(self) -> dict:
        """``{"index": int, "knobs": {name: JSON value}}``; ``space.from_json`` inverts it."""
        return {"index": self.index, "knobs": {n: e.to_json_value() for n, e in self.items()}}

    def knob_values(self) -> np.ndarray:
        """Flat float32 vector of the knob values, fixed width for a space.

        Split: its sizes; choice: the value if numeric (bools 0/1) else the
        choice index; reorder: the permutation.
        """
        return np.asarray([x for _, e in self.items() for x in e.numeric()], dtype=np.float32)

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
