/*
 * tunefleet_runtime.c -- thread pool, parallel-for, errors, aligned allocation,
 * DLTensor checks and the timer. See tunefleet_runtime.h for the contract.
 *
 * Thread pool: sized from the affinity mask read at first use; worker i (1..n-1)
 * is pinned to the i-th CPU of that mask, the calling thread runs chunk 0 and is
 * left unpinned. Fork/join: the caller publishes a job by bumping `generation`;
 * workers spin (pause instruction) for up to TF_SPIN_NS, then sleep on a futex.
 * Every worker acknowledges every job (those without a chunk at once) by
 * decrementing `remaining`, so no worker can see a job's fields change under it;
 * the caller waits for `remaining` to reach 0 the same way. Workers are started
 * lazily, stopped when the thread count changes, in a forked child the pool is
 * rebuilt from scratch, and the workers are joined when the library is unloaded.
 */
#include "tunefleet_runtime.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define TF_SPIN_NS 100000           /* busy-wait this long before sleeping */
#define TF_ERROR_BYTES 1024
#define TF_ALIGN 64
#define TF_MIN_FLUSH_BYTES (64u << 20)
#define TF_FLUSH_BLOCK (1u << 20)
#define TF_MAX_NUMBER (1 << 30)     /* cap on the timer's growing `number` */

/* ------------------------------------------------------------------ errors */

static __thread char tf_error_text[TF_ERROR_BYTES];

TF_HIDDEN void tf_set_error(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tf_error_text, sizeof tf_error_text, fmt, ap);
  va_end(ap);
}

TF_EXPORT const char* tunefleet_last_error(void) { return tf_error_text; }

/* ---------------------------------------------------------------- memory */

TF_HIDDEN void* tf_alloc_aligned(size_t bytes) {
  void* ptr = NULL;
  size_t rounded = (bytes + TF_ALIGN - 1) & ~(size_t)(TF_ALIGN - 1);
  if (rounded < bytes || posix_memalign(&ptr, TF_ALIGN, rounded ? rounded : TF_ALIGN) != 0) {
    tf_set_error("tf_alloc_aligned: cannot allocate %zu bytes", bytes);
    return NULL;
  }
  return ptr;
}

TF_HIDDEN void tf_free(void* ptr) { free(ptr); }

/* ---------------------------------------------------- waiting primitives */

static inline void tf_pause(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ __volatile__("yield");
#endif
}

static int64_t tf_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void tf_futex_wait(uint32_t* word, uint32_t value) {
  syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, value, NULL, NULL, 0);
}

