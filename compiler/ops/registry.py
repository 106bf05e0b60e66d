"""Operator registry: argument schemas, workloads, and per-target schedule templates.

An operator (`OpDef`) declares its arguments (`ArgDef`: name, type, bounds, allowed values,
default), how to build its tensor expression from concrete arguments, a numpy reference,
its FLOP count, and a schedule template per target kind. A `Workload` is an operator with
concrete, validated arguments; its key is a stable hash of its canonical JSON.
"""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from ..space import ConfigEntity, ConfigSpace
from ..te import Tensor


class WorkloadError(ValueError):
    """Bad operator or arguments; `field` names the offending argument ('op' for the operator)."""

    def __init__(self, field: str, message: str):
        super().__init__(f"{field}: {message}")
        self.field = field


@dataclass(frozen=True)
class ArgDef:
    """One operator argument. type: 'int' | 'int2' | 'float' | 'bool' | 'str' | 'json'.

    'int2' is a per-dimension pair (e.g. a conv stride): an int `s` or a list `[h, w]`,
    normalized to the list `[h, w]` (so `2` and `[2, 2]` give the same workload key); `min`
    and `max` bound each element. `default` is given in normalized form.

    `omit_default`: for an argument added to an operator after workloads of it were recorded,
    a workload leaves it out of its args when it has its default, so the canonical JSON and
    the key of every earlier workload stay the same (the operator reads it with its default).
    """

    name: str
    type: str
    default: Any = None
    min: int | None = None
    max: int | None = None
    choices: tuple | None = None
    description: str = ""
    required: bool = False
    omit_default: bool = False

    def schema(self) -> dict:
        return {"name": self.name, "type": self.type, "default": self.default, "min": self.min, "max": self.max,
                "choices": list(self.choices) if self.choices else None, "required": self.required,
                "description": self.description}

    def _check_int(self, value: Any, what: str = "") -> int:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise WorkloadError(self.name, f"{what}must be an integer, got {value!r}")
        value = int(value)
        if self.min is not None and value < self.min:
            raise WorkloadError(self.name, f"{what}must be >= {self.min}, got {value}")
        if self.max is not None and value > self.max:
            raise WorkloadError(self.name, f"{what}must be <= {self.max}, got {value}")
        return value

    def check(self, value: Any) -> Any:
        if self.type == "int":
            value = self._check_int(value)
        elif self.type == "int2":
            if isinstance(value, (list, tuple)):
                if len(value) != 2:
                    raise WorkloadError(self.name, f"must be an integer or a pair [h, w], got {list(value)!r}")
                value = [self._check_int(v, f"{d} element ") for d, v in zip(("first", "second"), value)]
            else:
                value = [self._check_int(value)] * 2
        elif self.type == "bool":
            if not isinstance(value, bool):
                raise WorkloadError(self.name, f"must be true or false, got {value!r}")
        elif self.type == "float":
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise WorkloadError(self.name, f"must be a number, got {value!r}")
            value = float(value)
        elif self.type == "str":
            if not isinstance(value, str):
                raise WorkloadError(self.name, f"must be a string, got {value!r}")
        elif self.type == "json":
            if not isinstance(value, dict):
                raise WorkloadError(self.name, f"must be an object, got {type(value).__name__}")
        if self.choices is not None and value not in self.choices:
            raise WorkloadError(self.name, f"{value!r} is not allowed; allowed: {', '.join(map(str, self.choices))}")
        return value


Template = Callable[[Any, "Workload", Any], tuple[Any, list[Tensor]]]


@dataclass
class OpDef:
    """An operator: schema, compute builder, numpy reference, FLOP count and templates.

    compute(args) -> list of tensors: inputs then outputs (the kernel's argument order).
    reference(args, *inputs) -> list of numpy outputs. flop(args) -> int.
    templates: {'cpu': template, 'cuda': template}; a template is
    `(cfg, workload, target) -> (Schedule, tensors)`. default_config(space, workload, target)
    -> dict of knob values chosen by a rule (used without tuning), or a list of them: the
    default first, then configs a search measures right after it (e.g. the default of each
    method of a union space).
    check(args) raises WorkloadError for cross-argument constraints.
    layouts(args) -> {arg name: layout text} for the artifact header.
    """

    name: str
    description: str
    args: list[ArgDef]
    compute: Callable[[dict], list[Tensor]]
    reference: Callable[..., list[np.ndarray]]
    flop: Callable[[dict], int]
    templates: dict[str, Template] = field(default_factory=dict)
    default_config: Callable[[ConfigSpace, "Workload", Any], dict | list[dict]] | None = None
    check: Callable[[dict], None] | None = None
    layouts: Callable[[dict], dict[str, str]] | None = None
    family: str = ""

    def schema(self) -> dict:
        return {"name": self.name, "description": self.description, "family": self.family or self.name,
                "args": [a.schema() for a in self.args], "targets": sorted(self.templates)}

    def normalize(self, args: dict) -> dict:
        if not isinstance(args, dict):
            raise WorkloadError("args", f"must be an object of argument values, got {type(args).__name__}")
        known = {a.name for a in self.args}
        for k in args:
            if k not in known:
                raise WorkloadError(k, f"unknown argument of {self.name}; arguments: {', '.join(sorted(known))}")
        out = {}
        for a in self.args:
            if a.name in args and args[a.name] is not None:
                value = a.check(args[a.name])
            elif a.required:
                raise WorkloadError(a.name, f"is required for {self.name}")
            else:
                value = copy.deepcopy(a.default)  # a workload never shares a mutable default
            if not (a.omit_default and value == a.default):
                out[a.name] = value
        if self.check is not None:
            self.check(out)
        return out


