"""Benchmark: tunefleet's CPU operators against PyTorch (oneDNN), onnxruntime and numpy, in one run.

Workloads (batch 1, float32): the ResNet-50 conv2d layers (NCHW, fused bias + relu; the
last 3×3 layer also with pre-packed weights, as a model bundle takes them; the stride-2
layers; the bottlenecks' last 1×1 layers with the shortcut's sum fused, "res", against
PyTorch's conv2d + add_ + relu and onnxruntime's Conv + Add + Relu), MobileNet-v1 depthwise
layers, BERT's attention batch_matmul 12×128×64 · 12×64×128, and dense layers (ResNet's
classifier 1×512 → 1000, BERT's FFN 768 → 3072 at 1 and 128 tokens). For each: our default
config (no tuning), the best of up to 32 configs sampled from the template's space (the
default's one-knob neighbours and random points, ranked by a quick in-process timing), and
the peers: PyTorch on the CPU when it is installed, onnxruntime on a one-node model (not for
batch_matmul), numpy/OpenBLAS for dense (also with OPENBLAS_CORETYPE=Haswell, its AVX2
kernels). Prints GFLOP/s, each peer's time over our best, and the percentage of the fp32 FMA
peak that the bench measures itself. Every GFLOP/s is the best over several rounds of fresh
processes, each round timing the peak, our two kernels and the peers one after the other
(timings vary by up to 35% between processes on these machines, more when other work shares
them); each ratio is the median over the rounds of the peer's time over ours in the same round
(`common.round_ratio`), which holds where bursts of load make the bests come from different
moments.

    python bench/ops_cpu.py [--only conv5 dw] [--configs 32] [--threads N] [--protocol min-call]
                            [--target "cpu -isa=avx2"]

`--target` builds for another ISA that this host runs (AVX2 code on an AVX-512 host) and limits
PyTorch to it (oneDNN's ONEDNN_MAX_CPU_ISA, MKL's MKL_ENABLE_INSTRUCTIONS: `TORCH_ISA_ENV`); the
peak is measured with that ISA's vectors. onnxruntime (MLAS), which has no such switch, is then
left out; numpy's columns name their ISA already.

Measured on an Intel Xeon (model 167, AVX-512, 2 vCPUs, quiet), 16 configs, GFLOP/s of our
best, (PyTorch / onnxruntime), peer ÷ ours: 7² layers before -> after they became im2col GEMMs:
512@7² 3×3 223 -> 256 (199 / 314: 1.29 / 0.82), 1×1 2048 -> 512 239 -> 295 (174 / 283: 1.70 /
0.96), 3×3 s2 512@14² 244 (186 / 307: 1.31 / 0.80); the NCHWc 3×3 layers' default before ->
after its AVX-512 tiles of two vectors (8 configs): 56² 299 -> 345 (175 / 397: 1.98 / 0.87),
28² 314 -> 358 (344 / 409: 1.06 / 0.89), 14² 312 -> 352 (304 / 422: 1.16 / 0.83), s2 128@56²
248 -> 266 (253 / 312: 1.05 / 0.85), s2 256@28² 272 -> 322 (294 / 356: 1.10 / 0.91); every 1×1
layer 1.36-7.8 × PyTorch; dense 1×512 -> 1000 1.72 × PyTorch, 128×768 -> 3072 0.98 ×
PyTorch, 1.29 × numpy.

On an AMD EPYC Zen 3 (AVX2 only; a 2-vCPU VM whose neighbours take one of its CPUs at times:
the two threads' FMA peak fell to one core's 39 GFLOP/s in 10-25% of short samples), 8
configs, 5 rounds, ratios the per-round medians, GFLOP/s of our best (PyTorch / onnxruntime),
peer ÷ ours: 3×3 NCHWc 56² 66.9 (50.3 / 69.6: 1.61 / 0.97), 28² 67.0 (64.8 / 72.2: 1.05 /
0.93), 14² 67.9 (67.2 / 77.3: 1.03 / 0.88), s2 128@56² 62.7 (61.1 / 69.9: 1.03 / 0.90), s2
256@28² 62.2 (60.4 / 69.9: 1.03 / 1.10); the im2col GEMMs 512@7² 3×3 50.9 (45.5 / 68.5: 1.14
/ 0.73), s2 512@14² 50.2 (37.2 / 57.9: 1.06 / 0.70) — 49 pixels fill four panels of 16, a
quarter of the work padding; 1×1 s2 256→512@56² 1.93 / 1.15, 1×1 2048→512@7² 1.36 / 0.88;
dense 1×512 -> 1000 45.4 (3.51 / 2.70, numpy 1.43), 128×768 -> 3072 63.9 (1.48 / 1.08, numpy
1.01).

On an AMD EPYC Zen 5 (family 26 model 2, AVX-512, 2 vCPUs, peak 537-563 GFLOP/s), 8 configs, 3
rounds, GFLOP/s of our default -> best, peer ÷ ours (PyTorch / onnxruntime): 3×3 NCHWc 56² 476 ->
478 (2.32 / 0.94), 28² 487 (1.12 / 0.96), 14² 444 (1.10 / 0.83), s2 128@56² 333 -> 369 (1.21 /
1.04), s2 256@28² 435 (1.12 / 0.91); the im2col GEMMs at 7² 295 -> 305 (1.07 / 0.60) and s2
512@14² 302 (1.16 / 0.67): 49 pixels in 64 lanes; with pre-packed OIHW16i32o weights 516 (1.84
/ 1.04); 1×1 layers 1.12-9.7 / 0.80-1.21 (2048 -> 512 at 7² 375: 1.12 / 0.80); dense 1×512 ->
1000 110 (2.96 / 1.45, numpy 1.29), 128×768 -> 3072 432 -> 436 (2.05 / 0.86, numpy 1.25). At
the session's start (before even_blocks, the vectorized NCHWc epilogue and narrower tiles at
14²) the 1×1 layers at 28² ran at 288-354 by default (s2 256 -> 512: 288, its best of 8 381) and
1024 -> 256 at 14² at 375 (0.82 × onnxruntime, now 422: 0.91). Later (peak 517-574): the 7²
layers per call 314 (1.17 / 0.65) and s2 354 (1.44 / 0.75) -> 364 (1.34 / 0.77) and 367 (1.48 /
0.86) with the per-call panel GEMM as their default; 1×1 2048 -> 512 at 7² pre-packed (AVX-512
bundles now pre-pack it, OIHW8i32o) 372 (1.13 / 0.81) -> 445 (1.52 / 1.13); pre-packed 3×3 7²
478-493 (1.76-1.84 / 1.01-1.03), s2 492-505 (1.96 / 1.01-1.02). With the 1×1 layers at 56²
reading their input in place by default (peak 524-531): 256 -> 64 485 (91% of the peak; 1.58
/ 1.21), 64 -> 256 495 (11.2 / 1.70).

On an AMD EPYC Zen 4 (family 25 model 17, AVX-512 on 256-bit units, 2 vCPUs, peak 234 GFLOP/s),
8 configs, 3 rounds, GFLOP/s of our best, peer ÷ ours (PyTorch / onnxruntime), NCHWc layers
before -> after their weight packing stored whole vectors: 3×3 56² 209 (1.66 -> 2.02 / 0.93),
28² 212 -> 214 (1.00 / 0.95 -> 0.94), 14² 206 -> 213 (0.96 -> 0.98 / 0.92), s2 128@56² 195 -> 196
(1.00 -> 1.01 / 0.93), s2 256@28² 199 -> 209 (0.98 -> 1.03 / 0.93 -> 0.98); the im2col GEMMs at
7² 150 (0.81 / 0.64) and s2 512@14² 146 (0.88 / 0.66), where NCHWc with its packing per call
now reaches 189 and 159 (not chosen: on a Xeon the GEMM won, before that packing); pre-packed
OIHW16i32o 225 (1.22 / 0.96); 1×1 layers 1.15-6.9 / 0.89-1.48; dense 1×512 -> 1000 77 (3.66 /
1.61, OpenBLAS 1.22-1.30). Later, with the 7² layers' union space (8 configs, 3 rounds): 3×3 56²
206 (1.66 / 1.01), 28² 212 (0.94 / 0.92), 14² 211 (1.00 / 0.93), 7² 143 (1.01 / 0.64; the
NCHWc default not faster here per call), pre-packed OIHW8i32o 212 (1.56 / 1.01), s2 512@14² 145
(1.11 / 0.66), s2 128@56² 197 (1.04 / 0.93), s2 256@28² 201 (1.09 / 1.00); 1×1 layers 1.10-6.1
/ 0.83-1.23; dense 1×512 -> 1000 70 (3.29 / 1.47, OpenBLAS 1.14 / 1.16), 128×768 -> 3072
pre-packed 223 (1.41 / 1.09, OpenBLAS 1.43 / 1.29). Then the NCHWc input packing stored whole
vectors (gathered from ic_bn rows): the 3×3 defaults 1.03× (56²), 1.01× (28²), 1.01× (14²)
by 7 rounds, AVX2 builds 1.02× and 1.01×. Later (8 configs, 3 rounds; the host busier, load
1.2-1.7) the 7² layers per call were level with PyTorch again: 3×3 164 (1.00 / 0.73), s2 512@14²
163 (0.99 / 0.76), 1×1 2048 -> 512 171 (1.05 / 0.83); their GEMM pads 49 pixels to 64 lanes.
With the GEMM's dot-product form as their default (8 configs, 5 rounds): 193 (1.09 / 0.83), 194
(1.23 / 0.87), 179 (1.09 / 0.86); pre-packed 224 (1.39 / 0.98). Then the dot products' horizontal
sums became one shuffle tree each (tf_hsum_*; 8 configs, 5 rounds, PyTorch slower in this run):
186 (1.11 / 0.78), 197 (1.49 / 0.93), 185 (1.21 / 0.91); dense 1×512 -> 1000 (dot products by
default) 70 -> 83 (3.98 / 1.77, OpenBLAS 1.29), 1×768 -> 3072 75 -> 77 (3.08 / 1.19, OpenBLAS
1.12); built for AVX2 the dot products still trail the GEMM's tiles at 7² (3×3 0.94×, 1×1 0.98×).

On an Intel Xeon (model 207, AVX-512, 2 vCPUs; a noisy host: the measured peak 214-361, kernel
medians up to 30% below their bests, so ratios of single rows swing), 8 configs, 3 rounds, after
the 7² layers' space became the union of the im2col GEMM and NCHWc: 3×3 56² 269 (2.76 / 1.24),
28² 282 (0.79 / 0.84; re-timed alone in 8 rounds: 298 vs PyTorch 287, 1.02), 14² 256 (1.04 /
0.72), 7² 179 (1.10 / 0.74; its best of 8 an NCHWc config), pre-packed OIHW8i32o 235 (1.41 /
0.87), s2 512@14² 186 (1.41 / 0.79), s2 128@56² 213 (1.38 / 0.91); 1×1 layers 1.43-6.6 / 0.91-1.29;
depthwise 3.3-18.7 / 1.7-2.2; dense 128×768 -> 3072 231 (0.88 / 0.66, OpenBLAS 1.86). The 7²
layers re-timed alone, 8 rounds, best GFLOP/s (÷ PyTorch by rounds): 512@7² GEMM 194 (1.05),
NCHWc packing per call 186, pre-packed 243 (1.40), PyTorch 159; s2 512@14² 192 (1.31) / 175 /
206 (1.39) / 149. onnxruntime (MLAS, weights packed once per session) leads our per-call
kernels on most 3×3 layers here. Later, with the linear layers' constant W pre-packed into the
GEMM's column panels (NK64n; 8 configs, 5 rounds, peak 338-352): dense 128×768 -> 3072 per
call 246 (0.97 / 0.89), pre-packed 300 (1.14 / 1.11, OpenBLAS 1.34).

On an Intel Xeon (model 85, AVX-512 with two FMA units, 2 vCPUs, measured peak 244-304; noisy:
kernel medians up to 40% below their bests), 8 configs, 3 -> 5 rounds, GFLOP/s of our best
(PyTorch / onnxruntime), before -> after the im2col GEMM gathered its pixels in a stage of their
own and a transposed B's panels were packed by register transposes (each change's own A/B:
defaults, 7 interleaved rounds, median ratio within a round: 1.17-1.34× and 1.17×): 512@7² 3×3
123 -> 150 (1.76 -> 1.86 / 0.72 -> 0.93), s2 512@14² 74 -> 154 (1.21 -> 1.74 / 0.67 -> 0.79),
1×1 s2 256 -> 512@56² 86 -> 174 (2.23 -> 2.55 / 1.03), dense 128×768 -> 3072 per call 170 -> 224
(0.94 -> 1.12 / 0.89 -> 0.99; OpenBLAS 1.61), now faster than with W pre-packed (192: 0.94 /
0.86, which reads the panels from memory in the micro-kernel); the other 3×3 layers 1.15-1.96 /
0.88-1.15, 1×1 layers 1.00-7.2 / 0.77-1.48, dense 1×512 -> 1000 1.77 / 1.73 (OpenBLAS 1.07).

On an AMD EPYC Zen 5 (family 26 model 2, 2 vCPUs) with `--target "cpu -isa=avx2"`: AVX2 code
against PyTorch limited to AVX2 (AVX2 peak 270-285 GFLOP/s for 2 threads), 8 configs, 3 -> 5
rounds, GFLOP/s of our best (PyTorch) before -> after the 3 × 4-vector NCHWc tile (its own A/B,
defaults, 5 rounds: 1.03-1.10×): 3×3 64@56² 234 -> 242 (1.57 -> 1.75), 128@28² 234 -> 239 (0.96
-> 1.05), 256@14² 236 -> 238 (1.00 -> 1.07), stride 2 128@56² 227 -> 220 (0.99 -> 1.15; the
host slower in the later run, PyTorch 231 -> 192), stride 2 256@28² 233 -> 237 (1.02 -> 1.06);
7² 3×3 pre-packed 209 -> 230 (1.14 -> 1.26; OIHW8i32o and the same tile instead of 7 columns ×
one vector); unchanged: 7² 3×3 (im2col GEMM) 194 (1.05), stride 2 512@14² 195 (1.16),
1×1 layers 197-259 (1.12-5.27), depthwise 1.3-14, dense 1×512 -> 1000 106 (2.90; OpenBLAS's
AVX2 kernels 1.21), 1×768 -> 3072 91 (2.23; 0.95), 128×768 -> 3072 246 (1.21; 1.05).

On an AMD EPYC Zen 3 (family 25 model 1, AVX2 only, 2 vCPUs, measured peak 178-198 GFLOP/s;
a very noisy host: one kernel's in-process GFLOP/s swung 40-84 between seconds, whole runs
by up to 1.4×), 8 configs, 3 rounds, GFLOP/s of our best (PyTorch / onnxruntime), before ->
after the NCHWc AVX2 defaults accumulated by rows (the input-channel blocks outside the row's
tiles) and took 2 vectors × 4 columns at 7 output columns (two runs after, the host quieter in
the first): 3×3 64@56² 121 -> 160-161 (1.95 -> 2.42-2.84 / 0.83 -> 1.00-1.14), 128@28² 129 ->
139-160 (1.36 -> 1.18-1.48 / 0.98 -> 0.86-1.03), 256@14² 111 -> 114-154 (1.03 -> 1.15-1.19 /
0.74 -> 0.75-1.26), 7² pre-packed 91 -> 100-104 (1.21 -> 1.35-1.81 / 0.68 -> 0.72-0.80), s2
256@28² 106 -> 113-120 (1.17 -> 1.29-1.36 / 0.79 -> 0.97-1.05); unchanged: 7² 3×3 (im2col
GEMM) 107-108 (1.64-1.74 / 0.91-0.97), s2 128@56² 120-150 (1.11-1.54 / 0.83-1.31), 1×1 layers
108-151 (1.32-8.5 / 0.88-3.0), dense 1×512 -> 1000 49-53 (4.17-4.24 / 1.89-2.03, OpenBLAS
1.33-1.34), 1×768 -> 3072 50-58 (2.87-4.30 / 1.49-1.53, OpenBLAS 1.13-1.14), 128×768 -> 3072
105-108 (1.26-1.33 / 0.82-0.91, OpenBLAS 1.02-1.39), pre-packed 117 (1.62 / 0.96). Every row at
or above PyTorch (MKL / oneDNN) on this AVX2 host. Later (peak 195-203), after pre-packed weights
over at most 64 pixels became the panels of a GEMM of the pixels (its AVX2 default; the
bundles pre-pack the 7² 1×1 layers too): 512@7² 3×3 pre-packed 100-104 -> 152-172 (1.60-1.98 /
0.97-1.03; 79-85% of the peak), s2 512@14² pre-packed 168 (2.03 / 0.90), 1×1 2048 -> 512 at 7²
per call 118, pre-packed 158 (2.03 / 0.97); onnxruntime's one-node models hold the weights as
initializers, packed once per session like ours pre-packed (512@7² per call 132-136: 0.76-0.89).
Then the bundles pre-packed the 14² layers to 2-vector blocks for that GEMM as well: 256@14²
pre-packed 138 (1.06 / 0.92; the quick ranking picked NCHWc's default, level with the GEMM in
this run); in-process, 21 alternating timings, medians: the GEMM over OIHW8i16o 137, NCHWc over
OIHW8i32o (the layout before) 110, NCHWc per call 117.

Zen 3 again (family 25 model 1, peak 197-204), after the row guards of edge tiles left their
loops over K (`passes.unswitch_invariant_guards`), 8 configs, 3 rounds, GFLOP/s default -> best
(PyTorch / onnxruntime): 3×3 NCHWc 56² 170 (1.91 / 0.97), 28² 169 (1.15 / 0.90), 14² 137 -> 161
(1.41 / 0.92), pre-packed 14² 157 -> 170 (1.21 / 0.88), s2 128@56² 134 (1.10 / 0.91), s2 256@28²
158 (1.04 / 0.94); 7² per call 151 -> 152 (1.42 / 0.96; 107-108 before the per-call panel GEMM),
pre-packed 155 (1.94 / 0.91), s2 512@14² 133 -> 150 (1.52 / 0.95), pre-packed 168 -> 174 (1.84 /
1.03); 1×1 layers 0.94-5.27 / 0.87-1.69, 256 -> 64 at 56² 119 -> 127 (0.94 / 1.69: PyTorch 125,
level within the noise; in-process the default beat mr 4, mr 5 and 4 × 3 vectors there), 2048 ->
512 at 7² pre-packed 164 (1.67 / 0.94); dense 1×512 -> 1000 59 (3.36 / 1.96, OpenBLAS 1.30), 1×768
-> 3072 63 (2.79 / 1.52, 1.28), 128×768 -> 3072 168 (1.45 / 0.99, 1.22).

On an Intel Xeon (model 167 as the VM reports it: AVX-512 with two FMA units, AMX, 2 MiB L2
per core, 2 vCPUs; quiet, peak 438-480 GFLOP/s), 8 configs, 3 rounds, GFLOP/s default -> best,
peer ÷ our best (PyTorch / onnxruntime): 3×3 NCHWc 56² 345 (1.16 / 0.92), 28² 348 -> 359 (1.19 /
0.98), 14² 332 (1.20 / 0.86), pre-packed 14² 355 (1.27 / 0.96), s2 128@56² 271 (1.14 / 0.98), s2
256@28² 313 (1.14 / 0.94); 1×1 layers 1.38-5.96 / 0.95-1.41; dense 1×512 -> 1000 97 (1.87 / 1.56,
OpenBLAS 1.24), 1×768 -> 3072 29 (1.25 / 2.02, OpenBLAS 1.92), 128×768 -> 3072 317 -> 329 (1.05 /
0.97, OpenBLAS 1.38), pre-packed 349 (1.04 / 1.00). The 7² layers before -> after the per-call
panel GEMM packed each panel of weights per block inside the parallel loop (its default): 512@7²
3×3 200 -> 275 (best 270 -> 283: 1.35 / 0.90), s2 512@14² 199 -> 267 (1.46 / 0.84), pre-packed
OIHW8i32o 265 -> 272 (1.39 / 0.93); 1×1 2048 -> 512 at 7² 207-219 by default (its dot products;
the GEMM's tiles, its second default, 274-286: 1.58 / 0.92). Every row at or above PyTorch.

The same Xeon model 167 later (main at d32be5b, peak 429-468), 8 configs, 3 rounds, our best and
PyTorch / onnxruntime ÷ ours: 3×3 NCHWc 56² 308 (1.24 / 0.95), 28² 329 (1.24 / 1.00), 14² 362 (1.42
/ 0.95), pre-packed 364 (1.53 / 0.90); 7² 276 (1.42 / 0.94), pre-packed 262 (1.48 / 0.92), s2 512@14²
234 (1.46 / 0.80), pre-packed 248 (1.62 / 0.92), s2 128@56² 258 (1.31 / 1.00), s2 256@28² 287 (1.23 /
0.98); 1×1 layers 1.42-6.04 / 0.98-1.55; dense 1×512 -> 1000 84 (2.21 / 1.74, OpenBLAS 1.22), 1×768 ->
3072 27 (1.48 / 1.40), 128×768 -> 3072 318 (1.08 / 1.01). Every row at or above PyTorch; onnxruntime
ahead on the 7² layers, whose per-call panel GEMM reads all 9.4 MB of weights each call (about 10
GB/s per core from memory here; onnxruntime packs its constant weights once, at load): tiles of 5
or 6 rows × 64 0.79-0.83× the default's 7 × 32, 7 × 48 0.65×.

AMD EPYC Zen 4 again (family 25 model 17, peak 231-235), after the per-call panel GEMM packed
per block and register tiles were kept within the vector registers (main at d62a53d), 8 configs,
3 rounds, GFLOP/s default -> best (PyTorch / onnxruntime): 3×3 NCHWc 56² 215 (1.70 / 0.97), 28²
195 -> 214 (1.03 / 0.95: the same config, timed apart), 14² 215 (1.00 / 0.92), pre-packed 14² 226
(1.05 / 0.97), s2 256@28² 204 -> 210 (1.04 / 1.03), s2 128@56² 203 -> 205 (1.11 / 1.00); 7² 189
-> 200 (1.13 / 0.83), pre-packed 226 -> 227 (1.28 / 0.98), s2 512@14² 179 -> 191 (1.48 / 0.99),
pre-packed 222 (1.38 / 1.06); 1×1 layers 1.30-5.74 / 0.85-1.19; dense 1×512 -> 1000 85 (3.82 /
1.63, OpenBLAS 1.22), 1×768 -> 3072 79 (2.99 / 1.13), 128×768 -> 3072 209 (1.59 / 1.00, OpenBLAS
1.36), pre-packed 214 -> 222. Every row at or above PyTorch.

AMD EPYC Zen 4 again (family 25 model 17, peak 234-235), after partition_tails split the tile at
N's edge off blocks fused into the parallel loop (main at afc69d2), 8 configs, 3 rounds, GFLOP/s
default -> best (PyTorch / onnxruntime ÷ ours): 3×3 NCHWc 56² 216.0 (1.68 / 0.97), 28² 219.4 (1.04
/ 0.97), 14² 214.7 -> 215.0 (1.01 / 0.93), pre-packed 226.3 (1.07 / 0.97); 7² 188.3 -> 197.8 (1.12
/ 0.84), pre-packed 227.1 -> 227.5 (1.24 / 0.97); s2 512@14² 186.9 -> 195.5 (1.21 / 0.90),
pre-packed 207.7 (1.30 / 1.00); s2 128@56² 208.2 (1.06 / 0.98), s2 256@28² 212.3 (1.05 / 0.99);
1×1 layers 1.24-5.80 / 0.98-1.18, among them 1024 -> 256 at 14² 178.5 -> 204.8 (1.58 / 1.02): its
default packs B and takes 12 × 32, where B read in place with a 6 × 32 tile, blocks of M
outermost, now reaches 217.9 (93% of the peak) in interleaved rounds — 34.6 before the split;
dense 1×512 -> 1000 86.9 (3.91 / 1.79, OpenBLAS 1.39), 1×768 -> 3072 79.4 -> 79.8 (3.07 / 1.16),
128×768 -> 3072 215.9 -> 216.2 (1.26 / 1.02, OpenBLAS 1.39), pre-packed 226.3 -> 226.8. Every row
at or above PyTorch.

Intel Xeon (model 207, AVX-512, 48 KiB L1d and 2 MiB L2 per core, 2 vCPUs; main at a1a6635, peak
372-393), 8 configs, 3 rounds, GFLOP/s default -> best (PyTorch / onnxruntime ÷ ours): 3×3 NCHWc 56²
308.8 (2.10 / 0.98), 28² 327.0 (1.06 / 0.91), 14² 312.1 (1.09 / 0.91), pre-packed 347.2 (1.25 /
1.00); 7² 257.1 -> 260.4 (1.46 / 0.88), pre-packed 266.4 -> 268.7 (1.46 / 0.90); s2 512@14² 257.0 ->
257.2 (1.51 / 0.87), pre-packed 247.2 -> 281.4 (1.62 / 0.91); s2 128@56² 269.2 -> 271.5 (1.12 /
0.96), s2 256@28² 283.9 (1.16 / 0.99); 1×1 layers 1.31-6.78 / 0.94-1.41, among them 2048 -> 512 at
7² 194.8 -> 272.3 (1.73 / 0.94): its default, the dot products, runs 1.41× slower than the GEMM's
tiles here (conv2d.dot_conv_default); dense 1×512 -> 1000 66.1 -> 67.1 (1.66 / 1.39, OpenBLAS
1.41), 1×768 -> 3072 30.3 (1.18 / 1.15), 128×768 -> 3072 314.3 (1.09 / 0.94, OpenBLAS 1.31),
pre-packed 323.6 -> 330.3 (1.21 / 1.05). Every row at or above PyTorch.

AMD EPYC Zen 5 (family 26 model 2, 48 KiB L1d and 1 MiB L2 per core, 2 vCPUs; main at 1606399,
after the dot products' horizontal sums were taken per tile row; peak 507-531), 8 configs, 3
rounds, GFLOP/s default -> best (PyTorch / onnxruntime ÷ ours): 3×3 NCHWc 56² 457.4 (2.26 / 0.97),
28² 469.0 (1.15 / 0.98), 14² 443.2 (1.19 / 0.91), pre-packed 495.2 (1.31 / 1.00; 97% of the peak);
7² per call 360.0 (1.46 / 0.75), pre-packed 481.9 (2.04 / 1.04); s2 512@14² 359.4 (1.54 / 0.90),
pre-packed 477.7 (2.06 / 1.03); s2 128@56² 351.6 -> 355.0 (1.28 / 1.14), s2 256@28² 446.5 -> 447.0
(1.23 / 0.97); 1×1 layers 1.12-11.7 / 0.80-1.74, among them 2048 -> 512 at 7² 333.4 -> 359.2 (1.12 /
0.80; the dot products by default, the GEMM's tiles best), pre-packed 471.4 (1.48 / 1.06); dense
1×512 -> 1000 101.7 -> 106.8 (3.19 / 1.52, OpenBLAS 1.33), 1×768 -> 3072 88.5 -> 89.4 (2.42 / 1.12,
1.03), 128×768 -> 3072 448.1 -> 449.8 (2.38 / 0.99, 1.36), pre-packed 491.3 (3.57 / 1.16, 1.60).
Every row at or above PyTorch (MKL and oneDNN on an AMD host).

Intel Xeon model 167 again (main at 9a07e8c, after the grouped horizontal sums; peak 443-476), 8
configs, 3 rounds, GFLOP/s default -> best (PyTorch / onnxruntime ÷ ours): 3×3 NCHWc 56² 317.2 ->
327.8 (2.11 / 0.97), 28² 328.6 (1.23 / 0.97), 14² 321.3 -> 356.4 (1.36 / 0.90), pre-packed 347.4
(1.43 / 0.97); 7² per call 257.7 -> 269.6 (1.51 / 0.91), pre-packed 252.2 -> 283.1 (1.65 / 1.05);
s2 512@14² 243.4 (1.52 / 0.91), pre-packed 221.8 -> 260.4 (1.65 / 0.90); s2 128@56² 262.6 -> 283.3
(1.31 / 1.03), s2 256@28² 283.3 (1.17 / 0.94); 1×1 layers 1.50-6.50 / 0.96-1.52, among them 2048 ->
512 at 7² 197.3 -> 244.3 (1.75 / 0.98; the dot products by default, the GEMM's tiles best); dense
1×512 -> 1000 93.9 (2.14 / 1.97, OpenBLAS 1.32), 1×768 -> 3072 27.2 (1.43 / 1.40, 1.10), 128×768 ->
3072 322.8 (1.07 / 1.02, 1.41), pre-packed 321.7 -> 326.4 (1.12 / 1.01, 1.40). Every row at or above
PyTorch, the defaults too.

AMD EPYC Zen 4 again (family 25 model 17, main at ab3108b, peak 224-233), 8 configs, 3 rounds,
GFLOP/s default -> best (PyTorch / onnxruntime ÷ ours): 3×3 NCHWc 56² 199.1 (1.68 / 0.99), 28²
209.3 (1.06 / 0.98), 14² 201.7 -> 206.9 (1.15 / 1.00), pre-packed 222.7 (1.16 / 1.13); 7² per call
158.0 -> 166.4 (1.09 / 0.77), pre-packed 221.4 (2.08 / 1.07); s2 512@14² 159.2 (1.82 / 0.93),
pre-packed 186.6 -> 213.5 (2.27 / 1.28); s2 128@56² 197.0 (1.04 / 0.73), s2 256@28² 184.3 -> 197.1
(1.20 / 1.06); 1×1 layers 1.22-7.59 / 0.99-2.33, among them 1024 -> 256 at 14² 144.9 -> 178.9
(1.22 / 1.40; the default alone 0.94× PyTorch: its 12 × 32 tile, where 6 × 32 measured 1.17-1.19×
the default in 7 interleaved rounds, B packed or read in place alike); dense 1×512 -> 1000 72.5 ->
77.6 (3.73 / 1.98, OpenBLAS 1.55), 1×768 -> 3072 72.0 (3.14 / 1.30, 1.22), 128×768 -> 3072 206.6
(1.39 / 1.05, 1.33), pre-packed 202.2 -> 210.7 (1.65 / 1.10, 1.46). B read in place instead of
packed at 1×1 layers whose blocks do not divide the pixels (the default packs it there), 5 rounds:
1.03-1.11× at 14² and 28² except 1024 -> 256 (0.94-0.96), and 0.80-0.88× built for AVX2: the rule
stays.

Intel Xeon model 167 again (main at 4602ff2, AVX-512's tiles of 24 accumulators unrolled by 2;
peak 424-474), 8 configs, 3 rounds, GFLOP/s default -> best (PyTorch / onnxruntime ÷ ours): 3×3
NCHWc 56² 306.0 (2.22 / 0.99), 28² 320.9 -> 323.1 (1.24 / 0.98), 14² 301.6 -> 307.7 (1.35 / 0.88),
pre-packed 317.1 -> 325.5 (1.46 / 0.95); 7² per call 243.1 -> 263.4 (1.51 / 0.89), pre-packed
263.3 -> 298.0 (1.61 / 1.01); s2 512@14² 266.6 (1.64 / 0.91), pre-packed 220.9 -> 262.0 (1.59 /
0.90); s2 128@56² 269.9 -> 304.7 (1.30 / 1.04), s2 256@28² 293.3 (1.21 / 0.97); 1×1 layers
1.75-7.01 / 0.98-1.61, among them 256 -> 64 at 56² 238.9 -> 245.2 (1.85 / 1.24) and 2048 -> 512
at 7² 208.5 -> 274.4 (1.94 / 1.08; the dot products by default, the GEMM's tiles best); dense
1×512 -> 1000 87.3 (2.10 / 1.67, OpenBLAS 1.22), 1×768 -> 3072 27.0 -> 27.1 (1.52 / 1.39, 1.15),
128×768 -> 3072 323.2 -> 330.8 (1.10 / 1.05, 1.47), pre-packed 315.0 -> 319.5 (1.11 / 1.02, 1.40).
Every row at or above PyTorch, the defaults too.

AMD EPYC Zen 5 again (family 26 model 2; main at ff6d3a6; peak 540-555), 8 configs, 3 rounds,
GFLOP/s default -> best (PyTorch / onnxruntime ÷ ours): 3×3 NCHWc 56² 504.0 (2.33 / 0.98), 28²
502.7 (1.16 / 0.97), 14² 474.2 (1.26 / 0.93), pre-packed 506.9 (1.37 / 1.01); 7² per call 354.5
-> 358.7 (1.28 / 0.74), pre-packed 488.5 (1.84 / 1.01); s2 512@14² 394.0 (1.51 / 0.81), pre-packed
505.6 (1.80 / 1.05); s2 128@56² 487.7 (1.31 / 1.11), s2 256@28² 428.0 -> 429.5 (1.20 / 1.00); 1×1
layers 1.37-9.84 / 0.99-1.76, among them 2048 -> 512 at 7² 318.8 -> 390.4 (1.37 / 0.99; the dot
products by default, the GEMM's tiles best), pre-packed 495.9 -> 501.6 (1.45 / 1.06); dense 1×512
-> 1000 109.8 (2.82 / 1.43, OpenBLAS 1.37), 1×768 -> 3072 94.5 (2.46 / 1.08, 1.05), 128×768 -> 3072
468.6 (2.69 / 0.97, 1.47), pre-packed 519.3 -> 523.1 (2.45 / 1.06, 1.52). Every row at or above
PyTorch. After the GEMM's tiles came first at 1×1 where the dot products' rows of weights
overflow the L1 (ac8074a; 5 rounds): 2048 -> 512 at 7² 391.5 by default (1.17 / 0.84). B read
in place instead of packed at the 1×1 layers whose pixels leave the last tile partial (7
interleaved rounds, medians): 14² 1024 -> 256 1.05-1.08×, 256 -> 1024 1.02×, 512 -> 512 1.07×;
28² 512 -> 128 1.10×, 128 -> 512 1.03×; 17² 768 -> 192 1.07×; built for AVX2 at 14² 1.03× —
but 0.68-0.82× at 7², and on a Zen 4 0.94-1.11× (AVX-512) and 0.80-0.88× (AVX2), so the
default keeps packing there.

Intel Xeon model 207 (AVX-512; a noisy host: medians up to 30% below the bests), after the lanes
left at a tensor's edge took vectors of 8 and 4 lanes and a tile of mixed widths stayed in
registers (59e0aae), `--only dw`, 8 configs, 3 rounds (peak 324-351), default -> best (÷PyTorch /
÷onnxruntime): 32@112² 74.1 -> 75.6 (15.27 / 2.01), 64@112² s2 24.7 -> 42.8 (4.96 / 3.21), 512@14²
39.0 (2.74 / 1.37). Against the build before that change, 7-9 interleaved rounds, medians: 512@14²
1.33-1.49× (the AVX2 build 1.33×), 1×1 1024 -> 256 at 14² 1.02-1.06×, 256 -> 1024 level.

AMD EPYC Zen 5 again (main at a6f5229; peak 459-496), `--only dw bmm dense`, 8 configs, 3 rounds,
default -> best (÷PyTorch / ÷onnxruntime): depthwise 32@112² 128.9 -> 137.7 (35.7 / 1.77), 64@112²
s2 43.2 -> 58.7 (3.09 / 1.67), 512@14² 78.2 (3.40 / 1.50); bmm 12×128×64 457.7 (2.54); dense
1×512 -> 1000 100.9 (3.09 / 1.49, OpenBLAS 1.37), 1×768 -> 3072 87.0 -> 97.2 (2.76 / 1.29, 1.22),
128×768 -> 3072 360.4 (3.78 / 1.13, 1.51), pre-packed 423.8 (2.81 / 1.27, 1.78). After the
strided depthwise default took row bands where its padded plane outgrows the L1 (bfd93ea):
64@112² s2 54.0 by default (best 64.9: 16 columns, a whole vector, instead of 8).

Intel Xeon model 167 again (main at b0243f3; peak 377-390), `--only dw`, 8 configs, 3 rounds,
default -> best (÷PyTorch / ÷onnxruntime), after the strided depthwise tiles became one vector
wide (1e41429) and the unstrided 112² layer took row bands with AVX-512 (0294615): 32@112² 104.2
(17.57 / 2.58; before: 83.0 by default, the bands the best of 16), 64@112² s2 42.2 -> 46.5 (4.57
/ 2.64), 512@14² 58.2 (3.57 / 1.56). The 3×3 convolutions that run, 24 configs: 64@56² 253.6
(1.13 / 0.90), 128@28² 273.5 (1.24 / 0.97), s2 128@56² 219.5 -> 220.3 (1.14 / 0.94), s2 256@28²
240.8 (1.13 / 0.93), 256@14² 249.1 -> 250.3 (1.13 / 0.85): above PyTorch, below onnxruntime's
NCHWc kernels (MLAS) by 3-15%, the default the best of the 24 (unroll_kw, accumulate "row",
4-vector tiles of 6-7 columns, input-channel blocks of 16: 0.88-1.01× the default).

AMD EPYC Zen 5 again (main at 3002771, after the depthwise row rules of 9cf5692 and ba7486c; peak
519-526), `--only dw`, 8 configs, 3 rounds, default -> best (÷PyTorch / ÷onnxruntime): 32@112²
189.5 -> 195.9 (28.9 / 1.85; 128.9 by default at a6f5229), 64@112² s2 68.9 -> 69.7 (2.97 / 1.37;
43.2), 512@14² 88.6 (3.48 / 1.29; 78.2).

AMD EPYC Zen 4 (family 25 model 17, peak 234-235), after the AVX-512 1×1 layers at 14² and 28²
read their input in place (conv2d.gemm_conv_default, 9b12f6c) and with the residual rows,
`--only conv dense`, 8 configs, 3 rounds, GFLOP/s default -> best (PyTorch / onnxruntime ÷
ours): 1×1 1024 -> 256 at 14² 216.7 (1.24 / 1.51), 256 -> 1024 218.1 -> 220.8 (2.68 / 1.24);
with the residual 64 -> 256 at 56² 205.2 -> 207.3 (6.39 / 1.74), 128 -> 512 at 28² 211.9 ->
212.1 (3.97 / 2.20), 256 -> 1024 at 14² 215.8 -> 220.1 (2.70 / 1.12); 3×3 56² 216.0 (1.78 /
0.97), 28² 219.6 (1.00 / 0.94), 14² 215.2 (0.99 / 0.93), pre-packed 226.8 -> 227.2 (1.08 /
0.97), 7² per call 189.3 -> 194.7 (0.89 / 0.73), pre-packed (as bundles take it) 226.6 (1.17 /
0.95); s2 128@56² 207.7 (1.07 / 0.98), s2 512@14² per call 169.7 (1.01 / 0.85), pre-packed
222.7 (1.36 / 1.03); 1×1 s2 256 -> 512 202.7 (3.43 / 1.30); dense 1×512 -> 1000 85.9 (4.11 /
1.77, OpenBLAS 1.30), 128×768 -> 3072 219.7 (1.24 / 0.99, OpenBLAS 1.12-1.31). Below PyTorch:
the 7² 3×3 layer with its weights packed per call (model bundles pre-pack them) and, at 1.0,
the 3×3 layers at 28² and 14².

AMD EPYC Zen 4 again (main at 4612919, where dense at M = 1 prefetches the next tile's rows of W
into L2: after a cache flush 1.18-1.47×, in a loop 0.85-0.93×; `compiler.ops.dot`), `--only
"dense 1x"`, 8 configs, 5 rounds (peak 234), GFLOP/s default -> best (PyTorch / onnxruntime ÷
ours, OpenBLAS): 1×512 -> 1000 73.2 -> 75.5 (3.59 / 1.54, 1.15), 1×768 -> 3072 72.3 -> 72.5
(2.76 / 1.05, 1.04). Timed in a loop, as this bench does, W stays in the L3, where the
prefetches cost (85.9 -> 73.2 at 1×512 -> 1000 against the row above); in a model run it comes
from memory, where they pay (bench/tune_model.py: MobileNet's classifier 1.13-1.26×).

Intel Xeon model 207 again (main at 226bfe1, peak 404-431), 8 configs, 3 rounds, GFLOP/s default
-> best (PyTorch / onnxruntime ÷ ours): 3×3 NCHWc 56² 337.1 (1.90 / 1.12), 28² 322.9 -> 357.3
(1.11 / 1.01), 14² 286.9 (1.06 / 0.92), pre-packed 285.0 -> 316.0 (1.15 / 0.92); 7² per call 236.1
(1.44 / 0.92), pre-packed 289.5 -> 323.3 (1.68 / 1.09); s2 512@14² 278.5 (1.56 / 0.89), pre-packed
215.7 -> 304.5 (1.96 / 1.17); 1×1 2048 -> 512 at 7² 270.4 (1.70 / 1.04), pre-packed 249.3 -> 286.7
(1.51 / 0.92); dense 1×512 -> 1000 65.6 (1.74 / 1.38, OpenBLAS 1.14), 128×768 -> 3072 343.5 -> 346.2
(1.28 / 0.96, 1.65). Every row at or above PyTorch. The two pre-packed layers' bests are their
second preferred config (the GEMM's tiles; NCHWc first, `panel_gemm_first`), which a search
measures second: 1.41× and 1.15× over the first here.

AMD EPYC Zen 4 again (main at 8aa0335, peak 233-235), `--only conv5 "conv4 3x3" "conv3 3x3" "dense
1x512"`, 8 configs, 3 rounds, GFLOP/s default -> best (PyTorch / onnxruntime ÷ ours): 3×3 NCHWc 28²
220.1 -> 221.4 (1.05 / 0.98), 14² 205.9 (1.02 / 0.93); 7² per call 189.5 -> 198.0 (0.92 / 0.73),
pre-packed 226.4 -> 226.8 (1.17 / 0.95); s2 512@14² 187.0 -> 195.1 (1.22 / 0.89), pre-packed 222.5
-> 222.9 (1.31 / 1.01); s2 128@56² 209.1 -> 209.9 (1.06 / 0.99); 1×1 2048 -> 512 at 7² 160.9 ->
192.2 (1.18 / 0.93), pre-packed 214.5 (1.32 / 1.11); dense 1×512 -> 1000 72.5 -> 72.6 (3.44 / 1.48,
OpenBLAS 1.11). Here the two pre-packed layers' first preferred config (NCHWc) is their best, as on
Zen 5 and unlike the Xeon model 207 above; the per-call 1×1 at 7² wants its second (the dot
products, 1.19×), as `conv2d.dot_weights_stay_in_l1` records. Below PyTorch: the 7² 3×3 with its
weights packed per call (model bundles pre-pack it: 1.17×).

AMD EPYC Zen 3 again (family 25 model 1, AVX2 only; main at 4faf704, peak 198-204), all workloads,
8 configs, 3 rounds, GFLOP/s default -> best (PyTorch / onnxruntime, peer time ÷ ours): 3×3 NCHWc 56²
171.6 -> 172.7 (2.04 / 1.02), 28² 164.4 (1.34 / 1.00), 14² 143.8 (0.98 / 0.72), pre-packed 14² 170.8
(1.13 / 0.94), s2 128@56² 162.5 -> 166.8 (1.26 / 0.99), s2 256@28² 139.1 -> 146.5 (1.37 / 0.92); 7² per
call 149.9 (1.41 / 0.94), pre-packed 172.8 (1.51 / 0.98); s2 512@14² 150.5 -> 153.0 (2.03 / 0.97),
pre-packed 165.3 (1.59 / 1.07); 1×1 layers 142.9-184.7 (1.20-6.50 / 0.96-1.75), with the shortcut's
sum 145.4-169.1 (3.40-5.45 / 1.11-1.46); dense 1×512 -> 1000 55.4 -> 59.3 (3.25 / 1.90, OpenBLAS
1.58), 128×768 -> 3072 166.0 (1.23 / 1.01, 1.07). Every row at or above PyTorch but the 14² 3×3 with
its weights packed per call, level with it (0.98 by the per-round median; PyTorch ran at 146.1 here,
at 114-137 in the earlier Zen 3 runs above).

AMD EPYC Zen 4 again (main at c5dc651, peak 233), `--only "conv5 3x3"`, 8 configs, 3 rounds: 7² per
call 167.7 -> 179.2 (0.91 / 0.69; PyTorch 180.3 at its best round), s2 512@14² 172.9 -> 191.6 (1.20 /
0.84), pre-packed 219.5 -> 220.9 (1.42 / 0.94). Where the per-call panel GEMM's time goes (its default,
512@7² 3×3, best of 5 interleaved rounds, the kernel's C edited): 1.244 ms; without packing the weights
1.085 ms (213 GFLOP/s, 91% of the peak), so the per-call transposes of 9.4 MB take 13%; without the
pixels' gather 1.254 (nothing), without the output's transpose 1.211 (3%). What did not move it,
medians of 5-7 rounds against the default: K blocks (kc 2304 to 576: 0.98-1.02), prefetching the next
panel's weight rows into the L2 or L1 while the tiles compute (1.00-1.04, best times equal), a 16 × 16
transpose by unpacks and 128-bit lane shuffles instead of vpermt2ps (0.99; dense 128×768 -> 3072
1.02). The dot products over the weights read in place (the second preferred config, which a search
measures second) run 1.03-1.05× the default here, at 7² and s2 alike, whatever their kc.

AMD EPYC Zen 5 again (family 26 model 2; main at a3b7131; a slower instance, peak 441-480), `--only
conv dense`, 8 configs, 3 rounds, GFLOP/s default -> best (PyTorch / onnxruntime ÷ ours): 3×3 NCHWc
56² 420.7 -> 422.2 (3.17 / 1.01), 28² 433.2 (1.37 / 0.99), 14² 411.9 (1.32 / 0.93), pre-packed 439.7
-> 443.0 (1.49 / 1.07); 7² per call 321.4 -> 331.3 (1.73 / 0.87), pre-packed 449.8 -> 462.4 (2.03 /
1.13); s2 512@14² 331.2 (1.68 / 1.01), pre-packed 380.3 (2.41 / 1.02); s2 128@56² 401.9 -> 403.1
(1.23 / 0.98), s2 256@28² 402.7 -> 406.1 (1.29 / 1.05); 1×1 layers 1.19-15.3 / 0.80-1.83, among them
2048 -> 512 at 7² 304.5 -> 320.5 (1.19 / 0.80), pre-packed 439.0 (1.55 / 1.07); dense 1×512 -> 1000
69.9 -> 84.3 (2.90 / 1.49, OpenBLAS 1.25), 1×768 -> 3072 60.6 -> 63.7 (2.00 / 0.91, OpenBLAS 0.83),
128×768 -> 3072 387.3 -> 399.8 (2.23 / 1.03, 1.45), pre-packed 446.2 -> 451.5 (2.72 / 1.09, 1.52).
Every row at or above PyTorch. Dense at M = 1 prefetches the next tile's rows of W into the L2
(`compiler.ops.dot`), which this loop, with W in the L3, pays for: 1×768 -> 3072 ran 89.4 on a
faster Zen 5 before it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import (PROCESSES, export, host_target, interleaved_seconds, kernel_code, numpy_env,  # noqa: E402
                    peak_code, quick_seconds, round_ratio, scratch_dir)

from tunefleet.compiler import ops  # noqa: E402
from tunefleet.compiler.driver import build_workload  # noqa: E402
from tunefleet.compiler.ops.conv_common import out_size  # noqa: E402
from tunefleet.compiler.ops.prepacked import with_prepacked_weights  # noqa: E402
from tunefleet.compiler.target import Target  # noqa: E402

_CONV = {"N": 1, "bias": True, "epilogue": "relu"}
_DW = {"N": 1, "KH": 3, "KW": 3, "padding": 1, "bias": True, "epilogue": "relu"}
WORKLOADS = {
    "conv2 3x3": ("conv2d_nchw", {**_CONV, "CI": 64, "CO": 64, "H": 56, "W": 56, "KH": 3, "KW": 3, "padding": 1}),
    "conv3 3x3": ("conv2d_nchw", {**_CONV, "CI": 128, "CO": 128, "H": 28, "W": 28, "KH": 3, "KW": 3, "padding": 1}),
    "conv4 3x3": ("conv2d_nchw", {**_CONV, "CI": 256, "CO": 256, "H": 14, "W": 14, "KH": 3, "KW": 3, "padding": 1}),
    "conv4 packed": ("conv2d_nchw", {**_CONV, "CI": 256, "CO": 256, "H": 14, "W": 14, "KH": 3, "KW": 3, "padding": 1}),
    "conv5 3x3": ("conv2d_nchw", {**_CONV, "CI": 512, "CO": 512, "H": 7, "W": 7, "KH": 3, "KW": 3, "padding": 1}),
    "conv5 packed": ("conv2d_nchw", {**_CONV, "CI": 512, "CO": 512, "H": 7, "W": 7, "KH": 3, "KW": 3, "padding": 1}),
    "conv5 3x3 s2": ("conv2d_nchw", {**_CONV, "CI": 512, "CO": 512, "H": 14, "W": 14, "KH": 3, "KW": 3,
                                     "padding": 1, "stride": 2}),
    "conv3 3x3 s2": ("conv2d_nchw", {**_CONV, "CI": 128, "CO": 128, "H": 56, "W": 56, "KH": 3, "KW": 3,
                                     "padding": 1, "stride": 2}),
    "conv2 1x1": ("conv2d_nchw", {**_CONV, "CI": 256, "CO": 64, "H": 56, "W": 56, "KH": 1, "KW": 1}),
    "conv2 1x1 up": ("conv2d_nchw", {**_CONV, "CI": 64, "CO": 256, "H": 56, "W": 56, "KH": 1, "KW": 1}),
    "conv3 1x1 s2": ("conv2d_nchw", {**_CONV, "CI": 256, "CO": 512, "H": 56, "W": 56, "KH": 1, "KW": 1, "stride": 2}),
    "conv4 1x1 up": ("conv2d_nchw", {**_CONV, "CI": 256, "CO": 1024, "H": 14, "W": 14, "KH": 1, "KW": 1}),
    "conv4 1x1": ("conv2d_nchw", {**_CONV, "CI": 1024, "CO": 256, "H": 14, "W": 14, "KH": 1, "KW": 1}),
    # the bottlenecks' last layers, the shortcut's Add and the Relu fused (residual)
    "conv2 1x1 up res": ("conv2d_nchw", {**_CONV, "CI": 64, "CO": 256, "H": 56, "W": 56, "KH": 1, "KW": 1,
                                         "residual": True}),
    "conv3 1x1 up res": ("conv2d_nchw", {**_CONV, "CI": 128, "CO": 512, "H": 28, "W": 28, "KH": 1, "KW": 1,
                                         "residual": True}),
    "conv4 1x1 up res": ("conv2d_nchw", {**_CONV, "CI": 256, "CO": 1024, "H": 14, "W": 14, "KH": 1, "KW": 1,
                                         "residual": True}),
    "conv5 1x1": ("conv2d_nchw", {**_CONV, "CI": 2048, "CO": 512, "H": 7, "W": 7, "KH": 1, "KW": 1}),
    "conv5 1x1 packed": ("conv2d_nchw", {**_CONV, "CI": 2048, "CO": 512, "H": 7, "W": 7, "KH": 1, "KW": 1}),
    "conv5 3x3 s2 packed": ("conv2d_nchw", {**_CONV, "CI": 512, "CO": 512, "H": 14, "W": 14, "KH": 3, "KW": 3,
                                            "padding": 1, "stride": 2}),
    "dw 32x112": ("depthwise_conv2d_nchw", {**_DW, "C": 32, "H": 112, "W": 112}),
    "dw 64x112 s2": ("depthwise_conv2d_nchw", {**_DW, "C": 64, "H": 112, "W": 112, "stride": 2}),
    "dw 512x14": ("depthwise_conv2d_nchw", {**_DW, "C": 512, "H": 14, "W": 14}),
    "bmm 12x128x64": ("batch_matmul", {"batch": 12, "M": 128, "N": 128, "K": 64}),
    "conv 3x3 s2 256@28": ("conv2d_nchw", {**_CONV, "CI": 256, "CO": 512, "H": 28, "W": 28, "KH": 3, "KW": 3,
                                           "padding": 1, "stride": 2}),
    "dense 1x512>1000": ("dense", {"M": 1, "N": 1000, "K": 512, "bias": True}),  # ResNet's classifier
    "dense 1x768>3072": ("dense", {"M": 1, "N": 3072, "K": 768, "bias": True}),  # BERT's FFN, one token
    "dense 128x768>3072": ("dense", {"M": 128, "N": 3072, "K": 768, "bias": True}),
    "dense 128 packed": ("dense", {"M": 128, "N": 3072, "K": 768, "bias": True}),
}


#: Rows whose weights are pre-packed as a model bundle's constant weights are
#: (compiler.ops.prepacked.prepacked_layout for the target; a layer the target's bundles take
#: in place, such as a 1×1 convolution on AVX-512, runs as its row without "packed").
PREPACKED = ("conv4 packed", "conv5 packed", "conv5 1x1 packed", "conv5 3x3 s2 packed", "dense 128 packed")


def torch_available() -> bool:
    try:
        import torch  # noqa: F401
    except ImportError:
        return False
    return True


#: Timing protocols: "repeats" is tunefleet's (repeats of back-to-back calls lasting >= 100 ms,
#: best repeat's mean); "min-call" is the fastest single call of 200, which shrugs off most of
#: the load other work puts on a shared machine.
PROTOCOLS = {"repeats": {"repeat": 10, "min_repeat_ms": 100}, "min-call": {"repeat": 200, "min_repeat_ms": 0}}
#: The peak measurement that goes with each protocol: long runs, or many short ones.
PEAK_RUNS = {"repeats": {}, "min-call": {"iters": 200_000, "runs": 200}}


#: PyTorch's environment that keeps oneDNN's and MKL's kernels to a target ISA (none: the host's best).
TORCH_ISA_ENV = {"avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"},
                 "generic": {"ONEDNN_MAX_CPU_ISA": "SSE41", "MKL_ENABLE_INSTRUCTIONS": "SSE4_2"}}


def torch_env(target: Target) -> dict | None:
    """The environment of a PyTorch child limited to `target`'s ISA; None on the host's own."""
    if target == Target.host() or target.isa not in TORCH_ISA_ENV:
        return None
    return {**os.environ, **TORCH_ISA_ENV[target.isa]}


def timed_code(setup: str, protocol: str) -> str:
    """Python source that runs `setup` (which defines f, a call of the peer) and prints the best
    seconds per call of f with the same protocol as ours (see PROTOCOLS)."""
    p = PROTOCOLS[protocol]
    return f"""
