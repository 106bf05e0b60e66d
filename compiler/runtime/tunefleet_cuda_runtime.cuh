/*
 * tunefleet_cuda_runtime.cuh -- the runtime compiled into every tunefleet GPU artifact.
 *
 * How it gets into a build: tunefleet.compiler.cuda_build.cuda_unit() makes ONE CUDA C++
 * file: this file first (with the DLPack declarations put where the marker line below
 * is, and tunefleet_dltensor_check.h where it is included), then the kernels, their
 * launchers and ABI entry points. The file is compiled by
 * nvcc with -fvisibility=hidden and the CUDA runtime linked statically, so every symbol
 * here is private to its .so except the TF_EXPORT ones, and the library needs nothing at
 * load time but libc; the CUDA driver (libcuda.so.1) is opened on the first CUDA call.
 *
 * Contents: the last-error text (per host thread), DLTensor checks for device tensors,
 * the GPU timer (CUDA events around `number` launches per repeat, a warm-up, optional L2
 * flush), and small exported helpers (device memory, copies, device facts) so a caller
 * such as tunefleet's Python loader needs no other CUDA library.
 */
#ifndef TUNEFLEET_CUDA_RUNTIME_CUH_
#define TUNEFLEET_CUDA_RUNTIME_CUH_

#include <cuda_runtime.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#define TF_HIDDEN __attribute__((visibility("hidden")))
#define TF_EXPORT __attribute__((visibility("default")))

/* TUNEFLEET_DLPACK_DECLARATIONS */

extern "C" {

/* ---------------------------------------------------------------- errors */

/* Exported on purpose, as in the C runtime (tunefleet_runtime.c, same name and size): where
 * several tunefleet libraries, CPU or GPU, are linked into one program, the dynamic linker
 * binds them all to one definition, so tunefleet_last_error() of any of them returns the error
 * any of them set last on this thread. Its size never changes. */
TF_EXPORT __thread char tunefleet_error_text[1024];

TF_HIDDEN void tf_set_error(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
TF_HIDDEN void tf_set_error(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tunefleet_error_text, sizeof tunefleet_error_text, fmt, ap);
  va_end(ap);
}

/* The calling thread's last error text ("" if none). */
TF_EXPORT const char* tunefleet_last_error(void) { return tunefleet_error_text; }

/* 0 if e is cudaSuccess, else -1 with "<what>: <CUDA error name>: <text>" as the error. */
TF_HIDDEN int tf_cuda_ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return 0;
  tf_set_error("%s: %s: %s", what, cudaGetErrorName(e), cudaGetErrorString(e));
  return -1;
}

/* ---------------------------------------------------------------- DLTensor checks */

#include "tunefleet_dltensor_check.h"

/* Checks one DLTensor argument of `kernel` against what it was compiled with, its device aside:
 * not NULL, dtype, ndim, shape, strides (NULL or compact row-major; strides of extent-1
 * dimensions are ignored), data non-NULL. An entry point checks every argument so before it
 * checks any device (tf_check_cuda_tensor), so that a process without a CUDA device still
 * learns whether arguments agree with the library: host tensors that do are refused for their
 * device only, which is how tunefleet.load checks a GPU artifact's manifest. Returns 0, or
 * nonzero with an error text naming the argument, what was expected and what was given. */
TF_HIDDEN int tf_check_cuda_layout(const char* kernel, const char* arg, const DLTensor* t, uint8_t code,
                                   uint8_t bits, int32_t ndim, const int64_t* shape) {
  if (t == NULL) {
    tf_set_error("%s: argument '%s': the DLTensor pointer is NULL", kernel, arg);
    return -1;
  }
  return tf_check_tensor_layout(kernel, arg, t, code, bits, ndim, shape);
}

/* Checks where one DLTensor argument of `kernel` (its layout checked by tf_check_cuda_layout)
 * lives: device kDLCUDA or kDLCUDAManaged, on the current device, device or managed memory by
 * cudaPointerGetAttributes, data + byte_offset aligned to `align` bytes. Returns 0 and stores
 * the first element's address in *data, or nonzero with an error text naming the argument,
 * what was expected and what was given. */
TF_HIDDEN int tf_check_cuda_tensor(const char* kernel, const char* arg, const DLTensor* t, unsigned align,
                                   void** data) {
  if (t->device.device_type != kDLCUDA && t->device.device_type != kDLCUDAManaged) {
    tf_set_error("%s: argument '%s': expected device kDLCUDA (2) or kDLCUDAManaged (13), got device_type %d "
                 "(device_id %d)", kernel, arg, (int)t->device.device_type, (int)t->device.device_id);
    return -1;
  }
  int current = -1;
  if (tf_cuda_ok(cudaGetDevice(&current), "cudaGetDevice") != 0) return -1;
  if (t->device.device_id != current) {
    tf_set_error("%s: argument '%s': the tensor is on CUDA device %d, but the current device is %d "
                 "(cudaSetDevice first)", kernel, arg, (int)t->device.device_id, current);
    return -1;
  }
  char* first = (char*)t->data + t->byte_offset;
  cudaPointerAttributes attr;
  if (tf_cuda_ok(cudaPointerGetAttributes(&attr, first), "cudaPointerGetAttributes") != 0) return -1;
  if (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged) {
    tf_set_error("%s: argument '%s': data %p is not CUDA device or managed memory (cudaPointerGetAttributes "
                 "type %d)", kernel, arg, (void*)first, (int)attr.type);
    return -1;
  }
  if ((uintptr_t)first % align != 0) {
    tf_set_error("%s: argument '%s': data + byte_offset (%p + %llu) is not aligned to %u bytes", kernel, arg,
                 t->data, (unsigned long long)t->byte_offset, align);
    return -1;
  }
  *data = first;
  return 0;
}

