// A user's C++ program calling the probe artifact (tests/runtime_probe.py) while it changes
// its CPU affinity mask between calls, as an MPI rank that pins itself after a first call.
//
//   runtime_mask_program OUT_DIR thread|process CPU_A CPU_B
//
// Calls the probe on mask {A, B} ("wide"), then {A} ("narrow"), then {A, B} again
// ("widened"); "thread" sets the mask of the calling thread only (sched_setaffinity(0)),
// "process" that of every thread of the process (as `taskset -a -p` or hwloc's process
// binding do). Each call writes X then Y (float32, N each) to OUT_DIR/<phase>.bin and prints
// one JSON line: the thread count tunefleet_get_num_threads gave before the call, the
// distinct thread ids that ran the parallel loop's blocks, the threads of the process after
// the call (/proc/self/task), the calling thread's id, and the CPU and thread id of each
// block. After the narrow and the widened calls it prints what tunefleet_set_num_threads(8)
// returned.
#include <dirent.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <vector>

#include "probe.h"

static const int N = 4096, BLOCKS = 64;

static std::vector<int> thread_ids() {
  std::vector<int> ids;
  DIR* dir = opendir("/proc/self/task");
  while (dirent* entry = readdir(dir))
    if (entry->d_name[0] != '.') ids.push_back(atoi(entry->d_name));
  closedir(dir);
  return ids;
}

static void set_mask(const std::vector<int>& cpus, bool every_thread) {
  cpu_set_t set;
  CPU_ZERO(&set);
  for (int cpu : cpus) CPU_SET(cpu, &set);
  std::vector<int> targets = every_thread ? thread_ids() : std::vector<int>{0};
  for (int tid : targets)
    if (sched_setaffinity(tid, sizeof set, &set) != 0) {
      perror("sched_setaffinity");
      exit(3);
    }
}

static void call(const char* phase, int index, const char* out_dir) {
  std::vector<float> x(N), y(N);
  std::vector<int32_t> cpu(BLOCKS), tid(BLOCKS);
  for (int i = 0; i < N; ++i) x[i] = float(i) + 1000.0f * index;
  int api = tunefleet_get_num_threads();
  if (probe(x.data(), y.data(), cpu.data(), tid.data()) != 0) {
    fprintf(stderr, "%s\n", tunefleet_last_error());
    exit(2);
  }
  char path[4096];
  snprintf(path, sizeof path, "%s/%s.bin", out_dir, phase);
  FILE* out = fopen(path, "wb");
  if (out == NULL || fwrite(x.data(), 4, N, out) != (size_t)N || fwrite(y.data(), 4, N, out) != (size_t)N) {
    perror(path);
    exit(4);
  }
  fclose(out);
  std::set<int> ran(tid.begin(), tid.end());
  printf("{\"phase\": \"%s\", \"api\": %d, \"threads_seen\": %zu, \"tasks\": %zu, \"caller\": %ld, \"cpus\": [",
         phase, api, ran.size(), thread_ids().size(), (long)syscall(SYS_gettid));
  for (int b = 0; b < BLOCKS; ++b) printf("%s%d", b ? ", " : "", cpu[b]);
  printf("], \"tids\": [");
  for (int b = 0; b < BLOCKS; ++b) printf("%s%d", b ? ", " : "", tid[b]);
  printf("]}\n");
}

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s OUT_DIR thread|process CPU_A CPU_B\n", argv[0]);
    return 1;
  }
  bool every_thread = strcmp(argv[2], "process") == 0;
  int a = atoi(argv[3]), b = atoi(argv[4]);
  set_mask({a, b}, every_thread);
  call("wide", 0, argv[1]);
  set_mask({a}, every_thread);
  call("narrow", 1, argv[1]);
  printf("{\"phase\": \"set8 narrow\", \"returned\": %d}\n", tunefleet_set_num_threads(8));
  set_mask({a, b}, every_thread);
  call("widened", 2, argv[1]);
  printf("{\"phase\": \"set8 widened\", \"returned\": %d}\n", tunefleet_set_num_threads(8));
  return 0;
}
