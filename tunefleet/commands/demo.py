"""`tunefleet demo`: the main job end to end, in one command.

Starts the embedded service (as `tunefleet up` does, under ``<dir>/home``, on a free port,
with its own Redis and SQLite), submits the seed workload — ``conv2d_nchw`` 1×512×7×7 →
512 channels, 3×3, padding 1, with bias and relu — for this machine's CPU, waits with
progress, downloads the tuned kernel, calls it from Python and from C++ (a ``main.cpp``
written against the artifact's header, built with g++) with both outputs checked against
the operator's numpy reference, prints a summary and stops the service.
"""

from __future__ import annotations

import collections
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

import click

from .paths import OutputPath

SEED_OP = "conv2d_nchw"
SEED_ARGS = {"N": 1, "CI": 512, "H": 7, "W": 7, "CO": 512, "KH": 3, "KW": 3, "padding": [1, 1],
             "bias": True, "epilogue": "relu"}
FALLBACK_OP, FALLBACK_ARGS = "matmul", {"M": 512, "N": 512, "K": 512}
#: Largest accepted max |out - ref| / max |ref| of a float32 kernel (as the workers check).
TOLERANCE = 1e-4
_C_TYPES = {"float32": "float", "float64": "double"}
#: Calls are timed in TIMING_WINDOWS windows of at least TIMING_MIN_CALLS calls and
#: TIMING_WINDOW_S seconds; the best window's time per call is reported, from Python and from C++
#: alike, so a burst of other work (the service's processes exiting just before) does not read
#: as binding overhead.
TIMING_WINDOWS, TIMING_MIN_CALLS, TIMING_WINDOW_S = 5, 10, 0.1


def _can_sandbox() -> bool:
    """Whether the demo's worker can sandbox its candidates here. The demo tunes only its own seed
    workload on the user's own machine, so where no sandbox can be made (no user namespaces) it
    runs its worker with --no-sandbox and says so, instead of failing the quick start."""
    from tunefleet.compiler import sandbox

    try:
        sandbox.detect()
    except sandbox.SandboxUnavailable as exc:
        click.echo(f"    (no sandbox here: {exc}; the demo's worker runs its own candidates unsandboxed)")
        return False
    return True


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _step(text: str) -> None:
    click.secho(f"==> {text}", bold=True)


@click.command("demo")
@click.option("--trials", type=click.IntRange(min=1), default=24, show_default=True,
              help="tuning budget (about 5 s per trial on 2 busy cores)")
@click.option("--dir", "out_dir", type=OutputPath(folder=True),
              default=Path("tunefleet-demo"), show_default=True,
              help="where the service's data, the kernel and the C++ program go")