/* Checks that output `out` (out_bytes bytes at out_data) does not overlap argument `other`. */
TF_HIDDEN int tf_check_disjoint(const char* kernel, const char* out, const void* out_data, size_t out_bytes,
                                const char* other, const void* other_data, size_t other_bytes) {
  uintptr_t a = (uintptr_t)out_data, b = (uintptr_t)other_data;
  if (a < b + other_bytes && b < a + out_bytes) {
    tf_set_error("%s: output '%s' overlaps argument '%s' in memory; outputs must not alias", kernel, out, other);
    return -1;
  }
  return 0;
}

/* Checks a raw device pointer argument's alignment (launchers of kernels with vector accesses). */
TF_HIDDEN int tf_check_aligned(const char* kernel, const char* arg, const void* p, unsigned align) {
  if ((uintptr_t)p % align == 0) return 0;
  tf_set_error("%s: argument '%s' (%p) must be aligned to %u bytes (the kernel accesses it with %u-byte vectors)",
               kernel, arg, p, align, align);
  return -1;
}

/* ---------------------------------------------------------------- timer */

/* Times fn(args, stream) on a stream of its own: one warm-up launch (synchronized, so a
 * failing kernel is reported before any timing), then `repeat` repeats. A repeat optionally
 * flushes the L2 cache first (flush_l2 != 0: cudaMemsetAsync of a buffer twice the device's
 * L2 size, on the same stream), then records a CUDA event, launches fn `number` times back
 * to back, records another event and waits for it. A repeat shorter than min_repeat_ms
 * raises `number` (kept for later repeats) and is redone. cooldown_ms of sleep follow each
 * repeat. out_seconds[r] = seconds per launch of repeat r. Returns 0, or nonzero with the
 * error text set (a launch error, an execution error, or bad arguments). */
TF_EXPORT int tunefleet_cuda_timer(int (*fn)(void** args, cudaStream_t stream), void** args, int number, int repeat,
                                   int min_repeat_ms, int cooldown_ms, int flush_l2, double* out_seconds) {
  if (fn == NULL || out_seconds == NULL || number < 1 || repeat < 1 || min_repeat_ms < 0 || cooldown_ms < 0) {
    tf_set_error("tunefleet_cuda_timer: bad arguments (fn %p, number %d, repeat %d, min_repeat_ms %d, "
                 "cooldown_ms %d, out_seconds %p)", (void*)fn, number, repeat, min_repeat_ms, cooldown_ms,
                 (void*)out_seconds);
    return -1;
  }
  cudaStream_t stream = NULL;
  cudaEvent_t start = NULL, stop = NULL;
  void* flush = NULL;
  size_t flush_bytes = 0;
  int rc = -1;
  if (tf_cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "tunefleet_cuda_timer: stream") != 0)
    return -1;
  if (tf_cuda_ok(cudaEventCreate(&start), "tunefleet_cuda_timer: event") != 0) goto done;
  if (tf_cuda_ok(cudaEventCreate(&stop), "tunefleet_cuda_timer: event") != 0) goto done;
  if (flush_l2) {
    int device = 0, l2 = 0;
    if (tf_cuda_ok(cudaGetDevice(&device), "tunefleet_cuda_timer: cudaGetDevice") != 0) goto done;
    if (tf_cuda_ok(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, device), "tunefleet_cuda_timer: L2 size"))
      goto done;
    flush_bytes = 2 * (size_t)(l2 > 0 ? l2 : 64 << 20);
    if (tf_cuda_ok(cudaMalloc(&flush, flush_bytes), "tunefleet_cuda_timer: L2 flush buffer") != 0) goto done;
  }
  if (fn(args, stream) != 0) goto done;
  if (tf_cuda_ok(cudaStreamSynchronize(stream), "tunefleet_cuda_timer: warm-up launch") != 0) goto done;
  for (int r = 0; r < repeat; ++r) {
    float ms = 0.0f;
    for (;;) {
      if (flush != NULL &&
          tf_cuda_ok(cudaMemsetAsync(flush, r & 0xff, flush_bytes, stream), "tunefleet_cuda_timer: L2 flush"))
        goto done;
      if (tf_cuda_ok(cudaEventRecord(start, stream), "tunefleet_cuda_timer: cudaEventRecord") != 0) goto done;
      for (int i = 0; i < number; ++i)
        if (fn(args, stream) != 0) goto done;
      if (tf_cuda_ok(cudaEventRecord(stop, stream), "tunefleet_cuda_timer: cudaEventRecord") != 0) goto done;
      if (tf_cuda_ok(cudaEventSynchronize(stop), "tunefleet_cuda_timer: kernel execution") != 0) goto done;
      if (tf_cuda_ok(cudaEventElapsedTime(&ms, start, stop), "tunefleet_cuda_timer: cudaEventElapsedTime"))
        goto done;
      if (ms >= (float)min_repeat_ms || number >= (1 << 24)) break;
      /* aim 20% past the minimum; at least double, at most x64 per step */
      double scale = ms > 0.0f ? 1.2 * min_repeat_ms / ms : 64.0;
      scale = scale < 2.0 ? 2.0 : scale > 64.0 ? 64.0 : scale;
      number = (int)(number * scale) < (1 << 24) ? (int)(number * scale) : (1 << 24);
    }
    out_seconds[r] = (double)ms / 1e3 / number;
    if (cooldown_ms > 0) {
      struct timespec ts = {cooldown_ms / 1000, (long)(cooldown_ms % 1000) * 1000000L};
      nanosleep(&ts, NULL);
    }
  }
  rc = 0;
