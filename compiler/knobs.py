"""Knobs and their entities: the tunable parameters a schedule template defines
(`compiler.space` holds the space they make up and its points).

A knob has a fixed, ordered list of entities (its choices): a :class:`SplitKnob` the ways to
split a loop (:class:`SplitEntity`, AutoTVM's ``SplitSpace``), a :class:`ChoiceKnob` a choice
among JSON scalars (:class:`ChoiceEntity`), a :class:`ReorderKnob` loop orders
(:class:`ReorderEntity`, AutoTVM's ``ReorderSpace``). Candidates are computed eagerly and in
a deterministic order, so the same definition gives the same knob in every process.
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Callable, Iterable, Sequence
from typing import Any

__all__ = [
    "ConfigError",
    "Knob",
    "SplitKnob",
    "SplitEntity",
    "ChoiceKnob",
    "ChoiceEntity",
    "ReorderKnob",
    "ReorderEntity",
]

_SHOWN_VALUES = 10  # allowed values listed in an error message
_MAX_REORDER_AXES = 8  # 8! = 40320 permutations


class ConfigError(ValueError):
    """A knob definition, a config index or a config's JSON does not fit the space."""


def _allowed(values: Sequence[Any]) -> str:
    shown = ", ".join(json.dumps(v) for v in values[:_SHOWN_VALUES])
    more = len(values) - _SHOWN_VALUES
    return f"[{shown}{f', ... ({more} more)' if more > 0 else ''}]"


# --------------------------------------------------------------------------- entities


class _IntListEntity:
    """Base of the entities that are a list of ints (a split's sizes, a loop order's
    permutation): JSON value, numeric features and repr all come from ``ints()``."""

    __slots__ = ()

    def ints(self) -> list[int]:
        raise NotImplementedError

    def to_json_value(self) -> list[int]:
        return list(self.ints())

    def numeric(self) -> list[float]:
        return [float(v) for v in self.ints()]

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.ints()})"


class SplitEntity(_IntListEntity):
    """One way to split a loop: ``size`` lists the factors, outermost first.

    ``size[0]`` is the outer extent ``ceil(extent / prod(size[1:]))``; it is an
    exact quotient unless the knob allows tails (policy ``"power2"`` or
    candidates with a tail).
    """

    __slots__ = ("size",)

    def __init__(self, size: Sequence[int]):
        self.size = [int(s) for s in size]

    def apply(self, sch: Any, stage: Any, axis: Any) -> list[Any]:
        """Split ``axis`` of ``stage`` by the inner factors, innermost first.

        Calls ``outer, inner = stage.split(axis, factor=f)`` for ``f`` in
        ``size[-1], size[-2], ..., size[1]``, each time splitting the previous
        outer axis. ``sch`` is unused (kept for AutoTVM's signature). Returns
        the ``len(size)`` resulting axes, outermost first.
        """
        inners = []
        outer = axis
        for factor in reversed(self.size[1:]):
            outer, inner = stage.split(outer, factor=factor)
            inners.append(inner)
        return [outer, *reversed(inners)]

    def ints(self) -> list[int]:
        return self.size


class ChoiceEntity:
    """One choice of a :class:`ChoiceKnob`: ``val`` is the chosen value."""

    __slots__ = ("val", "_pos")

    def __init__(self, val: Any, pos: int):
        self.val = val
        self._pos = pos

    def to_json_value(self) -> Any:
        return self.val

    def numeric(self) -> list[float]:
        """The value itself when it is a number (bools as 0/1), else its choice index."""
        if isinstance(self.val, (int, float)):
            return [float(self.val)]
        return [float(self._pos)]

    def __repr__(self) -> str:
        return f"ChoiceEntity({self.val!r})"


class ReorderEntity(_IntListEntity):
    """One loop order: ``perm[k]`` is the index (into the given axes) of the k-th loop."""

    __slots__ = ("perm",)

    def __init__(self, perm: Sequence[int]):
        self.perm = [int(p) for p in perm]

    def apply(self, sch: Any, stage: Any, axes: Sequence[Any]) -> list[Any]:
        """Call ``stage.reorder(*[axes[i] for i in perm])``; return the axes in that order.

        ``sch`` is unused (kept for AutoTVM's signature).
        """
        ordered = [axes[i] for i in self.perm]
        stage.reorder(*ordered)
        return ordered

    def ints(self) -> list[int]:
        return self.perm


# --------------------------------------------------------------------------- knobs


