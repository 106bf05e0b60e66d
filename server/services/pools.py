"""What the hosts of a device key execute: their agreement, and the target a task gets.

Each worker reports the best target its host executes (``HostFacts.target``: ``cpu
-isa=avx2``, ``cuda -arch=sm_90``). The live hosts of one device key must **agree**: the
same best target, so that every trial of a task measures the same code on the same kind
of host. A host registering under a key whose live hosts have another best target is
refused (409) and should join, or found, a key of its own; a lost host does not count.
The check and the registration's write are one transaction holding the key's lock
(:func:`check_agreement`), so of disagreeing hosts registering at once exactly one kind
is accepted. Pools whose live hosts disagree all the same (hosts registered before this
check, or a restarted host that changed) are marked in ``GET /api/v1/targets``
(:attr:`Pool.agree`).

A task's target follows the key's live hosts (:func:`task_target`):

- omitted, or a kind alone (``cpu``, ``cuda``): the best target they all execute
  (``Target.common_best``; with agreeing hosts, their best);
- named: accepted when they all execute it (an avx512 pool runs avx2 and generic code too),
  else 422 naming the target, the device key and what its hosts support;
- with no live host known for the key: a named target is kept as given; an omitted one is
  stored as its kind alone (``cpu``) and the tuner resolves it to the best target of the
  key's live hosts when it starts the task (:func:`resolve_pending`). A worker that still
  gets a target it cannot execute answers ``unsupported_target`` and the task fails.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from tunefleet.compiler.target import Target, bare_kind
from tunefleet.server.db.models import DeviceKeyLock, Task, Worker
from tunefleet.server.errors import Conflict, FieldError
from tunefleet.server.schemas.workers import HostFacts, WorkerRegister
from tunefleet.server.services.liveness import live_device_keys, live_query, live_workers

__all__ = ["Pool", "live_pool", "check_agreement", "task_target", "resolve_pending", "live_pools"]


@dataclass(frozen=True)
class Pool:
    """The live hosts of `device_key`: worker name -> the best target its host executes."""

    device_key: str
    hosts: dict[str, Target]

    @classmethod
    def of(cls, device_key: str, workers: Sequence[Worker]) -> Pool:
        """The pool of `workers` (live ones of `device_key`); a worker whose host facts name
        no target, stored before registration required it, is left out."""
        hosts = {w.name: HostFacts.model_validate(w.host or {}).target for w in workers}
        return cls(device_key, {name: target for name, target in hosts.items() if target is not None})

    @property
    def agree(self) -> bool:
        """Whether every live host has the same best target."""
        return len(set(self.hosts.values())) <= 1

    @property
    def kinds(self) -> set[str]:
        """The target kinds of the live hosts ("cpu", "cuda"; one when they agree)."""
        return {target.kind for target in self.hosts.values()}

    @property
    def best(self) -> Target | None:
        """The best target every live host executes; None without hosts (or when they share
        none, which agreement prevents)."""
        return Target.common_best(self.hosts.values())

    @property
    def supports(self) -> list[Target]:
        """The targets every live host executes, the best first."""
        best = self.best
        return best.executable() if best is not None else []

    def describe(self) -> str:
        """E.g. "its live hosts (w1: cpu -isa=avx2) support cpu -isa=avx2, cpu -isa=generic"."""
        hosts = ", ".join(f"{name}: {target}" for name, target in sorted(self.hosts.items()))
        supported = ", ".join(map(str, self.supports)) or "no common target"
        return f"its live hosts ({hosts}) support {supported}"


def live_pool(session: Session, device_key: str, lost_after_s: float) -> Pool:
    """The live workers of `device_key` and their best targets (Pool.of); ends the read
    transaction."""
    return Pool.of(device_key, live_workers(session, device_key, lost_after_s))


def live_pools(session: Session, lost_after_s: float) -> list[Pool]:
    """Every device key with a live worker, the most workers first."""
    return [live_pool(session, key, lost_after_s) for key in live_device_keys(session, lost_after_s)]


def check_agreement(session: Session, request: WorkerRegister, lost_after_s: float) -> None:
    """Conflict (409) when the live hosts of the device key in `request` (other than a
    worker of the same name: a restart) have another best target than the registering
    host; the message names both hosts, both targets and the device key.

    First takes the key's lock, held until the caller commits its registration (or rolls
    back): the check and that write are atomic against other registrations of the key."""
    mine = request.host.target
    assert mine is not None  # WorkerRegister requires it
    _lock_device_key(session, request.device_key)
    pool = Pool.of(request.device_key, session.scalars(live_query(request.device_key, lost_after_s)).all())
    others = {name: t for name, t in pool.hosts.items() if name != request.name and t != mine}
    if others:
        name, theirs = sorted(others.items())[0]
        raise Conflict(
            f"device key {request.device_key!r}: host {request.name!r} executes {mine} at best, but its live "
            f"host {name!r} executes {theirs}; the hosts of a device key must agree on their best target "
            f"(register this host under another device key, e.g. {request.device_key}-{mine.isa})")


def _lock_device_key(session: Session, device_key: str) -> None:
    """Lock `device_key`'s DeviceKeyLock row (created when missing) for the rest of the
    session's transaction. PostgreSQL: a row lock (an inserting transaction's row, or
    SELECT ... FOR UPDATE), other transactions wait for it. SQLite: the INSERT makes the
    transaction the database's one writer before it reads, other writers wait (busy timeout)."""
    insert = {"postgresql": postgresql.insert, "sqlite": sqlite.insert}[session.get_bind().dialect.name]
    session.execute(insert(DeviceKeyLock).values(device_key=device_key).on_conflict_do_nothing())
    session.execute(select(DeviceKeyLock).where(DeviceKeyLock.device_key == device_key).with_for_update())


