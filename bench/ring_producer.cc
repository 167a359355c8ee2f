// ring_producer: a synthetic source of retransmit events for a running
// lossd's observer ring, to measure the transport (ring -> reader -> hub ->
// consumers) at rates TCP cannot produce on this machine. Benchmark only.
//
// It finds lossd's obs_ring and obs_counters maps among the process's file
// descriptors, loads bench/ring_producer.bpf.c with those two maps reused,
// and runs it through BPF_PROG_TEST_RUN in batches, paced to --rate events/s
// (0: as fast as it can) for --seconds. Every event is submitted exactly as
// the sockops program submits one (same record, same wakeup rule); a failed
// reservation is counted in lossd's own ring_lost counter, so lossd's loss
// accounting covers these events too.
//
// Usage: ring_producer --pid PID [--rate N] [--seconds S] [--batch N]
// Prints one JSON line: submitted, lost, seconds, achieved rate.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>

#include "base/fd.h"
#include "ring_producer.skel.h"

namespace {

struct ProduceArgs {  // struct produce_args in ring_producer.bpf.c
  uint32_t n;
  uint32_t family;
  uint64_t first_id;
  uint64_t submitted;
  uint64_t lost;
};

double Now() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

// The fd (in this process) of the map named `name` that process `pid` holds.
int FindMap(int pid, const char* name) {
  std::string dir = "/proc/" + std::to_string(pid) + "/fdinfo";
  DIR* d = opendir(dir.c_str());
  if (!d) return -errno;
  int found = -ENOENT;
  while (struct dirent* ent = readdir(d)) {
    std::ifstream in(dir + "/" + ent->d_name);
    std::string key;
    unsigned id = 0;
    while (in >> key) {
      if (key == "map_id:") {
        in >> id;
        break;
      }
    }
    if (!id) continue;
    int fd = bpf_map_get_fd_by_id(id);
    if (fd < 0) continue;
    struct bpf_map_info info;
    std::memset(&info, 0, sizeof(info));
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) == 0 && std::strcmp(info.name, name) == 0) {
      found = fd;
      break;
    }
    close(fd);
  }
  closedir(d);
  return found;
}

int Usage() {
  std::fprintf(stderr,
               "usage: ring_producer --pid PID [--rate EVENTS_PER_S] [--seconds S] [--batch N]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int pid = 0;
  double rate = 0, seconds = 5;
  uint32_t batch = 256;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--pid")
      pid = std::atoi(argv[i + 1]);
    else if (a == "--rate")
      rate = std::atof(argv[i + 1]);
    else if (a == "--seconds")
      seconds = std::atof(argv[i + 1]);
    else if (a == "--batch")
      batch = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    else
      return Usage();
  }
  if (pid <= 0 || seconds <= 0 || batch == 0 || rate < 0) return Usage();

  lossd::UniqueFd ring(FindMap(pid, "obs_ring"));
  lossd::UniqueFd counters(FindMap(pid, "obs_counters"));
  if (!ring.valid() || !counters.valid()) {
    std::fprintf(
        stderr,
        "ring_producer: process %d holds no observer ring (is it lossd with the observer?)\n", pid);
    return 1;
  }
  ring_producer_bpf* skel = ring_producer_bpf__open();
  if (!skel) {
    std::fprintf(stderr, "ring_producer: open: %s\n", strerror(errno));
    return 1;
  }
  int err = bpf_map__reuse_fd(skel->maps.obs_ring, ring.get());
  if (!err) err = bpf_map__reuse_fd(skel->maps.obs_counters, counters.get());
  if (!err) err = ring_producer_bpf__load(skel);
  if (err) {
    std::fprintf(stderr, "ring_producer: load with lossd's maps: %s\n", strerror(-err));
    ring_producer_bpf__destroy(skel);
    return 1;
  }
  int prog = bpf_program__fd(skel->progs.produce);
  uint64_t submitted = 0, lost = 0, runs = 0;
  double start = Now(), end = start + seconds, now = start;
  while ((now = Now()) < end) {
    uint64_t due =
        rate > 0 ? static_cast<uint64_t>(rate * (now - start)) : submitted + lost + batch;
    if (submitted + lost >= due) {
      usleep(50);
      continue;
    }
    uint64_t n = due - submitted - lost;
    ProduceArgs args = {};
    args.n = static_cast<uint32_t>(n < batch ? n : batch);
    args.family = 2;
    args.first_id = submitted + lost + 1;
    LIBBPF_OPTS(bpf_test_run_opts, opts, .ctx_in = &args, .ctx_size_in = sizeof(args));
    if (bpf_prog_test_run_opts(prog, &opts)) {
      std::fprintf(stderr, "ring_producer: test run: %s\n", strerror(errno));
      ring_producer_bpf__destroy(skel);
      return 1;
    }
    submitted += args.submitted;
    lost += args.lost;
    runs++;
  }
  double secs = Now() - start;
  std::printf(
      "{\"submitted\":%llu,\"lost\":%llu,\"seconds\":%.4f,\"rate_target\":%.0f,"
      "\"rate_achieved\":%.0f,\"runs\":%llu,\"batch\":%u}\n",
      (unsigned long long)submitted, (unsigned long long)lost, secs, rate,
      (submitted + lost) / secs, (unsigned long long)runs, batch);
  ring_producer_bpf__destroy(skel);
  return 0;
}
