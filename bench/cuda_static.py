"""Static profile of our CUDA kernels, with nvcc alone (no GPU): what can be read before a run.

For the default config of each GPU benchmark workload (the matmuls of bench/matmul_gpu.py,
ResNet-50 3×3 convolutions of bench/ops_gpu.py), optionally with knobs overridden:

- registers per thread and spill bytes, from `ptxas -v` for the target architecture;
- the main loop: the innermost PTX loop holding the kernel's FMAs (one K tile of the
  register-tile update), its instruction count and the share of them that are `fma.f32`,
  with the most frequent other opcodes. Integer work there (index arithmetic, gathers)
  costs issue slots the FMAs need; it is what an implicit-GEMM gather or a missing
  strength reduction shows up as;
- shared memory per block and threads per block, from the lowering.

PTX is what ptxas optimizes further, so the counts are an upper bound on the SASS loop and a
way to compare schedules, not a timing. Timings need a GPU: bench/matmul_gpu.py, bench/ops_gpu.py.

    python bench/cuda_static.py [--arch sm_90] [--set double_buffer=0 bk=16]
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from tunefleet.compiler import ops
from tunefleet.compiler.cuda.build import cuda_unit, workload_kernel
from tunefleet.compiler.cuda.nvcc import arch_flags, nvcc_path
from tunefleet.compiler.target import Target

WORKLOADS = [
    ("matmul", {"M": 4096, "N": 4096, "K": 4096}),
    ("matmul", {"M": 1024, "N": 1024, "K": 1024}),
    ("matmul", {"M": 128, "N": 3072, "K": 768}),
    ("conv2d_nchw", {"N": 1, "CI": 64, "CO": 64, "H": 56, "W": 56, "KH": 3, "KW": 3, "padding": 1}),
    ("conv2d_nchw", {"N": 1, "CI": 256, "CO": 256, "H": 14, "W": 14, "KH": 3, "KW": 3, "padding": 1}),
    ("conv2d_nchw", {"N": 1, "CI": 512, "CO": 512, "H": 7, "W": 7, "KH": 3, "KW": 3, "padding": 1}),
]
_LABEL = re.compile(r"^(\$L__\w+):$")
_BRANCH = re.compile(r"\bbra(?:\.uni)?\s+(\$L__\w+);")


def main_loop(ptx: str) -> tuple[int, int, collections.Counter]:
    """(instructions, fma.f32 instructions, opcode counts) of the smallest PTX loop (a label and
    a backward branch to it) of the first kernel that holds FMAs; (0, 0, {}) when there is none."""
    lines = [line.strip() for line in ptx[ptx.index(".entry"):].splitlines()]
    labels = {m.group(1): i for i, line in enumerate(lines) if (m := _LABEL.match(line))}
    best: list[str] | None = None
    for i, line in enumerate(lines):
        m = _BRANCH.search(line)
        if m and labels.get(m.group(1), i) < i:
            body = [x for x in lines[labels[m.group(1)]:i + 1] if x and not x.startswith(("//", ".", "{", "}", "$"))]
            if any(_opcode(x) == "fma" for x in body) and (best is None or len(body) < len(best)):
                best = body
    if best is None:
        return 0, 0, collections.Counter()
    opcodes = collections.Counter(_opcode(x) for x in best)
    return len(best), opcodes["fma"], opcodes


def _opcode(instruction: str) -> str:
    return re.sub(r"^@!?%p\d+\s+", "", instruction).split()[0].split(".")[0]


def profile(workload, config, target: Target, work: Path) -> dict:
    """Registers, spills, main-loop counts, shared bytes and threads of one config (see module doc)."""
    part = workload_kernel(workload, config, target, name="k")
    unit = work / "k.cu"
    unit.write_text(cuda_unit([part]))
    flags = [nvcc_path(), "-O3", "-std=c++17", *arch_flags(target.isa), "-diag-suppress", "177"]
    ptxas = subprocess.run([*flags, "-cubin", "-Xptxas", "-v", "-o", str(work / "k.cubin"), str(unit)],
                           capture_output=True, text=True, check=True).stderr
    subprocess.run([*flags, "--ptx", "-o", str(work / "k.ptx"), str(unit)], capture_output=True, check=True)
    n, fma, opcodes = main_loop((work / "k.ptx").read_text())
    regs = re.findall(r"Used (\d+) registers", ptxas)
    spills = re.findall(r"(\d+) bytes spill stores", ptxas)
    return {"registers": int(regs[-1]) if regs else None, "spill_bytes": int(spills[-1]) if spills else None,
            "loop_instructions": n, "loop_fma": fma, "opcodes": opcodes,
            "shared_bytes": part.gfunc.shared_bytes, "threads": part.gfunc.threads}


def _knob_value(text: str):
    return {"true": True, "false": False}.get(text.lower(), int(text) if text.lstrip("-").isdigit() else text)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--arch", default="sm_90", help="CUDA architecture to compile for (default sm_90)")
    p.add_argument("--set", nargs="*", default=[], metavar="KNOB=VALUE",
                   help="override knobs of every default config, e.g. double_buffer=false bk=16")
    args = p.parse_args()
    try:
        overrides = {k: _knob_value(v) for k, v in (item.split("=", 1) for item in args.set)}
    except ValueError:
        sys.exit("--set takes KNOB=VALUE pairs")
    target = Target("cuda", args.arch)
    print(f"{'workload':58} {'regs':>5} {'spill':>6} {'loop':>5} {'fma':>5} {'fma%':>5} {'smem':>7} {'thr':>4}  "
          f"other opcodes in the loop")
    with tempfile.TemporaryDirectory() as tmp:
        for op, wargs in WORKLOADS:
            w = ops.make_workload(op, wargs)
            knobs = {**ops.default_config(w, target).to_json()["knobs"], **overrides}
            r = profile(w, ops.config_space(w, target).from_json({"knobs": knobs}), target, Path(tmp))
            share = f"{r['loop_fma'] / r['loop_instructions']:.0%}" if r["loop_instructions"] else "-"
            other = ", ".join(f"{k} {v}" for k, v in r["opcodes"].most_common(6) if k != "fma")
            name = f"{op} " + "×".join(str(v) for v in wargs.values())
            print(f"{name:58} {r['registers']:>5} {r['spill_bytes']:>6} {r['loop_instructions']:>5} {r['loop_fma']:>5} "
                  f"{share:>5} {r['shared_bytes']:>7} {r['threads']:>4}  {other}", flush=True)


if __name__ == "__main__":
    main()