import time
{setup}
f()
number = 1
while {p['min_repeat_ms']}:  # as tunefleet's timer: repeats of `number` calls lasting >= min_repeat_ms
    t = time.perf_counter()
    for _ in range(number): f()
    if time.perf_counter() - t >= {p['min_repeat_ms']} / 1000: break
    number *= 2
best = 1e9
for _ in range({p['repeat']}):
    t = time.perf_counter()
    for _ in range(number): f()
    best = min(best, (time.perf_counter() - t) / number)
print(best)
"""


def _conv_channels(op: str, a: dict) -> tuple[int, int, int]:
    """(input channels, output channels, groups) of a convolution workload."""
    return (a["C"], a["C"], a["C"]) if op.startswith("depthwise") else (a["CI"], a["CO"], 1)


def torch_code(op: str, a: dict, threads: int, protocol: str) -> str:
    """Python source timing PyTorch's equivalent of the workload (torch.mm for a matmul without bias
    or epilogue, F.linear, torch.bmm, F.conv2d (+ the residual) + relu; oneDNN / MKL inside) with
    the same protocol as ours; prints the best seconds."""
    if op == "matmul":
        if a.get("bias") or a.get("epilogue", "none") != "none":
            raise ValueError("torch_code times a matmul without bias or epilogue")
        setup = (f"x = torch.rand({a['M']}, {a['K']}); y = torch.rand({a['K']}, {a['N']})\n"
                 "out = torch.empty(x.shape[0], y.shape[1])\ncall = lambda: torch.mm(x, y, out=out)")
    elif op == "batch_matmul":
        setup = (f"x = torch.rand({a['batch']}, {a['M']}, {a['K']}); y = torch.rand({a['batch']}, {a['K']}, {a['N']})\n"
                 "call = lambda: torch.bmm(x, y)")
    elif op == "dense":
        setup = (f"x = torch.rand({a['M']}, {a['K']}); w = torch.rand({a['N']}, {a['K']}); b = torch.rand({a['N']})\n"
                 "call = lambda: F.linear(x, w, b)")
    else:
        cin, cout, groups = _conv_channels(op, a)
        conv = f"F.conv2d(x, w, b, {a['stride']}, {a['padding']}, {a['dilation']}, {groups})"
        setup = (f"x = torch.rand({a['N']}, {cin}, {a['H']}, {a['W']})\n"
                 f"w = torch.rand({cout}, {cin // groups}, {a['KH']}, {a['KW']}); b = torch.rand({cout})\n"
                 f"r = torch.rand({a['N']}, {cout}, {', '.join(map(str, out_size(a)))})\n"
                 f"call = lambda: F.relu({conv + '.add_(r)' if a.get('residual') else conv}, inplace=True)")
    return timed_code(f"import torch\nimport torch.nn.functional as F\ntorch.set_num_threads({threads})\n{setup}\n"
                      "def f():\n    with torch.no_grad(): call()", protocol)


def ort_code(op: str, a: dict, threads: int, protocol: str) -> str | None:
    """Python source timing onnxruntime on a one-node model of the workload (Gemm with transB for
    dense, Conv (+ Add of the residual, an input) + Relu; weights as initializers, default graph
    optimizations, `threads` intra-op threads); None for batch_matmul."""
    if op == "batch_matmul":
        return None
    if op == "dense":
        x_shape, attrs = [a["M"], a["K"]], {"transB": 1}
        weights = f"[rng.random(({a['N']}, {a['K']}), dtype=np.float32), rng.random({a['N']}, dtype=np.float32)]"
        nodes = "[helper.make_node('Gemm', ['x', 'w', 'b'], ['y'], **attrs)]"
        residual = None
    else:
        cin, cout, groups = _conv_channels(op, a)
        (sh, sw), (ph, pw), (dh, dw) = (v if isinstance(v, list) else [v, v]
                                        for v in (a["stride"], a["padding"], a["dilation"]))
        x_shape = [a["N"], cin, a["H"], a["W"]]
        attrs = {"strides": [sh, sw], "pads": [ph, pw, ph, pw], "dilations": [dh, dw], "group": groups,
                 "kernel_shape": [a["KH"], a["KW"]]}
        weights = (f"[rng.random(({cout}, {cin // groups}, {a['KH']}, {a['KW']}), dtype=np.float32), "
                   f"rng.random({cout}, dtype=np.float32)]")
        nodes = ("[helper.make_node('Conv', ['x', 'w', 'b'], ['c'], **attrs), "
                 + ("helper.make_node('Add', ['c', 'r'], ['s']), helper.make_node('Relu', ['s'], ['y'])]"
                    if a.get("residual") else "helper.make_node('Relu', ['c'], ['y'])]"))
        residual = [a["N"], cout, *out_size(a)] if a.get("residual") else None
    setup = f"""import numpy as np, onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper
rng = np.random.default_rng(0)
attrs = {attrs!r}
inits = [numpy_helper.from_array(t, n) for t, n in zip({weights}, ['w', 'b'])]
feeds = {{name: rng.random(shape, dtype=np.float32) for name, shape in (('x', {x_shape}), ('r', {residual})) if shape}}
graph = helper.make_graph({nodes}, 'peer', [helper.make_tensor_value_info(n, TensorProto.FLOAT, a.shape)
                                            for n, a in feeds.items()],
                          [helper.make_tensor_value_info('y', TensorProto.FLOAT, None)], inits)
opts = ort.SessionOptions(); opts.intra_op_num_threads = {threads}
sess = ort.InferenceSession(helper.make_model(graph).SerializeToString(), opts, providers=['CPUExecutionProvider'])
f = lambda: sess.run(None, feeds)"""
    return timed_code(setup, protocol)


def numpy_code(op: str, a: dict, protocol: str) -> str | None:
    """Python source timing numpy (OpenBLAS) on dense, y = x @ wᵀ + b; None for other operators."""
    if op != "dense":
        return None
    setup = ("import numpy as np\nrng = np.random.default_rng(0)\n"
             f"x = rng.random(({a['M']}, {a['K']}), dtype=np.float32)\n"
             f"w = rng.random(({a['N']}, {a['K']}), dtype=np.float32); b = rng.random({a['N']}, dtype=np.float32)\n"
             f"y = np.empty(({a['M']}, {a['N']}), np.float32)\n"
             "f = lambda: np.add(np.matmul(x, w.T, out=y), b, out=y)")
    return timed_code(setup, protocol)


def candidates(space, preferred: list, n: int, rng) -> list:
    """The preferred configs (`ops.preferred_configs`: the default, then e.g. the other method's
    default), up to n/2 of the default's one-knob neighbours (random order), then random configs."""
    out = {c.index: c for c in preferred}
    neighbours = space.neighbors(preferred[0])
    for i in rng.permutation(len(neighbours))[: max(0, n // 2 - 1)]:
        out.setdefault(neighbours[i].index, neighbours[i])
    for c in space.random(rng, 4 * n):
        if len(out) >= n:
            break
        out.setdefault(c.index, c)
    return list(out.values())


def search(w, target, n: int, rng) -> tuple:
    """(default BuiltKernel, best BuiltKernel, best config) among up to n sampled configs."""
    preferred = ops.preferred_configs(w, target)
    default = preferred[0]
    configs = candidates(default.space, preferred, n, rng)
    with ThreadPoolExecutor(2) as pool:
        built = list(pool.map(lambda c: build_workload(w, c, target), configs))
    trials = sorted(((quick_seconds(b, w), c.index, c, b) for c, b in zip(configs, built)), key=lambda t: t[:2])
    default_built = built[configs.index(default)]
    return default_built, trials[0][3], trials[0][2]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="*", help="names of workloads to run (prefix match), default all")
    p.add_argument("--configs", type=int, default=32, help="configs sampled per workload (<= 32)")
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--processes", type=int, default=PROCESSES, help="rounds of fresh processes per timing")
    p.add_argument("--protocol", choices=list(PROTOCOLS), default="repeats",
                   help="repeats: tunefleet's timer protocol; min-call: fastest single call (for busy machines)")
    p.add_argument("--target", type=host_target, default=Target.host(),
                   help="CPU target to build for (default: this host's best), e.g. 'cpu -isa=avx2'; PyTorch is "
                        "limited to its ISA, onnxruntime left out unless it is the host's")
    args = p.parse_args()
    os.environ["TUNEFLEET_NUM_THREADS"] = str(args.threads)
    target = args.target
    own_isa = target == Target.host()
    have_torch = torch_available()
    torch_isa = "host's" if own_isa else TORCH_ISA_ENV.get(target.isa, {}).get("ONEDNN_MAX_CPU_ISA", "host's")
    print(f"target {target}, {args.threads} threads; PyTorch {'installed' if have_torch else 'not installed'}"
          f" ({torch_isa} ISA); onnxruntime {'one-node model' if own_isa else 'left out (host ISA only)'}; "
          f"protocol {args.protocol}; peak: the fp32 FMA peak measured in the same rounds as the row's timings; "
          f"numpy: OpenBLAS (dense only), np-AVX2 with OPENBLAS_CORETYPE=Haswell; GFLOP/s (best over the rounds); "
          f"ratios: median over the rounds of peer time / our best time in the same round")
    peers = ["torch", "ort", "numpy", "np-AVX2"]
    print(f"{'workload':>14} {'GFLOP':>6} {'default':>8} {'best':>8} " + " ".join(f"{p:>8}" for p in peers)
          + f" {'peak':>6} " + " ".join(f"{'/' + p:>8}" for p in peers) + f" {'%peak def/best':>14}  best config")
    rng = np.random.default_rng(0)
    for name, (op, a) in WORKLOADS.items():
        if args.only and not any(name.startswith(o) for o in args.only):
            continue
        t0 = time.time()
        w = ops.make_workload(op, a)
        w = with_prepacked_weights(w, target) if name in PREPACKED else w
        default_built, best_built, best_cfg = search(w, target, min(args.configs, 32), rng)
        codes = [(peak_code(args.threads, target, **PEAK_RUNS[args.protocol]), None)]
        codes += [(kernel_code(export(b, w, scratch_dir("tf-bench-")), **PROTOCOLS[args.protocol]), None)
                  for b in (default_built, best_built)]
        np_code = numpy_code(op, w.args, args.protocol)
        torch_peer = torch_code(op, w.args, args.threads, args.protocol) if have_torch else None
        peer_codes = [(torch_peer, torch_env(target)),
                      (ort_code(op, w.args, args.threads, args.protocol) if own_isa else None, None),
                      (np_code, numpy_env(False)), (np_code, numpy_env(True))]
        present = [c for c in peer_codes if c[0] is not None]
        s_peak, s_default, s_best, *s_present = interleaved_seconds(
            [c for c, _ in codes + present], processes=args.processes, envs=[e for _, e in codes + present])
        s_ours = [min(d, b) for d, b in zip(s_default, s_best)]
        times = iter(s_present)
        s_peers = [next(times) if c[0] is not None else None for c in peer_codes]
        peak = 1 / min(s_peak)
        gf = [w.flop / min(s) / 1e9 if s else float("nan") for s in (s_default, s_ours, *s_peers)]
        ratios = " ".join(f"{round_ratio(s, s_ours) if s else float('nan'):8.2f}" for s in s_peers)
        print(f"{name:>14} {w.flop / 1e9:6.2f} " + " ".join(f"{g:8.1f}" for g in gf) + f" {peak:6.0f} {ratios} "
              f"{f'{100 * gf[0] / peak:.0f}/{100 * gf[1] / peak:.0f}':>14}  {best_cfg.to_json()['knobs']} "
              f"({time.time() - t0:.0f}s)", flush=True)

if __name__ == "__main__":
    main()