@click.option("--port", type=int, default=0, help="server port [default: a free one]")
def demo_command(trials: int, out_dir: Path, port: int) -> None:
    """Tune the seed workload here and call the kernel from Python and C++.

    conv2d_nchw 1x512x7x7 -> 512, 3x3, pad 1, bias + relu: starts the service on this
    machine, tunes for --trials candidates, downloads the artifact, checks its output from
    Python and from a C++ program against numpy, prints a summary, stops the service."""
    from tunefleet.client import Client, best_text
    from tunefleet.compiler import ops
    from tunefleet.server.embedded import EmbeddedService, ServiceError
    from tunefleet.base.settings import Settings

    began = time.monotonic()
    out_dir = out_dir.resolve()
    home = out_dir / "home"
    op, args = SEED_OP, SEED_ARGS
    if SEED_OP not in {o["name"] for o in ops.list()}:
        click.echo(f"(operator {SEED_OP} is not available in this build: tuning {FALLBACK_OP} 512³ instead)")
        op, args = FALLBACK_OP, FALLBACK_ARGS
    workload = ops.make_workload(op, args)
    settings = Settings(home=home, database_url=f"sqlite:///{home / 'tunefleet.db'}", redis_url=None,
                        artifact_dir=home / "artifacts", log_format="text")

    _step(f"starting the service under {home}")
    service = EmbeddedService(settings, port=port or _free_port(), sandbox=_can_sandbox())
    try:
        service.start()
    except ServiceError as exc:
        raise click.ClickException(str(exc)) from exc
    try:
        click.echo(f"    server {service.url}, worker on CPUs {service.cpus}, logs in {service.logs}")
        with Client(service.url, service.user_token, timeout_s=60) as client:
            task = client.submit(op, args, trials=trials)  # target: the best the worker's host executes
            target = task["target"]
            _step(f"tuning {_describe(op, args)} for {target}, {trials} trials")
            tuned_at = time.monotonic()
            task = client.wait(task["id"], progress=True)
            tuning_s = time.monotonic() - tuned_at
            if task["status"] != "done":
                raise click.ClickException(f"task {task['id']} ended {task['status']}: {task['error']}")
            statuses = collections.Counter(t["status"] for t in client.trials(task["id"], limit=500)["items"])
            _step("downloading the kernel")
            folder = client.download(task["id"], out_dir / "kernel")
        click.echo(f"    {folder}: {', '.join(sorted(p.name for p in folder.iterdir()))}")
    finally:
        _step("stopping the service")
        service.stop()

    _step("calling it from Python")
    py_error, py_ms, inputs, ref, manifest = _python_check(workload, folder)
    click.echo(f"    max relative error vs numpy {py_error:.2e}, {py_ms:.3f} ms per call "
               f"(best of {TIMING_WINDOWS} windows)")
    _step("calling it from C++")
    cpp = _cpp_check(folder, manifest, inputs, ref, out_dir / "cpp")
    if cpp is None:
        click.echo("    skipped: no g++ on PATH (apt-get install g++)")
    else:
        click.echo(f"    max relative error vs numpy {cpp[0]:.2e}, {cpp[1]:.3f} ms per call "
                   f"({out_dir / 'cpp' / 'main.cpp'})")

    ok = py_error <= TOLERANCE and (cpp is None or cpp[0] <= TOLERANCE)
    summary = ", ".join(f"{n} {s}" for s, n in statuses.most_common())
    click.echo("")
    click.secho(f"tunefleet demo {'passed' if ok else 'FAILED'} in {time.monotonic() - began:.0f} s", bold=True)
    rows = [
        ("workload", f"{_describe(op, args)} ({workload.flop / 1e6:.1f} MFLOP)"),
        ("target", f"{task['target']} on device key {task['device_key']}"),
        ("tuning", f"{task['trials_done']} trials ({summary}) in {tuning_s:.0f} s"),
        ("best", f"{best_text(task)} (validated median)"),
        ("artifact", f"{folder}"),
        ("Python", f"error {py_error:.1e}, {py_ms:.3f} ms per call"),
        ("C++", "skipped (no g++)" if cpp is None else f"error {cpp[0]:.1e}, {cpp[1]:.3f} ms per call"),
        ("dashboard", f"tunefleet up (TUNEFLEET_HOME={home}) shows task {task['id']}"),
    ]
    for name, value in rows:
        click.echo(f"  {name:<10} {value}")
    if not ok:
        raise SystemExit(1)


def _describe(op: str, args: dict[str, Any]) -> str:
    if op == "conv2d_nchw":
        extras = " + ".join(x for x in ("bias" if args.get("bias") else "", args.get("epilogue", "none")) if x and x != "none")
        return (f"conv2d_nchw {args['N']}x{args['CI']}x{args['H']}x{args['W']} -> {args['CO']}, "
                f"{args['KH']}x{args['KW']}, pad {args['padding'][0]}" + (f", {extras}" if extras else ""))
    return f"{op} " + " ".join(f"{k}={v}" for k, v in args.items())


def _rel_error(out, ref) -> float:
    import numpy as np

    out, ref = np.asarray(out, np.float64), np.asarray(ref, np.float64)
    return float(np.abs(out - ref).max() / max(float(np.abs(ref).max()), 1e-30))


def _python_check(workload, folder: Path):
    """Output error against numpy and milliseconds per call of the kernel from Python (the best
    of TIMING_WINDOWS windows)."""
    import numpy as np

    import tunefleet
    from tunefleet.compiler import ops
    from tunefleet.compiler.artifact import read_manifest

    kernel = tunefleet.load(folder)
    inputs = ops.random_inputs(workload.tensors(), np.random.default_rng(0))
    out = kernel(*inputs)
    ref = workload.reference(*inputs)[0]
    error = _rel_error(out, ref)
    best_s = float("inf")
    for _ in range(TIMING_WINDOWS):
        calls, t0 = 0, time.perf_counter()
        while calls < TIMING_MIN_CALLS or time.perf_counter() - t0 < TIMING_WINDOW_S:
            kernel(*inputs, out=[out])
            calls += 1
        best_s = min(best_s, (time.perf_counter() - t0) / calls)
    return error, best_s * 1e3, inputs, ref, read_manifest(folder)


