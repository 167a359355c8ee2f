#include "host/offloads.h"

#include <linux/ethtool.h>
#include <unistd.h>

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

}  // namespace

Result<std::unique_ptr<OffloadGuard>> OffloadGuard::Disable(const std::string& ifname,
                                                            const std::string& state_file) {
  Offloads saved;
  LOSSD_RETURN_IF_ERROR(GetOffloads(ifname, &saved));
  std::unique_ptr<OffloadGuard> g(new OffloadGuard());
  g->ifname_ = ifname;
  g->state_file_ = state_file;
  g->gro_ = saved.gro;
  g->gso_max_segs_ = saved.gso_max_segs;
  // Record before changing, so a crash in between is recoverable.
  auto lines = ReadLines(state_file);
  lines.push_back(ifname + " " + std::to_string(saved.gro) + " " +
                  std::to_string(saved.gso_max_segs));
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
  auto lines = ReadLines(state_file_);
  for (auto it = lines.begin(); it != lines.end(); ++it) {
    if (it->rfind(ifname_ + " ", 0) == 0) {
      lines.erase(it);
      break;
    }
  }
  WriteLines(state_file_, lines);
}

int RestoreOffloads(const std::string& state_file) {
  int restored = 0;
  for (const auto& line : ReadLines(state_file)) {
    std::istringstream in(line);
    std::string ifname;
    Offloads o;
    if (!(in >> ifname >> o.gro >> o.gso_max_segs)) continue;
    Status st = SetOffloads(ifname, o);
    if (st.ok()) {
      LOG_INFO("restored offloads of %s left by a previous run", ifname.c_str());
      restored++;
    } else {
      LOG_WARN("restore offloads of %s: %s", ifname.c_str(), st.message().c_str());
    }
  }
  WriteLines(state_file, {});
  return restored;
}

}  // namespace lossd
