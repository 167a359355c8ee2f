#include "host/offloads.h"

#include <linux/ethtool.h>
#include <net/if.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <vector>

#include "common/log.h"
#include "host/ethtool.h"
#include "host/netlink.h"

namespace lossd {
namespace {

struct Offloads {
  uint32_t gro = 0;
  uint32_t gso_max_segs = 0;
};

Status GetOffloads(const std::string& ifname, Offloads* o) {
  LOSSD_RETURN_IF_ERROR(EthtoolValue(ifname, ETHTOOL_GGRO, &o->gro));
  return GetGsoMaxSegs(ifname, &o->gso_max_segs);
}

Status SetOffloads(const std::string& ifname, Offloads o) {
  Offloads cur;
  LOSSD_RETURN_IF_ERROR(GetOffloads(ifname, &cur));
  if (cur.gso_max_segs != o.gso_max_segs)
    LOSSD_RETURN_IF_ERROR(SetGsoMaxSegs(ifname, o.gso_max_segs));
  if (cur.gro != o.gro) LOSSD_RETURN_IF_ERROR(EthtoolValue(ifname, ETHTOOL_SGRO, &o.gro));
  return Status::Ok();
}

// No state file (an empty path: --state-dir '') reads as empty and writes nothing.
std::vector<std::string> ReadLines(const std::string& file) {
  std::vector<std::string> lines;
  if (file.empty()) return lines;
  std::ifstream in(file);
  for (std::string l; std::getline(in, l);)
    if (!l.empty()) lines.push_back(l);
  return lines;
}

void WriteLines(const std::string& file, const std::vector<std::string>& lines) {
  if (file.empty()) return;
  if (lines.empty()) {
    unlink(file.c_str());
    return;
  }
  std::string tmp = file + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    for (const auto& l : lines) out << l << "\n";
  }
  rename(tmp.c_str(), file.c_str());
}

struct Record {
  uint64_t netns = 0;  // 0: a record of an older lossd (name only, this namespace)
  uint32_t ifindex = 0;
  std::string ifname;
  Offloads saved;
};

bool ParseRecord(const std::string& line, Record* r) {
  std::istringstream in(line);
  std::vector<std::string> f;
  for (std::string w; in >> w;) f.push_back(w);
  try {
    if (f.size() == 5) {
      r->netns = std::stoull(f[0]);
      r->ifindex = static_cast<uint32_t>(std::stoul(f[1]));
      r->ifname = f[2];
      r->saved.gro = static_cast<uint32_t>(std::stoul(f[3]));
      r->saved.gso_max_segs = static_cast<uint32_t>(std::stoul(f[4]));
      return true;
    }
    if (f.size() == 3) {
      r->ifname = f[0];
      r->saved.gro = static_cast<uint32_t>(std::stoul(f[1]));
      r->saved.gso_max_segs = static_cast<uint32_t>(std::stoul(f[2]));
      return true;
    }
  } catch (const std::exception&) {
  }
  return false;
}

}  // namespace

uint64_t CurrentNetnsIno() {
  struct stat st;
  if (stat("/proc/self/ns/net", &st) != 0) return 0;
  return st.st_ino;
}

Result<std::unique_ptr<OffloadGuard>> OffloadGuard::Disable(const std::string& ifname,
                                                            const std::string& state_file) {
  Offloads saved;
  LOSSD_RETURN_IF_ERROR(GetOffloads(ifname, &saved));
  std::unique_ptr<OffloadGuard> g(new OffloadGuard());
  g->ifname_ = ifname;
  g->state_file_ = state_file;
  g->gro_ = saved.gro;
  g->gso_max_segs_ = saved.gso_max_segs;
  unsigned ifindex = if_nametoindex(ifname.c_str());
  if (ifindex == 0) return Status::FromErrno(errno, "interface " + Shown(ifname));
  g->record_ = std::to_string(CurrentNetnsIno()) + " " + std::to_string(ifindex) + " " + ifname +
               " " + std::to_string(saved.gro) + " " + std::to_string(saved.gso_max_segs);
  // Record before changing, so a crash in between is recoverable.
  auto lines = ReadLines(state_file);
  lines.push_back(g->record_);
  WriteLines(state_file, lines);
  Offloads one;
  one.gro = 0;
  one.gso_max_segs = 1;
  Status st = SetOffloads(ifname, one);
  if (!st.ok()) return st;  // the destructor restores what was changed
  return g;
}

OffloadGuard::~OffloadGuard() {
  Offloads o;
  o.gro = gro_;
  o.gso_max_segs = gso_max_segs_;
  Status st = SetOffloads(ifname_, o);
  if (!st.ok()) LOG_WARN("restore offloads: %s", st.message().c_str());
  if (!st.ok()) return;  // the record stays: the next start tries again
  auto lines = ReadLines(state_file_);
  auto it = std::find(lines.begin(), lines.end(), record_);
  if (it != lines.end()) lines.erase(it);
  WriteLines(state_file_, lines);
}

int RestoreOffloads(const std::string& state_file) {
  int restored = 0;
  uint64_t here = CurrentNetnsIno();
  std::vector<std::string> kept;
  for (const auto& line : ReadLines(state_file)) {
    Record r;
    if (!ParseRecord(line, &r)) {
      LOG_WARN("offload record '%s' in %s is unreadable: kept", Shown(line).c_str(),
               state_file.c_str());
      kept.push_back(line);
      continue;
    }
    if (r.netns && r.netns != here) {  // cannot be reached from here
      LOG_INFO("offload record of %s (ifindex %u) is of network namespace %llu, not this one: kept",
               r.ifname.c_str(), r.ifindex, static_cast<unsigned long long>(r.netns));
      kept.push_back(line);
      continue;
    }
    std::string ifname = r.ifname;
    if (r.ifindex) {
      char name[IF_NAMESIZE] = {};
      if (!if_indextoname(r.ifindex, name)) {  // gone, and its settings with it
        LOG_INFO("offloads of %s left by a previous run: ifindex %u is gone, nothing to restore",
                 r.ifname.c_str(), r.ifindex);
        continue;
      }
      ifname = name;
    }
    Status st = SetOffloads(ifname, r.saved);
    if (st.ok()) {
      LOG_INFO("restored offloads of %s left by a previous run", ifname.c_str());
      restored++;
    } else {
      LOG_WARN("restore offloads of %s: %s (record kept)", ifname.c_str(), st.message().c_str());
      kept.push_back(line);
    }
  }
  WriteLines(state_file, kept);
  return restored;
}

}  // namespace lossd