def _cpp_check(folder: Path, manifest: dict, inputs, ref, work: Path) -> tuple[float, float] | None:
    """Write main.cpp against the artifact's header, build it with g++, run it on `inputs`
    (written as raw files) and return its output's error against `ref` and its ms per call (the
    best of TIMING_WINDOWS windows, as from Python); None without g++."""
    import numpy as np

    gxx = shutil.which("g++")
    if gxx is None:
        return None
    work.mkdir(parents=True, exist_ok=True)
    name, args = manifest["name"], manifest["args"]
    for arg, array in zip([a for a in args if not a["is_output"]], inputs):
        np.ascontiguousarray(array).tofile(work / f"{arg['name']}.bin")
    (work / "main.cpp").write_text(_main_cpp(name, args))
    subprocess.run([gxx, "-O2", "-std=c++17", "main.cpp", f"-I{folder}", f"-L{folder}", f"-l:{name}.so",
                    f"-Wl,-rpath,{folder}", "-o", "main"], cwd=work, check=True)
    run = subprocess.run(["./main", "."], cwd=work, check=True, capture_output=True, text=True)
    ms = float(run.stdout.split()[0])
    output = next(a for a in args if a["is_output"])
    out = np.fromfile(work / f"{output['name']}.out.bin", dtype=output["dtype"]).reshape(output["shape"])
    return _rel_error(out, ref), ms


def _main_cpp(name: str, args: list[dict]) -> str:
    """A C++ program that reads each input from <dir>/<arg>.bin, calls the kernel, writes each
    output to <dir>/<arg>.out.bin and prints milliseconds per call (the best of TIMING_WINDOWS
    windows, as `_python_check` times them)."""
    decls, reads, writes = [], [], []
    for a in args:
        count = 1
        for n in a["shape"]:
            count *= n
        ctype = _C_TYPES[a["dtype"]]
        decls.append(f"    std::vector<{ctype}> {a['name']}({count});  // {a['dtype']} {a['shape']}")
        if a["is_output"]:
            writes.append(f'    write(dir + "/{a["name"]}.out.bin", {a["name"]});')
        else:
            reads.append(f'    if (!read(dir + "/{a["name"]}.bin", {a["name"]})) return 2;')
    call = f"{name}({', '.join(a['name'] + '.data()' for a in args)})"
    return f"""// Calls the tunefleet kernel {name} from C++: inputs from <dir>/<arg>.bin, outputs to
// <dir>/<arg>.out.bin; prints milliseconds per call, the best of {TIMING_WINDOWS} windows.
// Written by `tunefleet demo`.
#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "{name}.h"

template <typename T>
static bool read(const std::string& path, std::vector<T>& v) {{
    std::ifstream f(path, std::ios::binary);
    f.read(reinterpret_cast<char*>(v.data()), v.size() * sizeof(T));
    if (!f) std::fprintf(stderr, "cannot read %s\\n", path.c_str());
    return static_cast<bool>(f);
}}

template <typename T>
static void write(const std::string& path, const std::vector<T>& v) {{
    std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}}

int main(int argc, char** argv) {{
    const std::string dir = argc > 1 ? argv[1] : ".";
{chr(10).join(decls)}
{chr(10).join(reads)}
    if ({call} != 0) {{
        std::fprintf(stderr, "{name}: %s\\n", tunefleet_last_error());
        return 1;
    }}
    double best = 1e300;
    for (int window = 0; window < {TIMING_WINDOWS}; ++window) {{
        int calls = 0;
        const auto t0 = std::chrono::steady_clock::now();
        double elapsed = 0;
        while (calls < {TIMING_MIN_CALLS} || elapsed < {TIMING_WINDOW_S}) {{
            {call};
            ++calls;
            elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        }}
        if (elapsed / calls < best) best = elapsed / calls;
    }}
{chr(10).join(writes)}
    std::printf("%.6f ms per call\\n", best * 1e3);
    return 0;
}}
"""