class Knob:
    """A named tunable parameter with a fixed, ordered list of entities.

    ``len(knob)`` is the number of choices, ``entity(i)`` the i-th one and
    ``index_of(json_value)`` the inverse of ``entity(i).to_json_value()``
    (raises :class:`ConfigError` naming the knob and its allowed values).
    """

    def __init__(self, name: str, entities: list[Any], keys: list[str]):
        if not entities:
            raise ConfigError(f"knob {name!r} has no candidates")
        self.name = name
        self._entities = entities
        self._index = {k: i for i, k in enumerate(keys)}
        if len(self._index) != len(keys):
            raise ConfigError(f"knob {name!r} has duplicate candidates")

    def __len__(self) -> int:
        return len(self._entities)

    def entity(self, i: int) -> Any:
        return self._entities[i]

    def index_of(self, value: Any) -> int:
        try:
            key = json.dumps(value, allow_nan=False)
        except (TypeError, ValueError):
            key = None
        if key is None or key not in self._index:
            raise ConfigError(
                f"knob {self.name!r}: {value!r} is not a candidate; allowed: "
                f"{_allowed([e.to_json_value() for e in self._entities])}"
            )
        return self._index[key]

    @staticmethod
    def _key(value: Any) -> str:
        return json.dumps(value, allow_nan=False)