done:
  if (flush != NULL) cudaFree(flush);
  if (start != NULL) cudaEventDestroy(start);
  if (stop != NULL) cudaEventDestroy(stop);
  cudaStreamSynchronize(stream);
  cudaStreamDestroy(stream);
  return rc;
}

/* ---------------------------------------------------------------- helpers for callers */

/* Number of CUDA devices visible (0 when there is no driver or no device: *count = 0 and
 * the error text says why, the return value is still 0). */
TF_EXPORT int tunefleet_cuda_device_count(int* count) {
  *count = 0;
  cudaError_t e = cudaGetDeviceCount(count);
  if (e != cudaSuccess) {
    *count = 0;
    tf_cuda_ok(e, "cudaGetDeviceCount");
  }
  return 0;
}

TF_EXPORT int tunefleet_cuda_set_device(int device) { return tf_cuda_ok(cudaSetDevice(device), "cudaSetDevice"); }

/* Facts of `device`: name (into name[name_len]), compute capability, SM count, global memory,
 * L2 size, shared memory per block (opt-in), registers per block, clock rates (kHz; 0 where the
 * runtime no longer reports them), CUDA runtime and driver versions. */
TF_EXPORT int tunefleet_cuda_device_info(int device, char* name, int name_len, int* major, int* minor, int* sms,
                                         size_t* global_bytes, int* l2_bytes, int* shared_per_block_optin,
                                         int* regs_per_block, int* max_threads_per_block, int* runtime_version,
                                         int* driver_version) {
  cudaDeviceProp p;
  if (tf_cuda_ok(cudaGetDeviceProperties(&p, device), "cudaGetDeviceProperties") != 0) return -1;
  snprintf(name, (size_t)name_len, "%s", p.name);
  *major = p.major;
  *minor = p.minor;
  *sms = p.multiProcessorCount;
  *global_bytes = p.totalGlobalMem;
  *l2_bytes = p.l2CacheSize;
  *shared_per_block_optin = (int)p.sharedMemPerBlockOptin;
  *regs_per_block = p.regsPerBlock;
  *max_threads_per_block = p.maxThreadsPerBlock;
  cudaRuntimeGetVersion(runtime_version);
  cudaDriverGetVersion(driver_version);
  return 0;
}

TF_EXPORT int tunefleet_cuda_malloc(void** ptr, size_t bytes) {
  *ptr = NULL;
  return tf_cuda_ok(cudaMalloc(ptr, bytes ? bytes : 1), "cudaMalloc");
}

TF_EXPORT int tunefleet_cuda_free(void* ptr) { return tf_cuda_ok(cudaFree(ptr), "cudaFree"); }

/* kind: 1 host to device, 2 device to host, 3 device to device. Synchronous. */
TF_EXPORT int tunefleet_cuda_memcpy(void* dst, const void* src, size_t bytes, int kind) {
  cudaMemcpyKind k = kind == 1 ? cudaMemcpyHostToDevice : kind == 2 ? cudaMemcpyDeviceToHost
                                                                    : cudaMemcpyDeviceToDevice;
  return tf_cuda_ok(cudaMemcpy(dst, src, bytes, k), "cudaMemcpy");
}

/* Fills `bytes` bytes at device pointer `ptr` with the byte `value` (e.g. 0xff: NaN floats). */
TF_EXPORT int tunefleet_cuda_memset(void* ptr, int value, size_t bytes) {
  return tf_cuda_ok(cudaMemset(ptr, value, bytes), "cudaMemset");
}

/* Waits for the device; reports an error of earlier asynchronous work. */
TF_EXPORT int tunefleet_cuda_synchronize(void) {
  return tf_cuda_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
}

}  /* extern "C" */

#endif /* TUNEFLEET_CUDA_RUNTIME_CUH_ */
