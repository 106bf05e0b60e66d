"""Benchmark: `tune` on this machine, XGBoost-guided against random search, against the peers.

Workloads (float32): matmul 1024³, 2048³, 1000³ and 128×3072×768 (issue 18's sizes) and the
ResNet-50 conv2d layer 1×512×7×7 (3×3, pad 1, bias + relu fused, as PyTorch computes it there);
an operator this installation lacks is skipped with a message.
For each workload and strategy (xgb, random) one tuning run of the largest budget, with a
fresh record file; the smaller budgets are read off the same run (the search does not know
its budget; only the final validation of the largest budget is not repeated for them).

Printed per run and budget: the best GFLOP/s found within the budget (a trial's GFLOP/s is
flop / its fastest repeat, the estimate least disturbed by other work on a shared host),
the trials and seconds it took to reach 90% of that best, and the record file; per run,
the same for 90% of the run's final best. Then,
per run: the validated winner's artifact timed like its peers — numpy (OpenBLAS) with
OPENBLAS_CORETYPE removed (its AVX-512 kernels) and with it set (AVX2), and PyTorch (torch.mm,
F.conv2d + relu) when installed — in interleaved rounds of fresh processes: GFLOP/s best over the
rounds, ratios the median over the rounds of the peer's time over ours in the same round, and
the winner's best as a percentage of the fp32 FMA peak timed in the same rounds
(`common.peak_code`, with the target's vectors).
Finally: when the XGBoost search reached random search's best of the largest budget.

    python bench/tune_cpu.py [--only matmul] [--budgets 64 256] [--strategies xgb random]
                             [--out DIR] [--processes 3] [--target "cpu -isa=avx2"]
                             [--search-settings JSON]

On an AMD EPYC Zen 3 (AVX2 only, a 2-vCPU VM shared with noisy neighbours; xgb, 64 trials,
winners re-timed in 5 rounds; ratio: per-round median of peer time / ours): matmul 1024³
tuned 47.2 GFLOP/s vs numpy 47.5 (0.93), the default already the in-search best (74.2, the
host quiet for a moment), 196 s; 128×3072×768 65.9 vs numpy 44.1 (1.02 by rounds), 131 s;
conv2d 512@7² 3×3 44.6 vs PyTorch 36.1 (0.97 by rounds), 90% of the best after 20 trials,
176 s. The in-search CV reached 40% on this host: its two CPUs' joint throughput fell to one
core's at times, which the per-CPU reference of the interference probe does not see.

That was mostly the measurement child itself (found on an AMD EPYC Zen 5, AVX-512, 2 vCPUs):
its calling thread left on the pool worker's CPU (the two took turns on one CPU) and an
OpenBLAS thread spinning through the timing. Same run, same host, xgb, 64 trials, winners
re-timed in 5 rounds, before -> after both fixes (in-search best / re-timed winner, GFLOP/s;
ratio to numpy or PyTorch; validation CV):

    matmul 1024³          518.6 / 443.3 (1.03, CV 36%)  ->  511.7 / 508.4 (1.17, CV 13%)
    matmul 128×3072×768   448.9 / 420.9 (1.10, CV 51%)  ->  469.0 / 475.7 (1.22, CV 16%)
    conv2d 512@7² 3×3     261.0 / 234.6 (0.87, CV 47%)  ->  305.8 / 301.9 (1.10, CV 14%)

90% of the final best: after 1, 22 and 35 trials before; after 1 trial (the default) in all
three after. Later in the session, 2048³: 513.1 in search / 505.8 re-timed, 1.08 × numpy (CV 2%),
122 s; 1000³: 518.4 / 504.3, 1.08 (CV 13%), 56 s; 90% of the best after the first trial in both.
The same host with `--target "cpu -isa=avx2"` (AVX2 code against OpenBLAS's AVX2
kernels): matmul 1024³ 266.3 vs 248.9 GFLOP/s (1.08), 128×3072×768 249.6 vs 261.7 (0.97; the
winner 3 rows × 4 vectors with B packed per block, found after 33 trials; OpenBLAS runs at
98% of the AVX2 peak there), conv2d 512@7² 194.0 (PyTorch uses AVX-512 here: no AVX2 peer).
With the AVX2 default's 4 × 3-vector tile where three vectors divide N: 128×3072×768 241.2 vs
241.5 (1.00), 90% of the run's best after the first trial (the default) instead of 33.
After the runtime kept each thread's freed temporaries (no page faults in a fresh measuring
process), all five in one run (the host and OpenBLAS faster than earlier that day): 1024³
534.6 vs numpy 502.0 (1.07, CV 2.4%), 2048³ 531.2 vs 510.0 (1.07, CV 5.6%), 1000³ 516.8 vs
505.4 (1.03, CV 3.1%), 128×3072×768 439.3 vs 396.5 (1.11, CV 12.2%), conv2d 512@7² 323.0 vs
PyTorch 297.4 (1.08, CV 2.2%); 90% of each run's best at its first trial.

On an AMD EPYC Zen 4 (family 25 model 17: AVX-512 on 256-bit units, peak 230 GFLOP/s for 2
threads, about what its AVX2 code reaches too), same protocol, GFLOP/s tuned vs numpy with
OpenBLAS's AVX-512 / AVX2 kernels (ratios): 1024³ 223.7 vs 203.7 / 218.2 (1.11 / 1.03), 2048³
215.5 vs 205.5 / 217.6 (1.04 / 0.99), 1000³ 219.9 vs 208.7 / 221.0 (1.05 / 1.00), 128×3072×768
208.7 vs 182.4 / 209.5 (1.15 / 1.00); OpenBLAS's AVX2 kernels run at 91-95% of the peak, so
1.1× them is out of reach. conv2d 512@7² 148.2 vs PyTorch 184.9 (0.80: an im2col GEMM whose 49
pixels fill 64 lanes). With `--target "cpu -isa=avx2"`: 1024³ 217.6 vs OpenBLAS AVX2 219.1
(0.99), 2048³ 214.3 / 209.2 (1.02), 1000³ 209.9 / 215.3 (0.97), 128×3072×768 197.5 / 209.4
(0.95; the default 4 × 3-vector tile, 1.07× the old 6 × 2 in interleaved rounds); 90% of each
run's best at its first trial.

Zen 4 again (main at 7056a20, peak 233-234), xgb, 64 trials, 5 rounds, tuned vs numpy with
OpenBLAS's AVX-512 / AVX2 kernels and PyTorch (ratios), % of the peak: 1024³ 222.5 vs 202.6 /
214.8 / 191.5 (1.14 / 1.06 / 1.16), 96%, 62 s; 2048³ 214.0 vs 196.7 / 211.0 / 185.4 (1.08 /
1.01 / 1.32), 92%; 1000³ 213.0 vs 203.1 / 211.0 / 197.3 (1.05 / 1.03 / 1.08), 91%; 128×3072×768
204.6 vs 179.7 / 204.7 / 163.8 (1.16 / 1.00 / 1.30), 88%; conv2d 512@7² 197.0 vs PyTorch 184.3
(1.10), 84%; 90% of each run's best after 1-2 trials.

Intel Xeon (model 207, AVX-512, a noisy host), conv2d 512@7² after its space became the union
of the im2col GEMM and NCHWc (both defaults measured first; 55 of the 69 trials went to NCHWc
configs): the validated winner, an NCHWc config, 197.5 vs PyTorch 157.5 (1.27), 90% of the
run's best after 19 trials.

The same host, the search's first trials: before, a cost model fit on the two defaults' results
planned the next 16 trials (extreme configs, 5-13 GFLOP/s); now 16 one-knob steps from the best
measured configs come first, and two results below half the best refit the model at once.
64 trials, seeds 0-2, each seed before (`--search-settings '{"warmup": 0, "retrain_surprises":
1000000}'`) and after in turn; trials 3-64 below half the run's best, before -> after: conv2d
512@7² 21/27/32 -> 13/16/8, matmul 128×3072×768 17/23/9 -> 18/7/8, 1024³ 16/16/19 -> 15/8/9
(180 -> 102 in all); their mean GFLOP/s 155 -> 179 (averaged over the 9 runs); the best after 64
trials the same or higher in 7 of 9 (conv2d 512@7² 199/186/152 -> 198/177/188, 128×3072×768
266/221/272 -> 280/284/291, 1024³ 334/329/313 -> 335/334/315).

AMD EPYC Zen 4 (family 25 model 17, AVX-512 on 256-bit units, 2 vCPUs), 64 trials, seed 0, before
-> after a refit at surprises re-scored the last annealing's pool instead of annealing again:
tuning time 107 -> 48 s for conv2d 512@7² (search 61 -> 11 s), 62 -> 49 s for 128×3072×768
(search 22 -> 12 s), 73 -> 76 s for 1024³ (search 16 -> 17 s: few surprises there); validated
winners 182.0 -> 179.4 (PyTorch 179.2 / 185.3 in the same runs: 1.12 / 1.02 by rounds), 199.1 ->
202.6 (numpy with OpenBLAS's AVX-512 / AVX2 kernels 1.17 / 1.04 -> 1.14 / 1.02), 223.8 -> 220.3
(1.09 / 1.03 -> 1.09 / 1.08); 90% of each run's best after 1-3 trials in both. Trials 3-64 below
half the run's best 11 -> 13, 5 -> 6, 4 -> 10 (1024³ again, quiet: 12, search 6 s, winner 218.8,
1.14 / 1.09), within the 7-18 of the Xeon runs above: one run each does not tell whether
re-scoring costs trials. Later, with the dot products as the default of conv2d 512@7² (xgb, 64
trials, 5 rounds): in-search best 184.4, but the validation kept a GEMM of median 156 GFLOP/s
(disturbance 0.58) over the dot products' 175 (0.37) by own throughput: re-timed 161.7 vs
PyTorch 175.7 (1.00). With the fastest validated median winning unless a far more disturbed
finalist is faster without its disturbance (validation.best): 192.8 vs 176.6 (1.14), tuned in 39 s.

AMD EPYC Zen 3 (family 25 model 1, AVX2 only, 2 vCPUs, a noisy host), after the NCHWc AVX2
defaults accumulated by rows: conv2d 512@7², xgb, 64 trials, 5 rounds: validated winner 108.9
vs PyTorch 79.5 GFLOP/s (1.74), 90% of the run's best after 1 trial, tuned in 103 s (search 18 s).

Intel Xeon (model 167 as the VM reports it: AVX-512 with two FMA units, 2 MiB L2 per core,
2 vCPUs, quiet; measured peak 458 GFLOP/s), xgb, 64 trials, winners re-timed in 5 rounds: matmul
1024³ 372.6 vs numpy 331.7 (1.12; 81% of the peak), 2048³ 412.1 vs 354.8 (1.16; 90%), 1000³ 371.1
vs 341.5 (1.10), 128×3072×768 311.9 vs 263.3 (1.21), conv2d 512@7² 271.5 vs PyTorch 205.7 (1.34;
the per-call panel GEMM's default, each panel of weights packed per block inside the parallel
loop); 90% of each run's best after the first trial, except 128×3072×768 (31 trials).

The same Xeon later, with PyTorch's torch.mm among the peers (xgb, 64 trials, 5 rounds),
tuned vs numpy / PyTorch (ratios): matmul 1024³ 366.2 vs 332.4 / 352.4 (1.10 / 1.02), 1000³ 353.0
vs 323.4 / 354.5 (1.11 / 1.00), 128×3072×768 301.4 vs 260.6 / 321.5 (1.12 / 0.96); 90% of each
run's best after 1, 13 and 1 trials; tuning 37-73 s.

AMD EPYC Zen 4 again (family 25 model 17, peak 230-234; main at d62a53d: register tiles kept
within the vector registers), xgb, 64 trials, winners re-timed in 5 rounds, GFLOP/s tuned vs
numpy with OpenBLAS's AVX-512 / AVX2 kernels: 1024³ 223.9 vs 202.2 / 218.2 (1.13 / 1.07), 2048³
221.7 vs 204.3 / 217.8 (1.09 / 1.03), 1000³ 212.6 vs 205.3 / 216.2 (1.04 / 0.99), 128×3072×768
199.1 vs 179.9 / 204.2 (1.12 / 0.98); conv2d 512@7² 178.2 vs PyTorch 180.8 (0.99), again 189.2
vs 173.3 (1.17; spread of the winner's timings 10-30%). 90% of each run's best at the first or
second trial; tuning 43-176 s.

AMD EPYC Zen 3 again (family 25 model 1, AVX2 only, peak 195-204, a noisy host: the winners'
timings spread 17-26%), after the row guards of edge tiles left their loops over K, xgb, 64
trials, winners re-timed in 5 rounds: matmul 1024³ 165.6 vs numpy 183.8 / its AVX2 kernels 182.2
(round-median ratios 1.02 / 0.97), 1000³ 170.3 vs 182.7 / 176.3 (0.98 / 0.98), conv2d 512@7²
139.8 vs PyTorch 111.9 (1.59); 90% of each run's best within 1-3 trials; tuning 68-91 s.

Intel Xeon (model 207, AVX-512, 2 MiB L2 per core, 2 vCPUs; main at a1a6635, peak 384-391), xgb,
64 trials, winners re-timed in 5 rounds, tuned vs numpy / PyTorch (ratios by rounds): matmul 1024³
338.4 vs 337.3 / 352.6 (1.01 / 0.98; 87% of the peak), 2048³ 356.1 vs 339.6 / 357.8 (1.05 / 0.99;
93%), 1000³ 356.2 vs 336.6 / 347.4 (1.08 / 1.06; 92%), 128×3072×768 306.2 vs 278.7 / 313.0 (1.23 /
0.91; 80%), conv2d 512@7² 249.9 vs PyTorch 186.8 (1.31); 90% of each run's best after 1, 1, 1, 3
and 6 trials; tuning 48-153 s. The 1024³ winner (bm 64, the default's neighbour) ran below the
untuned default of bench/matmul_cpu.py that hour (352.6): the validation's 30 timings of each
finalist had medians of 253-319 GFLOP/s against 335-357 in the search (a busier minute), so its
ranking among neighbours a few % apart is noise.

AMD EPYC Zen 5 (family 26 model 2, 1 MiB L2 per core, 2 vCPUs; main at 4e4a4cc, peak 519-532), xgb,
64 trials, winners re-timed in 5 rounds, tuned vs numpy / PyTorch (ratios by rounds; % of the peak):
matmul 1024³ 493.1 vs 466.7 / 213.2 (1.06 / 2.27; 93%), 2048³ 488.5 vs 455.2 / 205.6 (1.01 / 2.31;
92%), 1000³ 483.9 vs 457.7 / 210.2 (1.05 / 2.31; 93%), 128×3072×768 453.1 vs 366.3 / 186.3 (1.26 /
2.44; 86%), conv2d 512@7² 395.0 vs PyTorch 255.9 (1.55; 75%); 90% of each run's best at the first
trial (the default) in all five; tuning 33-112 s.

Intel Xeon model 167 again (main at 60bfe19; a noisier hour, peak 429-457), xgb, 64 trials, 5
rounds, tuned vs numpy / PyTorch (ratios by rounds; % of the peak): matmul 1024³ 341.8 vs 313.0 /
333.1 (1.09 / 1.04; 77%), 2048³ 346.5 vs 319.2 / 352.1 (1.09 / 1.02; 79%), 1000³ 308.6 vs 291.0 /
313.7 (1.05 / 0.97; 72%), 128×3072×768 279.9 vs 246.7 / 281.7 (1.13 / 1.00; 64%), conv2d 512@7²
233.6 vs PyTorch 177.7 (1.37); 90% of each run's best at the first trial except 128×3072×768 (7
trials) and the conv2d (3); tuning 46-146 s.

Intel Xeon model 167 again (main at 4602ff2: AVX-512's tiles of 24 accumulators unrolled by 2;
peak 431-467), xgb, 64 trials, 5 rounds, tuned vs numpy / PyTorch (ratios by rounds; % of the
peak): matmul 1024³ 381.2 vs 325.9 / 367.0 (1.15 / 1.05; 82%), 2048³ 399.9 vs 340.7 / 368.8 (1.14
/ 1.04; 86%), 1000³ 358.2 vs 315.9 / 349.3 (1.13 / 1.03; 78%), 128×3072×768 298.1 vs 256.6 / 305.4
(1.18 / 0.98; 66%), conv2d 512@7² 256.9 vs PyTorch 181.5 (1.42; 60%); 90% of each run's best at
the first trial except 1000³ (7 trials) and the conv2d (34); tuning 37-137 s.

AMD EPYC Zen 5 again (family 26 model 2; main at ff6d3a6; peak 534-564), xgb, 64 trials, 5
rounds, tuned vs numpy / PyTorch (ratios by rounds; % of the peak): matmul 1024³ 517.1 vs 489.9 /
226.1 (1.25 / 2.39 — one slow numpy round; 1.06 by the bests; 97%), 2048³ 519.5 vs 488.4 / 228.5
(1.07 / 2.31; 94%), 1000³ 518.2 vs 501.8 / 229.0 (1.03 / 2.28; 94%), 128×3072×768 482.8 vs 376.7 /
209.2 (1.28 / 2.73; 86%), conv2d 512@7² 414.5 vs PyTorch 289.1 (1.45; 73%); 90% of each run's best
at the first trial except the conv2d (9 trials, 4 s); tuning 28-99 s.

AMD EPYC Zen 5 again (main at a6f5229; peak 473-507, a noisier instance), xgb, 64 trials, 5
rounds, tuned vs numpy / PyTorch (ratios by rounds; % of the peak): matmul 1024³ 431.7 vs 372.8 /
189.9 (1.16 / 2.34; 91%), 2048³ 457.9 vs 427.1 / 190.6 (1.06 / 2.42; 94%), 1000³ 422.2 vs 420.6 /
199.3 (1.00 / 2.13; 84%), 128×3072×768 404.4 vs 317.1 / 168.8 (1.23 / 2.41; 80%), conv2d 512@7²
321.3 vs PyTorch 220.2 (1.46; 67%); 90% of each run's best within 5 trials (4 s); tuning 38-139 s.
Zen 5 again (main at fd7d226; peak 503-529), same protocol: matmul 1024³ 449.3 vs 415.2 / 198.1
(1.07 / 2.25; 89%), 2048³ 493.2 vs 451.5 / 207.0 (1.13 / 2.43; 95%), 1000³ 438.6 vs 452.1 / 207.7
(**0.93** / 2.10; 84%: in the search 469.8, and the untuned default ran 499.5 in bench/matmul_cpu.py
an hour before — the winner's re-timing here read 7% below its search), 128×3072×768 458.0 vs
363.3 / 193.0 (1.24 / 2.41; 87%), conv2d 512@7² 373.5 vs PyTorch 239.3 (1.55; 71%); 90% of each
run's best at the first trial (7 trials for the convolution); tuning 35-115 s.

Intel Xeon model 167 again (main at b0243f3; a slower instance, peak 377-386), xgb, 64 trials, 5
rounds, tuned vs numpy / PyTorch (ratios by rounds; % of the peak): matmul 1024³ 316.5 vs 270.4 /
303.7 (1.19 / 1.08; 82%), 2048³ 318.0 vs 267.3 / 298.8 (1.16 / 1.05; 84%), 1000³ 290.6 vs 255.3 /
274.5 (1.14 / 1.06; 77%), 128×3072×768 242.3 vs 217.3 / 263.2 (1.14 / 0.91; 63%), conv2d 512@7²
213.0 vs PyTorch 166.4 (1.28; 56%); 90% of each run's best at the first trial; tuning 41-150 s.

Intel Xeon model 167 again (main at cd951f1, with the winner's settle pauses; peak 480-491),
xgb, 64 trials, 5 rounds, tuned vs numpy / PyTorch (ratios by rounds; % of the peak): matmul
1024³ 408.0 vs 350.5 / 375.7 (1.19 / 1.08; 84%), 2048³ 428.5 vs 384.4 / 399.0 (1.12 / 1.07; 89%),
1000³ 420.3 vs 341.2 / 380.9 (1.13 / 1.10; 87%), 128×3072×768 337.1 vs 277.7 / 335.5 (1.19 /
0.99; 70%), conv2d 512@7² 300.2 vs PyTorch 195.9 (1.55; 61%); 90% of each run's best at the
first trial except 1000³ (11 trials, 6 s); tuning 31-110 s.
AMD EPYC Zen 3 (family 25 model 1, AVX2 only, 512 KiB L2 per core; main at d041f7b, peak 205),
xgb, 64 trials, 5 rounds, tuned vs numpy / PyTorch (ratios by rounds; % of the peak): matmul
1024³ 192.5 vs 189.4 / 186.3 (1.11 / 1.06; 94%), 2048³ 189.0 vs 188.4 / 188.1 (1.00 / 1.03; 92%),
1000³ 186.6 vs 187.7 / 186.2 (1.00 / 1.01; 91%), 128×3072×768 174.8 vs 174.7 / 159.6 (1.03 / 1.11;
85%), conv2d 512@7² 162.9 vs PyTorch 128.4 (1.29; 79%); 90% of each run's best at the first
trial; tuning 53-316 s. OpenBLAS runs at 92-93% of the peak at the cubes here.

Intel Xeon model 207 (2 MiB L2 per core; main at 226bfe1, peak 405-427), xgb, 64 trials, 3
rounds, tuned vs numpy / PyTorch (ratios by rounds; % of the peak): matmul 1024³ 363.9 vs 297.9 /
361.3 (1.22 / 1.04; 86%), 2048³ 359.6 vs 371.3 / 391.8 (1.35 / 0.93; 85%), 1000³ 372.6 vs 250.4 /
369.5 (1.45 / 1.08; 87%), 128×3072×768 299.4 vs 239.3 / 308.7 (1.57 / 0.97; 74%), conv2d 512@7²
273.5 vs PyTorch 195.6 (1.26; 65%); 90% of each run's best after 3-25 trials (3-18 s); tuning
26-147 s.

AMD EPYC Zen 4 again (family 25 model 17; main at 8aa0335, peak 233-235), xgb, 64 trials, 3
rounds, tuned vs numpy / its AVX2 kernels / PyTorch (ratios by rounds; % of the peak): matmul
1024³ 224.3 vs 203.8 / 218.0 / 196.6 (1.26 / 1.27 / 1.15; 96%), 2048³ 227.3 vs 207.8 / 221.2 /
202.9 (1.10 / 1.03 / 1.12; 97%), 1000³ 221.7 vs 211.6 / 221.4 / 206.4 (1.05 / 1.01 / 1.08; 95%),
128×3072×768 209.5 vs 179.7 / 203.0 / 173.3 (1.17 / 1.04 / 1.28; 90%), conv2d 512@7² 200.9 vs
PyTorch 182.8 (1.06; 86%); 90% of each run's best at the first trial (conv2d: 26 trials, 12 s);
tuning 23-153 s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(__file__))
from common import PROCESSES, host_target, interleaved_seconds, kernel_code, peak_code, round_ratio  # noqa: E402
from ops_cpu import torch_available, torch_code, torch_env  # noqa: E402

from tunefleet.compiler import ops  # noqa: E402
from tunefleet.compiler.target import Target  # noqa: E402
from tunefleet.tuner.apply import apply_best  # noqa: E402
from tunefleet.tuner.tune import SEARCH_SETTINGS, tune  # noqa: E402

_CONV = {"N": 1, "KH": 3, "KW": 3, "padding": 1, "bias": True, "epilogue": "relu"}  # as bench/ops_cpu.py
#: name -> (operator, arguments). Add a line to benchmark another workload.
WORKLOADS = {
    "matmul 1024³": ("matmul", {"M": 1024, "N": 1024, "K": 1024}),
    "matmul 2048³": ("matmul", {"M": 2048, "N": 2048, "K": 2048}),
    "matmul 1000³": ("matmul", {"M": 1000, "N": 1000, "K": 1000}),
    "matmul 128x3072x768": ("matmul", {"M": 128, "N": 3072, "K": 768}),
    "conv2d 512x7x7 3x3": ("conv2d_nchw", {**_CONV, "CI": 512, "CO": 512, "H": 7, "W": 7}),
}


def numpy_code(a: dict, coretype: bool) -> str:
    """Python source printing the best seconds of numpy's A @ B for a matmul workload. Without
    ``coretype``, OPENBLAS_CORETYPE is removed before numpy loads OpenBLAS (its AVX-512 kernels);
    with it, set to Haswell (AVX2), as this machine's environment does."""
    env = ("os.environ['OPENBLAS_CORETYPE'] = os.environ.get('OPENBLAS_CORETYPE', 'Haswell')" if coretype
           else "os.environ.pop('OPENBLAS_CORETYPE', None)")
    M, N, K = a["M"], a["N"], a["K"]
    return f"""
import os, time
{env}
import numpy as np
a = np.random.rand({M}, {K}).astype(np.float32); b = np.random.rand({K}, {N}).astype(np.float32)
c = a @ b
best = 1e9
for _ in range(max(5, int(4e9 / {2 * M * N * K}))):
    t = time.perf_counter(); np.matmul(a, b, out=c); best = min(best, time.perf_counter() - t)
print(best)
"""


