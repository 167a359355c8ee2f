// path_timer: the kernel's own time per skb through a path (entry device's
// netif_receive_skb to the exit device's net_dev_start_xmit, or to
// tcp_probe for local delivery), in one network namespace. Benchmark only:
// bench/path_cost.py runs one per measured run. See bench/path_timer.bpf.c.
//
// Usage: path_timer --netns-ino INO --entry IFINDEX [--exit IFINDEX]
// Attaches, prints {"event":"ready"} and, on SIGINT/SIGTERM or EOF on stdin,
// one JSON line: starts, timed, unmatched, over_range (longer than the
// histogram: a vCPU descheduled by the hypervisor mid-path, say), mean_ns,
// mean_in_range_ns (without those), p10/p50/p90 ns.
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "loader/bpf_objects.h"
#include "path_timer.skel.h"

namespace {

constexpr int kBucketNs = 2;  // PT_BUCKET_NS
constexpr uint32_t kBuckets = 8192;
enum { kStarts, kTimed, kUnmatched, kSumNs, kCounters };

volatile sig_atomic_t g_stop = 0;

int Usage() {
  std::fprintf(stderr, "usage: path_timer --netns-ino INO --entry IFINDEX [--exit IFINDEX]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  unsigned long ino = 0, entry = 0, exit_if = 0;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    unsigned long v = std::strtoul(argv[i + 1], nullptr, 10);
    if (a == "--netns-ino")
      ino = v;
    else if (a == "--entry")
      entry = v;
    else if (a == "--exit")
      exit_if = v;
    else
      return Usage();
  }
  if (!ino || !entry) return Usage();

  path_timer_bpf* skel = path_timer_bpf__open();
  if (!skel) {
    std::fprintf(stderr, "path_timer: open: %s\n", strerror(errno));
    return 1;
  }
  skel->rodata->netns_ino = static_cast<uint32_t>(ino);
  skel->rodata->entry_ifindex = static_cast<uint32_t>(entry);
  skel->rodata->exit_ifindex = static_cast<uint32_t>(exit_if);
  // Only the end point of this path.
  bpf_program__set_autoload(exit_if ? skel->progs.pt_end_local : skel->progs.pt_end_xmit, false);
  int err = path_timer_bpf__load(skel);
  if (!err) err = path_timer_bpf__attach(skel);
  if (err) {
    std::fprintf(stderr, "path_timer: load/attach: %s\n", strerror(-err));
    path_timer_bpf__destroy(skel);
    return 1;
  }
  struct sigaction sa = {};
  sa.sa_handler = [](int) { g_stop = 1; };
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  std::printf("{\"event\":\"ready\"}\n");
  std::fflush(stdout);
  struct pollfd pfd = {0, POLLIN, 0};
  while (!g_stop) {
    int n = poll(&pfd, 1, 200);
    if (n > 0) {
      char buf[64];
      if (read(0, buf, sizeof(buf)) <= 0) break;  // EOF: done
    }
  }

  uint64_t c[kCounters] = {};
  int cfd = bpf_map__fd(skel->maps.counters), hfd = bpf_map__fd(skel->maps.hist);
  int ncpus = libbpf_num_possible_cpus();
  lossd::Status st;
  for (uint32_t k = 0; k < kCounters && st.ok(); k++) st = lossd::AddPerCpu(cfd, k, ncpus, &c[k]);
  std::vector<uint64_t> h(kBuckets);
  for (uint32_t k = 0; k < kBuckets && st.ok(); k++) st = lossd::AddPerCpu(hfd, k, ncpus, &h[k]);
  path_timer_bpf__destroy(skel);
  if (!st.ok()) {
    std::fprintf(stderr, "path_timer: %s\n", st.message().c_str());
    return 1;
  }
  uint64_t total = 0, in_range = 0;
  double in_range_ns = 0;  // bucket midpoints: the mean without the over-range tail
  for (uint32_t k = 0; k < kBuckets; k++) {
    total += h[k];
    if (k + 1 < kBuckets) {
      in_range += h[k];
      in_range_ns += h[k] * (k * kBucketNs + kBucketNs / 2.0);
    }
  }
  auto quantile = [&](double q) -> double {
    if (!total) return -1;
    uint64_t want = static_cast<uint64_t>(q * (total - 1)), seen = 0;
    for (uint32_t k = 0; k < kBuckets; k++) {
      seen += h[k];
      if (seen > want) return k * kBucketNs + kBucketNs / 2.0;  // bucket midpoint
    }
    return kBuckets * kBucketNs;
  };
  std::printf(
      "{\"starts\":%llu,\"timed\":%llu,\"unmatched\":%llu,\"over_range\":%llu,\"mean_ns\":%.2f,"
      "\"mean_in_range_ns\":%.2f,\"p10_ns\":%.1f,\"p50_ns\":%.1f,\"p90_ns\":%.1f,\"bucket_ns\":%d}"
      "\n",
      (unsigned long long)c[kStarts], (unsigned long long)c[kTimed],
      (unsigned long long)c[kUnmatched], (unsigned long long)h[kBuckets - 1],
      c[kTimed] ? static_cast<double>(c[kSumNs]) / c[kTimed] : -1.0,
      in_range ? in_range_ns / in_range : -1.0, quantile(0.1), quantile(0.5), quantile(0.9),
      kBucketNs);
  return 0;
}
