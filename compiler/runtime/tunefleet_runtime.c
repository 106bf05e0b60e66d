/*
 * tunefleet_runtime.c -- thread pool, parallel-for, errors, aligned allocation,
 * DLTensor checks and the timer. See tunefleet_runtime.h for the contract.
 *
 * Thread pool: before each parallel loop, sized from the calling thread's affinity
 * mask and the cgroup CPU quota (min(requested, CPUs of the mask, quota)); the calling
 * thread runs chunk 0 and is left unpinned, worker i (1..n-1) is pinned to the i-th of
 * the mask's other CPUs: slot 0 of `cpus` is kept the caller's current CPU (sched_getcpu
 * before each loop; when the caller has moved onto a worker's CPU, that worker takes the
 * caller's old one). A caller left on a worker's CPU (by the scheduler, or by a mask it
 * narrowed and widened again) would otherwise share that CPU with the worker while
 * another CPU idles until Linux migrates it: a 256^3 matmul on 2 CPUs ran 4.5x slower,
 * a 1024^3 one 2x, for tens of milliseconds at a time (AMD Zen 5 VM). One parallel loop
 * at a time holds the pool (a mutex). Fork/join: the caller publishes a job by bumping
 * `generation`; workers spin (pause instruction) for up to tf_spin_ns (TF_SPIN_NS, or
 * $TUNEFLEET_SPIN_US), then sleep on a futex; not at all while their CPU is contended
 * ("contention-aware spinning").
 * Load balancing: each chunk is cut into up to TF_CHUNK_PARTS parts; a thread takes its
 * own chunk's parts from the front, then the others' from the back (one atomic word per
 * chunk, on a cache line of its own), so where another program keeps one CPU busy the
 * threads on free CPUs do the slowed thread's rest. Static chunks ran at the pace of the
 * slowest CPU: with a busy loop pinned to one of 2 CPUs, a 1024^3 matmul took 1.98x its
 * quiet time, and 1.40x with the parts (numpy/OpenBLAS 1.68x; AMD Zen 4, medians of 5
 * fresh processes). In a quiet loop each thread runs its own chunk, but for a part at the end.
 * A worker takes part in a job only by joining it (tf_join: a CAS on `job` while it is
 * open) and reads the job's fields only then; once every part is taken the caller closes
 * the job and waits for the workers that joined (`finished`), not for a worker that has
 * not woken or been scheduled yet: it finds the job closed and waits for the next. So no
 * worker can see a job's fields change under it. Workers are started
 * lazily, restarted when the thread count changes, re-pinned when only the mask
 * changes; in a forked child the pool is
 * rebuilt from scratch, and the workers are joined when the library is unloaded.
 */
#include "tunefleet_runtime.h"

#include <errno.h>
#include <fcntl.h>
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

#define TF_SPIN_NS 100000           /* by default busy-wait this long before sleeping */
#define TF_CONTENTION_WINDOW_NS 20000000 /* a worker reads its run-queue wait once per this much time */
#ifndef TF_CONTENDED_SHARE /* -D: bench/busy_host.py --always-spinning builds one that never reads contended */
#define TF_CONTENDED_SHARE 10       /* contended: it waited on the run queue over 1/10 of a window */
#endif
#define TF_MAX_SPIN_US 10000000     /* the most TUNEFLEET_SPIN_US may ask for: 10 s */
#define TF_ERROR_BYTES 1024
#define TF_ALIGN 64
#define TF_MIN_FLUSH_BYTES (64u << 20)
#define TF_FLUSH_BLOCK (1u << 20)
#define TF_MAX_NUMBER (1 << 30)     /* cap on the timer's growing `number` */
#define TF_CHUNK_PARTS 8            /* parts per chunk of a parallel loop, the unit of stealing */
#define TF_JOB_CLOSED (1u << 31)    /* tf_pool.job: the caller took the last part; no one joins now */

/* ------------------------------------------------------------------ errors */

/* Exported on purpose, unlike everything else of the runtime: where several tunefleet
 * libraries are linked into one program, the dynamic linker binds every library's references
 * to this symbol to one definition (the first loaded), so tunefleet_last_error() of any of
 * them returns the error any of them set last on this thread. Part of the ABI: its size
 * (TF_ERROR_BYTES) never changes. Two libraries opened with dlopen(RTLD_LOCAL), as Python's
 * ctypes does, keep one each (tunefleet.load reads each library's own). */
TF_EXPORT __thread char tunefleet_error_text[TF_ERROR_BYTES];

TF_HIDDEN void tf_set_error(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(tunefleet_error_text, sizeof tunefleet_error_text, fmt, ap);
  va_end(ap);
}

TF_EXPORT const char* tunefleet_last_error(void) { return tunefleet_error_text; }

/* ---------------------------------------------------------------- memory */

/* Kernels allocate their large temporaries (packed panels, padded planes) on every call.
 * glibc returns blocks above its mmap threshold to the system when they are freed, so a call
 * got fresh pages and faulted on each of them: a 128x3072x768 GEMM packing all of B (9.4 MB)
 * ran 1.7-2.5x its own time for its first 5-8 calls in a process, 4608 page faults a call
 * (AMD Zen 5) -- most of a measurement's repeats, each candidate being timed in a fresh
 * process. So each thread keeps the last TF_CACHE_SLOTS blocks of at least TF_CACHE_MIN_BYTES
 * it freed and hands one back to an allocation it fits (at most twice the size asked for),
 * like TVM's per-thread workspace pool. Every block starts with a TF_ALIGN-byte header
 * holding its size. A thread's blocks are freed when it ends (the key's destructor). */