static void tf_futex_wake_all(uint32_t* word) {
  syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Returns once *word != value: spins for TF_SPIN_NS, then sleeps on the futex with
 * *sleepers counting the sleepers (a waker reads it after changing *word). */
static void tf_wait_while_equal(uint32_t* word, uint32_t value, uint32_t* sleepers) {
  int64_t start = 0;
  for (unsigned i = 1; __atomic_load_n(word, __ATOMIC_ACQUIRE) == value; ++i) {
    tf_pause();
    if ((i & 63) == 0) {
      int64_t now = tf_now_ns();
      if (start == 0) {
        start = now;
      } else if (now - start > TF_SPIN_NS) {
        __atomic_add_fetch(sleepers, 1, __ATOMIC_SEQ_CST);
        while (__atomic_load_n(word, __ATOMIC_SEQ_CST) == value) tf_futex_wait(word, value);
        __atomic_sub_fetch(sleepers, 1, __ATOMIC_SEQ_CST);
        return;
      }
    }
  }
}

/* Wakes the sleepers of *word after it was changed with a SEQ_CST operation. */
static void tf_wake(uint32_t* word, uint32_t* sleepers) {
  if (__atomic_load_n(sleepers, __ATOMIC_SEQ_CST) != 0) tf_futex_wake_all(word);
}

/* ------------------------------------------------------------- the pool */

static struct {
  pthread_mutex_t lock;  /* held by the thread running a job, resizing or starting */
  int initialized;
  int* cpus;             /* CPU ids of the affinity mask at first use */
  int num_cpus;
  int num_threads;       /* threads a parallel loop uses, caller included */
  int num_workers;       /* running worker threads */
  pthread_t* workers;
  /* the current job */
  tf_parallel_fn fn;
  void* closure;
  int64_t extent;
  int num_chunks;
  int shutdown;
  uint32_t start_generation; /* generation when the running workers were started */
  uint32_t generation;   /* futex word: bumped to publish a job or a shutdown */
  uint32_t remaining;    /* futex word: workers that have not finished the job */
  uint32_t worker_sleepers;
  uint32_t caller_sleepers;
} tf_pool = {.lock = PTHREAD_MUTEX_INITIALIZER};

static __thread int tf_in_parallel; /* set in workers and in a caller running a job */

static void tf_run_chunk(int index) {
  int64_t n = tf_pool.num_chunks, base = tf_pool.extent / n, rem = tf_pool.extent % n;
  int64_t begin = index * base + (index < rem ? index : rem);
  tf_pool.fn(begin, begin + base + (index < rem), tf_pool.closure);
}

static void* tf_worker_main(void* arg) {
  int index = (int)(intptr_t)arg;
  uint32_t seen = tf_pool.start_generation;
  tf_in_parallel = 1;
  for (;;) {
    tf_wait_while_equal(&tf_pool.generation, seen, &tf_pool.worker_sleepers);
    seen = __atomic_load_n(&tf_pool.generation, __ATOMIC_ACQUIRE);
    if (tf_pool.shutdown) return NULL;
    if (index < tf_pool.num_chunks) tf_run_chunk(index);
    if (__atomic_sub_fetch(&tf_pool.remaining, 1, __ATOMIC_SEQ_CST) == 0)
      tf_wake(&tf_pool.remaining, &tf_pool.caller_sleepers);
  }
}

/* Reads the affinity mask into tf_pool.cpus; on failure the pool has one CPU. */
static void tf_read_affinity(void) {
  for (int max_cpus = 1024; max_cpus <= (1 << 20); max_cpus *= 2) {
    cpu_set_t* set = CPU_ALLOC(max_cpus);
    size_t size = CPU_ALLOC_SIZE(max_cpus);
    if (set == NULL) break;
    CPU_ZERO_S(size, set);
    if (sched_getaffinity(0, size, set) == 0) {
      int count = CPU_COUNT_S(size, set), k = 0;
      tf_pool.cpus = malloc(sizeof(int) * (size_t)(count > 0 ? count : 1));
      for (int cpu = 0; tf_pool.cpus && cpu < max_cpus && k < count; ++cpu)
        if (CPU_ISSET_S(cpu, size, set)) tf_pool.cpus[k++] = cpu;
      tf_pool.num_cpus = tf_pool.cpus ? k : 0;
      CPU_FREE(set);
      break;
    }
    CPU_FREE(set);
    if (errno != EINVAL) break;
  }
  if (tf_pool.num_cpus < 1) tf_pool.num_cpus = 1; /* cpus may be NULL: workers unpinned */
}

/* n <= 0 -> all CPUs of the mask; n > mask -> clamped, with a message naming `source`. */
static int tf_clamp_threads(int n, const char* source) {
  if (n <= 0) return tf_pool.num_cpus;
  if (n > tf_pool.num_cpus) {
    fprintf(stderr,
            "tunefleet: %s asks for %d threads but the process's CPU affinity mask has %d CPU(s); "
            "using %d\n", source, n, tf_pool.num_cpus, tf_pool.num_cpus);
    return tf_pool.num_cpus;
  }
  return n;
}

static void tf_after_fork_in_child(void) {
  /* The workers do not exist in the child; forget them and start afresh. */
  pthread_mutex_init(&tf_pool.lock, NULL);
  free(tf_pool.workers);
  tf_pool.workers = NULL;
  tf_pool.num_workers = 0;
  tf_pool.remaining = 0;
  tf_pool.worker_sleepers = 0;
  tf_pool.caller_sleepers = 0;
  tf_in_parallel = 0;
}

/* Requires the lock. Reads the mask and TUNEFLEET_NUM_THREADS once. */
static void tf_pool_init_locked(void) {
  if (tf_pool.initialized) return;
  tf_pool.initialized = 1;
  tf_read_affinity();
  tf_pool.num_threads = tf_pool.num_cpus;
  const char* env = getenv("TUNEFLEET_NUM_THREADS");
  if (env != NULL && *env != '\0') {
    char* end;
    long n = strtol(env, &end, 10);
    if (*end != '\0' || n > INT_MAX || n < INT_MIN)
      fprintf(stderr, "tunefleet: ignoring TUNEFLEET_NUM_THREADS='%s' (not an integer)\n", env);
    else
      tf_pool.num_threads = tf_clamp_threads((int)n, "TUNEFLEET_NUM_THREADS");
  }
  pthread_atfork(NULL, NULL, tf_after_fork_in_child);
}

/* Requires the lock and no job running. Joins all workers. */
static void tf_pool_stop_locked(void) {
  if (tf_pool.num_workers > 0) {
    tf_pool.shutdown = 1;
    __atomic_add_fetch(&tf_pool.generation, 1, __ATOMIC_SEQ_CST);
    tf_wake(&tf_pool.generation, &tf_pool.worker_sleepers);
    for (int i = 0; i < tf_pool.num_workers; ++i) pthread_join(tf_pool.workers[i], NULL);
  }
  free(tf_pool.workers);
  tf_pool.workers = NULL;
  tf_pool.num_workers = 0;
  tf_pool.shutdown = 0;
}

/* Requires the lock. Starts num_threads - 1 pinned workers if not running; if a
 * thread cannot be created the pool shrinks to what was started. */
static void tf_pool_start_locked(void) {
  int want = tf_pool.num_threads - 1;
  if (tf_pool.num_workers == want) return;
  tf_pool_stop_locked();
  if (want <= 0 || (tf_pool.workers = malloc(sizeof(pthread_t) * (size_t)want)) == NULL) {
    tf_pool.num_threads = 1;
    return;
  }
  size_t set_size = tf_pool.cpus ? CPU_ALLOC_SIZE(tf_pool.cpus[tf_pool.num_cpus - 1] + 1) : 0;
  cpu_set_t* set = tf_pool.cpus ? CPU_ALLOC(tf_pool.cpus[tf_pool.num_cpus - 1] + 1) : NULL;
  tf_pool.start_generation = tf_pool.generation;
  for (int i = 1; i <= want; ++i) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    if (set != NULL) {
      CPU_ZERO_S(set_size, set);
      CPU_SET_S(tf_pool.cpus[i], set_size, set);
      pthread_attr_setaffinity_np(&attr, set_size, set);
    }
    int err = pthread_create(&tf_pool.workers[i - 1], &attr, tf_worker_main, (void*)(intptr_t)i);
    pthread_attr_destroy(&attr);
    if (err != 0) {
      fprintf(stderr, "tunefleet: cannot start pool thread %d (%s); using %d threads\n", i,
              strerror(err), i);
      tf_pool.num_threads = i;
      break;
    }
    tf_pool.num_workers = i;
  }
  if (set != NULL) CPU_FREE(set);
}

