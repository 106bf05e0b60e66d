"""Reading an untrusted ONNX model in a child process, under a memory and a time limit.

ONNX's parser and shape inference are C++ run on the uploader's bytes. Shape inference with data
propagation computes shape tensors: 25 Concat nodes that each double one, about 2 KB of model,
ask for gigabytes (7 GB and 19 s before it failed under an 8 GB limit, on AMD Zen 4), enough for
the kernel to kill the server that parses it. :func:`load_model_isolated` runs
:func:`~.graph.load_model` in a fresh interpreter (``spawn``: nothing of the server's state, about
0.8 s to start) whose address space is bounded (``RLIMIT_AS``); a model past either limit, or
one that crashes the parser, is a :class:`~.graph.ModelError` like any other bad model.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import re
import resource
from collections.abc import Mapping, Sequence
from multiprocessing.connection import Connection

from .graph import ModelError, ModelGraph, Problem, load_model

__all__ = ["load_model_isolated"]

#: How protobuf's parser and ONNX's shape inference report an allocation that failed.
_ALLOC_FAILED = re.compile(r"bad_alloc|[Aa]lloc(ation)? failed")


def _child(conn: Connection, data: bytes, input_shapes: Mapping[str, Sequence[int]], max_bytes: int,
           memory_bytes: int) -> None:
    resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
    too_much = f"reading it needs more than {memory_bytes >> 20} MiB of memory"
    try:
        conn.send(("ok", load_model(data, input_shapes, max_bytes=max_bytes)))
    except ModelError as exc:  # C++ allocation failures come back as the parser's or inference's error text
        conn.send(("error", [dataclasses.replace(p, reason=f"{p.reason} ({too_much})") if _ALLOC_FAILED.search(p.reason)
                             else p for p in exc.problems]))
    except MemoryError:
        conn.send(("error", [_problem(too_much)]))


def _problem(reason: str) -> Problem:
    return Problem("model", "model", reason)


def load_model_isolated(data: bytes, input_shapes: Mapping[str, Sequence[int]] | None = None, *, max_bytes: int,
                        memory_bytes: int, timeout_s: float) -> ModelGraph:
    """:func:`~.graph.load_model` of the model bytes `data` in a child process limited to
    `memory_bytes` bytes of address space and `timeout_s` wall seconds.

    Raises ModelError as load_model does, and also when the child runs out of memory (shape
    inference reports std::bad_alloc, or Python a MemoryError), out of time (it is killed), or
    dies (a crash in the parser)."""
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(send, data, dict(input_shapes or {}), max_bytes, memory_bytes),
                        name="tunefleet-model-parse", daemon=True)
    child.start()
    send.close()
    try:
        if not receive.poll(timeout_s):
            raise ModelError([_problem(f"reading it took longer than {timeout_s:g} s")])
        status, value = receive.recv()
    except EOFError:
        raise ModelError([_problem("the ONNX parser crashed on it")]) from None
    finally:
        receive.close()
        child.kill()
        child.join()
    if status == "error":
        raise ModelError(value)
    return value