def task_target(session: Session, device_key: str, kind: str | None, requested: Target | None,
                lost_after_s: float) -> str:
    """The target string a task on `device_key` gets, for a requested `kind` (None: any)
    and target (None: the pool's best); see the module docstring. FieldError on `target`
    when the key's live hosts cannot execute it, or are of another kind."""
    pool = live_pool(session, device_key, lost_after_s)
    if not pool.hosts:
        if requested is not None:
            return str(requested)
        return kind or _known_kind(session, device_key)
    best = pool.best
    if best is None:
        raise FieldError(("body", "target"), f"device key {device_key!r}: {pool.describe()}: name one that "
                                             f"all its hosts execute, or stop the disagreeing ones")
    if kind is not None and best.kind != kind:
        raise FieldError(("body", "target"), f"a {kind} target cannot run on device key {device_key!r}: "
                                             f"{pool.describe()}")
    if requested is None:
        return str(best)
    if not requested.runs_on(best):
        raise FieldError(("body", "target"), f"target {str(requested)!r} cannot run on device key "
                                             f"{device_key!r}: {pool.describe()}")
    return str(requested)


def _known_kind(session: Session, device_key: str) -> str:
    """The kind of the workers the key had (lost ones too), else "cpu"."""
    hosts: Sequence[dict] = session.scalars(select(Worker.host).where(Worker.device_key == device_key)).all()
    kinds = {HostFacts.model_validate(h or {}).kind for h in hosts}
    return kinds.pop() if len(kinds) == 1 else "cpu"


def resolve_pending(session: Session, task: Task, lost_after_s: float) -> str:
    """The task's target, resolved (and stored, committed) when it was submitted as a kind
    alone while no host of its key was live: the best target of the key's live hosts now.
    FieldError (its message says why) when they are none or of another kind."""
    kind = bare_kind(task.target)
    if kind is None:
        return task.target
    target = task_target(session, task.device_key, kind, None, lost_after_s)
    if bare_kind(target) is not None:
        raise FieldError(("target",), f"no live host of device key {task.device_key!r} to resolve "
                                      f"target {kind!r} on")
    session.execute(update(Task).where(Task.id == task.id, Task.target == task.target).values(target=target))
    session.commit()
    task.target = target
    return target
