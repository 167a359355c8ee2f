#include "format.h"

#include <time.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstring>

namespace lossctl {
namespace {

std::string TrimZeros(std::string s) {
  if (s.find('.') == std::string::npos) return s;
  while (!s.empty() && s.back() == '0') s.pop_back();
  if (!s.empty() && s.back() == '.') s.pop_back();
  return s;
}

std::string Fixed(double v, int decimals) {
  char buf[64];
  snprintf(buf, sizeof(buf), "%.*f", decimals, v);
  return buf;
}

}  // namespace

std::string FormatRate(double fraction) {
  if (!std::isfinite(fraction)) return "?";
  double pct = fraction * 100.0;
  if (pct == 0) return "0%";
  // About 6 significant digits, never an exponent, at most 10 decimals
  // (the BPF resolution, 2^-32, is 2.3e-8 %).
  int mag = static_cast<int>(std::floor(std::log10(std::fabs(pct))));
  int decimals = std::clamp(5 - mag, 0, 10);
  return TrimZeros(Fixed(pct, decimals)) + "%";
}

std::string FormatBytes(uint64_t bytes) {
  static const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + "B";
  double v = static_cast<double>(bytes);
  int u = 0;
  while (v >= 1024 && u < 6) {
    v /= 1024;
    u++;
  }
  return TrimZeros(Fixed(v, v < 10 ? 2 : v < 100 ? 1 : 0)) + kUnits[u];
}

std::string FormatDuration(uint64_t ns) {
  if (ns == 0) return "0s";
  if (ns < 1000) return std::to_string(ns) + "ns";
  if (ns < 1000000) return TrimZeros(Fixed(ns / 1e3, 1)) + "us";
  if (ns < 1000000000) return TrimZeros(Fixed(ns / 1e6, 1)) + "ms";
  if (ns < 60000000000ull) return TrimZeros(Fixed(ns / 1e9, ns < 10000000000ull ? 2 : 1)) + "s";
  uint64_t s = (ns + 500000000) / 1000000000;  // whole seconds from a minute on
  uint64_t d = s / 86400, h = s / 3600 % 24, m = s / 60 % 60;
  s %= 60;
  std::string out;
  if (d) out += std::to_string(d) + "d";
  if (h) out += std::to_string(h) + "h";
  if (m) out += std::to_string(m) + "m";
  if (s) out += std::to_string(s) + "s";
  return out;
}

std::string FormatUnixTime(uint64_t unix_ns, bool with_micros) {
  time_t secs = static_cast<time_t>(unix_ns / 1000000000);
  struct tm tm;
  localtime_r(&secs, &tm);
  char buf[64];
  if (with_micros) {
    size_t n = strftime(buf, sizeof(buf), "%H:%M:%S", &tm);
    snprintf(buf + n, sizeof(buf) - n, ".%06u", static_cast<unsigned>(unix_ns / 1000 % 1000000));
  } else {
    strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  }
  return buf;
}

std::string FormatMonoTime(uint64_t mono_ns) {
  struct timespec mono, real;
  clock_gettime(CLOCK_MONOTONIC, &mono);
  clock_gettime(CLOCK_REALTIME, &real);
  int64_t offset = (static_cast<int64_t>(real.tv_sec) - mono.tv_sec) * 1000000000 +
                   (static_cast<int64_t>(real.tv_nsec) - mono.tv_nsec);
  return FormatUnixTime(static_cast<uint64_t>(static_cast<int64_t>(mono_ns) + offset), true);
}

std::string FormatPorts(const v1::PortRange& p) {
  if (p.lo() == 0 && p.hi() == 0) return "";
  uint32_t hi = p.hi() ? p.hi() : p.lo();  // the daemon reads hi 0 as "lo only"
  if (hi == p.lo()) return std::to_string(p.lo());
  return std::to_string(p.lo()) + "-" + std::to_string(hi);
}

std::string FormatEndpoint(const std::string& addr, uint32_t port) {
  if (addr.find(':') != std::string::npos) return "[" + addr + "]:" + std::to_string(port);
  return addr + ":" + std::to_string(port);
}

const char* HookName(v1::Hook h) {
  switch (h) {
    case v1::HOOK_AUTO: return "auto";
    case v1::HOOK_XDP: return "xdp";
    case v1::HOOK_TC: return "tc";
    case v1::HOOK_CGROUP: return "cgroup";
    default: return "?";
  }
}

const char* DirectionName(v1::Direction d) {
  switch (d) {
    case v1::DIRECTION_INGRESS: return "ingress";
    case v1::DIRECTION_EGRESS: return "egress";
    case v1::DIRECTION_BOTH: return "both";
    default: return "?";
  }
}

const char* PayloadName(v1::Payload p) {
  switch (p) {
    case v1::PAYLOAD_ANY: return "any";
    case v1::PAYLOAD_ONLY: return "only";
    case v1::PAYLOAD_NONE: return "none";
    default: return "?";
  }
}

const char* RuleStateName(v1::RuleState s) {
  switch (s) {
    case v1::RULE_STATE_ACTIVE: return "active";
    case v1::RULE_STATE_EXPIRED: return "expired";
    case v1::RULE_STATE_STOPPED: return "stopped";
    case v1::RULE_STATE_FAILED: return "failed";
    case v1::RULE_STATE_DELETED: return "deleted";
    default: return "unknown";
  }
}

const char* OutcomeName(v1::Outcome o) {
  switch (o) {
    case v1::OUTCOME_SENT: return "sent";
    case v1::OUTCOME_FAILED: return "failed";
    default: return "?";
  }
}

const char* GapSourceText(v1::GapSource s) {
  switch (s) {
    case v1::GAP_SOURCE_KERNEL_RING: return "kernel ring buffer full";
    case v1::GAP_SOURCE_DAEMON_HUB: return "daemon fan-out";
    case v1::GAP_SOURCE_SUBSCRIBER: return "this client too slow";
    default: return "unknown source";
  }
}

std::string CaStateName(uint32_t ca_state) {
  static const char* kNames[] = {"open", "disorder", "cwr", "recovery", "loss"};
  if (ca_state < 5) return kNames[ca_state];
  return std::to_string(ca_state);
}

const char* RetransmitTypeName(v1::RetransmitType t) {
  switch (t) {
    case v1::RETRANSMIT_TYPE_FAST: return "fast";
    case v1::RETRANSMIT_TYPE_RTO: return "rto";
    case v1::RETRANSMIT_TYPE_LOSS: return "loss";
    case v1::RETRANSMIT_TYPE_TLP: return "tlp";
    case v1::RETRANSMIT_TYPE_SYN: return "syn";
    case v1::RETRANSMIT_TYPE_SYNACK: return "synack";
    case v1::RETRANSMIT_TYPE_PROBE0: return "probe0";
    case v1::RETRANSMIT_TYPE_UNKNOWN: return "unknown";
    default: return "?";
  }
}

bool ParseRetransmitType(const std::string& name, v1::RetransmitType* out) {
  std::string n;
  for (char c : name) n.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  for (int t = v1::RETRANSMIT_TYPE_FAST; t <= v1::RETRANSMIT_TYPE_UNKNOWN; t++) {
    auto type = static_cast<v1::RetransmitType>(t);
    if (n == RetransmitTypeName(type)) {
      *out = type;
      return true;
    }
  }
  return false;
}

const std::vector<std::string>& RetransmitTypeNames() {
  static const std::vector<std::string> kNames = {"fast", "rto",    "loss",   "tlp",
                                                  "syn",  "synack", "probe0", "unknown"};
  return kNames;
}

std::vector<std::pair<std::string, uint64_t>> OrderedByType(
    const google::protobuf::Map<std::string, uint64_t>& m) {
  std::vector<std::pair<std::string, uint64_t>> out;
  for (const auto& name : RetransmitTypeNames()) {
    auto it = m.find(name);
    if (it != m.end()) out.emplace_back(name, it->second);
  }
  std::vector<std::pair<std::string, uint64_t>> other;
  for (const auto& kv : m) {
    const auto& names = RetransmitTypeNames();
    if (std::find(names.begin(), names.end(), kv.first) == names.end())
      other.emplace_back(kv.first, kv.second);
  }
  std::sort(other.begin(), other.end());
  out.insert(out.end(), other.begin(), other.end());
  return out;
}

std::string TargetSummary(const v1::RuleSpec& s) {
  std::string out = s.interface();
  auto add = [&](const std::string& part) { out += (out.empty() ? "" : " + ") + part; };
  if (!s.cgroup().empty()) add("cgroup " + s.cgroup());
  if (s.pid()) add("pid " + std::to_string(s.pid()));
  if (!s.unit().empty()) add("unit " + s.unit());
  if (!s.pod().empty()) add("pod " + s.pod());
  if (!s.container().empty()) add("container " + s.container());
  return out.empty() ? "-" : out;
}

std::string OwnerSummary(const v1::CgroupOwner& o) {
  if (o.path().empty()) return "-";
  std::string out;
  auto add = [&](const std::string& part) { out += (out.empty() ? "" : " ") + part; };
  if (!o.pod().empty()) add("pod " + o.pod());
  if (!o.container().empty())
    add(o.runtime() + " " + o.container().substr(0, 12));
  else if (!o.unit().empty())
    add(o.unit());
  if (out.empty()) out = o.path();
  return out;
}

std::string TargetSummary(const v1::Rule& r) {
  std::string out = TargetSummary(r.spec());
  const auto& s = r.spec();
  bool service = s.pid() || !s.unit().empty() || !s.container().empty() || !s.pod().empty();
  if (service && !r.cgroup().empty()) out += " (cgroup " + r.cgroup() + ")";
  return out;
}

std::string MatchSummary(const v1::Match& m) {
  std::vector<std::string> parts;
  if (m.family()) parts.push_back("ipv" + std::to_string(m.family()));
  if (!m.protocol().empty()) parts.push_back(m.protocol());
  if (!m.src().empty()) parts.push_back("src " + m.src());
  if (!m.dst().empty()) parts.push_back("dst " + m.dst());
  std::string sport = FormatPorts(m.sport()), dport = FormatPorts(m.dport());
  if (!sport.empty()) parts.push_back("sport " + sport);
  if (!dport.empty()) parts.push_back("dport " + dport);
  if (!m.tcp_flags().empty()) parts.push_back("flags " + m.tcp_flags());
  if (m.payload() != v1::PAYLOAD_ANY)
    parts.push_back(std::string("payload ") + PayloadName(m.payload()));
  if (parts.empty()) return "any";
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : " ") + p;
  return out;
}

