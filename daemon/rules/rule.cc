#include "rules/rule.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

namespace lossd {
namespace {

std::string Trim(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) b++;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) e--;
  return s.substr(b, e - b);
}

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Whole-string unsigned integer.
bool ParseUint(const std::string& s, uint64_t max, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  for (char c : s)
    if (!std::isdigit(static_cast<unsigned char>(c))) return false;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno || *end || v > max) return false;
  *out = v;
  return true;
}

bool ParseDouble(const std::string& s, double* out) {
  if (s.empty()) return false;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno || *end || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

std::vector<std::string> Split(const std::string& s, const std::string& seps) {
  std::vector<std::string> out;
  std::string cur;
  for (char c : s) {
    if (seps.find(c) != std::string::npos) {
      out.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(c);
    }
  }
  out.push_back(cur);
  return out;
}

}  // namespace

std::string Cidr::ToString() const {
  char buf[INET6_ADDRSTRLEN] = {};
  inet_ntop(family == 4 ? AF_INET : AF_INET6, addr.data(), buf, sizeof(buf));
  return std::string(buf) + "/" + std::to_string(prefix);
}

Result<Cidr> ParseCidr(const std::string& text) {
  std::string s = Trim(text);
  Cidr c;
  std::string host = s;
  std::optional<uint64_t> prefix;
  auto slash = s.find('/');
  if (slash != std::string::npos) {
    host = s.substr(0, slash);
    uint64_t v;
    if (!ParseUint(s.substr(slash + 1), 128, &v))
      return InvalidArgument("invalid CIDR '" + text + "': prefix length must be a number");
    prefix = v;
  }
  if (inet_pton(AF_INET, host.c_str(), c.addr.data()) == 1) {
    c.family = 4;
  } else if (inet_pton(AF_INET6, host.c_str(), c.addr.data()) == 1) {
    c.family = 6;
  } else {
    return InvalidArgument("invalid CIDR '" + text + "': '" + host +
                           "' is not an IPv4 or IPv6 address");
  }
  int max = c.family == 4 ? 32 : 128;
  c.prefix = prefix ? static_cast<int>(*prefix) : max;
  if (c.prefix > max)
    return InvalidArgument("invalid CIDR '" + text + "': prefix length " +
                           std::to_string(c.prefix) + " exceeds " + std::to_string(max));
  // Host bits must be zero: "10.0.0.1/24" is almost always a typo for a host
  // or a network, and silently masking it would target the wrong traffic.
  for (int bit = c.prefix; bit < max; bit++) {
    if (c.addr[bit / 8] & (0x80 >> (bit % 8)))
      return InvalidArgument("invalid CIDR '" + text + "': host bits set beyond /" +
                             std::to_string(c.prefix));
  }
  return c;
}

Result<PortRange> ParsePortRange(const std::string& text) {
  std::string s = Trim(text);
  PortRange r;
  auto dash = s.find('-');
  uint64_t lo, hi;
  if (dash == std::string::npos) {
    if (!ParseUint(s, 65535, &lo))
      return InvalidArgument("invalid port '" + text + "': expected 0-65535 or LO-HI");
    hi = lo;
  } else if (!ParseUint(Trim(s.substr(0, dash)), 65535, &lo) ||
             !ParseUint(Trim(s.substr(dash + 1)), 65535, &hi)) {
    return InvalidArgument("invalid port range '" + text + "': expected LO-HI within 0-65535");
  }
  if (lo > hi)
    return InvalidArgument("invalid port range '" + text + "': low end above high end");
  r.lo = static_cast<uint16_t>(lo);
  r.hi = static_cast<uint16_t>(hi);
  return r;
}

Result<double> ParseRate(const std::string& text) {
  std::string s = Trim(text);
  bool percent = !s.empty() && s.back() == '%';
  if (percent) s = Trim(s.substr(0, s.size() - 1));
  double v;
  if (!ParseDouble(s, &v))
    return InvalidArgument("invalid rate '" + text + "': expected e.g. 1%, 0.005% or 0.01");
  if (percent) v /= 100.0;
  if (v < 0 || v > 1)
    return InvalidArgument("invalid rate '" + text + "': must lie between 0% and 100%");
  return v;
}

