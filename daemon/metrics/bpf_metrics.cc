// The run statistics of lossd's own BPF programs (kernel.bpf_stats_enabled),
// from the program fds the process holds.
#include <bpf/bpf.h>
#include <dirent.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "metrics/families.h"

namespace lossd {

using prometheus::MetricType;

bool BpfStatsEnabled() {
  std::ifstream in("/proc/sys/kernel/bpf_stats_enabled");
  int v = 0;
  return in >> v && v != 0;
}

std::vector<BpfProgStats> OwnBpfPrograms() {
  std::vector<BpfProgStats> progs;
  DIR* d = opendir("/proc/self/fd");
  if (!d) return progs;
  std::vector<uint32_t> seen;
  int dfd = dirfd(d);
  while (struct dirent* e = readdir(d)) {
    int fd = atoi(e->d_name);
    if (e->d_name[0] == '.' || fd == dfd) continue;
    char target[64] = {};
    std::string path = std::string("/proc/self/fd/") + e->d_name;
    ssize_t n = readlink(path.c_str(), target, sizeof(target) - 1);
    if (n <= 0 || std::strcmp(target, "anon_inode:bpf-prog") != 0) continue;
    // The fd may have been closed (and reused) since: the info call then
    // fails or returns another program of ours; either is harmless.
    struct bpf_prog_info info;
    std::memset(&info, 0, sizeof(info));
    uint32_t len = sizeof(info);
    if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) continue;
    if (std::find(seen.begin(), seen.end(), info.id) != seen.end()) continue;
    seen.push_back(info.id);
    BpfProgStats s;
    s.name = info.name;
    s.id = info.id;
    s.run_cnt = info.run_cnt;
    s.run_time_ns = info.run_time_ns;
    progs.push_back(std::move(s));
  }
  closedir(d);
  return progs;
}

void BpfMetrics(Families* out) {
  bool enabled = BpfStatsEnabled();
  Fam(out, "lossd_bpf_stats_enabled",
      "1 if kernel.bpf_stats_enabled is on (run counts and times are counted only then)",
      MetricType::Gauge)
      .Add({}, enabled);
  std::map<std::string, BpfProgStats> by_name;  // a name loaded twice: summed
  for (const BpfProgStats& p : OwnBpfPrograms()) {
    BpfProgStats& s = by_name[p.name];
    s.run_cnt += p.run_cnt;
    s.run_time_ns += p.run_time_ns;
  }
  Fam cnt(out, "lossd_bpf_program_runs_total",
          "Runs of each of lossd's BPF programs (while kernel.bpf_stats_enabled)",
          MetricType::Counter);
  Fam secs(out, "lossd_bpf_program_run_seconds_total",
           "Time spent in each of lossd's BPF programs (while kernel.bpf_stats_enabled)",
           MetricType::Counter);
  for (const auto& [name, s] : by_name) {
    cnt.Add({{"program", name}}, double(s.run_cnt));
    secs.Add({{"program", name}}, double(s.run_time_ns) / 1e9);
  }
}

}  // namespace lossd