_REGISTRY: dict[str, OpDef] = {}


def register(op: OpDef) -> OpDef:
    _REGISTRY[op.name] = op
    return op


def get(name: str) -> OpDef:
    """The operator called `name`; WorkloadError('op') lists the known ones."""
    if not isinstance(name, str) or name not in _REGISTRY:  # a workload file's "op" may be any JSON
        raise WorkloadError("op", f"unknown operator {str(name)[:80]!r}; available: {', '.join(sorted(_REGISTRY))}")
    return _REGISTRY[name]


def list_ops() -> list[dict]:
    """Every operator's schema: name, description, args (name/type/default/min/max/choices), targets."""
    return [_REGISTRY[n].schema() for n in sorted(_REGISTRY)]


class Workload:
    """An operator with concrete, validated arguments.

    `key`: first 24 hex digits of sha256 of the canonical JSON `{"op": ..., "args": ...}`.
    """

    def __init__(self, op: str, args: dict):
        self.opdef = get(op)
        self.op = op
        self.args = self.opdef.normalize(args)
        self.canonical = json.dumps({"op": op, "args": self.args}, sort_keys=True, separators=(",", ":"))
        self.key = hashlib.sha256(self.canonical.encode()).hexdigest()[:24]

    def to_json(self) -> dict:
        return {"op": self.op, "args": self.args}

    @classmethod
    def from_json(cls, data: dict) -> "Workload":
        if not isinstance(data, dict) or "op" not in data:
            raise WorkloadError("op", "workload JSON needs 'op' and 'args'")
        return cls(data["op"], data.get("args", {}))

    @property
    def flop(self) -> int:
        return int(self.opdef.flop(self.args))

    @property
    def family(self) -> str:
        return self.opdef.family or self.op

    def tensors(self) -> list[Tensor]:
        """Fresh tensors of the computation: inputs, then outputs."""
        return self.opdef.compute(self.args)

    def reference(self, *inputs: np.ndarray) -> list[np.ndarray]:
        return self.opdef.reference(self.args, *inputs)

    def template(self, target_kind: str) -> Template:
        if target_kind not in self.opdef.templates:
            raise WorkloadError("target", f"operator {self.op!r} has no template for {target_kind!r}; "
                                f"available: {', '.join(sorted(self.opdef.templates)) or 'none'}")
        return self.opdef.templates[target_kind]

    def layouts(self) -> dict[str, str]:
        return self.opdef.layouts(self.args) if self.opdef.layouts else {}

    def kernel_name(self, target=None) -> str:
        """A C identifier naming the kernel: operator, key prefix and, for a build for
        `target` (a compiler.target.Target), its name suffix (``matmul_<key>_avx2``,
        ``matmul_<key>_sm90``), so that builds of one workload for two targets have
        different symbol and library names and link into one program. Without a target:
        the workload's own name (``matmul_<key>``), e.g. a multi-target library's dispatcher."""
        base = f"{self.op}_{self.key[:12]}"
        return base if target is None else f"{base}_{target.name_suffix}"

    def __repr__(self):
        return f"Workload({self.canonical})"


def make_workload(op: str, args: dict) -> Workload:
    """Validate and build a workload; raises WorkloadError naming the bad field."""
    if not isinstance(op, str):
        raise WorkloadError("op", f"must be an operator name, got {op!r}")
    return Workload(op, args)


def config_space(workload: Workload, target) -> ConfigSpace:
    """Run the workload's template for `target` once in define mode and return its space."""
    space = ConfigSpace()
    workload.template(target.kind)(space, workload, target)
    space.freeze()
    return space


def default_config(workload: Workload, target) -> ConfigEntity:
    """The config used without tuning, chosen by the operator's rule (else the first point)."""
    return preferred_configs(workload, target)[0]


def preferred_configs(workload: Workload, target) -> list[ConfigEntity]:
    """The configs a search measures first: the default (`default_config`), then the other
    configs the operator's rule names (e.g. the default of each method of a union space)."""
    space = config_space(workload, target)
    rule = workload.opdef.default_config
    if rule is None:
        return [space.get(0)]
    knobs = rule(space, workload, target)
    return [space.from_json({"knobs": k}) for k in (knobs if isinstance(knobs, list) else [knobs])]


def random_inputs(tensors: Sequence[Tensor], rng: np.random.Generator) -> list[np.ndarray]:
    """Random inputs in [-1, 1) for the placeholders among `tensors`."""
    from ..te import PlaceholderOp

    return [(rng.random(t.shape, dtype=np.float64) * 2 - 1).astype(t.dtype)
            for t in tensors if isinstance(t.op, PlaceholderOp)]