TF_HIDDEN void tf_parallel_for(int64_t extent, tf_parallel_fn fn, void* closure) {
  if (extent <= 0) return;
  if (extent == 1 || tf_in_parallel || pthread_mutex_trylock(&tf_pool.lock) != 0) {
    fn(0, extent, closure);
    return;
  }
  tf_pool_init_locked();
  tf_pool_start_locked();
  int chunks = tf_pool.num_threads < extent ? tf_pool.num_threads : (int)extent;
  if (chunks <= 1) {
    pthread_mutex_unlock(&tf_pool.lock);
    fn(0, extent, closure);
    return;
  }
  tf_pool.fn = fn;
  tf_pool.closure = closure;
  tf_pool.extent = extent;
  tf_pool.num_chunks = chunks;
  __atomic_store_n(&tf_pool.remaining, (uint32_t)tf_pool.num_workers, __ATOMIC_RELAXED);
  __atomic_add_fetch(&tf_pool.generation, 1, __ATOMIC_SEQ_CST);
  tf_wake(&tf_pool.generation, &tf_pool.worker_sleepers);
  tf_in_parallel = 1;
  tf_run_chunk(0);
  tf_in_parallel = 0;
  uint32_t left;
  while ((left = __atomic_load_n(&tf_pool.remaining, __ATOMIC_ACQUIRE)) != 0)
    tf_wait_while_equal(&tf_pool.remaining, left, &tf_pool.caller_sleepers);
  pthread_mutex_unlock(&tf_pool.lock);
}