class SplitKnob(Knob):
    """Factorizations of a loop extent into ``num_outputs`` factors (AutoTVM's ``SplitSpace``).

    Policies:

    * ``"factors"``: every factor divides; the product equals ``extent``.
    * ``"power2"``: each inner factor is a power of two or a divisor of
      ``extent``; the product of the inner factors is at most ``extent``, and
      the outermost is ``ceil(extent / prod(inner))`` (tails allowed).
    * ``"candidates"``: the given size lists (outermost first; an outermost of
      ``-1`` means ``ceil(extent / prod(inner))``).

    ``max_factor`` bounds each inner factor; ``filter(size) -> bool`` keeps a
    size list (outermost first) when true. Candidates are ordered by their
    factors read innermost first, ascending, so choice 0 is ``[extent, 1, ...]``
    when it is allowed.
    """

    def __init__(
        self,
        name: str,
        extent: int,
        num_outputs: int = 2,
        *,
        policy: str = "factors",
        max_factor: int | None = None,
        filter: Callable[[list[int]], bool] | None = None,
        candidates: Iterable[Sequence[int]] | None = None,
    ):
        if not isinstance(extent, int) or extent < 1:
            raise ConfigError(f"split {name!r}: extent must be a positive int, got {extent!r}")
        if not isinstance(num_outputs, int) or num_outputs < 1:
            raise ConfigError(f"split {name!r}: num_outputs must be a positive int, got {num_outputs!r}")
        if max_factor is not None and (not isinstance(max_factor, int) or max_factor < 1):
            raise ConfigError(f"split {name!r}: max_factor must be a positive int, got {max_factor!r}")
        self.extent = extent
        self.num_outputs = num_outputs
        self.policy = policy
        if policy != "candidates" and candidates is not None:
            raise ConfigError(f"split {name!r}: candidates=... needs policy='candidates'")
        bound = extent if max_factor is None else min(extent, max_factor)
        if policy == "factors":
            sizes = self._enumerate(extent, num_outputs, [d for d in _divisors(extent) if d <= bound], exact=True)
        elif policy == "power2":
            pow2 = [1 << k for k in range(bound.bit_length()) if 1 << k <= bound]
            values = sorted(set(pow2) | {d for d in _divisors(extent) if d <= bound})
            sizes = self._enumerate(extent, num_outputs, values, exact=False)
        elif policy == "candidates":
            if candidates is None:
                raise ConfigError(f"split {name!r}: policy 'candidates' needs candidates=[...]")
            sizes = [self._check_candidate(name, c, bound) for c in candidates]
        else:
            raise ConfigError(
                f"split {name!r}: unknown policy {policy!r}; allowed: ['factors', 'power2', 'candidates']"
            )
        if filter is not None:
            sizes = [s for s in sizes if filter(list(s))]
        if policy != "candidates":
            sizes.sort(key=lambda s: s[::-1])
        super().__init__(name, [SplitEntity(s) for s in sizes], [self._key(list(s)) for s in sizes])

    @staticmethod
    def _enumerate(extent: int, n: int, values: list[int], exact: bool) -> list[tuple[int, ...]]:
        """All (outer, *inner) with inner drawn from ``values``; exact: product == extent."""
        out: list[tuple[int, ...]] = []

        def rec(inner: tuple[int, ...], prod: int) -> None:
            if len(inner) == n - 1:
                if exact and extent % prod:
                    return
                out.append((-(-extent // prod), *inner))
                return
            for v in values:
                p = prod * v
                if p > extent:
                    break
                if exact and extent % p:
                    continue
                rec((v, *inner), p)

        rec((), 1)
        return out

    def _check_candidate(self, name: str, cand: Sequence[int], bound: int) -> tuple[int, ...]:
        size = list(cand)
        if len(size) != self.num_outputs or not all(isinstance(s, int) and not isinstance(s, bool) for s in size):
            raise ConfigError(f"split {name!r}: candidate {cand!r} must be {self.num_outputs} ints")
        inner = size[1:]
        prod = math.prod(inner)
        if any(s < 1 or s > bound for s in inner) or prod > self.extent:
            raise ConfigError(
                f"split {name!r}: candidate {cand!r} has inner factors outside 1..{bound} "
                f"or a product above the extent {self.extent}"
            )
        outer = -(-self.extent // prod)
        if size[0] not in (-1, outer):
            raise ConfigError(f"split {name!r}: candidate {cand!r} must have outermost {outer} (or -1)")
        return (outer, *inner)


class ChoiceKnob(Knob):
    """A choice among JSON scalars (ints, floats, strs, bools, None); entity ``.val``.

    ``absent``: for a knob added to a template that already had records, the choice that
    does what the template did before, taken by a config written without the knob (see
    ``ConfigSpace.from_json``); it must be one of ``choices``. None: such a config is an error.
    """

    def __init__(self, name: str, choices: Sequence[Any], absent: Any = None):
        choices = list(choices)
        for c in choices:
            if not (c is None or isinstance(c, (bool, int, float, str))):
                raise ConfigError(f"knob {name!r}: choice {c!r} is not a JSON scalar")
            if isinstance(c, float) and not math.isfinite(c):
                raise ConfigError(f"knob {name!r}: choice {c!r} is not finite")
        self.choices = choices
        super().__init__(name, [ChoiceEntity(c, i) for i, c in enumerate(choices)], [self._key(c) for c in choices])
        self.absent = absent
        if absent is not None:
            self.index_of(absent)


class ReorderKnob(Knob):
    """Loop orders over ``n`` axes (AutoTVM's ``ReorderSpace``); entity ``.perm``.

    ``axes`` is the number of axes or a list of labels (labels are only used to
    write candidates by name). Policy ``"all"``: every permutation in
    lexicographic order (at most 8 axes); ``"candidates"``: the given
    permutations, each a list of indices or of labels.
    """

    def __init__(
        self,
        name: str,
        axes: int | Sequence[str],
        policy: str = "all",
        candidates: Iterable[Sequence[int | str]] | None = None,
    ):
        labels = [str(i) for i in range(axes)] if isinstance(axes, int) else [str(a) for a in axes]
        n = len(labels)
        if n < 1 or len(set(labels)) != n:
            raise ConfigError(f"reorder {name!r}: needs at least one axis and distinct labels, got {axes!r}")
        self.labels = labels
        if policy == "all":
            if candidates is not None:
                raise ConfigError(f"reorder {name!r}: candidates=... needs policy='candidates'")
            if n > _MAX_REORDER_AXES:
                raise ConfigError(
                    f"reorder {name!r}: {n} axes give {math.factorial(n)} orders; "
                    f"give policy='candidates' beyond {_MAX_REORDER_AXES} axes"
                )
            perms = [list(p) for p in itertools.permutations(range(n))]
        elif policy == "candidates":
            if candidates is None:
                raise ConfigError(f"reorder {name!r}: policy 'candidates' needs candidates=[...]")
            perms = [self._check_candidate(name, c) for c in candidates]
        else:
            raise ConfigError(f"reorder {name!r}: unknown policy {policy!r}; allowed: ['all', 'candidates']")
        super().__init__(name, [ReorderEntity(p) for p in perms], [self._key(p) for p in perms])

    def _check_candidate(self, name: str, cand: Sequence[int | str]) -> list[int]:
        perm = [self.labels.index(c) if isinstance(c, str) and c in self.labels else c for c in cand]
        if not all(type(p) is int for p in perm) or sorted(perm) != list(range(len(self.labels))):
            raise ConfigError(f"reorder {name!r}: candidate {list(cand)!r} is not a permutation of {self.labels}")
        return perm


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small) | {n // d for d in small})
