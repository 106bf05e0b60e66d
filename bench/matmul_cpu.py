"""Benchmark: tunefleet's CPU matmul against numpy and PyTorch, in one run.

For M=N=K in {256, 512, 1024, 2048} and 128×3072×768: our default config (no tuning), the
best of up to 16 configs from the template's space (the default's neighbourhood plus
random points whose register tile fits the vector registers), numpy — timed in child
processes with OPENBLAS_CORETYPE removed (OpenBLAS's AVX-512 kernels) and with it set
(AVX2 kernels) — and, where it is installed, PyTorch's torch.mm (MKL / oneDNN, with our timing
protocol), in interleaved rounds of fresh processes (peak, ours, ours, numpy, numpy, torch, ...).
Prints GFLOP/s (best over the rounds), the ratios OpenBLAS time / ours (OpenBLAS's faster
kernels of each round) and PyTorch time / ours (each the median over the rounds of the ratio
within a round, `common.round_ratio`) and the percentage of the fp32 FMA peak that the bench
measures itself, in the same rounds as the row's timings (the best over them: a peak measured
once at the start, in a disturbed minute, read 167 GFLOP/s on a Xeon model 207 whose kernels
then ran at 314 — 188% of it).

    python bench/matmul_cpu.py [--sizes 1024 2048] [--configs 16] [--threads N] [--processes 5]
                               [--target "cpu -isa=avx2"]

`--target` builds for another ISA that this host runs (AVX2 code on an AVX-512 host); the
ratio then compares with OpenBLAS's kernels of that ISA (the np-AVX2 column), and the peak is
measured with that ISA's vectors.

Measured on an Intel Xeon (model 207, Emerald Rapids class, 2 vCPUs, target avx512, 2
threads), a shared host (load average 2.0-2.4 beside the run; the CPU lock kept other
benches out, not other work): GFLOP/s of our default config, before -> after B packed per
block of N (pack_b "block"), numpy/OpenBLAS of the same run after the arrow:

    1024³          318 -> 329   numpy 291 / 304   ratio 1.09 -> 1.08
    2048³          321 -> 325   numpy 304 / 314   ratio 1.05 -> 1.05 (best/16 328)
    1000³          309 -> 312   numpy 295 / 294   ratio 1.05 -> 1.06
    128×3072×768   246 -> 281   numpy 244 / 226   ratio 1.01 -> 1.25 (numpy's 226 disturbed;
                                                  against the earlier 244: 1.15)

The fp32 FMA peak this bench measures varies with the load (268-348 for 2 threads); 176
for one thread, so about 350 for two: the default reaches about 93% of it at 1024³.
OpenBLAS's AVX2 kernels (OPENBLAS_CORETYPE=Haswell) reach 160 there. Again on a model 207,
later (peak 315 for 2 threads; a noisier host: kernel medians up to 30% below their bests),
best of 16 / numpy / ratio: 256³ 210 / 163 / 1.49, 512³ 305 / 192 / 1.27, 1024³ 299 (default
271) / 199 / 1.39, 2048³ 294 / 292 / 1.01, 128×3072×768 267 / 217 / 1.24.

On an AMD EPYC Zen 3 (AVX2 only, family 25 model 1; a 2-vCPU Firecracker VM whose
neighbours disturb it: one kernel's timing varied 1.5-2x between rounds, while the register-
only peak loop held at 37.7 GFLOP/s per core, 69-75 for two), 5 rounds, ratio = median of the
per-round numpy time / ours, GFLOP/s best over the rounds:

    1024³          default 51.8   numpy 43.8 (AVX2 kernels 46.5)   ratio 1.06
    2048³                  52.9         49.1               50.1          1.08
    1000³                  48.2         46.9               46.8          0.98
    128×3072×768           62.7         59.8               61.1          1.05

(a quiet Zen 3 host with 100 GFLOP/s per core, when issue 18 was filed: best-of-5 ratios of
0.83, 0.96, 0.96 and 0.77).

Again on a Zen 3 (family 25 model 1, 2 vCPUs, 32 KiB L1d and 512 KiB L2 per core; measured peak
170-176 GFLOP/s for 2 threads, 89 for one), 5 rounds, default / best of 16 / numpy / np-AVX2 /
ratio: 1024³ 127.3 / 128.5 / 131.5 / 127.3 / 1.02 (73% of the peak), 2048³ 130.0 / 130.0 / 133.3
/ 135.9 / 1.00, 1000³ 119.6 / 149.6 (mr 5: no partial row tile) / 136.2 / 131.3 / 1.03,
128×3072×768 112.1 / 112.1 / 105.0 / 128.8 / 1.07 after AVX2 took pack_b "block" where A fits
half the L2 (before: 87.4 / 91.5 / 107.4 / 105.6 / 0.83). One thread at 1024³: ours 69-74, numpy
78-79 (89% of 89); the 6 × 16 micro-kernel itself reaches 87 (98%) in a C loop with A and its B
panel in the L2, so the loss is in how the blocks meet the caches, not in the register tile.

Zen 3 again (same model; measured peak 195 GFLOP/s for 2 threads, a noisy host: medians of a
kernel 10-20% below its best), after the row guards of a register tile straddling M's edge left
its loop over K (`passes.unswitch_invariant_guards`; 1000³'s default, 6-row tiles over 1000 rows,
2 threads: 134.6 -> 165.5 GFLOP/s in one run of 5 rounds of fresh processes, 1.01× in another,
medians of 21 alternating in-process rounds 130 -> 142 (1.10×); one thread level), 5 rounds,
default / best of 16 / numpy / np-AVX2 / ratio / % of the peak: 1024³ 151.7 / 159.2 / 166.5 /
160.7 / 1.09 / 82%, 2048³ 154.6 / 167.5 / 185.9 / 162.9 / 1.03 / 86%, 1000³ 166.6 / 166.6 / 185.4
/ 184.5 / 0.95 / 86%, 128×3072×768 171.0 / 171.0 / 168.5 / 168.2 / 1.03 / 88%. OpenBLAS reaches
95% of the peak at 2048³ and 1000³ here, so 1.1× is out of reach on this ISA; K blocks of 512 at
2048³ (kc 512, bn 8, bm 8-16) measured 1.03-1.05× the default, within this host's noise.

On an AMD EPYC Zen 5 (family 26 model 2, AVX-512 on 512-bit units, 2 vCPUs, 48 KiB L1d and
1 MiB L2 per core; quiet), target avx512, measured peak 535 GFLOP/s for 2 threads, 5 rounds:

    1024³          default 504.8  best/16 504.8   numpy 472.7 (AVX2 kernels 250.8)   ratio 1.05   94%
    2048³                  491.4          502.2         465.2               247.8          1.08   94%
    1000³                  504.1          506.0         452.4               234.1          1.12   95%
    128×3072×768           459.1          459.1         349.2               241.4          1.31   86%

OpenBLAS runs at 87-88% of the peak at the cubes, so 1.1× there asks for 97%: the default is the
best of the space's neighbours (kc, pack_a, mr, nr, ku, bm measured one at a time: 0.89-1.00×).

Zen 5 again (same model), with PyTorch's torch.mm beside numpy (peak 509), 5 rounds, default /
best of 16 / numpy / np-AVX2 / PyTorch / ratio to OpenBLAS / to PyTorch / % of the peak: 256³ 488.5
/ 488.5 / 405.6 / 233.5 / 199.1 / 1.44 / 2.59 / 96%, 512³ 485.1 / 485.1 / 451.6 / 240.3 / 208.3 / 1.09
/ 2.37 / 95%, 1024³ 471.6 / 480.5 / 448.3 / 239.0 / 205.5 / 1.08 / 2.35 / 94%, 2048³ 475.7 / 475.7 /
455.7 / 236.2 / 206.1 / 1.04 / 2.30 / 94%, 1000³ 472.4 / 476.5 / 446.4 / 237.6 / 207.8 / 1.09 / 2.33 /
94%, 128×3072×768 406.5 / 409.9 / 344.4 / 214.0 / 151.4 / 1.21 / 2.70 / 81%: PyTorch (MKL on an AMD
host) runs at about the AVX2 kernels' speed here; OpenBLAS at 88-90% of the peak at the cubes.

The same Zen 5 with `--target "cpu -isa=avx2"` (our AVX2 code against OpenBLAS's AVX2 kernels;
AVX2 peak 268 GFLOP/s), 4-5 rounds: 1024³ 1.01-1.09 (97% of the peak), 2048³ 1.03, 1000³ 1.06,
128×3072×768 0.98 -> 1.00 after the 4 × 3-vector AVX2 tile where three vectors divide N (218.6 ->
248.1 GFLOP/s; OpenBLAS 232-253, up to 98% of the peak there: 1.1× is out of reach).

On an AMD EPYC Zen 4 (family 25 model 17, AVX-512 on 256-bit units: no faster than AVX2 per
instruction; 2 vCPUs, 32 KiB L1d and 1 MiB L2 per core), target avx512, measured peak 230
GFLOP/s for 2 threads, 5 rounds, GFLOP/s (numpy with OpenBLAS's AVX-512 / AVX2 kernels): 1024³
221.3 (194.4 / 201.7), 2048³ 220.3 (201.3 / 209.5), 128×3072×768 211.0 (182.7 / 204.7), 512³
227.7 (203.8 / 216.3) — 92-100% of the peak, OpenBLAS's AVX2 kernels faster than its AVX-512
ones and at 88-94%: ratios to the faster of the two 1.03-1.10, the most the peak leaves.

On an Intel Xeon (model 167 as the VM reports it: AVX-512 with two FMA units, AMX, 48 KiB
L1d and 2 MiB L2 per core, 2 vCPUs; quiet), target avx512, measured peak 458 GFLOP/s for 2
threads, 5 rounds, default / best of 16 / numpy / np-AVX2 / ratio / % of the peak: 256³ 316.1 /
316.1 / 265.6 / 198.4 / 1.20 / 69%, 512³ 377.7 / 379.2 / 300.6 / 219.1 / 1.28 / 83%, 1024³ 385.1 /
385.1 / 338.1 / 223.5 / 1.12 / 84%, 2048³ 376.5 / 392.5 / 350.8 / 233.4 / 1.12 / 86%, 1000³ 357.0
/ 359.7 / 338.0 / 226.5 / 1.07 / 81%, 128×3072×768 322.0 / 334.3 / 279.8 / 214.1 / 1.19 / 73%. At
1024³ the default is the best of its one-knob neighbours (interleaved in one process, 2
threads: mr 7 0.90, 14 × 32 0.78, 12 × 32 0.91, pack_a 0.90, kc 256 0.85, kc 512 0.90, ku 8
0.98; gcc's -mtune for the host, -O2 or no instruction scheduling 1.00-1.02); one thread 173
(a 384 × 256 × 1024 product with B in the L2: 198).

The same Xeon model 167 later, with PyTorch's torch.mm beside numpy (a noisier minute: peak 457),
5 rounds, default / best of 16 / numpy / np-AVX2 / PyTorch / ratio to OpenBLAS / to PyTorch / % of
the peak: 256³ 272.5 / 272.5 / 240.5 / 181.3 / 328.9 / 1.15 / 0.96, 512³ 331.9 / 332.9 / 273.2 /
200.4 / 358.9 / 1.23 / 1.00, 1024³ 372.4 / 372.4 / 335.3 / 222.3 / 359.5 / 1.07 / 1.00 / 81%, 2048³
371.3 / 371.3 / 327.7 / 220.6 / 377.8 / 1.10 / 0.99 / 81%, 1000³ 343.4 / 343.4 / 316.1 / 220.8 /
355.6 / 1.11 / 0.98 / 75%, 128×3072×768 290.4 / 300.6 / 256.3 / 196.4 / 324.6 / 1.19 / 0.93 / 66%:
MKL runs level with us at the cubes and ahead at the skinny product. One thread at 1024³: ours
174-183, PyTorch 191-208 (peak 238). A C model of the default's loops puts the loss in the caches,
not in the register tile: the 6 × 64 tile reaches 209-223 GFLOP/s on one core with its operands in
the L1, 206-211 with B's 1024-deep panel in the L2, 177-191 with A's rows streamed from the L3 as
well (the default's arrangement). Order nm_mn with 2 panels per block (each tile's rows of A read
again from the L1 for the block's second panel): 1.04-1.07× at 1024³ (1 and 2 threads), 1.04× at
1000³, 1.00× at 2048³ and 128×3072×768 — not the default, which would then give 1024³ only 8
blocks of N to share among the threads (MIN_PARALLEL_TASKS is 16) and does not know their
count. GotoBLAS's K blocks (kc 128-256, A packed, B's panel in the L1): 0.58-0.88×, each K block
reading and writing C's region again. At 128×3072×768 packing B per block of N (768 rows of 256
bytes, each in another page) takes a quarter of a thread's time in the C model (tiles alone
180-185 GFLOP/s, with the packs 140-150); prefetching the next block's rows during the tiles
slowed it (0.85×), and wider blocks (bn 2-8) or K blocks (kc 192-384) measured 0.97-1.03×.

Zen 4 again, `--target "cpu -isa=avx2"` (peak 230): 1024³ default 209.9, best of 16 214.0 (93%),
numpy AVX2 kernels 209.7; 1000³ 191.7 / 193.6 / 212.9. At 1000³ the default (6 × 16, bm 8, bn
8, kc = K) is the best of its neighbours, medians of 5 interleaved processes against it: mr 5
(no partial row tile) 1.00-1.02, mr 4 0.89, 10 × 8 0.87, 4 × 24 0.89, kc 200 0.95, bn 4 0.97,
bm 16 0.97, A packed 0.90; OpenBLAS's AVX2 kernels run at 93% of the peak there.

Zen 4 again (family 25 model 17), with PyTorch's torch.mm beside numpy (peak 234), 5 rounds,
default / best of 16 / numpy / np-AVX2 / PyTorch / ratio to OpenBLAS / to PyTorch / % of the
peak: 256³ 227.7 / 229.2 / 189.5 / 193.8 / 189.1 / 1.22 / 1.20 / 98%, 512³ 225.7 / 226.2 / 204.0 /
214.7 / 202.0 / 1.37 / 1.13 / 97%, 1024³ 225.6 / 227.4 / 208.0 / 222.5 / 202.9 / 1.03 / 1.13 / 97%,
2048³ 224.8 / 224.8 / 206.2 / 218.8 / 200.3 / 1.06 / 1.13 / 96%, 1000³ 219.5 / 221.2 / 211.0 / 220.0
/ 202.3 / 1.01 / 1.09 / 95%, 128×3072×768 213.0 / 213.0 / 181.5 / 207.5 / 171.4 / 1.10 / 1.25 /
91%: PyTorch (MKL on an AMD host) trails by 9-25% here, where on the Xeon it ran level with us;
OpenBLAS's AVX2 kernels run at 94-95% of the peak at the cubes, which leaves 1.1× out of reach.

Intel Xeon model 207 again (48 KiB L1d and 2 MiB L2 per core; main at a1a6635, peak 374), 5 rounds,
default / best of 16 / numpy / np-AVX2 / PyTorch / ratio to OpenBLAS / to PyTorch / % of the peak:
256³ 292.5 / 292.5 / 259.4 / 160.7 / 312.2 / 1.11 / 0.90 / 78%, 512³ 341.1 / 341.1 / 296.8 / 174.2 /
346.1 / 1.16 / 0.98 / 91%, 1024³ 352.6 / 356.7 / 334.4 / 177.7 / 338.4 / 1.11 / 1.04 / 95%, 2048³
360.5 / 360.5 / 347.4 / 182.4 / 351.8 / 1.06 / 1.03 / 96%, 1000³ 343.2 / 343.2 / 315.9 / 180.3 /
348.2 / 1.12 / 1.01 / 92%, 128×3072×768 309.3 / 309.6 / 269.1 / 167.1 / 312.1 / 1.47 / 0.97 / 83%.
OpenBLAS runs at 93% of the peak at 2048³, so 1.1× there asks for more than the peak. At 256³
(115 µs a call) the default's neighbours, 9 interleaved rounds: kc 128 0.92-1.09, pack_b 1.02-1.05,
12 × 32 1.03-1.04, bm 1-4 1.00-1.02 — within this host's noise.

Intel Xeon model 167 again (main at 2837cad, peak 446), 5 rounds, default / best of 16 / numpy /
np-AVX2 / PyTorch / ratio to OpenBLAS / to PyTorch / % of the peak: 256³ 306.7 / 306.7 / 263.3 /
183.7 / 306.3 / 1.20 / 1.01 / 69%, 512³ 321.7 / 321.7 / 271.1 / 196.4 / 307.3 / 1.18 / 1.05 / 72%,
1024³ 357.5 / 360.8 / 312.4 / 208.3 / 349.9 / 1.14 / 1.01 / 81%, 2048³ 350.5 / 367.8 / 324.5 / 212.8 /
371.3 / 1.12 / 1.03 / 82%, 1000³ 313.9 / 315.9 / 300.9 / 207.4 / 343.1 / 1.06 / 0.98 / 71%,
128×3072×768 296.2 / 301.1 / 247.0 / 197.9 / 298.8 / 1.22 / 1.00 / 67%. At 1024³ against the default,
medians of 5-7 interleaved rounds: ku 1 1.02, ku 2 0.96, order nm_mn with 2 panels per block
0.99-1.04; GotoBLAS's loop order — K blocks outside the row tiles of a block of M, a 12 × 32 tile
whose rows of A stay in the L1 across all 32 panels of B, B's K block (1 MiB) in the L2 — 0.61-0.77
(kc 128-512, bm 4-64): with every block of K the tiles add into C, whose rows then come from the L3.
Software prefetch of A's rows in the C model of gemm_tile_levels.py (the next tile's rows, or this
tile's 1-16 lines ahead, into the L1 or L2) measured level with none.

AMD EPYC Zen 4 again (family 25 model 17, main at ab3108b, a slower hour: peak 232), 5 rounds,
default / best of 16 / numpy / np-AVX2 / PyTorch / ratio to OpenBLAS / to PyTorch / % of the peak:
256³ 214.2 / 218.1 / 179.8 / 170.2 / 164.0 / 1.38 / 1.35 / 94%, 512³ 208.1 / 208.1 / 198.5 / 181.0 /
166.7 / 1.04 / 1.29 / 90%, 1024³ 198.8 / 198.8 / 189.1 / 162.8 / 158.3 / 1.24 / 1.33 / 86%, 2048³
215.0 / 215.0 / 192.6 / 182.6 / 148.0 / 1.09 / 1.37 / 93%, 1000³ 204.9 / 210.8 / 192.0 / 189.2 / 156.2
/ 1.10 / 1.38 / 91%, 128×3072×768 175.9 / 188.6 / 156.0 / 159.3 / 129.0 / 1.10 / 1.65 / 81%. Shapes
whose K the unroll of 4 does not divide, after bound inference stopped guarding the columns of
their tiles (7504089; before, the tile at N's edge ran on single lanes): 127×255×129 194.6 / 199.9 /
136.7 / 138.4 / 120.3 / 1.43 / 1.87 / 88% (the default was 17.6), 512×500×513 203.8 / 203.8 / 199.0
/ 164.1 / 154.8 / 1.13 / 1.40 / 89% (was 44.2), 1000×1000×1001 208.8 / 208.8 / 187.9 / 176.0 / 185.3
/ 1.12 / 1.16 / 91%.

Zen 4 again (main at 7056a20, a faster hour: peak 234), same columns: 256³ 226.2 / 227.9 / 189.0 /
195.6 / 187.5 / 1.23 / 1.21 / 97%, 512³ 225.4 / 225.4 / 203.6 / 216.1 / 199.2 / 1.04 / 1.13 / 96%,
1024³ 221.1 / 221.1 / 203.6 / 215.5 / 197.8 / 1.04 / 1.12 / 94%, 2048³ 220.5 / 220.5 / 201.8 / 216.2
/ 195.2 / 1.09 / 1.15 / 94%, 128×3072×768 208.1 / 208.8 / 178.3 / 203.1 / 171.1 / 1.03 / 1.25 / 89%.
OpenBLAS's AVX2 kernels ran at 92% of the peak at 1024³: 1.1× them would be 101%. With `--target
"cpu -isa=avx2"` (peak 224): 1024³ 192.0 / 208.6 / 202.7 / 215.4 / 189.5 / 0.99 / 1.08 / 93%, the
best of 16 the default with ku 8; the default's 6 × 16 tile unrolled by 4 (or 8) spilled a
register in its loop over K (GCC 12), by 1 or 2 not, so AVX2 now takes ku 2 (`gemm.tile_unroll`).
After (main at 73cbb16, peak 232), default / best of 16 / np-AVX2 / ratio to OpenBLAS's AVX2 kernels
(default's before -> after, each run's own): 256³ 202.8 / 202.8 / 195.2 / 1.04 (1.01 -> 1.04), 512³
221.4 / 221.4 / 214.9 / 1.03 (0.95 -> 1.03), 1024³ 213.0 / 214.0 / 216.9 / 0.98 (0.89 -> 0.98),
2048³ 211.0 / 212.7 / 210.9 / 1.00 (0.92 -> 1.00); 128×3072×768 (the 4 × 24 tile, unchanged)
198.7 / 198.7 / 198.3 / 1.00.

Intel Xeon model 167 again (48 KiB L1d, 2 MiB L2 per core, AMX; main at 167cec2, where AVX-512's
tiles of 24 accumulators, which GCC 12 spilled unrolled by 4, take ku 2: 1.04-1.07× at the
sizes below in 9 interleaved rounds; peak 430), 5 rounds, default / best of 16 / numpy / np-AVX2
/ PyTorch / ratio to OpenBLAS / to PyTorch / % of the peak: 256³ 276.7 / 276.7 / 240.0 / 175.4 /
280.3 / 1.17 / 0.97 / 64%, 512³ 345.6 / 345.6 / 272.8 / 195.6 / 310.9 / 1.28 / 1.12 / 80%, 1024³
341.9 / 351.5 / 308.3 / 201.3 / 321.4 / 1.15 / 1.06 / 82%, 2048³ 363.6 / 367.0 / 305.9 / 209.3 /
354.3 / 1.20 / 1.08 / 85%, 128×3072×768 298.4 / 304.3 / 251.7 / 192.9 / 307.3 / 1.24 / 0.99 / 71%.
In the interleaved rounds of the ku change the default reached 365 at 1024³ (85% of that
minute's peak; 83% of one core's on one thread), and stayed the best of its neighbours (per-round
ratios: nm_mn with 2 or 4 panels per block 0.99 / 0.93, pack_a 0.89, 8 × 48 0.92, 12 × 32
0.85, kc 512 / 256 0.87 / 0.78). GotoBLAS's order with A's block in the L2 — blocks of 16-32
row tiles outermost, each packing B's K block (kc 128-256: a 32 KiB panel in the L1 for its
tiles) — ran at 61-66% of one core's peak: every block of M packs or reads all of B again
from the L3. Transparent huge pages for A, B and C: level.

AMD EPYC Zen 5 again (family 26 model 2; main at ff6d3a6, AVX-512's crowded tiles unrolled by
2; peak 567), 5 rounds, default / best of 16 / numpy / np-AVX2 / PyTorch / ratio to OpenBLAS /
to PyTorch / % of the peak: 256³ 525.4 / 525.4 / 473.6 / 262.4 / 222.9 / 1.53 / 2.37 / 93%, 512³
539.8 / 539.8 / 493.1 / 262.6 / 230.9 / 1.28 / 2.34 / 95%, 1024³ 534.0 / 534.7 / 510.4 / 265.1 /
230.0 / 1.08 / 2.33 / 94%, 2048³ 529.6 / 533.3 / 495.9 / 269.9 / 233.0 / 1.08 / 2.27 / 94%,
128×3072×768 481.9 / 483.6 / 388.6 / 253.8 / 212.2 / 1.34 / 2.30 / 85%. The unroll by 2 against
4 here (7 interleaved rounds, medians): matmul 1.00-1.01, the 1×1 convolutions 1.00-1.02 (12 × 32
at 14² 1.02). OpenBLAS at 90% of the peak at 1024³ leaves 1.1× at 99%. The skinny product's 15%:
packing B's panels per call, 11% here (the same code without its packing loop 1.12×, B
pre-packed as KN64n 1.08-1.10×, 92% of the peak), bound by the L3's latency on rows 12 KiB apart
(36 GB/s per core); prefetching the next panel during the tiles 0.93-0.95×, 8-24 rows ahead in
the packing loop 0.96×, bn 2 / 4 0.96 / 0.98, kc 96-384 0.97-1.00, all of B packed first 0.99,
packing it row by row 0.82, B in place 0.93; 64-byte aligned arrays (numpy's are 16-byte
aligned) 1.03×.

AMD EPYC Zen 5 again (family 26 model 2; main at a6f5229; a slower instance or a busier hour: peak
in the rounds 473-490), 5 rounds, default / best of 16 / numpy / np-AVX2 / PyTorch / ratio to
OpenBLAS / to PyTorch / % of the peak: 256³ 449.9 / 449.9 / 397.9 / 219.8 / 180.2 / 1.26 / 2.52 /
94%, 512³ 445.9 / 445.9 / 404.6 / 220.8 / 189.1 / 1.29 / 2.39 / 94%, 1024³ 452.4 / 452.4 / 398.3 /
212.1 / 196.1 / 1.16 / 2.29 / 92%, 2048³ 446.7 / 446.7 / 398.2 / 219.4 / 187.5 / 1.12 / 2.34 / 93%,
1000³ 441.6 / 444.9 / 422.0 / 217.7 / 192.2 / 1.07 / 2.32 / 94%, 128×3072×768 378.0 / 378.0 / 306.9 /
192.5 / 150.3 / 1.25 / 2.55 / 81%. OpenBLAS ran at 81-89% of the peak here (88-90% before).
Zen 5 again (main at 3002771; peak in the rounds 519-531), 5 rounds, default / best of 16 / numpy /
np-AVX2 / PyTorch / ratio to OpenBLAS / to PyTorch / % of the peak: 1024³ 503.8 / 506.9 / 474.6 /
252.9 / 219.0 / 1.07 / 2.34 / 96%, 2048³ 510.7 / 510.7 / 472.1 / 249.0 / 221.9 / 1.07 / 2.32 / 96%,
1000³ 499.5 / 499.8 / 471.0 / 254.1 / 215.8 / 1.06 / 2.31 / 95%, 128×3072×768 460.0 / 460.0 /
359.2 / 239.7 / 194.0 / 1.31 / 2.39 / 87%; OpenBLAS at 89-90% of the peak at the cubes.
Zen 5 again (main at ec65afb; peak in the rounds 526-535), 5 rounds, same columns: 1024³ 507.6 /
508.7 / 481.6 / 253.4 / 218.6 / 1.10 / 2.34 / 97%, 2048³ 501.0 / 501.4 / 457.3 / 242.7 / 218.6 /
1.10 / 2.33 / 95%, 1000³ 499.0 / 499.2 / 467.3 / 248.4 / 217.3 / 1.10 / 2.33 / 94%, 128×3072×768
435.6 / 446.6 / 344.1 / 230.9 / 167.7 / 1.30 / 2.72 / 83%: 1.1× OpenBLAS at the three cubes in one
run, OpenBLAS at 86-92% of the peak. Built for AVX2 there (`--target "cpu -isa=avx2"`, AVX2
peak 271-276), default / best of 16 / np-AVX2 / ratio to OpenBLAS's AVX2 kernels / % of that
peak: 1024³ 269.7 / 269.7 / 267.5 / 1.09 / 98%, 1000³ 261.6 / 261.6 / 258.7 / 1.08 / 95%,
128×3072×768 244.5 / 245.8 / 244.7 / 1.04 / 91%.

Intel Xeon model 207 again (main at 1ea56ce, the peak now measured in each row's rounds: 311-335;
a noisy hour, kernel medians up to 25% below their bests), 5 rounds, default / best of 16 / numpy /
np-AVX2 / PyTorch / ratio to OpenBLAS / to PyTorch / % of the peak: 256³ 280.7 / 280.7 / 214.3 /
135.7 / 277.5 / 1.21 / 0.99 / 84%, 512³ 234.7 / 234.7 / 184.5 / 121.9 / 252.4 / 1.27 / 0.90 / 72%,
1024³ 246.5 / 254.7 / 282.2 / 127.3 / 303.0 / 1.19 / 1.00 / 81%, 2048³ 236.3 / 237.2 / 206.6 / 125.9
/ 241.0 / 1.17 / 0.99 / 76%, 128×3072×768 212.9 / 212.9 / 146.5 / 107.6 / 261.9 / 1.30 / 0.95 / 66%.
An earlier run that hour, with the peak measured once at the start, read 167 GFLOP/s for it while
the kernels ran at 314 (188% "of the peak"), hence the peak in the rounds.

Intel Xeon model 167 again (main at f7a0a7c; a slower instance, peak 376-387), 5 rounds, default
/ best of 16 / numpy / np-AVX2 / PyTorch / ratio to OpenBLAS / to PyTorch / % of the peak: 1024³
320.7 / 320.7 / 261.3 / 177.7 / 284.7 / 1.22 / 1.12 / 84%, 2048³ 305.7 / 307.9 / 263.6 / 180.5 /
294.2 / 1.17 / 1.04 / 82%, 1000³ 294.8 / 294.8 / 255.8 / 177.2 / 277.3 / 1.16 / 1.06 / 78%,
128×3072×768 253.4 / 253.4 / 210.1 / 162.3 / 265.4 / 1.20 / 0.96 / 65%. GotoBLAS's arrangement
through the knobs at 1024³ (each thread's half of N as 8 panels, K blocks of 128-256 packed per
block, A's blocks of 32-64 row tiles in the L2 across the panels; 7 interleaved rounds, medians
against the default): 0.80-0.89×, with all of K 0.96×; 1000³ with 48-column panels 0.90-0.98×.

Intel Xeon model 167 again (main at cd951f1, peak 476-480): where the default's 82% of the peak
at 1024³ goes. One thread reaches the same share as two (191.3 of 236.6 GFLOP/s, 81%; two
391.2 of 479.7, 82%): the core, not the split. Its inner loop (6 × 64 tile, ku 2, B packed per
64-column panel of all of K, so each row tile streams the 256 KiB panel from the L2) issues 48
FMAs, 8 loads of B, 12 broadcasts of A and 3 register moves per iteration (gcc 12): 20 loads in
the 24 cycles its FMAs take on two ports, so not load-bound. Against the default, medians of 5 interleaved
rounds: software prefetches of the B panel 4, 8 or 16 iterations ahead 0.95×; K blocks of 128
or 256 (the panel's block in the L1) 0.74× and 0.79×, with A packed 0.70× and 0.84×; ku 1 or 4
0.94× and 0.97×; tiles 8 × 48, 7 × 48, 12 × 32, 14 × 32 0.90-0.95×. Still open: a hardware
counter (none in this VM) would tell whether the L2's bandwidth or the FMA ports' are short.
AMD EPYC Zen 3 (family 25 model 1, AVX2 only, 512 KiB L2 per core; main at ae54d98, peak
205-206), 5 rounds, default / best of 16 / numpy / np-AVX2 / PyTorch / ratio to OpenBLAS / to
PyTorch / % of the peak: 1024³ 192.8 / 192.8 / 191.1 / 185.2 / 181.8 / 1.04 / 1.08 / 94%, 2048³
189.3 / 189.3 / 189.9 / 189.8 / 188.0 / 1.00 / 1.01 / 92%, 1000³ 190.4 / 190.9 / 190.1 / 190.5 /
187.5 / 1.00 / 1.02 / 93%, 128×3072×768 175.8 / 176.1 / 173.0 / 173.8 / 160.1 / 1.04 / 1.09 / 86%.
Blocks sized for this L2 (the default rule assumes 1 MiB), at 1024³ against the default, medians
of 5 interleaved rounds: bn 4 1.00, bn 2 0.99, bm 4 1.00, bn 4 with bm 4 0.99.

Intel Xeon model 207 again (48 KiB L1d and 2 MiB L2 per core; main at 226bfe1, peak 402-424),
`--configs 8 --processes 3`, default / best of 8 / numpy / np-AVX2 / PyTorch / ratio to OpenBLAS / to
PyTorch / % of the peak: 256³ 318.1 / 318.1 / 281.3 / 153.4 / 337.6 / 1.18 / 1.06 / 78%, 512³ 341.5 /
367.3 / 312.6 / 187.3 / 381.5 / 1.37 / 0.95 / 87%, 1024³ 364.9 / 364.9 / 266.1 / 165.8 / 364.1 / 1.43 /
1.09 / 86%, 2048³ 334.2 / 334.2 / 277.8 / 166.9 / 336.8 / 1.28 / 1.04 / 83%, 128×3072×768 338.8 / 338.8
/ 235.8 / 179.5 / 343.8 / 1.63 / 0.99 / 81%: MKL level with us at 1024³, both at 86% of the peak.

AMD EPYC Zen 4 again (family 25 model 17; main at 8aa0335, peak 234), `--configs 8 --processes 3`,
same columns: 256³ 231.3 / 231.3 / 130.5 / 134.9 / 168.8 / 1.73 / 1.36 / 99%, 512³ 228.3 / 228.5 /
201.1 / 217.3 / 202.8 / 1.08 / 1.15 / 98%, 1024³ 225.6 / 226.0 / 202.2 / 219.4 / 203.0 / 1.04 / 1.13 /
96%, 2048³ 226.5 / 226.5 / 205.3 / 219.7 / 200.7 / 1.06 / 1.14 / 97%, 128×3072×768 212.3 / 212.3 /
181.3 / 203.5 / 164.1 / 1.10 / 1.49 / 91%. OpenBLAS's AVX2 kernels reach 94% of the peak at 1024³.

AMD EPYC Zen 3 again (family 25 model 1, AVX2 only; main at 4faf704, peak 199-204, a noisy host),
`--configs 8 --processes 3`, same columns: 256³ 162.4 / 162.4 / 174.5 / 175.7 / 160.9 / 1.13 / 1.01 /
80%, 512³ 182.9 / 182.9 / 180.5 / 185.0 / 170.3 / 1.19 / 1.14 / 91%, 1024³ 181.5 / 181.5 / 176.3 / 178.7 /
174.4 / 1.16 / 1.06 / 90%, 2048³ 183.0 / 183.0 / 186.0 / 181.8 / 178.6 / 1.04 / 1.04 / 92%, 128×3072×768
151.0 / 153.1 / 128.7 / 143.8 / 139.0 / 1.10 / 1.11 / 76%. The ratios are medians of per-round ratios, so
256³ reads 1.13 while OpenBLAS's best round beat ours.

AMD EPYC Zen 5 again (family 26 model 2; main at a3b7131; a slower instance, peak in the rounds
470-478), 5 rounds, default / best of 16 / numpy / np-AVX2 / PyTorch / ratio to OpenBLAS / to
PyTorch / % of the peak: 1024³ 455.0 / 455.0 / 425.5 / 223.4 / 195.0 / 1.08 / 2.36 / 95%, 2048³
444.3 / 446.8 / 409.4 / 221.1 / 190.9 / 1.13 / 2.35 / 95%, 1000³ 447.2 / 448.6 / 421.6 / 223.4 /
196.9 / 1.06 / 2.30 / 95%, 128×3072×768 407.0 / 407.0 / 325.7 / 199.3 / 164.1 / 1.28 / 2.60 / 86%;
OpenBLAS at 87-90% of the peak at the cubes.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import (PROCESSES, export, host_target, interleaved_seconds, kernel_code, numpy_env, numpy_matmul_code, peak_code,  # noqa: E402
                    quick_seconds, round_ratio, scratch_dir)
from ops_cpu import torch_available, torch_code, torch_env  # noqa: E402

from tunefleet.compiler import ops  # noqa: E402
from tunefleet.compiler.driver import build_workload  # noqa: E402
from tunefleet.compiler.target import Target  # noqa: E402


def candidates(space, default, lanes: int, n: int, rng) -> list:
    """The default, its one-knob neighbours, then random configs with mr*nr/lanes <= 28."""
    out = {default.index: default}
    for c in space.neighbors(default):
        if len(out) >= max(2, n // 2):
            break
        if c["mr"].val * c["nr"].val // lanes <= 28 and c["mr"].val >= 4:
            out.setdefault(c.index, c)
    while len(out) < n:
        c = space.random(rng, 1)[0]
        if c["mr"].val * c["nr"].val // lanes <= 28 and c["mr"].val >= 4:
            out.setdefault(c.index, c)
    return list(out.values())


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", nargs="*", default=["256", "512", "1024", "2048", "128x3072x768"])
    p.add_argument("--configs", type=int, default=16, help="configs sampled per size (<= 16)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--processes", type=int, default=PROCESSES, help="rounds of fresh processes per timing")
    p.add_argument("--target", type=host_target, default=Target.host(),
                   help="CPU target to build for (default: this host's best), e.g. 'cpu -isa=avx2'")
    args = p.parse_args()
    os.environ["TUNEFLEET_NUM_THREADS"] = str(args.threads)
    target = args.target
    lanes = target.lanes("float32")
    print(f"target {target}, {args.threads} threads; peak: the fp32 FMA peak measured in each row's rounds")
    have_torch = torch_available()
    print(f"PyTorch {'installed: its column times torch.mm (MKL / oneDNN)' if have_torch else 'not installed'}")
    header = (f"{'M×N×K':>14} {'default':>9} {'best/16':>9} {'numpy':>9} {'np-AVX2':>9} {'torch':>9} {'best/np':>8} "
              f"{'best/pt':>8} {'peak':>6} {'%peak':>6}  best config")
    print(header)
    rng = np.random.default_rng(0)
    for size in args.sizes:
        M, N, K = ([int(size)] * 3) if "x" not in size else [int(x) for x in size.split("x")]
        w = ops.make_workload("matmul", {"M": M, "N": N, "K": K})
        gf = lambda s: w.flop / s / 1e9  # noqa: E731
        space = ops.config_space(w, target)
        default = ops.default_config(w, target)
        t0 = time.time()
        trials = []
        for cfg in candidates(space, default, lanes, min(args.configs, 16), rng):
            built = build_workload(w, cfg, target)
            trials.append((quick_seconds(built, w), cfg, built))
        trials.sort(key=lambda t: t[0])
        best_cfg, best_built = trials[0][1], trials[0][2]
        default_built = next(t[2] for t in trials if t[1].index == default.index)
        artifacts = [export(b, w, scratch_dir("tf-bench-")) for b in (default_built, best_built)]
        codes = [peak_code(args.threads, target), *(kernel_code(a) for a in artifacts),
                 *[numpy_matmul_code(M, N, K)] * 2]
        envs = [None, None, None, numpy_env(False), numpy_env(True)]
        if have_torch:
            codes.append(torch_code("matmul", w.args, args.threads, "repeats"))
            envs.append(torch_env(target))
        s_peak, s_default, s_best, s_np, s_np_avx2, *s_torch = interleaved_seconds(codes, envs=envs,
                                                                                   processes=args.processes)
        peak = 1 / min(s_peak)  # GFLOP/s: the peak's code prints seconds per GFLOP
        s_ours = [min(d, b) for d, b in zip(s_default, s_best)]
        # OpenBLAS at its best on this host: its AVX2 kernels beat its AVX-512 ones where AVX-512
        # runs on 256-bit units (AMD Zen 4); built for AVX2, ours meets its AVX2 kernels alone.
        s_openblas = s_np_avx2 if target.isa == "avx2" else [min(a, b) for a, b in zip(s_np, s_np_avx2)]
        pt_gflops, pt_ratio = ("-", "-")
        if s_torch:
            pt_gflops, pt_ratio = f"{gf(min(s_torch[0])):.1f}", f"{round_ratio(s_torch[0], s_ours):.2f}"
        print(f"{f'{M}x{N}x{K}':>14} {gf(min(s_default)):9.1f} {gf(min(s_ours)):9.1f} {gf(min(s_np)):9.1f} "
              f"{gf(min(s_np_avx2)):9.1f} {pt_gflops:>9} {round_ratio(s_openblas, s_ours):8.2f} {pt_ratio:>8} "
              f"{peak:6.0f} {100 * gf(min(s_ours)) / peak:5.0f}%  "
              f"{best_cfg.to_json()['knobs']} ({time.time() - t0:.0f}s)", flush=True)

if __name__ == "__main__":
    main()