TF_EXPORT int tunefleet_set_num_threads(int n) {
  pthread_mutex_lock(&tf_pool.lock);
  tf_pool_init_locked();
  int threads = tf_clamp_threads(n, "tunefleet_set_num_threads");
  if (threads != tf_pool.num_threads) {
    tf_pool_stop_locked();
    tf_pool.num_threads = threads;
  }
  pthread_mutex_unlock(&tf_pool.lock);
  return threads;
}

TF_EXPORT int tunefleet_get_num_threads(void) {
  pthread_mutex_lock(&tf_pool.lock);
  tf_pool_init_locked();
  int n = tf_pool.num_threads;
  pthread_mutex_unlock(&tf_pool.lock);
  return n;
}

/* Joins the workers before the library's code is unmapped (dlclose or exit). */
__attribute__((destructor)) static void tf_pool_fini(void) {
  if (pthread_mutex_trylock(&tf_pool.lock) != 0) return;
  tf_pool_stop_locked();
  pthread_mutex_unlock(&tf_pool.lock);
}

/* ------------------------------------------------------- tensor checks */

#include "tunefleet_dltensor_check.h"

TF_HIDDEN int tf_check_tensor(const char* kernel, const char* arg, const DLTensor* t,
                              uint8_t code, uint8_t bits, int32_t ndim,
                              const int64_t* shape, void** data) {
  if (t == NULL) {
    tf_set_error("%s: argument '%s': the DLTensor pointer is NULL", kernel, arg);
    return -1;
  }
  if (t->device.device_type != kDLCPU) {
    tf_set_error("%s: argument '%s': expected device kDLCPU (1), got device_type %d (device_id %d)",
                 kernel, arg, (int)t->device.device_type, (int)t->device.device_id);
    return -1;
  }
  if (tf_check_tensor_layout(kernel, arg, t, code, bits, ndim, shape) != 0) return -1;
  char* first = (char*)t->data + t->byte_offset;
  if ((uintptr_t)first % (bits / 8) != 0) {
    tf_set_error("%s: argument '%s': data + byte_offset (%p + %llu) is not aligned to %u bytes",
                 kernel, arg, t->data, (unsigned long long)t->byte_offset, (unsigned)(bits / 8));
    return -1;
  }
  *data = first;
  return 0;
}

TF_HIDDEN int tf_check_disjoint(const char* kernel, const char* out, const void* out_data,
                                size_t out_bytes, const char* other, const void* other_data,
                                size_t other_bytes) {
  uintptr_t a = (uintptr_t)out_data, b = (uintptr_t)other_data;
  if (a < b + other_bytes && b < a + out_bytes) {
    tf_set_error("%s: output '%s' overlaps argument '%s' in memory; outputs must not alias",
                 kernel, out, other);
    return -1;
  }
  return 0;
}

/* ---------------------------------------------------------------- timer */

static struct {
  pthread_once_t once;
  unsigned char* buffer;
  size_t bytes;
} tf_flush = {.once = PTHREAD_ONCE_INIT};

/* The largest cache size listed under /sys for cpu0, in bytes (0 if unknown). */
static size_t tf_largest_cache_bytes(void) {
  size_t largest = 0;
  for (int index = 0; index < 16; ++index) {
    char path[96];
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
    FILE* f = fopen(path, "r");
    if (f == NULL) break;
    unsigned long long value = 0;
    char unit = 0;
    if (fscanf(f, "%llu%c", &value, &unit) >= 1) {
      size_t bytes = (size_t)value * (unit == 'K' ? 1024u : unit == 'M' ? (1u << 20) : 1u);
      if (bytes > largest) largest = bytes;
    }
    fclose(f);
  }
  return largest;
}

