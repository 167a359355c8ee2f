#include "host/records.h"

#include <climits>
#include <vector>

#include "rules/rule.h"

namespace lossd {
namespace {

constexpr size_t kIfNameMax = 15;  // IFNAMSIZ - 1
constexpr uint64_t kMaxGsoSegs = 65535;

// The line's fields, split on single spaces or tabs; none may be empty, so
// "a  b" (two spaces) or a trailing space is not a record.
bool Fields(const std::string& line, size_t n, std::vector<std::string>* out) {
  out->clear();
  size_t at = 0;
  for (;;) {
    size_t end = line.find_first_of(" \t", at);
    std::string f = line.substr(at, end == std::string::npos ? std::string::npos : end - at);
    if (f.empty() || out->size() == n) return false;
    out->push_back(std::move(f));
    if (end == std::string::npos) return out->size() == n;
    at = end + 1;
  }
}

bool Num(const std::string& w, uint64_t max, uint64_t* out) {
  return ParseDecimal(w, 0, max, out);
}

}  // namespace

bool ValidIfname(const std::string& n) {  // the kernel's dev_valid_name, printable ASCII
  if (n.empty() || n.size() > kIfNameMax || n == "." || n == "..") return false;
  for (unsigned char c : n)
    if (c <= ' ' || c == '/' || c == ':' || c >= 0x7f) return false;
  return true;
}

bool ParseOffloadRecord(const std::string& line, OffloadRecord* r) {
  std::vector<std::string> f;
  size_t at = 0;
  uint64_t netns = 0, ifindex = 0, gro = 0, gso = 0;
  if (Fields(line, 5, &f)) {
    if (!Num(f[0], UINT64_MAX, &netns) || !Num(f[1], INT32_MAX, &ifindex) || ifindex == 0)
      return false;
    at = 2;
  } else if (!Fields(line, 3, &f)) {
    return false;
  }
  if (!ValidIfname(f[at]) || !Num(f[at + 1], 1, &gro) || !Num(f[at + 2], kMaxGsoSegs, &gso) ||
      gso == 0)
    return false;
  r->netns = netns;
  r->ifindex = static_cast<uint32_t>(ifindex);
  r->ifname = f[at];
  r->gro = static_cast<uint32_t>(gro);
  r->gso_max_segs = static_cast<uint32_t>(gso);
  return true;
}

std::string OffloadRecordLine(const OffloadRecord& r) {
  std::string tail = r.ifname + " " + std::to_string(r.gro) + " " + std::to_string(r.gso_max_segs);
  if (r.ifindex == 0) return tail;  // the old form: by name, in this namespace
  return std::to_string(r.netns) + " " + std::to_string(r.ifindex) + " " + tail;
}

bool ParseFilterRecord(const std::string& line, FilterRecord* r) {
  std::vector<std::string> f;
  uint64_t netns = 0, ifindex = 0;
  if (!Fields(line, 3, &f) || !Num(f[0], UINT64_MAX, &netns) || netns == 0 ||
      !Num(f[1], INT32_MAX, &ifindex) || ifindex == 0 || !ValidIfname(f[2]))
    return false;
  r->netns = netns;
  r->ifindex = static_cast<uint32_t>(ifindex);
  r->ifname = f[2];
  return true;
}

std::string FilterRecordLine(const FilterRecord& r) {
  return std::to_string(r.netns) + " " + std::to_string(r.ifindex) + " " + r.ifname;
}

}  // namespace lossd