std::string Rate3(double fraction) {
  if (!(fraction > 0)) return FormatRate(fraction);
  double pct = fraction * 100;
  char buf[32];
  snprintf(buf, sizeof(buf), "%.3g", pct);
  double rounded = std::strtod(buf, nullptr);
  return FormatRate(rounded / 100);
}

std::string LossSummary(const v1::LossModel& l) {
  std::string out;
  switch (l.model_case()) {
    case v1::LossModel::kBernoulli: out = FormatRate(l.bernoulli().rate()); break;
    case v1::LossModel::kGilbertElliott: {
      const auto& g = l.gilbert_elliott();
      out = "ge " + FormatRate(g.p()) + "," + FormatRate(g.r()) + "," + FormatRate(g.bad_loss()) +
            "," + FormatRate(g.good_loss());
      break;
    }
    case v1::LossModel::kEveryNth: out = "every " + std::to_string(l.every_nth()); break;
    case v1::LossModel::kFirstK: out = "first " + std::to_string(l.first_k()); break;
    case v1::LossModel::kRamp:
      out = "ramp";
      for (const auto& st : l.ramp().steps())
        out += (out == "ramp" ? " " : ",") + FormatRate(st.rate()) + "/" +
               FormatDuration(st.duration_ns());
      break;
    case v1::LossModel::kMarkov: {
      const auto& m = l.markov();
      out = "markov " + FormatRate(m.p13()) + "," + FormatRate(m.p31()) + "," +
            FormatRate(m.p32()) + "," + FormatRate(m.p23()) + "," + FormatRate(m.p14());
      break;
    }
    case v1::LossModel::kPolice:
      out = "police " + lossd::PoliceText(l.police().rate_bps(), l.police().burst_bytes(),
                                          l.police().per_flow());
      break;
    default: out = "none"; break;
  }
  if (l.has_seed()) out += " seed " + std::to_string(l.seed());
  return out;
}