#define TF_CACHE_MIN_BYTES ((size_t)64 << 10)
#define TF_CACHE_SLOTS 4

typedef struct {
  void* blocks[TF_CACHE_SLOTS]; /* header addresses, NULL where empty */
} tf_cache_t;

static pthread_key_t tf_cache_key;
static pthread_once_t tf_cache_once = PTHREAD_ONCE_INIT;
static int tf_cache_ready; /* 0 where the key could not be created: no caching */

static size_t tf_block_bytes(void* header) { return *(size_t*)header; }

static void tf_cache_release(void* cache) {
  for (int i = 0; i < TF_CACHE_SLOTS; ++i) free(((tf_cache_t*)cache)->blocks[i]);
  free(cache);
}

static void tf_cache_init(void) { tf_cache_ready = pthread_key_create(&tf_cache_key, tf_cache_release) == 0; }

/* This thread's cache, created on first use; NULL where there can be none. */
static tf_cache_t* tf_thread_cache(void) {
  pthread_once(&tf_cache_once, tf_cache_init);
  if (!tf_cache_ready) return NULL;
  tf_cache_t* cache = pthread_getspecific(tf_cache_key);
  if (cache == NULL && (cache = calloc(1, sizeof *cache)) != NULL && pthread_setspecific(tf_cache_key, cache) != 0) {
    free(cache);
    cache = NULL;
  }
  return cache;
}

TF_HIDDEN void* tf_alloc_aligned(size_t bytes) {
  size_t rounded = (bytes + TF_ALIGN - 1) & ~(size_t)(TF_ALIGN - 1);
  if (rounded < bytes || rounded > SIZE_MAX - TF_ALIGN) {
    tf_set_error("tf_alloc_aligned: cannot allocate %zu bytes", bytes);
    return NULL;
  }
  tf_cache_t* cache = rounded >= TF_CACHE_MIN_BYTES ? tf_thread_cache() : NULL;
  int best = -1;
  for (int i = 0; cache != NULL && i < TF_CACHE_SLOTS; ++i) {
    void* b = cache->blocks[i];
    if (b != NULL && tf_block_bytes(b) >= rounded && tf_block_bytes(b) / 2 <= rounded &&
        (best < 0 || tf_block_bytes(b) < tf_block_bytes(cache->blocks[best])))
      best = i;
  }
  void* header = NULL;
  if (best >= 0) {
    header = cache->blocks[best];
    cache->blocks[best] = NULL;
  } else if (posix_memalign(&header, TF_ALIGN, rounded + TF_ALIGN) != 0) {
    tf_set_error("tf_alloc_aligned: cannot allocate %zu bytes", bytes);
    return NULL;
  } else {
    *(size_t*)header = rounded;
  }
  return (char*)header + TF_ALIGN;
}

TF_HIDDEN void tf_free(void* ptr) {
  if (ptr == NULL) return;
  void* header = (char*)ptr - TF_ALIGN;
  tf_cache_t* cache = tf_block_bytes(header) >= TF_CACHE_MIN_BYTES ? tf_thread_cache() : NULL;
  if (cache == NULL) {
    free(header);
    return;
  }
  int slot = -1; /* an empty slot, else the smallest block's */
  for (int i = 0; i < TF_CACHE_SLOTS; ++i) {
    if (cache->blocks[i] == NULL) {
      slot = i;
      break;
    }
    if (slot < 0 || tf_block_bytes(cache->blocks[i]) < tf_block_bytes(cache->blocks[slot])) slot = i;
  }
  if (cache->blocks[slot] != NULL && tf_block_bytes(cache->blocks[slot]) >= tf_block_bytes(header)) {
    free(header); /* smaller than every cached block */
    return;
  }
  free(cache->blocks[slot]);
  cache->blocks[slot] = header;
}

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

/* Busy-wait before sleeping, in nanoseconds (TF_SPIN_NS, or $TUNEFLEET_SPIN_US: tf_pool_init).
 * A sleeping worker took about 47 us to wake on an AMD Zen 5 VM (ResNet-18's kernels in model
 * order, 300 us of other work before each: 9.73 ms, 9.14 ms with 1000 us of spinning, 8.8 ms
 * back to back); spinning longer keeps a CPU busy that long after every call. */
static int64_t tf_spin_ns = TF_SPIN_NS;

/* Returns once *word != value: spins for spin_ns (0: not at all), then sleeps on the futex
 * with *sleepers counting the sleepers (a waker reads it after changing *word). */
static void tf_wait_while_equal(uint32_t* word, uint32_t value, uint32_t* sleepers, int64_t spin_ns) {
  int64_t start = 0;
  for (unsigned i = 1; __atomic_load_n(word, __ATOMIC_ACQUIRE) == value; ++i) {
    if (spin_ns > 0) {
      tf_pause();
      if ((i & 63) != 0) continue;
      int64_t now = tf_now_ns();
      if (start == 0) start = now;
      if (now - start <= spin_ns) continue;
    }
    __atomic_add_fetch(sleepers, 1, __ATOMIC_SEQ_CST);
    while (__atomic_load_n(word, __ATOMIC_SEQ_CST) == value) tf_futex_wait(word, value);
    __atomic_sub_fetch(sleepers, 1, __ATOMIC_SEQ_CST);
    return;
  }
}

