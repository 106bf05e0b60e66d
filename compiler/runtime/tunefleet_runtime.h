/*
 * tunefleet_runtime.h -- the C runtime compiled into every tunefleet CPU artifact.
 *
 * How it gets into a build: tunefleet.compiler.build.translation_unit() makes ONE
 * self-contained C file: this header first, then the caller's sources (any line
 * `#include "tunefleet_runtime.h"` in them is replaced by a comment, since the
 * header is already there), then tunefleet_runtime.c (with tunefleet_dltensor_check.h
 * put where it is included) inside `#ifndef TUNEFLEET_RUNTIME_LINKED`. tunefleet's own
 * builds define that macro and link this header + tunefleet_runtime.c compiled once as a
 * cached object (build.runtime_object) instead; the file alone rebuilds the same library.
 * Everything is compiled with -fvisibility=hidden, so every runtime symbol is
 * private to its .so; only TF_EXPORT symbols are visible. Two artifacts in one
 * process never share state.
 *
 * Generated kernel code may call only the four TF_HIDDEN functions of the
 * "kernel API" section below. The "ABI helpers" are for the entry points that
 * tunefleet.compiler.abi generates.
 */
#ifndef TUNEFLEET_RUNTIME_H_
#define TUNEFLEET_RUNTIME_H_

/* pthread_setaffinity_np, sched_getaffinity and CPU_* need _GNU_SOURCE before any
 * system header; the translation unit starts with this header. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include <stddef.h>
#include <stdint.h>

#define TF_HIDDEN __attribute__((visibility("hidden")))
#define TF_EXPORT __attribute__((visibility("default")))

/* TUNEFLEET_DLPACK_BEGIN -- copied verbatim into every artifact's public header. */
/* DLPack v0.8-compatible declarations. Skipped when dlpack.h (or another tunefleet
 * header) was included first; a program that needs dlpack.h must include it first. */
#if !defined(DLPACK_VERSION) && !defined(DLPACK_DLPACK_H_) && !defined(TUNEFLEET_DLPACK_DECLARED)
#define TUNEFLEET_DLPACK_DECLARED 1
#ifdef __cplusplus
typedef enum : int32_t {
#else
typedef enum {
#endif
  kDLCPU = 1,
  kDLCUDA = 2,
  kDLCUDAHost = 3,
  kDLOpenCL = 4,
  kDLVulkan = 7,
  kDLMetal = 8,
  kDLVPI = 9,
  kDLROCM = 10,
  kDLROCMHost = 11,
  kDLExtDev = 12,
  kDLCUDAManaged = 13,
  kDLOneAPI = 14,
  kDLWebGPU = 15,
  kDLHexagon = 16
} DLDeviceType;

typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U,
  kDLBfloat = 4U,
  kDLComplex = 5U,
  kDLBool = 6U
} DLDataTypeCode;

typedef struct {
  uint8_t code;   /* a DLDataTypeCode */
  uint8_t bits;   /* bits per lane */
  uint16_t lanes; /* 1 for scalar elements */
} DLDataType;

typedef struct {
  void* data;           /* base pointer; the first element is at (char*)data + byte_offset */
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;       /* ndim extents */
  int64_t* strides;     /* ndim strides in elements, or NULL for compact row-major */
  uint64_t byte_offset;
} DLTensor;
#endif
/* TUNEFLEET_DLPACK_END */

#ifdef __cplusplus
extern "C" {
#endif

/* ---- kernel API: the only runtime functions generated kernel code calls ---- */

/* Body of a parallel loop: runs iterations [begin, end) of the loop. */
typedef void (*tf_parallel_fn)(int64_t begin, int64_t end, void* closure);

/* Runs fn over [0, extent) and returns when every iteration is done. The range is split
 * into one contiguous chunk per pool thread (the calling thread's is chunk 0), each chunk
 * into up to 8 parts; a thread runs its chunk's parts in order, then takes the parts left
 * of the others from their ends, so a thread slowed by other work on its CPU does not hold
 * up the loop. fn is called once per part, with any [begin, end) of the range. First the
 * pool follows the calling thread's affinity mask and the cgroup CPU quota (see
 * tunefleet_set_num_threads). Runs fn(0, extent, closure) inline when extent <= 1,
 * when the pool has one thread, or when called from inside a parallel body (no nested
 * parallelism). A call while another thread's parallel loop runs waits for it (the
 * pool runs one loop at a time). Errors set with tf_set_error inside fn stay in the
 * thread that ran the part; fn cannot fail. */
TF_HIDDEN void tf_parallel_for(int64_t extent, tf_parallel_fn fn, void* closure);

/* Sets this thread's last-error text (printf format, truncated to 1023 bytes). */
TF_HIDDEN void tf_set_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));