std::string ImpairmentSummary(const v1::RuleSpec& s) {
  std::string out = LossSummary(s.loss());
  if (s.action() != v1::ACTION_DROP)
    out += std::string(" ") + lossd::ActionName(static_cast<lossd::Action>(s.action()));
  return out;
}


std::string LabelsSummary(const google::protobuf::Map<std::string, std::string>& labels) {
  std::map<std::string, std::string> sorted(labels.begin(), labels.end());
  std::string out;
  for (const auto& kv : sorted) out += (out.empty() ? "" : ",") + kv.first + "=" + kv.second;
  return out;
}

Table::Table(std::vector<std::string> header)
    : header_(std::move(header)), right_(header_.size(), false) {}

void Table::RightAlign(size_t column) {
  if (column < right_.size()) right_[column] = true;
}

void Table::AddRow(std::vector<std::string> row) {
  row.resize(header_.size());
  rows_.push_back(std::move(row));
}

std::vector<std::string> Table::Lines() const {
  std::vector<size_t> width(header_.size());
  for (size_t c = 0; c < header_.size(); c++) {
    width[c] = header_[c].size();
    for (const auto& r : rows_) width[c] = std::max(width[c], r[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string s;
    for (size_t c = 0; c < cells.size(); c++) {
      bool last = c + 1 == cells.size();
      size_t pad = width[c] - cells[c].size();
      if (right_[c]) s.append(pad, ' ');
      s += cells[c];
      if (!right_[c] && !last) s.append(pad, ' ');
      if (!last) s += "  ";
    }
    while (!s.empty() && s.back() == ' ') s.pop_back();
    return s;
  };
  std::vector<std::string> out;
  out.push_back(line(header_));
  for (const auto& r : rows_) out.push_back(line(r));
  return out;
}

std::vector<std::string> Table::FitLines(size_t max_width,
                                         const std::vector<size_t>& drop_order) const {
  auto widest = [](const std::vector<std::string>& lines) {
    size_t w = 0;
    for (const auto& l : lines) w = std::max(w, l.size());
    return w;
  };
  std::vector<std::string> lines = Lines();
  Table t = *this;
  std::vector<size_t> order = drop_order;  // column indexes of t as columns go
  for (size_t i = 0; i < order.size() && max_width && widest(lines) > max_width; i++) {
    size_t c = order[i];
    if (c >= t.header_.size()) continue;
    t.header_.erase(t.header_.begin() + c);
    t.right_.erase(t.right_.begin() + c);
    for (auto& r : t.rows_) r.erase(r.begin() + c);
    for (size_t j = i + 1; j < order.size(); j++)
      if (order[j] > c) order[j]--;
    lines = t.Lines();
  }
  return lines;
}

void Table::Print(FILE* out) const {
  for (const auto& l : Lines()) fprintf(out, "%s\n", l.c_str());
  fflush(out);
}

bool PrintLine(const std::string& line, bool flush) {
  if (fputs(line.c_str(), stdout) < 0 || fputc('\n', stdout) == EOF) return false;
  return !flush || fflush(stdout) == 0;
}

}  // namespace lossctl