/* Wakes the sleepers of *word after it was changed with a SEQ_CST operation. */
static void tf_wake(uint32_t* word, uint32_t* sleepers) {
  if (__atomic_load_n(sleepers, __ATOMIC_SEQ_CST) != 0) tf_futex_wake_all(word);
}

/* ------------------------------------------------- the cgroup CPU limit */

/* Reads up to size - 1 bytes of the file at `path` into buf, NUL-terminated; returns the
 * number of bytes read, or -1 if it cannot be opened or read. */
static ssize_t tf_read_small_file(const char* path, char* buf, size_t size) {
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = read(fd, buf, size - 1);
  close(fd);
  if (n >= 0) buf[n] = '\0';
  return n;
}

/* ceil(quota / period) threads for the CPU quota of the cgroup directory `dir` (cgroup v2
 * `cpu.max` "QUOTA PERIOD" or "max PERIOD"; v1 `cpu.cfs_quota_us` (-1: none) and
 * `cpu.cfs_period_us`), or INT_MAX where it sets none or has no such file. */
static int tf_cgroup_dir_limit(const char* dir, int v2) {
  char path[PATH_MAX + 32], text[64];
  long long quota = -1, period = 0;
  if (v2) {
    snprintf(path, sizeof path, "%s/cpu.max", dir);
    if (tf_read_small_file(path, text, sizeof text) <= 0 ||
        sscanf(text, "%lld %lld", &quota, &period) != 2)
      return INT_MAX; /* also "max ..." (no quota): sscanf stops at "max" */
  } else {
    snprintf(path, sizeof path, "%s/cpu.cfs_quota_us", dir);
    if (tf_read_small_file(path, text, sizeof text) <= 0 || sscanf(text, "%lld", &quota) != 1)
      return INT_MAX;
    snprintf(path, sizeof path, "%s/cpu.cfs_period_us", dir);
    if (tf_read_small_file(path, text, sizeof text) <= 0 || sscanf(text, "%lld", &period) != 1)
      return INT_MAX;
  }
  if (quota <= 0 || period <= 0) return INT_MAX;
  long long threads = (quota + period - 1) / period;
  return threads < INT_MAX ? (int)threads : INT_MAX;
}

/* Whether `token` is one of the comma-separated words of `list` (up to a space or the end). */
static int tf_has_token(const char* list, const char* token) {
  size_t len = strlen(token);
  for (const char* p = list; *p != '\0' && *p != ' ' && *p != '\n';) {
    size_t word = strcspn(p, ", \n");
    if (word == len && strncmp(p, token, len) == 0) return 1;
    p += word + (p[word] == ',');
  }
  return 0;
}

/* The tightest CPU quota on the path from the cgroup directory (mount point + the part of
 * `cgroup_path` below the mount's root) up to the mount point, as a thread count (INT_MAX:
 * none). The quotas of all ancestors apply, so every level is read. */
static int tf_cgroup_path_limit(const char* mount, const char* root, const char* cgroup_path,
                                int v2) {
  char dir[PATH_MAX];
  size_t root_len = strcmp(root, "/") == 0 ? 0 : strlen(root);
  const char* below = cgroup_path;
  if (root_len > 0 && strncmp(cgroup_path, root, root_len) == 0 &&
      (cgroup_path[root_len] == '/' || cgroup_path[root_len] == '\0'))
    below += root_len;
  else if (root_len > 0)
    below = ""; /* the process's cgroup lies outside what is mounted: read the mount's root */
  if (strcmp(below, "/") == 0) below = "";
  if ((size_t)snprintf(dir, sizeof dir, "%s%s", mount, below) >= sizeof dir) return INT_MAX;
  size_t mount_len = strlen(mount);
  int limit = INT_MAX;
  for (;;) {
    int level = tf_cgroup_dir_limit(dir, v2);
    if (level < limit) limit = level;
    char* slash = strrchr(dir, '/');
    if (slash == NULL || (size_t)(slash - dir) < mount_len) break;
    *slash = '\0';
  }
  return limit;
}

/* The number of threads the process's cgroup CPU quota lets run at once: ceil(quota /
 * period), the tightest over cgroup v2 `cpu.max` and v1 `cpu.cfs_quota_us` of the process's
 * cgroup and its ancestors; INT_MAX where none is set or none can be read. Costs a few
 * open/read/close calls (/proc/self/cgroup, /proc/self/mountinfo, the quota files). */