def peers(op: str, a: dict, threads: int, target: Target) -> dict[str, tuple[str, dict | None]]:
    """name -> (Python source printing a peer's best seconds on the workload, its environment:
    None for this process's); PyTorch kept to `target`'s ISA."""
    timed = {"numpy": (numpy_code(a, False), None), "numpy AVX2": (numpy_code(a, True), None)} if op == "matmul" else {}
    if (op == "matmul" or op.startswith("conv2d")) and torch_available():
        timed["torch"] = (torch_code(op, a, threads, "repeats"), torch_env(target))
    return timed


def gflops_trajectory(result) -> list[tuple[int, float, float]]:
    """(trial number, seconds since start, GFLOP/s by the fastest repeat) of each search trial."""
    return [(t.number, t.elapsed_s, result.workload.flop * t.result.peak_throughput() / 1e9) for t in result.trials]


def reach(trajectory, level: float) -> tuple[int, float]:
    """(trials, seconds) until a trial first reached ``level`` GFLOP/s."""
    for number, seconds, gf in trajectory:
        if gf >= level:
            return number, seconds
    return 0, float("nan")


def run(name: str, op: str, a: dict, strategy: str, budgets: list[int], out: Path, processes: int,
        target: Target) -> list:
    w = ops.make_workload(op, a)
    records = out / f"{name.replace(' ', '_').replace('³', '3')}-{strategy}.jsonl"
    records.unlink(missing_ok=True)
    result = tune(w, target, trials=max(budgets), records_path=records, strategy=strategy)
    trajectory = gflops_trajectory(result)
    final = max((gf for *_, gf in trajectory), default=0.0)
    trials90, seconds90 = reach(trajectory, 0.9 * final)
    poor = sum(gf < 0.5 * final for *_, gf in trajectory[2:])
    for budget in budgets:
        best = max((gf for number, _, gf in trajectory if number <= budget), default=0.0)
        b90 = reach([t for t in trajectory if t[0] <= budget], 0.9 * best)
        print(f"{name:>20} {strategy:>6} {budget:>6} {best:9.1f} {b90[0]:>9} {b90[1]:8.0f}  {records}", flush=True)
    if result.best is None:
        print(f"{name:>20} {strategy:>6}: no correct config")
        return trajectory
    artifact = apply_best([result.best], w, target, tempfile.mkdtemp(prefix="tf-tune-bench-"))
    threads = len(os.sched_getaffinity(0))
    timed = {"tuned": (kernel_code(artifact), None), **peers(op, w.args, threads, target),
             "peak": (peak_code(threads, target), None)}
    seconds = dict(zip(timed, interleaved_seconds([code for code, _ in timed.values()],
                                                  envs=[env for _, env in timed.values()], processes=processes)))
    peak = 1 / min(seconds.pop("peak"))  # GFLOP/s: the peak's code prints seconds per GFLOP
    line = ", ".join(f"{k} {w.flop / min(s) / 1e9:.1f}" for k, s in seconds.items())
    ratios = ", ".join(f"{k} {round_ratio(s, seconds['tuned']):.2f}" for k, s in seconds.items() if k != "tuned")
    print(f"{name:>20} {strategy:>6}  validated winner, GFLOP/s: {line} (ratio to {ratios or 'no peer'}; "
          f"tuned {w.flop / min(seconds['tuned']) / 1e9 / peak:.0%} of the measured fp32 FMA peak {peak:.0f}); "
          f"spread {result.spread:.1%}, CV {result.cv:.1%}; "
          f"90% of the run's best after {trials90} trials / {seconds90:.0f} s; "
          f"{poor} of the {max(0, len(trajectory) - 2)} trials after the first two below half of it; "
          f"tuning {result.elapsed_s:.0f} s (search {result.search_s:.0f} s)", flush=True)
    return trajectory


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="*", help="workload names to run (prefix match), default all")
    p.add_argument("--budgets", nargs="*", type=int, default=[64, 256])
    p.add_argument("--strategies", nargs="*", default=["xgb", "random"], choices=["xgb", "random", "grid"])
    p.add_argument("--out", type=Path, default=Path("bench-records"), help="directory of the record files")
    p.add_argument("--processes", type=int, default=PROCESSES, help="rounds of fresh processes per peer timing")
    p.add_argument("--search-settings", type=json.loads, default={},
                   help="JSON overrides of tuner.tune.SEARCH_SETTINGS for xgb, e.g. '{\"warmup\": 0, "
                        "\"retrain_surprises\": 1000000}' for the search before its warm-up and surprise refits")
    p.add_argument("--target", type=host_target, default=Target.host(),
                   help="CPU target to tune for (default: this host's best), e.g. 'cpu -isa=avx2' on an AVX-512 "
                        "host, then compared with numpy AVX2 (OpenBLAS's AVX2 kernels)")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    SEARCH_SETTINGS.update(args.search_settings)
    print(f"target {args.target}, {len(os.sched_getaffinity(0))} CPUs; PyTorch "
          f"{'installed' if torch_available() else 'not installed'}")
    print(f"{'workload':>20} {'search':>6} {'budget':>6} {'GFLOP/s':>9} {'trials90':>9} {'s90':>8}  records")
    for name, (op, a) in WORKLOADS.items():
        if args.only and not any(name.startswith(o) for o in args.only):
            continue
        try:
            ops.get(op)
        except ops.WorkloadError:
            print(f"{name:>20}: skipped, operator {op!r} is not registered")
            continue
        t0 = time.time()
        runs = {s: run(name, op, a, s, sorted(args.budgets), args.out, args.processes, args.target) for s in args.strategies}
        if "xgb" in runs and "random" in runs and runs["random"]:
            target = max(gf for *_, gf in runs["random"])
            trials, seconds = reach(runs["xgb"], target)
            print(f"{name:>20}  xgb reached random's best ({target:.1f} GFLOP/s) "
                  + (f"after {trials} trials / {seconds:.0f} s" if trials else "not at all")
                  + f"  ({time.time() - t0:.0f} s for the workload)", flush=True)


if __name__ == "__main__":
    main()
