/*
 * tunefleet_dltensor_check.h -- the device-independent checks of a DLTensor argument, shared
 * by the C runtime (tunefleet_runtime.c) and the CUDA runtime (tunefleet_cuda_runtime.cuh);
 * the device checks stay in each runtime.
 *
 * How it gets into a build: each runtime has the line `#include "tunefleet_dltensor_check.h"`
 * where these functions belong, and tunefleet.compiler.build.inline_dltensor_check() puts
 * this file's text in place of that line when a unit is generated, so every artifact stays
 * one self-contained file. Valid C99 and C++ (host code). Needs, before it: <stddef.h>,
 * <stdint.h>, <stdio.h>, <string.h>, the DLPack declarations and tf_set_error (each runtime
 * has them above that line; the headers are not included here, so that none is first
 * included inside the CUDA runtime's extern "C" block).
 */
#ifndef TUNEFLEET_DLTENSOR_CHECK_H_
#define TUNEFLEET_DLTENSOR_CHECK_H_

static void tf_format_dims(char* buf, size_t cap, const int64_t* dims, int32_t n) {
  size_t used = (size_t)snprintf(buf, cap, "[");
  for (int32_t i = 0; i < n && used < cap; ++i)
    used += (size_t)snprintf(buf + used, cap - used, i ? ", %lld" : "%lld", (long long)dims[i]);
  if (used < cap) snprintf(buf + used, cap - used, "]");
}

static void tf_format_dtype(char* buf, size_t cap, uint8_t code, uint8_t bits, uint16_t lanes) {
  static const char* const names[] = {"int", "uint", "float", "handle", "bfloat", "complex", "bool"};
  const char* name = code < sizeof names / sizeof names[0] ? names[code] : "code";
  int used = snprintf(buf, cap, "%s%u", name, (unsigned)bits);
  if (lanes != 1 && used > 0 && (size_t)used < cap)
    snprintf(buf + used, cap - (size_t)used, "x%u", (unsigned)lanes);
}

/* Checks DLTensor `t` (not NULL) of argument `arg` of `kernel`, in this order: dtype (code,
 * bits, lanes 1), ndim, shape, strides (NULL or compact row-major; strides of extent-1
 * dimensions are ignored), non-NULL data. Returns 0, or -1 with an error text naming the
 * argument, what was expected and what was given. */
static int tf_check_tensor_layout(const char* kernel, const char* arg, const DLTensor* t,
                                  uint8_t code, uint8_t bits, int32_t ndim,
                                  const int64_t* shape) {
  char want[256], got[256];
  if (t->dtype.code != code || t->dtype.bits != bits || t->dtype.lanes != 1) {
    tf_format_dtype(want, sizeof want, code, bits, 1);
    tf_format_dtype(got, sizeof got, t->dtype.code, t->dtype.bits, t->dtype.lanes);
    tf_set_error("%s: argument '%s': expected dtype %s, got %s", kernel, arg, want, got);
    return -1;
  }
  if (t->ndim != ndim) {
    tf_set_error("%s: argument '%s': expected %d dimensions, got %d", kernel, arg, (int)ndim,
                 (int)t->ndim);
    return -1;
  }
  if (ndim > 0 && t->shape == NULL) {
    tf_set_error("%s: argument '%s': the shape pointer is NULL", kernel, arg);
    return -1;
  }
  if (ndim > 0 && memcmp(t->shape, shape, sizeof(int64_t) * (size_t)ndim) != 0) {
    tf_format_dims(want, sizeof want, shape, ndim);
    tf_format_dims(got, sizeof got, t->shape, ndim);
    tf_set_error("%s: argument '%s': expected shape %s, got %s", kernel, arg, want, got);
    return -1;
  }
  if (t->strides != NULL) {
    int64_t stride = 1;
    int compact = 1;
    for (int32_t i = ndim - 1; i >= 0; --i) {
      if (shape[i] != 1 && t->strides[i] != stride) compact = 0;
      stride *= shape[i];
    }
    if (!compact) {
      int64_t expected[64];
      stride = 1;
      for (int32_t i = ndim - 1; i >= 0; --i) {
        if (i < 64) expected[i] = stride;
        stride *= shape[i];
      }
      tf_format_dims(want, sizeof want, expected, ndim < 64 ? ndim : 64);
      tf_format_dims(got, sizeof got, t->strides, ndim);
      tf_set_error("%s: argument '%s': expected compact row-major strides %s (or NULL), got %s",
                   kernel, arg, want, got);
      return -1;
    }
  }
  if (t->data == NULL) {
    tf_set_error("%s: argument '%s': the data pointer is NULL", kernel, arg);
    return -1;
  }
  return 0;
}

#endif /* TUNEFLEET_DLTENSOR_CHECK_H_ */