Result<int> ParseProtocol(const std::string& text) {
  std::string s = Lower(Trim(text));
  if (s == "tcp") return IPPROTO_TCP;
  if (s == "udp") return IPPROTO_UDP;
  if (s == "icmp") return IPPROTO_ICMP;
  if (s == "icmpv6" || s == "icmp6" || s == "ipv6-icmp") return IPPROTO_ICMPV6;
  if (s == "any" || s == "all" || s.empty()) return 0;
  uint64_t v;
  if (ParseUint(s, 255, &v)) return static_cast<int>(v);
  return InvalidArgument("invalid protocol '" + text + "': expected tcp, udp, icmp, icmpv6, any or 0-255");
}

Status ParseTcpFlags(const std::string& text, uint8_t* mask, uint8_t* value) {
  static const struct {
    const char* name;
    uint8_t bit;
  } kFlags[] = {{"fin", 0x01}, {"syn", 0x02}, {"rst", 0x04}, {"psh", 0x08},
                {"ack", 0x10}, {"urg", 0x20}, {"ece", 0x40}, {"cwr", 0x80}};
  *mask = *value = 0;
  for (std::string tok : Split(Lower(text), ",|+ ")) {
    tok = Trim(tok);
    if (tok.empty()) continue;
    bool negate = tok[0] == '!';
    if (negate) tok = tok.substr(1);
    uint8_t bit = 0;
    for (const auto& f : kFlags)
      if (tok == f.name) bit = f.bit;
    if (!bit)
      return InvalidArgument("invalid TCP flag '" + tok + "' in '" + text +
                             "': expected fin, syn, rst, psh, ack, urg, ece, cwr, optionally with '!'");
    if (*mask & bit) return InvalidArgument("TCP flag '" + tok + "' given twice in '" + text + "'");
    *mask |= bit;
    if (!negate) *value |= bit;
  }
  if (!*mask) return InvalidArgument("empty TCP flag list '" + text + "'");
  return Status::Ok();
}

Result<std::chrono::nanoseconds> ParseDuration(const std::string& text) {
  std::string s = Lower(Trim(text));
  static const struct {
    const char* suffix;
    double ns;
  } kUnits[] = {{"ms", 1e6}, {"us", 1e3}, {"ns", 1}, {"s", 1e9}, {"m", 60e9}, {"h", 3600e9}};
  double scale = 1e9;  // plain number: seconds
  for (const auto& u : kUnits) {
    size_t n = std::strlen(u.suffix);
    if (s.size() > n && s.compare(s.size() - n, n, u.suffix) == 0 &&
        (std::isdigit(static_cast<unsigned char>(s[s.size() - n - 1])) || s[s.size() - n - 1] == '.')) {
      scale = u.ns;
      s = s.substr(0, s.size() - n);
      break;
    }
  }
  double v;
  if (!ParseDouble(s, &v) || v < 0 || v * scale > 3.15e16 /* a year */)
    return InvalidArgument("invalid duration '" + text + "': expected e.g. 500ms, 30s, 5m, 1h");
  return std::chrono::nanoseconds(static_cast<int64_t>(std::llround(v * scale)));
}

Result<LossModel> ParseGilbertElliott(const std::string& text) {
  auto parts = Split(text, ",");
  if (parts.empty() || parts.size() > 4)
    return InvalidArgument("invalid Gilbert-Elliott model '" + text +
                           "': expected p[,r[,1-h[,1-k]]] as in netem's gemodel");
  double v[4];
  for (size_t i = 0; i < parts.size(); i++) {
    auto r = ParseRate(parts[i]);
    if (!r.ok())
      return InvalidArgument("invalid Gilbert-Elliott model '" + text + "': " + r.status().message());
    v[i] = *r;
  }
  LossModel m;
  m.kind = LossModel::Kind::kGilbertElliott;
  m.p = v[0];
  m.r = parts.size() > 1 ? v[1] : 1 - v[0];
  m.bad_loss = parts.size() > 2 ? v[2] : 1.0;
  m.good_loss = parts.size() > 3 ? v[3] : 0.0;
  return m;
}

const char* HookName(Hook hook) {
  switch (hook) {
    case Hook::kAuto: return "auto";
    case Hook::kXdp: return "xdp";
    case Hook::kTc: return "tc";
    case Hook::kCgroup: return "cgroup";
  }
  return "?";
}