static int tf_cgroup_cpu_limit(void) {
  char cgroups[8192], v2_path[PATH_MAX] = "", v1_path[PATH_MAX] = "";
  if (tf_read_small_file("/proc/self/cgroup", cgroups, sizeof cgroups) <= 0) return INT_MAX;
  char* save = NULL;
  for (char* line = strtok_r(cgroups, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
    char* controllers = strchr(line, ':');
    char* path = controllers ? strchr(controllers + 1, ':') : NULL;
    if (path == NULL) continue;
    *path++ = '\0';
    ++controllers;
    if (strcmp(line, "0") == 0 && *controllers == '\0')
      snprintf(v2_path, sizeof v2_path, "%s", path);
    else if (tf_has_token(controllers, "cpu"))
      snprintf(v1_path, sizeof v1_path, "%s", path);
  }
  FILE* mounts = fopen("/proc/self/mountinfo", "re");
  if (mounts == NULL) return INT_MAX;
  int limit = INT_MAX;
  char line[4096], root[PATH_MAX], mount[PATH_MAX];
  while (fgets(line, sizeof line, mounts) != NULL) {
    /* "ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS" */
    const char* tail = strstr(line, " - ");
    char fstype[32], super_options[512];
    if (tail == NULL || sscanf(line, "%*s %*s %*s %4095s %4095s", root, mount) != 2 ||
        sscanf(tail, " - %31s %*s %511s", fstype, super_options) != 2)
      continue;
    int level = INT_MAX;
    if (strcmp(fstype, "cgroup2") == 0 && v2_path[0] != '\0')
      level = tf_cgroup_path_limit(mount, root, v2_path, 1);
    else if (strcmp(fstype, "cgroup") == 0 && v1_path[0] != '\0' && tf_has_token(super_options, "cpu"))
      level = tf_cgroup_path_limit(mount, root, v1_path, 0);
    if (level < limit) limit = level;
  }
  fclose(mounts);
  return limit;
}

/* ------------------------------------------------------------- the pool */

/* How the pool follows its limits (see tunefleet_runtime.h, "public API"): every parallel
 * loop reads the calling thread's affinity mask (one sched_getaffinity call, compared with
 * memcmp) and, when it changed, re-pins or resizes the pool. The cgroup CPU quota has no
 * cheap change signal (cpu.max raises no inotify event), so it is re-read when the last
 * read is TF_CGROUP_RECHECK_NS old (CLOCK_MONOTONIC_COARSE, a vDSO read of a few ns). A read
 * costs 70-350 us (bench/pool_mask.py: /proc/self/mountinfo, /proc/self/cgroup and the
 * quota files, on a VM where a syscall costs ~0.7 us), so once a second bounds it to
 * <= 0.04% of a core whatever the call rate; a quota changed by an operator (docker update,
 * a Kubernetes resize) takes effect within a second, as Go's runtime (1.25) does for
 * GOMAXPROCS. */
#define TF_CGROUP_RECHECK_NS 1000000000

/* The parts of one chunk of a parallel loop not yet taken: parts [front, back) of its
 * iterations (tf_part_begin), the owner taking them from the front, other threads from the back. */
typedef struct {
  uint64_t word;         /* atomic: front | back << 32 */
  char pad[TF_ALIGN - sizeof(uint64_t)];
} tf_chunk_parts;

static struct {
  pthread_mutex_t lock;  /* held by the thread running a parallel loop or resizing the pool */
  int requested;         /* atomic: threads asked for (0: one per CPU of the mask) */
  size_t mask_bytes;     /* size of the CPU sets below; 0 if the mask cannot be read */
  cpu_set_t* mask;       /* the calling thread's mask the pool now follows */
  cpu_set_t* scratch;    /* the mask just read, to compare with `mask` */
  cpu_set_t* pin;        /* one worker's CPU, for pinning */
  int* cpus;             /* the CPU ids of `mask`: [0] the caller's, [i] worker i's */
  int num_cpus;          /* CPUs in `mask`; 0 before the first parallel loop */
  int start_cap;         /* the most threads that could be started on this mask */
  int cgroup_limit;      /* atomic: threads the cgroup CPU quota allows (INT_MAX: none) */
  int64_t cgroup_read_ns;/* atomic: CLOCK_MONOTONIC_COARSE of the last read; 0: never */
  int num_workers;       /* running worker threads */
  pthread_t* workers;
  tf_chunk_parts* parts; /* per chunk of the current job, num_workers + 1 of them */
  /* the current job */
  tf_parallel_fn fn;
  void* closure;
  int64_t extent;
  int num_chunks;
  int shutdown;
  uint32_t start_generation; /* generation when the running workers were started */
  uint32_t generation;   /* futex word: bumped to publish a job or a shutdown */
  uint64_t job;          /* atomic: generation << 32 | TF_JOB_CLOSED | workers that joined it */
  uint32_t finished;     /* futex word: workers that joined the job and are done with it */
  uint32_t worker_sleepers;
  uint32_t caller_sleepers;
} tf_pool = {.lock = PTHREAD_MUTEX_INITIALIZER, .cgroup_limit = INT_MAX};

static pthread_once_t tf_pool_once = PTHREAD_ONCE_INIT;

/* The threads of the parallel loop whose body this thread runs (0: none), caller included;
 * nonzero in workers and in a thread holding the pool lock too: parallel loops there run inline. */
static __thread int tf_loop_threads;

/* The first iteration of chunk `chunk` of the current job; its iteration count in *size. */
static int64_t tf_chunk_begin(int chunk, int64_t* size) {
  int64_t n = tf_pool.num_chunks, base = tf_pool.extent / n, rem = tf_pool.extent % n;
  *size = base + (chunk < rem);
  return chunk * base + (chunk < rem ? chunk : rem);
}

/* The parts a chunk of `size` iterations is cut into. */
static int64_t tf_parts_of(int64_t size) { return size < TF_CHUNK_PARTS ? size : TF_CHUNK_PARTS; }

/* The first iteration of part `part` of chunk `chunk` (part = its count: the chunk's end). */
static int64_t tf_part_begin(int chunk, uint32_t part) {
  int64_t size, begin = tf_chunk_begin(chunk, &size);
  return begin + size * part / tf_parts_of(size);
}

/* Takes the next part of chunk `chunk`, from its front (the owner) or its back; 0 when none is left. */
static int tf_take_part(int chunk, int from_back, uint32_t* part) {
  uint64_t* word = &tf_pool.parts[chunk].word;
  uint64_t old = __atomic_load_n(word, __ATOMIC_ACQUIRE);
  for (;;) {
    uint32_t front = (uint32_t)old, back = (uint32_t)(old >> 32);
    if (front >= back) return 0;
    uint64_t taken = from_back ? old - ((uint64_t)1 << 32) : old + 1;
    if (__atomic_compare_exchange_n(word, &old, taken, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
      *part = from_back ? back - 1 : front;
      return 1;
    }
  }
}

/* Thread `index` runs the parts of its own chunk, then takes those left of the others. */
static void tf_run_chunks(int index) {
  uint32_t part;
  int n = tf_pool.num_chunks;
  if (index < n)
    while (tf_take_part(index, 0, &part))
      tf_pool.fn(tf_part_begin(index, part), tf_part_begin(index, part + 1), tf_pool.closure);
  for (int i = index < n; i < n; ++i) {
    int chunk = (index + i) % n;
    while (tf_take_part(chunk, 1, &part))
      tf_pool.fn(tf_part_begin(chunk, part), tf_part_begin(chunk, part + 1), tf_pool.closure);
  }
}

/* Joins the job of generation `generation` if it is still open; 1 if it did. */
static int tf_join(uint32_t generation) {
  uint64_t job = __atomic_load_n(&tf_pool.job, __ATOMIC_ACQUIRE);
  while ((uint32_t)(job >> 32) == generation && !(job & TF_JOB_CLOSED))
    if (__atomic_compare_exchange_n(&tf_pool.job, &job, job + 1, 1, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) return 1;
  return 0;
}

/* Contention-aware spinning. A worker whose CPU another program keeps busy spends its share of
 * that CPU spinning between jobs; once the share is used up the scheduler runs the other task for
 * a slice (milliseconds), and a job published meanwhile waits for that slice to end: the worker
 * is runnable, not woken. A sleeping worker is woken by the job and, having slept, preempts the
 * other task at once. So a worker that waited on its CPU's run queue for more than
 * 1/TF_CONTENDED_SHARE of the last TF_CONTENTION_WINDOW_NS (its schedstat, as the interference
 * probe reads it: tuner/interference.py) sleeps between jobs without spinning for the next window.
 * AMD Zen 4, 2 vCPUs, a spinner pinned to one, default configs, busy / quiet time (medians of 5
 * fresh processes), spinning always against this: dense 1x2048 -> 1000 (65 us) 2.05x / 1.51x,
 * conv2d 1x1 1024 -> 256 at 14^2 1.86x / 1.33x, 3x3 512 at 7^2 1.72x / 1.40x, matmul 1024^3
 * 1.42x / 1.43x; quiet times level, busy ones those of never spinning. There every window of a
 * busy run read contended, and 1-4% of a quiet run's. Never spinning costs 3-39% on a quiet host
 * (a woken worker joins 30-50 us late), and preemptions alone are no sign of a busy CPU: a worker
 * on a quiet host was preempted 50-70 times a second. AMD Zen 3 (AVX2, 2 vCPUs; bench/busy_host.py
 * --always-spinning, 5 rounds): spinning always took 1.12x, 1.31x, 1.36x and 1.37x this runtime's
 * busy time for matmul 128x3072x768, conv2d 3x3 64 at 56^2, 1x1 1024 -> 256 at 14^2 and dense
 * 1x2048 -> 1000, 1.00x for matmul 1024^3; quiet, the best GFLOP/s of the two were level
 * (0.97-1.06x): a noisier host's quiet windows cost nothing here either. */
struct tf_contention {
  int fd;                   /* /proc/thread-self/schedstat of the worker, or -1: always spin */
  int64_t window_start_ns;  /* tf_now_ns() at the start of the window */
  int64_t waited_ns;        /* the run-queue wait at its start, or -1 */
  int64_t spin_ns;          /* how long the worker spins in this window: tf_spin_ns or 0 */
};

/* This thread's run-queue wait in nanoseconds (schedstat's second field), or -1. */
static int64_t tf_run_queue_wait_ns(int fd) {
  char text[128];
  ssize_t n = pread(fd, text, sizeof text - 1, 0);
  unsigned long long run, wait;
  if (n <= 0) return -1;
  text[n] = '\0';
  return sscanf(text, "%llu %llu", &run, &wait) == 2 ? (int64_t)wait : -1;
}

static void tf_contention_init(struct tf_contention* c) {
  c->fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
  c->window_start_ns = tf_now_ns();
  c->waited_ns = c->fd >= 0 ? tf_run_queue_wait_ns(c->fd) : -1;
  c->spin_ns = tf_spin_ns;
}

/* How long the worker spins before its next wait sleeps: tf_spin_ns, or 0 after a contended window. */
static int64_t tf_worker_spin_ns(struct tf_contention* c) {
  int64_t now = tf_now_ns();
  if (c->fd >= 0 && now - c->window_start_ns >= TF_CONTENTION_WINDOW_NS) {
    int64_t waited = tf_run_queue_wait_ns(c->fd);
    int contended = waited >= 0 && c->waited_ns >= 0 &&
                    (waited - c->waited_ns) * TF_CONTENDED_SHARE > now - c->window_start_ns;
    c->spin_ns = contended ? 0 : tf_spin_ns;
    c->window_start_ns = now;
    c->waited_ns = waited;
  }
  return c->spin_ns;
}

static void* tf_worker_main(void* arg) {
  int index = (int)(intptr_t)arg;
  uint32_t seen = tf_pool.start_generation;
  struct tf_contention contention;
  tf_contention_init(&contention);
  tf_loop_threads = 1;
  for (;;) {
    tf_wait_while_equal(&tf_pool.generation, seen, &tf_pool.worker_sleepers, tf_worker_spin_ns(&contention));
    seen = __atomic_load_n(&tf_pool.generation, __ATOMIC_ACQUIRE);
    if (tf_pool.shutdown) {
      if (contention.fd >= 0) close(contention.fd);
      return NULL;
    }
    if (!tf_join(seen)) continue;
    tf_loop_threads = tf_pool.num_chunks;
    tf_run_chunks(index);
    __atomic_add_fetch(&tf_pool.finished, 1, __ATOMIC_SEQ_CST);
    tf_wake(&tf_pool.finished, &tf_pool.caller_sleepers);
  }
}

static int64_t tf_coarse_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* The cgroup CPU limit, re-read when `fresh` or when the last read is TF_CGROUP_RECHECK_NS old. */
static int tf_cgroup_limit(int fresh) {
  int64_t now = tf_coarse_now_ns(), last = __atomic_load_n(&tf_pool.cgroup_read_ns, __ATOMIC_RELAXED);
  if (fresh || last == 0 || now - last >= TF_CGROUP_RECHECK_NS) {
    __atomic_store_n(&tf_pool.cgroup_limit, tf_cgroup_cpu_limit(), __ATOMIC_RELAXED);
    __atomic_store_n(&tf_pool.cgroup_read_ns, now > 0 ? now : 1, __ATOMIC_RELAXED);
  }
  return __atomic_load_n(&tf_pool.cgroup_limit, __ATOMIC_RELAXED);
}

/* CPUs in the calling thread's affinity mask (1 if it cannot be read). */
static int tf_caller_cpu_count(void) {
  if (tf_pool.mask_bytes == 0) return 1;
  cpu_set_t local, *set = tf_pool.mask_bytes <= sizeof local ? &local : malloc(tf_pool.mask_bytes);
  int count = set && sched_getaffinity(0, tf_pool.mask_bytes, set) == 0
                  ? CPU_COUNT_S(tf_pool.mask_bytes, set) : 1;
  if (set != &local) free(set);
  return count > 0 ? count : 1;
}

/* min(requested (<= 0: all), cpus, cgroup limit), at least 1. */
static int tf_threads_for(int requested, int cpus, int cgroup) {
  int n = requested > 0 && requested < cpus ? requested : cpus;
  if (cgroup < n) n = cgroup;
  return n > 1 ? n : 1;
}

/* The threads a request of n (<= 0: one per CPU) gets now on the calling thread's mask and
 * the cgroup limit; a request over them gets a one-line message naming `source` and the
 * limit that applies, with its current size. */
static int tf_clamp_threads(int n, const char* source) {
  int cpus = tf_caller_cpu_count(), cgroup = tf_cgroup_limit(1);
  int threads = tf_threads_for(n, cpus, cgroup);
  if (n > threads) {
    if (cpus <= cgroup)
      fprintf(stderr, "tunefleet: %s asks for %d threads but the calling thread's CPU affinity "
              "mask has %d CPU(s); using %d\n", source, n, cpus, threads);
    else
      fprintf(stderr, "tunefleet: %s asks for %d threads but the cgroup CPU quota allows %d "
              "(quota / period, rounded up); using %d\n", source, n, cgroup, threads);
  }
  return threads;
}

static void tf_after_fork_in_child(void) {
  /* The workers do not exist in the child; forget them and start afresh. */
  pthread_mutex_init(&tf_pool.lock, NULL);
  free(tf_pool.workers);
  tf_pool.workers = NULL;
  tf_pool.num_workers = 0;
  tf_pool.job = 0;
  tf_pool.finished = 0;
  tf_pool.worker_sleepers = 0;
  tf_pool.caller_sleepers = 0;
  tf_loop_threads = 0;
}

/* Run once: sizes the CPU sets (the smallest size sched_getaffinity accepts) and reads
 * TUNEFLEET_NUM_THREADS and TUNEFLEET_SPIN_US. */
static void tf_pool_init(void) {
  for (int max_cpus = 1024; max_cpus <= (1 << 20); max_cpus *= 2) {
    size_t size = CPU_ALLOC_SIZE(max_cpus);
    cpu_set_t* set = CPU_ALLOC(max_cpus);
    int ok = set != NULL && sched_getaffinity(0, size, set) == 0, err = errno;
    CPU_FREE(set);
    if (ok) {
      tf_pool.mask = CPU_ALLOC(max_cpus);
      tf_pool.scratch = CPU_ALLOC(max_cpus);
      tf_pool.pin = CPU_ALLOC(max_cpus);
      tf_pool.cpus = malloc(sizeof(int) * (size_t)max_cpus);
      if (tf_pool.mask && tf_pool.scratch && tf_pool.pin && tf_pool.cpus) tf_pool.mask_bytes = size;
      break;
    }
    if (set == NULL || err != EINVAL) break;
  }
  if (tf_pool.mask_bytes == 0) tf_pool.num_cpus = 1; /* unknown mask: one thread, unpinned */
  const char* env = getenv("TUNEFLEET_NUM_THREADS");
  if (env != NULL && *env != '\0') {
    char* end;
    long n = strtol(env, &end, 10);
    if (*end != '\0' || n > INT_MAX || n < INT_MIN) {
      fprintf(stderr, "tunefleet: ignoring TUNEFLEET_NUM_THREADS='%s' (not an integer)\n", env);
    } else {
      tf_clamp_threads((int)n, "TUNEFLEET_NUM_THREADS");
      tf_pool.requested = n > 0 ? (int)n : 0;
    }
  }
  env = getenv("TUNEFLEET_SPIN_US");
  if (env != NULL && *env != '\0') {
    char* end;
    long us = strtol(env, &end, 10);
    if (*end != '\0' || us < 0 || us > TF_MAX_SPIN_US)
      fprintf(stderr, "tunefleet: ignoring TUNEFLEET_SPIN_US='%s' (not an integer from 0 to %d)\n", env,
              TF_MAX_SPIN_US);
    else
      tf_spin_ns = (int64_t)us * 1000;
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
  free(tf_pool.parts);
  tf_pool.workers = NULL;
  tf_pool.parts = NULL;
  tf_pool.num_workers = 0;
  tf_pool.shutdown = 0;
}

/* Requires the lock. Sets pin to the one CPU of worker `index` (1..) and returns its size
 * in bytes, or 0 where the mask is unknown (workers unpinned). */
static size_t tf_pin_set_locked(int index) {
  if (tf_pool.mask_bytes == 0) return 0;
  CPU_ZERO_S(tf_pool.mask_bytes, tf_pool.pin);
  CPU_SET_S(tf_pool.cpus[index], tf_pool.mask_bytes, tf_pool.pin);
  return tf_pool.mask_bytes;
}

/* Requires the lock and no job running. Stops the workers and starts threads - 1 new ones,
 * worker i pinned to the CPU of slot i; if a thread cannot be created the pool keeps
 * what was started, and start_cap remembers it until the mask changes. */
static void tf_pool_start_locked(int threads) {
  tf_pool_stop_locked();
  int want = threads - 1;
  void* parts = NULL;
  if (want > 0 && ((tf_pool.workers = malloc(sizeof(pthread_t) * (size_t)want)) == NULL ||
                   posix_memalign(&parts, TF_ALIGN, sizeof(tf_chunk_parts) * (size_t)threads) != 0)) {
    free(tf_pool.workers);
    tf_pool.workers = NULL;
    tf_pool.start_cap = 1;
    want = 0;
  }
  tf_pool.parts = parts;
  tf_pool.start_generation = tf_pool.generation;
  for (int i = 1; i <= want; ++i) {
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    size_t pin_bytes = tf_pin_set_locked(i);
    if (pin_bytes != 0) pthread_attr_setaffinity_np(&attr, pin_bytes, tf_pool.pin);
    int err = pthread_create(&tf_pool.workers[i - 1], &attr, tf_worker_main, (void*)(intptr_t)i);
    pthread_attr_destroy(&attr);
    if (err != 0) {
      fprintf(stderr, "tunefleet: cannot start pool thread %d (%s); using %d threads\n", i,
              strerror(err), i);
      tf_pool.start_cap = i;
      break;
    }
    tf_pool.num_workers = i;
  }
}

/* Requires the lock and no job running. Pins the running workers to the CPUs of the mask
 * (after the mask changed but not the thread count); a worker that cannot be moved stays. */
static void tf_pool_repin_locked(void) {
  for (int i = 1; i <= tf_pool.num_workers; ++i) {
    size_t pin_bytes = tf_pin_set_locked(i);
    if (pin_bytes != 0) pthread_setaffinity_np(tf_pool.workers[i - 1], pin_bytes, tf_pool.pin);
  }
}

/* Requires the lock. Keeps slot 0 of `cpus` the calling thread's current CPU: where the
 * caller runs on the CPU of slot i > 0, swaps slots 0 and i and returns i (worker i, if it
 * runs, must be re-pinned to its new CPU); else returns INT_MAX. */
static int tf_caller_slot_locked(void) {
  int here = sched_getcpu();
  if (here < 0 || tf_pool.mask_bytes == 0 || tf_pool.cpus[0] == here) return INT_MAX;
  for (int i = 1; i < tf_pool.num_cpus; ++i) {
    if (tf_pool.cpus[i] == here) {
      tf_pool.cpus[i] = tf_pool.cpus[0];
      tf_pool.cpus[0] = here;
      return i;
    }
  }
  return INT_MAX;
}

/* Requires the lock and no job running. Makes the pool follow the calling thread's affinity
 * mask and the cgroup CPU limit: min(requested, CPUs of the mask, cgroup limit) threads,
 * worker i pinned to the CPU of slot i (tf_caller_slot_locked). */
static void tf_pool_follow_locked(void) {
  int mask_changed = 0;
  if (tf_pool.mask_bytes != 0 && sched_getaffinity(0, tf_pool.mask_bytes, tf_pool.scratch) == 0 &&
      (tf_pool.num_cpus == 0 || memcmp(tf_pool.scratch, tf_pool.mask, tf_pool.mask_bytes) != 0)) {
    cpu_set_t* previous = tf_pool.mask;
    tf_pool.mask = tf_pool.scratch;
    tf_pool.scratch = previous;
    int count = CPU_COUNT_S(tf_pool.mask_bytes, tf_pool.mask), k = 0;
    for (int cpu = 0; k < count && (size_t)cpu < 8 * tf_pool.mask_bytes; ++cpu)
      if (CPU_ISSET_S(cpu, tf_pool.mask_bytes, tf_pool.mask)) tf_pool.cpus[k++] = cpu;
    tf_pool.num_cpus = k > 0 ? k : 1;
    tf_pool.start_cap = INT_MAX;
    mask_changed = 1;
  }
  int moved = tf_caller_slot_locked();
  int threads = tf_threads_for(__atomic_load_n(&tf_pool.requested, __ATOMIC_RELAXED),
                               tf_pool.num_cpus, tf_cgroup_limit(0));
  if (threads > tf_pool.start_cap) threads = tf_pool.start_cap;
  if (threads - 1 != tf_pool.num_workers) {
    tf_pool_start_locked(threads);
  } else if (mask_changed) {
    tf_pool_repin_locked();
  } else if (moved <= tf_pool.num_workers) {
    size_t pin_bytes = tf_pin_set_locked(moved);
    if (pin_bytes != 0) pthread_setaffinity_np(tf_pool.workers[moved - 1], pin_bytes, tf_pool.pin);
  }
}

/* Runs a whole loop on the calling thread, which counts as a loop of one thread meanwhile. */
static void tf_run_alone(int64_t extent, tf_parallel_fn fn, void* closure) {
  tf_loop_threads = 1;
  fn(0, extent, closure);
  tf_loop_threads = 0;
}

TF_HIDDEN void tf_parallel_for(int64_t extent, tf_parallel_fn fn, void* closure) {
  if (extent <= 0) return;
  if (tf_loop_threads) {  /* inside a parallel body: part of the running loop */
    fn(0, extent, closure);
    return;
  }
  if (extent == 1) {
    tf_run_alone(extent, fn, closure);
    return;
  }
  pthread_once(&tf_pool_once, tf_pool_init);
  pthread_mutex_lock(&tf_pool.lock);
  tf_loop_threads = 1;
  tf_pool_follow_locked();
  int threads = tf_pool.num_workers + 1;
  int chunks = threads < extent ? threads : (int)extent;
  if (chunks <= 1) {
    pthread_mutex_unlock(&tf_pool.lock);
    tf_run_alone(extent, fn, closure);
    return;
  }
  tf_loop_threads = chunks;
  tf_pool.fn = fn;
  tf_pool.closure = closure;
  tf_pool.extent = extent;
  tf_pool.num_chunks = chunks;
  for (int c = 0; c < chunks; ++c) {
    int64_t size;
    tf_chunk_begin(c, &size);
    __atomic_store_n(&tf_pool.parts[c].word, (uint64_t)tf_parts_of(size) << 32, __ATOMIC_RELAXED);
  }
  __atomic_store_n(&tf_pool.finished, 0, __ATOMIC_RELAXED);
  uint32_t generation = tf_pool.generation + 1;
  __atomic_store_n(&tf_pool.job, (uint64_t)generation << 32, __ATOMIC_RELEASE);
  __atomic_store_n(&tf_pool.generation, generation, __ATOMIC_SEQ_CST);
  tf_wake(&tf_pool.generation, &tf_pool.worker_sleepers);
  tf_run_chunks(0);
  /* every part is taken: close the job to workers not yet in it, wait for those that are */
  uint32_t joined = (uint32_t)(__atomic_fetch_or(&tf_pool.job, TF_JOB_CLOSED, __ATOMIC_ACQ_REL) & (TF_JOB_CLOSED - 1));
  uint32_t done;
  while ((done = __atomic_load_n(&tf_pool.finished, __ATOMIC_ACQUIRE)) != joined)
    tf_wait_while_equal(&tf_pool.finished, done, &tf_pool.caller_sleepers, tf_spin_ns);
  tf_loop_threads = 0;
  pthread_mutex_unlock(&tf_pool.lock);
}

TF_EXPORT int tunefleet_set_num_threads(int n) {
  pthread_once(&tf_pool_once, tf_pool_init);
  __atomic_store_n(&tf_pool.requested, n > 0 ? n : 0, __ATOMIC_RELAXED);
  return tf_clamp_threads(n, "tunefleet_set_num_threads");
}

TF_EXPORT int tunefleet_get_num_threads(void) {
  pthread_once(&tf_pool_once, tf_pool_init);
  if (tf_loop_threads) return tf_loop_threads;
  return tf_threads_for(__atomic_load_n(&tf_pool.requested, __ATOMIC_RELAXED),
                        tf_caller_cpu_count(), tf_cgroup_limit(0));
}

/* Before the library's code is unmapped (dlclose or exit): joins the workers (their cached
 * blocks are freed as they end), then deletes the cache key, since no thread may run its
 * destructor afterwards (the calling thread's blocks are freed here, other application
 * threads' are left to the process). */
__attribute__((destructor)) static void tf_pool_fini(void) {
  if (pthread_mutex_trylock(&tf_pool.lock) == 0) {
    tf_pool_stop_locked();
    pthread_mutex_unlock(&tf_pool.lock);
  }
  if (tf_cache_ready) {
    tf_cache_t* cache = pthread_getspecific(tf_cache_key);
    pthread_key_delete(tf_cache_key);
    tf_cache_ready = 0;
    if (cache != NULL) tf_cache_release(cache);
  }
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
      if (tunefleet_error_text[0] == '\0') tf_set_error("tunefleet_timer: the timed function returned %d", rc);
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
  tunefleet_error_text[0] = '\0';
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
