#include "host/offloads.h"
#include "host/netns.h"

#include <fcntl.h>
#include <linux/ethtool.h>
#include <net/if.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "base/fd.h"
#include "base/log.h"
#include "host/ethtool.h"
#include "host/interface.h"
#include "host/netlink.h"
#include "host/records.h"
#include "host/state_dir.h"

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

// A record is ~50 bytes; a file past this was not written by lossd (the rest
// of it is dropped, as junk lines are).
// The valid offload records of the state file; junk (unparsable or out of
// range lines) is logged and dropped, so the next write leaves it out.
Result<std::vector<std::string>> ReadRecords(const std::string& file) {
  auto all = ReadStateLines(file, "offload records");
  if (!all.ok()) return all.status();
  std::vector<std::string> lines;
  size_t junk = 0;
  for (const std::string& l : *all) {
    OffloadRecord r;
    if (ParseOffloadRecord(l, &r)) {
      lines.push_back(l);
    } else if (++junk <= 3) {
      LOG_WARN("offload record '%s' in %s is not valid: dropped", Shown(l.substr(0, 80)).c_str(),
               file.c_str());
    }
  }
  if (junk > 3) LOG_WARN("%zu invalid offload records in %s dropped", junk, file.c_str());
  return lines;
}

Status WriteRecords(const std::string& file, const std::vector<std::string>& lines) {
  return WriteStateLines(file, lines, "offload records");
}

}  // namespace

uint64_t CurrentNetnsIno() { return ThreadNetnsIno(); }

Result<std::unique_ptr<OffloadGuard>> OffloadGuard::Disable(const std::string& ifname,
                                                            const std::string& state_file) {
  Offloads saved;
  LOSSD_RETURN_IF_ERROR(GetOffloads(ifname, &saved));
  std::unique_ptr<OffloadGuard> g(new OffloadGuard());
  g->ifname_ = ifname;
  g->state_file_ = state_file;
  g->gro_ = saved.gro;
  g->gso_max_segs_ = saved.gso_max_segs;
  auto ifindex = IfIndex(ifname);
  if (!ifindex.ok()) return ifindex.status();
  g->netns_ = CurrentNetnsIno();
  OffloadRecord rec;
  rec.netns = g->netns_;
  rec.ifindex = static_cast<unsigned>(*ifindex);
  rec.ifname = ifname;
  rec.gro = saved.gro;
  rec.gso_max_segs = saved.gso_max_segs;
  g->record_ = OffloadRecordLine(rec);
  // Record before changing, so a crash in between is recoverable; no record,
  // no change (the rule is refused).
  auto lines = ReadRecords(state_file);
  if (!lines.ok()) return lines.status();
  lines->push_back(g->record_);
  LOSSD_RETURN_IF_ERROR(WriteRecords(state_file, *lines));
  g->recorded_ = true;
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
  if (!recorded_) return;  // nothing was changed
  // Restored where it was changed (a cgroup target's device may be in another
  // namespace); a namespace that is gone took the device and its settings.
  bool gone = netns_ && netns_ != CurrentNetnsIno() && !FindNetns(netns_, "").ok();
  Status st = gone ? Status::Ok() : InNetns(netns_, "", [&] { return SetOffloads(ifname_, o); });
  if (!st.ok()) LOG_WARN("restore offloads: %s", st.message().c_str());
  if (!st.ok()) return;  // the record stays: the next start tries again
  auto lines = ReadRecords(state_file_);
  if (!lines.ok()) {
    LOG_WARN("%s (the record of %s stays)", lines.status().message().c_str(), ifname_.c_str());
    return;
  }
  auto it = std::find(lines->begin(), lines->end(), record_);
  if (it != lines->end()) lines->erase(it);
  st = WriteRecords(state_file_, *lines);
  if (!st.ok()) LOG_WARN("%s", st.message().c_str());
}

namespace {

// Restores one record in the calling thread's namespace; false to keep it.
bool RestoreRecord(const OffloadRecord& r) {
  std::string ifname = r.ifname;
  if (r.ifindex) {
    char name[IF_NAMESIZE] = {};
    if (!if_indextoname(r.ifindex, name)) {  // gone, and its settings with it
      LOG_INFO("offloads of %s left by a previous run: ifindex %u is gone, nothing to restore",
               r.ifname.c_str(), r.ifindex);
      return true;
    }
    ifname = name;
  }
  Offloads saved;
  saved.gro = r.gro;
  saved.gso_max_segs = r.gso_max_segs;
  Status st = SetOffloads(ifname, saved);
  if (!st.ok()) {
    LOG_WARN("restore offloads of %s: %s (record kept)", ifname.c_str(), st.message().c_str());
    return false;
  }
  LOG_INFO("restored offloads of %s left by a previous run", ifname.c_str());
  return true;
}

}  // namespace

int RestoreOffloads(const std::string& state_file) {
  int restored = 0;
  std::vector<std::string> kept;
  auto lines = ReadRecords(state_file);
  if (!lines.ok()) {
    LOG_WARN("%s: no offload restored", lines.status().message().c_str());
    return 0;
  }
  for (const auto& line : *lines) {
    OffloadRecord r;
    ParseOffloadRecord(line, &r);  // valid: ReadRecords kept only those
    // A record of another namespace (a cgroup target's device) is restored
    // there; one whose namespace is gone went with its devices.
    if (r.netns && r.netns != CurrentNetnsIno() && !FindNetns(r.netns, "").ok()) {
      LOG_INFO("offloads of %s left by a previous run: network namespace %llu is gone, nothing "
               "to restore",
               r.ifname.c_str(), static_cast<unsigned long long>(r.netns));
      continue;
    }
    bool done = false;
    Status st = InNetns(r.netns, "", [&] {
      done = RestoreRecord(r);
      return Status::Ok();
    });
    if (!st.ok()) LOG_WARN("restore offloads of %s: %s (record kept)", r.ifname.c_str(),
                           st.message().c_str());
    if (st.ok() && done) {
      restored++;
    } else {
      kept.push_back(line);
    }
  }
  Status st = WriteRecords(state_file, kept);
  if (!st.ok()) LOG_WARN("%s", st.message().c_str());
  return restored;
}

}  // namespace lossd