/* 64-byte aligned allocation of `bytes` bytes (large temporaries such as packing
 * buffers); NULL with the error text set on failure. Release with tf_free, which keeps
 * the thread's last few large blocks for its next allocations (a kernel called again
 * reuses its workspace instead of faulting on fresh pages). */
TF_HIDDEN void* tf_alloc_aligned(size_t bytes);
TF_HIDDEN void tf_free(void* ptr);

/* ---- ABI helpers: used by the entry points that tunefleet.compiler.abi generates ---- */

/* Checks one DLTensor argument of `kernel` against the expected CPU tensor: dtype
 * (code, bits, lanes 1), ndim, shape, strides (NULL or compact row-major; strides of
 * extent-1 dimensions are ignored), non-NULL data, and alignment of data + byte_offset
 * to the element size. Returns 0 and stores the first element's address in *data,
 * or returns nonzero with an error text naming the argument, what was expected and
 * what was given. */
TF_HIDDEN int tf_check_tensor(const char* kernel, const char* arg, const DLTensor* t,
                              uint8_t code, uint8_t bits, int32_t ndim,
                              const int64_t* shape, void** data);

/* Checks that output `out` (out_bytes bytes at out_data) does not overlap argument
 * `other`; returns nonzero with an error text naming both if it does. */
TF_HIDDEN int tf_check_disjoint(const char* kernel, const char* out, const void* out_data,
                                size_t out_bytes, const char* other, const void* other_data,
                                size_t other_bytes);

/* ---- public API: exported from every artifact ---- */

/* The thread pool. Each parallel loop uses min(requested, CPUs in the calling thread's
 * affinity mask, the cgroup CPU quota rounded up) threads, the caller included (unpinned),
 * the workers pinned one per CPU of that mask other than the one the caller runs on (a
 * worker the caller's thread lands on is moved to the CPU it left, so the two never take
 * turns on one CPU). The mask is read before every parallel loop (one
 * sched_getaffinity call), so a program that narrows or widens its mask after a first
 * call (an MPI rank pinning itself) gets a pool resized and re-pinned at its next call;
 * the quota (cgroup v2 cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us, of the process's
 * cgroup and its ancestors) is re-read at most once a second. Several application threads
 * may call kernels at once: the pool runs one parallel loop at a time, the others wait
 * (asleep) for it, so the pool never runs more threads than its CPUs and nothing waits
 * on a thread that waits in turn; a parallel loop inside a parallel body runs inline. */

/* Sets the requested number of pool threads (n <= 0: one per CPU of the mask),
 * TUNEFLEET_NUM_THREADS being the initial request. Returns the count parallel loops
 * called from this thread will use now: n clamped to the calling thread's mask and the
 * cgroup quota, with a one-line message on stderr naming the limit and its current size
 * when n is over it. The request is kept: a wider mask later gets up to n threads. */
TF_EXPORT int tunefleet_set_num_threads(int n);

/* The number of threads a parallel loop called from this thread would use now (its
 * current affinity mask and cgroup quota); inside a parallel body, the running loop's: the
 * threads it runs on, caller included (1 where the caller runs it alone), whatever loops
 * other application threads run meanwhile. */
TF_EXPORT int tunefleet_get_num_threads(void);

/* The calling thread's last error text ("" if none). Valid until the thread's next error. */
TF_EXPORT const char* tunefleet_last_error(void);

/* Times fn(args). One warm-up call, then `repeat` repeats; each repeat optionally
 * flushes the caches (flush_cache != 0: every pool thread writes and reads its share
 * of a buffer twice the size of the last-level cache, at least 64 MiB), then calls
 * fn `number` times back to back under CLOCK_MONOTONIC. A repeat shorter than
 * min_repeat_ms grows `number` (kept for later repeats) and is redone. Sleeps
 * cooldown_ms milliseconds between repeats. out_seconds[r] = seconds per call of
 * repeat r (`repeat` doubles). Returns 0; or fn's nonzero return value (error text
 * as fn left it, or a generic one); or -1 for bad arguments (error text set). */
TF_EXPORT int tunefleet_timer(int (*fn)(void** args), void** args, int number, int repeat,
                              int min_repeat_ms, int cooldown_ms, int flush_cache,
                              double* out_seconds);

#ifdef __cplusplus
}
#endif

#endif /* TUNEFLEET_RUNTIME_H_ */
