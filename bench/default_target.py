"""What the service's default target is worth: one task submitted without a target (the best
ISA the device key's hosts execute, since issue 11) and one for ``cpu -isa=generic`` (what
``tunefleet submit`` and ``Client.submit`` defaulted to before), same workload, same trial
budget, tuned by the same embedded service (SQLite, a private Redis, one worker on every
CPU of the mask) in the same run. Each artifact is then re-timed in fresh processes,
interleaved round by round (bench/common.interleaved_best_seconds), and the script prints
GFLOP/s of both and their ratio, with the ISA.

    .venv/bin/python bench/default_target.py                       # matmul 512^3, 32 trials each
    .venv/bin/python bench/default_target.py --op conv --trials 24  # the demo's conv2d
"""

from __future__ import annotations

import argparse
import socket
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import interleaved_best_seconds, kernel_code  # noqa: E402

from tunefleet.base.settings import Settings  # noqa: E402
from tunefleet.client import Client  # noqa: E402
from tunefleet.commands.demo import SEED_ARGS, SEED_OP  # noqa: E402
from tunefleet.compiler import ops  # noqa: E402
from tunefleet.compiler.target import Target  # noqa: E402
from tunefleet.server.embedded import EmbeddedService  # noqa: E402

WORKLOADS = {"matmul": ("matmul", {"M": 512, "N": 512, "K": 512}), "conv": (SEED_OP, SEED_ARGS)}
BEFORE = "cpu -isa=generic"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tune_both(op: str, args: dict, trials: int, home: Path) -> dict[str, tuple[dict, Path]]:
    """{"default": (task, artifact dir), "generic": (...)}, tuned one after the other."""
    settings = Settings(home=home, database_url=f"sqlite:///{home / 'tunefleet.db'}", redis_url=None,
                        artifact_dir=home / "artifacts", log_format="text")
    service = EmbeddedService(settings, port=_free_port())
    service.start()
    out = {}
    try:
        with Client(service.url, service.user_token, timeout_s=60) as client:
            for label, target in (("default", None), ("generic", BEFORE)):
                task = client.submit(op, args, target=target, trials=trials)
                print(f"  {label}: task {task['id']} for {task['target']} on {task['device_key']} ...", flush=True)
                task = client.wait(task["id"])
                if task["status"] != "done":
                    raise SystemExit(f"task {task['id']} ended {task['status']}: {task['error']}")
                out[label] = (task, client.download(task["id"], home / f"kernel-{label}"))
    finally:
        service.stop()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--op", choices=sorted(WORKLOADS), default="matmul")
    parser.add_argument("--trials", type=int, default=32, help="tuning trials per task")
    parser.add_argument("--processes", type=int, default=5, help="fresh timing processes per artifact")
    opts = parser.parse_args()
    op, args = WORKLOADS[opts.op]
    workload = ops.make_workload(op, args)
    print(f"host {Target.host()}; {op} {args}; {opts.trials} trials per task")
    with tempfile.TemporaryDirectory(prefix="tf-default-target-") as tmp:
        tuned = tune_both(op, args, opts.trials, Path(tmp))
        labels = list(tuned)
        rounds = [interleaved_best_seconds([kernel_code(tuned[label][1]) for label in labels], processes=1)
                  for _ in range(opts.processes)]
    print(f"\n{'task':<9} {'target':<18} {'tuned GFLOP/s':>14} {'best GFLOP/s':>13} {'median GFLOP/s':>15}")
    gflops = {}
    for i, label in enumerate(labels):
        task = tuned[label][0]
        seconds = [r[i] for r in rounds]
        gflops[label] = (workload.flop / min(seconds) / 1e9, workload.flop / statistics.median(seconds) / 1e9)
        print(f"{label:<9} {task['target']:<18} {task['best_gflops']:>14.1f} {gflops[label][0]:>13.1f} "
              f"{gflops[label][1]:>15.1f}")
    print(f"\ndefault / generic: {gflops['default'][0] / gflops['generic'][0]:.2f}x (best), "
          f"{gflops['default'][1] / gflops['generic'][1]:.2f}x (median of {opts.processes} processes)")


if __name__ == "__main__":
    main()