const char* DirectionName(Direction dir) {
  switch (dir) {
    case Direction::kIngress: return "ingress";
    case Direction::kEgress: return "egress";
    case Direction::kBoth: return "both";
  }
  return "?";
}

Status Validate(const RuleSpec& s) {
  if (s.iface.empty() && s.cgroup.empty())
    return InvalidArgument("a rule needs a target: an interface or a cgroup");
  if (s.hook == Hook::kCgroup && s.cgroup.empty())
    return InvalidArgument("hook 'cgroup' needs a cgroup path");
  if ((s.hook == Hook::kXdp || s.hook == Hook::kTc) && s.iface.empty())
    return InvalidArgument(std::string("hook '") + HookName(s.hook) + "' needs an interface");
  if (s.hook == Hook::kXdp && s.dir != Direction::kIngress)
    return InvalidArgument("XDP sees ingress only: use --hook tc (or auto) for egress");
  if (s.hook == Hook::kXdp && !s.cgroup.empty())
    return InvalidArgument("XDP runs before any socket exists: a cgroup match needs hook tc or cgroup");
  if (s.per_segment && s.iface.empty())
    return InvalidArgument("per-segment loss changes an interface's offloads: name the interface");

  int fam = s.family;
  for (const auto* c : {&s.src, &s.dst}) {
    if (!*c) continue;
    if (fam && fam != (*c)->family)
      return InvalidArgument("source, destination and family disagree on IPv4 vs IPv6");
    fam = (*c)->family;
  }
  if (s.family != 0 && s.family != 4 && s.family != 6)
    return InvalidArgument("family must be 4, 6 or any");
  // ICMP exists in IPv4 only, ICMPv6 in IPv6 only: such a rule would never match.
  if (s.l4proto == IPPROTO_ICMP && fam == 6)
    return InvalidArgument("protocol icmp is IPv4's; for IPv6 addresses use icmpv6");
  if (s.l4proto == IPPROTO_ICMPV6 && fam == 4)
    return InvalidArgument("protocol icmpv6 is IPv6's; for IPv4 addresses use icmp");

  bool ports = !s.sport.Any() || !s.dport.Any();
  if (ports && s.l4proto != 0 && s.l4proto != IPPROTO_TCP && s.l4proto != IPPROTO_UDP)
    return InvalidArgument("ports need protocol tcp or udp (or any)");
  if (s.tcp_flags_mask && s.l4proto != 0 && s.l4proto != IPPROTO_TCP)
    return InvalidArgument("TCP flags need protocol tcp");
  if ((s.tcp_flags_value & ~s.tcp_flags_mask) != 0)
    return InvalidArgument("TCP flag value has bits outside its mask");
  if (s.payload != LOSS_PAYLOAD_ANY && s.payload != LOSS_PAYLOAD_ONLY && s.payload != LOSS_PAYLOAD_NONE)
    return InvalidArgument("payload must be any, only or none");
  if (s.payload != LOSS_PAYLOAD_ANY && s.l4proto != 0 && s.l4proto != IPPROTO_TCP &&
      s.l4proto != IPPROTO_UDP)
    return InvalidArgument("a payload condition needs protocol tcp or udp");

  const LossModel& m = s.model;
  auto prob = [](double v) { return v >= 0 && v <= 1 && std::isfinite(v); };
  switch (m.kind) {
    case LossModel::Kind::kBernoulli:
      if (!prob(m.p)) return InvalidArgument("rate must lie between 0% and 100%");
      break;
    case LossModel::Kind::kGilbertElliott:
      if (!prob(m.p) || !prob(m.r) || !prob(m.bad_loss) || !prob(m.good_loss))
        return InvalidArgument("Gilbert-Elliott parameters must lie between 0% and 100%");
      break;
    case LossModel::Kind::kEveryNth:
      if (m.n < 1) return InvalidArgument("every-Nth needs N >= 1");
      break;
    case LossModel::Kind::kFirstK:
      if (m.n < 1) return InvalidArgument("first-K needs K >= 1");
      break;
  }
  if (s.priority > kMaxPriority)
    return InvalidArgument("priority must lie between 0 and " + std::to_string(kMaxPriority));
  if (s.ttl.count() < 0) return InvalidArgument("TTL must not be negative");
  return Status::Ok();
}

}  // namespace lossd