static void tf_flush_alloc(void) {
  size_t bytes = 2 * tf_largest_cache_bytes();
  if (bytes < TF_MIN_FLUSH_BYTES) bytes = TF_MIN_FLUSH_BYTES;
  bytes = (bytes + TF_FLUSH_BLOCK - 1) / TF_FLUSH_BLOCK * TF_FLUSH_BLOCK;
  tf_flush.buffer = tf_alloc_aligned(bytes);
  tf_flush.bytes = tf_flush.buffer ? bytes : 0;
}

static uint64_t tf_flush_sink; /* keeps the reads of the flush alive */

static void tf_flush_blocks(int64_t begin, int64_t end, void* closure) {
  unsigned char* base = (unsigned char*)closure + (size_t)begin * TF_FLUSH_BLOCK;
  size_t bytes = (size_t)(end - begin) * TF_FLUSH_BLOCK;
  memset(base, (int)(begin & 0xff) + 1, bytes);
  uint64_t sum = 0;
  for (size_t i = 0; i < bytes; i += 64) sum += base[i];
  __atomic_fetch_add(&tf_flush_sink, sum, __ATOMIC_RELAXED);
}

/* Evicts the kernel's data from the caches of every pool thread's core. */
static int tf_flush_caches(void) {
  pthread_once(&tf_flush.once, tf_flush_alloc);
  if (tf_flush.buffer == NULL) {
    tf_set_error("tunefleet_timer: cannot allocate the cache flush buffer");
    return -1;
  }
  tf_parallel_for((int64_t)(tf_flush.bytes / TF_FLUSH_BLOCK), tf_flush_blocks, tf_flush.buffer);
  return 0;
}

static void tf_sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

/* Calls fn number times; returns fn's first nonzero result (with an error text). */
static int tf_call_n(int (*fn)(void**), void** args, int number) {
  for (int i = 0; i < number; ++i) {
    int rc = fn(args);
    if (rc != 0) {
      if (tf_error_text[0] == '\0') tf_set_error("tunefleet_timer: the timed function returned %d", rc);
      return rc;
    }
  }
  return 0;
}

/* Like TVM's time_evaluator: enough calls to fill min_repeat_ms, growing by >= 1.618x. */
static int tf_next_number(int number, double seconds, int min_repeat_ms) {
  double per_call = seconds / number;
  double want = per_call > 0 ? min_repeat_ms * 1e-3 / per_call + 1 : number * 10.0;
  if (want < number * 1.618) want = number * 1.618 + 1;
  return want > TF_MAX_NUMBER ? TF_MAX_NUMBER : (int)want;
}

TF_EXPORT int tunefleet_timer(int (*fn)(void** args), void** args, int number, int repeat,
                              int min_repeat_ms, int cooldown_ms, int flush_cache,
                              double* out_seconds) {
  if (fn == NULL || out_seconds == NULL || number < 1 || repeat < 1 || min_repeat_ms < 0 ||
      cooldown_ms < 0) {
    tf_set_error("tunefleet_timer: bad arguments (fn %s, out_seconds %s, number %d >= 1, "
                 "repeat %d >= 1, min_repeat_ms %d >= 0, cooldown_ms %d >= 0)",
                 fn ? "set" : "NULL", out_seconds ? "set" : "NULL", number, repeat,
                 min_repeat_ms, cooldown_ms);
    return -1;
  }
  tf_error_text[0] = '\0';
  int rc = tf_call_n(fn, args, 1); /* warm-up */
  for (int r = 0; rc == 0 && r < repeat; ++r) {
    if (r > 0 && cooldown_ms > 0) tf_sleep_ms(cooldown_ms);
    for (;;) {
      if (flush_cache && (rc = tf_flush_caches()) != 0) return rc;
      int64_t start = tf_now_ns();
      if ((rc = tf_call_n(fn, args, number)) != 0) return rc;
      double seconds = (double)(tf_now_ns() - start) * 1e-9;
      if (seconds * 1e3 >= min_repeat_ms || number >= TF_MAX_NUMBER) {
        out_seconds[r] = seconds / number;
        break;
      }
      number = tf_next_number(number, seconds, min_repeat_ms);
    }
  }
  return rc;
}
