#include "rules/rule.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <sstream>
#include <utility>
#include <vector>

#include "base/address.h"

namespace lossd {

std::string TrimSpace(const std::string& s) {
  size_t b = 0, e = s.size();
  while (b < e && std::isspace(static_cast<unsigned char>(s[b]))) b++;
  while (e > b && std::isspace(static_cast<unsigned char>(s[e - 1]))) e--;
  return s.substr(b, e - b);
}

namespace {

std::string Trim(const std::string& s) {
  return TrimSpace(s);
}

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Whole-string unsigned integer.
bool ParseUint(const std::string& s, uint64_t max, uint64_t* out) {
  return ParseDecimal(s, 0, max, out);
}

// A decimal number as typed: value = digits * 10^exp. The grammar, shared
// by rates and durations (and units.py): [+-]? (D+ [. D*] | . D+) ([eE] [+-]? D{1,3})?
struct Decimal {
  bool negative = false;
  std::string digits;  // at least one
  int exp = 0;
};

// Reads a number at s[*pos], advancing *pos past it; false if none is there.
bool ReadDecimal(const std::string& s, size_t* pos, bool allow_sign, Decimal* out) {
  size_t i = *pos;
  Decimal d;
  if (allow_sign && i < s.size() && (s[i] == '+' || s[i] == '-')) d.negative = s[i++] == '-';
  auto digit = [&](size_t k) {
    return k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]));
  };
  while (digit(i)) d.digits.push_back(s[i++]);
  if (i < s.size() && s[i] == '.') {
    i++;
    while (digit(i)) {
      d.digits.push_back(s[i++]);
      d.exp--;
    }
  }
  if (d.digits.empty()) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    size_t j = i + 1;
    bool neg = false;
    if (j < s.size() && (s[j] == '+' || s[j] == '-')) neg = s[j++] == '-';
    int e = 0, n = 0;
    while (digit(j) && n < 4) {
      e = e * 10 + (s[j++] - '0');
      n++;
    }
    if (n == 0 || n > 3) return false;
    d.exp += neg ? -e : e;
    i = j;
  }
  *pos = i;
  *out = d;
  return true;
}

// The whole string as one number.
bool WholeDecimal(const std::string& s, bool allow_sign, Decimal* out) {
  size_t pos = 0;
  return ReadDecimal(s, &pos, allow_sign, out) && pos == s.size();
}

// The double nearest digits * 10^(exp + shift) (strtod rounds correctly).
double ToDouble(const Decimal& d, int shift) {
  std::string text = (d.negative ? "-" : "") + d.digits + "e" + std::to_string(d.exp + shift);
  return std::strtod(text.c_str(), nullptr);
}

// d * 10^pow10 * mult rounded to an integer (half to even), exactly; false
// when it exceeds `cap`.
bool ScaleExact(const Decimal& d, int pow10, uint64_t mult, uint64_t cap, uint64_t* out) {
  std::string digits = d.digits;
  size_t nz = digits.find_first_not_of('0');
  if (nz == std::string::npos) {
    *out = 0;
    return true;
  }
  digits = digits.substr(nz);
  long e = static_cast<long>(d.exp) + pow10;
  std::string int_part, frac;
  if (e >= 0) {
    if (digits.size() + static_cast<size_t>(e) > 19) return false;
    int_part = digits + std::string(static_cast<size_t>(e), '0');
  } else {
    long split = static_cast<long>(digits.size()) + e;  // digits before the point
    if (split > 19) return false;
    int_part = split > 0 ? digits.substr(0, static_cast<size_t>(split)) : "0";
    frac = split >= 0 ? digits.substr(static_cast<size_t>(split))
                      : std::string(static_cast<size_t>(-split), '0') + digits;
  }
  unsigned __int128 whole = std::strtoull(int_part.c_str(), nullptr, 10);
  whole *= mult;
  // frac * mult: the integer carry goes to `whole`, the digits stay a fraction.
  uint64_t carry = 0;
  for (size_t k = frac.size(); k-- > 0;) {
    uint64_t v = static_cast<uint64_t>(frac[k] - '0') * mult + carry;
    frac[k] = static_cast<char>('0' + v % 10);
    carry = v / 10;
  }
  whole += carry;
  if (!frac.empty()) {
    bool above_half =
        frac[0] > '5' || (frac[0] == '5' && frac.find_first_not_of('0', 1) != std::string::npos);
    bool half = frac[0] == '5' && frac.find_first_not_of('0', 1) == std::string::npos;
    if (above_half || (half && (whole & 1))) whole += 1;
  }
  if (whole > cap) return false;
  *out = static_cast<uint64_t>(whole);
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

bool ParseDecimal(const std::string& s, uint64_t lo, uint64_t hi, uint64_t* out) {
  if (s.empty() || s.size() > 20) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (UINT64_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  if (v < lo || v > hi) return false;
  *out = v;
  return true;
}

std::string Cidr::ToString() const {
  return AddrText(AfOfVersion(family), addr.data()) + "/" + std::to_string(prefix);
}

Result<Cidr> ParseCidr(const std::string& text) {
  if (text.size() > kMaxInputLength) return InvalidArgument("invalid CIDR: too long");
  std::string s = Trim(text);
  Cidr c;
  std::string host = s;
  std::optional<uint64_t> prefix;
  auto slash = s.find('/');
  if (slash != std::string::npos) {
    host = s.substr(0, slash);
    uint64_t v;
    if (!ParseUint(s.substr(slash + 1), 128, &v))
      return InvalidArgument("invalid CIDR '" + Shown(text) + "': prefix length must be a number");
    prefix = v;
  }
  if (inet_pton(AF_INET, host.c_str(), c.addr.data()) == 1) {
    c.family = 4;
  } else if (inet_pton(AF_INET6, host.c_str(), c.addr.data()) == 1) {
    c.family = 6;
  } else {
    return InvalidArgument("invalid CIDR '" + Shown(text) + "': '" + Shown(host) +
                           "' is not an IPv4 or IPv6 address");
  }
  int max = c.family == 4 ? 32 : 128;
  c.prefix = prefix ? static_cast<int>(*prefix) : max;
  if (c.prefix > max)
    return InvalidArgument("invalid CIDR '" + Shown(text) + "': prefix length " +
                           std::to_string(c.prefix) + " exceeds " + std::to_string(max));
  // An IPv4-mapped IPv6 address (::ffff:a.b.c.d, as dual-stack sockets show
  // IPv4 peers) is the IPv4 address on the wire: the rule must match IPv4.
  static const uint8_t kMapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (c.family == 6 && c.prefix >= 96 && std::memcmp(c.addr.data(), kMapped, 12) == 0) {
    std::memmove(c.addr.data(), c.addr.data() + 12, 4);
    std::memset(c.addr.data() + 4, 0, 12);
    c.family = 4;
    c.prefix -= 96;
  }
  // Host bits must be zero: "10.0.0.1/24" is almost always a typo for a host
  // or a network, and silently masking it would target the wrong traffic.
  const auto mask = PrefixMask(c.prefix);
  for (int i = 0; i < 16; i++) {
    if (c.addr[i] & ~mask[i])
      return InvalidArgument("invalid CIDR '" + Shown(text) + "': host bits set beyond /" +
                             std::to_string(c.prefix));
  }
  return c;
}

Result<PortRange> ParsePortRange(const std::string& text) {
  std::string s = Trim(text.substr(0, kMaxInputLength + 1));
  PortRange r;
  auto dash = s.find_first_of("-:");
  uint64_t lo, hi;
  if (dash == std::string::npos) {
    if (!ParseUint(s, 65535, &lo))
      return InvalidArgument("invalid port '" + Shown(text) + "': expected 0-65535 or LO-HI");
    hi = lo;
  } else if (!ParseUint(Trim(s.substr(0, dash)), 65535, &lo) ||
             !ParseUint(Trim(s.substr(dash + 1)), 65535, &hi)) {
    return InvalidArgument("invalid port range '" + Shown(text) +
                           "': expected LO-HI within 0-65535");
  }
  if (lo > hi)
    return InvalidArgument("invalid port range '" + Shown(text) + "': low end above high end");
  r.lo = static_cast<uint16_t>(lo);
  r.hi = static_cast<uint16_t>(hi);
  return r;
}

Result<double> ParseRate(const std::string& text) {
  std::string s = Lower(Trim(text.substr(0, kMaxInputLength + 1)));
  int shift = 0;
  if (!s.empty() && s.back() == '%') {
    shift = -2;
    s = Trim(s.substr(0, s.size() - 1));
  } else if (s.size() > 3 && s.compare(s.size() - 3, 3, "ppm") == 0) {
    shift = -6;
    s = Trim(s.substr(0, s.size() - 3));
  }
  Decimal d;
  if (text.size() > kMaxInputLength || !WholeDecimal(s, true, &d))
    return InvalidArgument("invalid rate '" + Shown(text) +
                           "': expected e.g. 1%, 0.005%, 50ppm or 0.01");
  double v = ToDouble(d, shift);
  if (d.negative && v == 0) v = 0;  // "-0%"
  if (!(v >= 0 && v <= 1))
    return InvalidArgument("invalid rate '" + Shown(text) + "': must lie between 0% and 100%");
  return v;
}

Result<int> ParseProtocol(const std::string& text) {
  std::string s = Lower(Trim(text.substr(0, kMaxInputLength + 1)));
  if (s == "tcp") return IPPROTO_TCP;
  if (s == "udp") return IPPROTO_UDP;
  if (s == "icmp") return IPPROTO_ICMP;
  if (s == "icmpv6" || s == "icmp6" || s == "ipv6-icmp") return IPPROTO_ICMPV6;
  if (s == "any" || s == "all" || s.empty()) return 0;
  uint64_t v;
  if (ParseUint(s, 255, &v)) return static_cast<int>(v);
  return InvalidArgument("invalid protocol '" + Shown(text) +
                         "': expected tcp, udp, icmp, icmpv6, any or 0-255");
}

const char* const kTcpFlagNames[8] = {"fin", "syn", "rst", "psh", "ack", "urg", "ece", "cwr"};

std::string TcpFlagsText(uint8_t mask, uint8_t value) {
  std::string out;
  for (int b = 0; b < 8; b++) {
    if (!(mask & (1 << b))) continue;
    if (!out.empty()) out += ",";
    if (!(value & (1 << b))) out += "!";
    out += kTcpFlagNames[b];
  }
  return out;
}

Status ParseTcpFlags(const std::string& text, uint8_t* mask, uint8_t* value) {
  *mask = *value = 0;
  if (text.size() > kMaxInputLength) return InvalidArgument("TCP flag list too long");
  std::string s = Lower(text);
  auto sep = [](char c) {
    return c == ',' || c == '|' || c == '+' || std::isspace(static_cast<unsigned char>(c));
  };
  size_t i = 0;
  while (i < s.size()) {
    if (sep(s[i])) {
      i++;
      continue;
    }
    bool negate = s[i] == '!';
    if (negate) {  // "!ack", "! ack"
      i++;
      while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) i++;
    }
    size_t b = i;
    while (i < s.size() && !sep(s[i]) && s[i] != '!') i++;
    std::string tok = s.substr(b, i - b);
    uint8_t bit = 0;
    for (int k = 0; k < 8; k++)
      if (tok == kTcpFlagNames[k]) bit = static_cast<uint8_t>(1 << k);
    if (!bit)
      return InvalidArgument(
          "invalid TCP flag '" + Shown(tok) + "' in '" + Shown(text) +
          "': expected fin, syn, rst, psh, ack, urg, ece, cwr, optionally with '!'");
    if (*mask & bit)
      return InvalidArgument("TCP flag '" + Shown(tok) + "' given twice in '" + Shown(text) + "'");
    *mask |= bit;
    if (!negate) *value |= bit;
  }
  if (!*mask) return InvalidArgument("empty TCP flag list '" + Shown(text) + "'");
  return Status::Ok();
}

Result<std::chrono::nanoseconds> ParseDuration(const std::string& text) {
  struct Unit {
    const char* suffix;
    int pow10;
    uint64_t mult;
  };
  static const Unit kUnits[] = {
      // in the order units.py tries them: "ms" before "m", "min" before "m"
      {"ns", 0, 1},
      {"us", 3, 1},
      {"\xc2\xb5s", 3, 1} /* µs */,
      {"\xce\xbcs", 3, 1} /* μs */,
      {"ms", 6, 1},
      {"sec", 9, 1},
      {"min", 9, 60},
      {"s", 9, 1},
      {"m", 9, 60},
      {"h", 9, 3600},
      {"d", 9, 86400}};
  const uint64_t cap = static_cast<uint64_t>(kMaxDurationSeconds) * 1000000000ull;
  auto invalid = [&](const std::string& why) {
    return InvalidArgument("invalid duration '" + Shown(text) + "': " + why);
  };
  if (text.size() > kMaxInputLength) return invalid("too long");
  std::string s;
  for (char c : Lower(Trim(text)))
    if (c != ' ') s.push_back(c);
  const char* expected = "expected e.g. 500ms, 30s, 2m30s, 1h, 1d or a number of seconds";
  Decimal d;
  uint64_t ns = 0;
  if (WholeDecimal(s, true, &d)) {  // a plain number: seconds
    if (d.negative) return invalid("must not be negative");
    if (!ScaleExact(d, 9, 1, cap, &ns))
      return invalid("more than 30 years; a plain number is seconds (for nanoseconds " +
                     (Trim(text).size() <= 62 ? "write '" + Trim(text) + "ns')"
                                              : std::string("add the unit: ns)")));
    return std::chrono::nanoseconds(static_cast<int64_t>(ns));
  }
  size_t pos = 0;
  if (s.empty()) return invalid(expected);
  while (pos < s.size()) {
    if (s[pos] == '-') return invalid("must not be negative");
    if (!ReadDecimal(s, &pos, true, &d) || d.negative) return invalid(expected);
    const Unit* unit = nullptr;
    for (const auto& u : kUnits) {
      size_t n = std::strlen(u.suffix);
      if (s.compare(pos, n, u.suffix) == 0) {
        unit = &u;
        pos += n;
        break;
      }
    }
    if (!unit) return invalid(expected);
    uint64_t part;
    if (!ScaleExact(d, unit->pow10, unit->mult, cap, &part) || part > cap - ns)
      return invalid("more than 30 years");
    ns += part;
  }
  return std::chrono::nanoseconds(static_cast<int64_t>(ns));
}

namespace {

// 1 .. `max` comma-separated rates (ParseRate's); a message names the model
// ("invalid WHAT 'TEXT': ...") and says what is `expected` on a wrong count.
Result<std::vector<double>> RateList(const std::string& text, size_t max, const char* what,
                                     const char* expected) {
  auto parts = Split(text.substr(0, kMaxInputLength + 1), ",");
  std::string invalid = std::string("invalid ") + what + " '" + Shown(text) + "': ";
  if (parts.size() > max) return InvalidArgument(invalid + expected);
  std::vector<double> v;
  for (const auto& part : parts) {
    auto r = ParseRate(part);
    if (!r.ok()) return InvalidArgument(invalid + r.status().message());
    v.push_back(*r);
  }
  return v;
}

}  // namespace

Result<LossModel> ParseGilbertElliott(const std::string& text) {
  auto v = RateList(text, 4, "Gilbert-Elliott model",
                    "expected p[,r[,1-h[,1-k]]] as in netem's gemodel");
  if (!v.ok()) return v.status();
  LossModel m;
  m.kind = LossModel::Kind::kGilbertElliott;
  m.p = (*v)[0];
  m.r = v->size() > 1 ? (*v)[1] : 1 - (*v)[0];
  m.bad_loss = v->size() > 2 ? (*v)[2] : 1.0;
  m.good_loss = v->size() > 3 ? (*v)[3] : 0.0;
  return m;
}

Result<LossModel> ParseMarkov(const std::string& text) {
  auto v = RateList(text, 5, "Markov model",
                    "expected p13[,p31[,p32[,p23[,p14]]]] as in netem's loss state");
  if (!v.ok()) return v.status();
  LossModel m;
  m.kind = LossModel::Kind::kMarkov4;
  m.p13 = (*v)[0];
  m.p31 = v->size() > 1 ? (*v)[1] : 1 - (*v)[0];
  m.p32 = v->size() > 2 ? (*v)[2] : 0.0;
  m.p23 = v->size() > 3 ? (*v)[3] : 1.0;
  m.p14 = v->size() > 4 ? (*v)[4] : 0.0;
  Status st = CheckMarkov(m);
  if (!st.ok())
    return InvalidArgument("invalid Markov model '" + Shown(text) + "': " + st.message());
  return m;
}

Status CheckMarkov(const LossModel& m) {
  for (double v : {m.p13, m.p31, m.p32, m.p23, m.p14})
    if (!(v >= 0 && v <= 1 && std::isfinite(v)))
      return InvalidArgument("Markov parameters must lie between 0% and 100%");
  // A share of state 1's or 3's packets: at most all of them (within rounding).
  constexpr double kOne = 1 + 1e-12;
  if (m.p13 + m.p14 > kOne)
    return InvalidArgument("p13 + p14 must not exceed 100% (the ways out of state 1)");
  if (m.p31 + m.p32 > kOne)
    return InvalidArgument("p31 + p32 must not exceed 100% (the ways out of state 3)");
  if (m.p13 > 0 && m.p31 == 0)
    return InvalidArgument("the burst state must be left: p13 > 0 needs p31 > 0");
  if (m.p32 > 0 && m.p23 == 0)
    return InvalidArgument("state 2 must be left: p32 > 0 needs p23 > 0");
  return Status::Ok();
}

namespace {

// A unit of a quantity: the number times 10^pow10 times mult.
struct QuantityUnit {
  const char* name;
  int pow10;
  uint64_t mult;
};

// tc's rate units (bits or bytes per second).
constexpr QuantityUnit kRateUnits[] = {
    {"bit", 0, 1},  {"kbit", 3, 1}, {"mbit", 6, 1}, {"gbit", 9, 1}, {"tbit", 12, 1},
    {"bps", 0, 8},  {"kbps", 3, 8}, {"mbps", 6, 8}, {"gbps", 9, 8}};
constexpr const char* kRateUnitNames =
    "bit, kbit, mbit, gbit, tbit (bits per second) or bps, kbps, mbps, gbps (bytes per second, "
    "as tc reads them)";
// Sizes in bytes ("" a bare number).
constexpr QuantityUnit kSizeUnits[] = {
    {"", 0, 1},           {"b", 0, 1},          {"k", 0, 1 << 10},    {"kb", 0, 1 << 10},
    {"kib", 0, 1 << 10},  {"m", 0, 1 << 20},    {"mb", 0, 1 << 20},   {"mib", 0, 1 << 20},
    {"g", 0, 1ULL << 30}, {"gb", 0, 1ULL << 30}, {"gib", 0, 1ULL << 30}};
constexpr const char* kSizeUnitNames =
    "b, k (kb, kib), m (mb, mib) or g (gb, gib), x1024 each, or a bare number of bytes";

// "NUMBER UNIT" (no sign; spaces around and between), the unit one of `units`
// in any case: *out the number in the units' base, rounded half to even
// (UINT64_MAX when larger). Else a message: "'TEXT' ...".
template <size_t N>
Status ParseQuantity(const std::string& text, const QuantityUnit (&units)[N],
                     const char* unit_names, const char* example, uint64_t* out) {
  std::string s = Trim(text);
  std::string quoted = "'" + Shown(s) + "'";
  size_t pos = 0;
  Decimal d;
  if (!ReadDecimal(s, &pos, /*allow_sign=*/false, &d))
    return InvalidArgument(quoted + " is not a number with a unit, e.g. " + example);
  std::string unit = Lower(Trim(s.substr(pos)));
  for (const QuantityUnit& u : units) {
    if (unit != u.name) continue;
    if (!ScaleExact(d, u.pow10, u.mult, UINT64_MAX, out)) *out = UINT64_MAX;
    return Status::Ok();
  }
  if (unit.empty()) return InvalidArgument(quoted + " needs a unit: " + unit_names);
  return InvalidArgument(quoted + ": unknown unit '" + Shown(unit) + "': expected " + unit_names);
}

}  // namespace

Result<LossModel> ParsePolice(const std::string& text) {
  std::string invalid = "invalid police model '" + Shown(text) + "': ";
  auto parts = Split(text.substr(0, kMaxInputLength + 1), ",/");
  if (text.size() > kMaxInputLength || parts.size() < 2 || parts.size() > 3)
    return InvalidArgument(invalid + "expected RATE,BURST[,flow|rule], e.g. 50mbit,64kib or " +
                           "50mbit,64kib,flow");
  LossModel m;
  m.kind = LossModel::Kind::kPolice;
  if (parts.size() == 3) {
    std::string scope = Lower(Trim(parts[2]));
    if (scope != "flow" && scope != "rule")
      return InvalidArgument(invalid + "expected RATE,BURST[,flow|rule]: the third part '" +
                             Shown(Trim(parts[2])) +
                             "' must be flow (a bucket per flow) or rule (one, the default)");
    m.police_per_flow = scope == "flow";
  }
  Status st = ParseQuantity(parts[0], kRateUnits, kRateUnitNames, "50mbit", &m.rate_bps);
  if (!st.ok()) return InvalidArgument(invalid + "the rate " + st.message());
  st = ParseQuantity(parts[1], kSizeUnits, kSizeUnitNames, "64kib", &m.burst_bytes);
  if (!st.ok()) return InvalidArgument(invalid + "the burst " + st.message());
  st = CheckPolice(m);
  if (!st.ok()) return InvalidArgument(invalid + st.message());
  return m;
}

Status CheckPolice(const LossModel& m) {
  if (m.rate_bps < kMinPoliceBps || m.rate_bps > kMaxPoliceBps)
    return InvalidArgument("a policer's rate must lie between " + BitRateText(kMinPoliceBps) +
                           " and " + BitRateText(kMaxPoliceBps));
  if (m.burst_bytes < 1 || m.burst_bytes > kMaxPoliceBurst)
    return InvalidArgument("a policer's burst must lie between " + ByteSizeText(1) + " and " +
                           ByteSizeText(kMaxPoliceBurst));
  return Status::Ok();
}

namespace {

// v in the largest of `units` (largest first) that divides it exactly.
std::string ExactText(uint64_t v, const std::pair<uint64_t, const char*>* units, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (v && v % units[i].first == 0) return std::to_string(v / units[i].first) + units[i].second;
  return std::to_string(v) + units[n - 1].second;
}

}  // namespace

std::string BitRateText(uint64_t bits_per_second) {
  static const std::pair<uint64_t, const char*> kUnits[] = {
      {1000000000000ULL, "tbit"}, {1000000000, "gbit"}, {1000000, "mbit"}, {1000, "kbit"},
      {1, "bit"}};
  return ExactText(bits_per_second, kUnits, std::size(kUnits));
}

std::string ByteSizeText(uint64_t bytes) {
  static const std::pair<uint64_t, const char*> kUnits[] = {
      {1ULL << 30, "gib"}, {1 << 20, "mib"}, {1 << 10, "kib"}, {1, "b"}};
  return ExactText(bytes, kUnits, std::size(kUnits));
}

std::string PoliceText(uint64_t rate_bps, uint64_t burst_bytes, bool per_flow) {
  return BitRateText(rate_bps) + "," + ByteSizeText(burst_bytes) + (per_flow ? ",flow" : "");
}

namespace {

// An enumeration's value by name: any case, the lossd.v1 prefix optional.
template <typename T, size_t N>
Result<T> Choose(const std::string& text, const char* what, const char* prefix,
                 const char* expected, const std::pair<const char*, T> (&table)[N]) {
  std::string s = Lower(Trim(text.substr(0, kMaxInputLength + 1)));
  std::string p = Lower(prefix);
  if (s.compare(0, p.size(), p) == 0 && s.size() > p.size()) s = s.substr(p.size());
  for (const auto& kv : table)
    if (s == kv.first) return kv.second;
  return InvalidArgument(std::string("invalid ") + what + " '" + Shown(text) + "': expected " +
                         expected);
}

}  // namespace

Result<Hook> ParseHook(const std::string& text) {
  static const std::pair<const char*, Hook> kTable[] = {{"", Hook::kAuto},
                                                        {"auto", Hook::kAuto},
                                                        {"xdp", Hook::kXdp},
                                                        {"tc", Hook::kTc},
                                                        {"cgroup", Hook::kCgroup}};
  return Choose(text, "hook", "HOOK_", "auto, xdp, tc or cgroup", kTable);
}

Result<Direction> ParseDirection(const std::string& text) {
  static const std::pair<const char*, Direction> kTable[] = {
      {"", Direction::kIngress},      {"ingress", Direction::kIngress}, {"in", Direction::kIngress},
      {"egress", Direction::kEgress}, {"out", Direction::kEgress},      {"both", Direction::kBoth}};
  return Choose(text, "direction", "DIRECTION_", "ingress, egress or both", kTable);
}

Result<int> ParsePayload(const std::string& text) {
  static const std::pair<const char*, int> kTable[] = {{"", LOSS_PAYLOAD_ANY},
                                                       {"any", LOSS_PAYLOAD_ANY},
                                                       {"only", LOSS_PAYLOAD_ONLY},
                                                       {"none", LOSS_PAYLOAD_NONE}};
  return Choose(text, "payload", "PAYLOAD_", "any, only or none", kTable);
}

Result<Action> ParseAction(const std::string& text) {
  static const std::pair<const char*, Action> kTable[] = {
      {"", Action::kDrop},
      {"drop", Action::kDrop},
      {"corrupt", Action::kCorrupt},
      {"corrupt-payload", Action::kCorruptPayload},
      {"corrupt_payload", Action::kCorruptPayload},
      {"duplicate", Action::kDuplicate},
      {"ecn", Action::kEcn},
      {"ecn-pass", Action::kEcnPass},
      {"ecn_pass", Action::kEcnPass}};
  return Choose(text, "action", "ACTION_",
                "drop, corrupt, corrupt-payload, duplicate, ecn or ecn-pass", kTable);
}

Result<int> ParseFamily(const std::string& text) {
  static const std::pair<const char*, int> kTable[] = {{"", 0},  {"any", 0},  {"0", 0},
                                                       {"4", 4}, {"ipv4", 4}, {"inet", 4},
                                                       {"6", 6}, {"ipv6", 6}, {"inet6", 6}};
  return Choose(text, "family", "", "4, 6 or any", kTable);
}

std::string ProtocolName(int proto) {
  switch (proto) {
    case 0: return "";
    case IPPROTO_TCP: return "tcp";
    case IPPROTO_UDP: return "udp";
    case IPPROTO_ICMP: return "icmp";
    case IPPROTO_ICMPV6: return "icmpv6";
    default: return std::to_string(proto);
  }
}

const char* PayloadName(int payload) {
  switch (payload) {
    case LOSS_PAYLOAD_ONLY: return "only";
    case LOSS_PAYLOAD_NONE: return "none";
    default: return "any";
  }
}

const char* ActionName(Action action) {
  switch (action) {
    case Action::kDrop: return "drop";
    case Action::kCorrupt: return "corrupt";
    case Action::kCorruptPayload: return "corrupt-payload";
    case Action::kDuplicate: return "duplicate";
    case Action::kEcn: return "ecn";
    case Action::kEcnPass: return "ecn-pass";
  }
  return "drop";
}

const char* ActedName(Action action) {
  switch (action) {
    case Action::kDrop: return "dropped";
    case Action::kCorrupt:
    case Action::kCorruptPayload: return "corrupted";
    case Action::kDuplicate: return "duplicated";
    case Action::kEcn:
    case Action::kEcnPass: return "marked";
  }
  return "dropped";
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

std::string DurationText(std::chrono::nanoseconds d) {
  static const std::pair<int64_t, const char*> kUnits[] = {
      {86400LL * 1000000000, "d"}, {3600LL * 1000000000, "h"}, {60LL * 1000000000, "m"},
      {1000000000, "s"},           {1000000, "ms"},            {1000, "us"}};
  int64_t ns = d.count();
  if (ns == 0) return "0s";
  for (const auto& [unit, name] : kUnits)
    if (ns % unit == 0) return std::to_string(ns / unit) + name;
  return std::to_string(ns) + "ns";
}

namespace {

// "WHAT must lie between MIN and MAX (got V)" unless min_ns <= v <= max_ns: the
// bound of every duration a schedule, a ramp or a guard holds.
Status CheckWithin(const std::string& what, std::chrono::nanoseconds v, int64_t min_ns,
                   int64_t max_ns) {
  if (v.count() >= min_ns && v.count() <= max_ns) return Status::Ok();
  return InvalidArgument(what + " must lie between " +
                         DurationText(std::chrono::nanoseconds(min_ns)) + " and " +
                         DurationText(std::chrono::nanoseconds(max_ns)) + " (got " +
                         DurationText(v) + ")");
}

// Each part of a pulse within kMinPulseNs .. kMaxPulseNs.
Status CheckPulse(std::chrono::nanoseconds active, std::chrono::nanoseconds dormant) {
  for (auto [what, v] : {std::make_pair("active", active), std::make_pair("dormant", dormant)})
    LOSSD_RETURN_IF_ERROR(
        CheckWithin(std::string("a pulse's ") + what + " time", v, kMinPulseNs, kMaxPulseNs));
  return Status::Ok();
}

}  // namespace

Status CheckRamp(const LossModel& m) {
  if (m.steps.empty() || m.steps.size() > kMaxRampSteps)
    return InvalidArgument("a ramp has 1 to " + std::to_string(kMaxRampSteps) + " steps (got " +
                           std::to_string(m.steps.size()) + ")");
  for (size_t i = 0; i < m.steps.size(); i++) {
    const RampStep& st = m.steps[i];
    std::string which = "ramp step " + std::to_string(i + 1);
    if (!(st.rate >= 0 && st.rate <= 1 && std::isfinite(st.rate)))
      return InvalidArgument(which + ": rate must lie between 0% and 100%");
    LOSSD_RETURN_IF_ERROR(CheckWithin(which + ": its time", st.duration, kMinPulseNs, kMaxPulseNs));
  }
  return Status::Ok();
}

Status ParsePulse(const std::string& text, Schedule* out) {
  if (text.size() > kMaxInputLength)
    return InvalidArgument("pulse is at most " + std::to_string(kMaxInputLength) + " characters");
  size_t slash = text.find('/');
  if (slash == std::string::npos || text.find('/', slash + 1) != std::string::npos)
    return InvalidArgument("invalid pulse '" + Shown(text) +
                           "': expected ACTIVE/DORMANT, e.g. 200ms/800ms");
  auto active = ParseDuration(text.substr(0, slash));
  if (!active.ok()) return InvalidArgument("pulse's active time: " + active.status().message());
  auto dormant = ParseDuration(text.substr(slash + 1));
  if (!dormant.ok()) return InvalidArgument("pulse's dormant time: " + dormant.status().message());
  LOSSD_RETURN_IF_ERROR(CheckPulse(*active, *dormant));
  out->active = *active;
  out->dormant = *dormant;
  return Status::Ok();
}

namespace {

Status CheckGuardDuration(const char* what, std::chrono::nanoseconds v) {
  return CheckWithin(what, v, kMinGuardNs, kMaxGuardNs);
}

// A guard's count conditions: one at most (the kernel keeps one ring of times).
struct GuardCount {
  const char* key;     // its spelling, "rtos>N/WINDOW"
  const char* one;     // "a guard's RTO count"
  const char* plural;  // "> 5 RTOs in 2s"
  uint32_t Guard::*n;
  std::chrono::nanoseconds Guard::*window;
};
constexpr GuardCount kGuardCounts[] = {
    {"rtos", "RTO", "RTOs", &Guard::rtos, &Guard::rtos_window},
    {"resends", "resend", "resends", &Guard::resends, &Guard::resends_window},
    {"resets", "reset", "resets or aborts", &Guard::resets, &Guard::resets_window},
};
constexpr const char* kGuardCountsOne = "a guard counts one of RTOs, resends or resets, not two";
constexpr const char* kGuardExpected =
    "expected stall>DURATION, rtos>N/WINDOW, resends>N/WINDOW, resets>N/WINDOW, "
    "retrans>RATE/WINDOW, misbehaves or watch=PORT, e.g. stall>500ms,rtos>5/2s";
// A share condition's rate: whole parts per million, below 100 % (the kernel's).
constexpr double kMinGuardRetrans = 1e-6;

}  // namespace

std::string ShareText(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g%%", fraction * 100);
  return buf;
}

Status CheckGuard(const Guard& g) {
  if (g.stall.count()) LOSSD_RETURN_IF_ERROR(CheckGuardDuration("a guard's stall", g.stall));
  if (!g.stall_cause.empty()) {
    bool known = false;
    for (const char* c : kGuardStallCauses) known = known || g.stall_cause == c;
    if (!known)
      return InvalidArgument("a guard's stall cause must be rto, tlp, fast_recovery or "
                             "zero_window, not '" + Shown(g.stall_cause) + "'");
    if (!g.stall.count()) return InvalidArgument("a guard's stall cause needs its stall>DURATION");
  }
  int counts = 0;
  for (const GuardCount& c : kGuardCounts) {
    const auto window = g.*(c.window);
    if (window.count()) {
      counts++;
      LOSSD_RETURN_IF_ERROR(
          CheckGuardDuration(("a guard's " + std::string(c.one) + " window").c_str(), window));
    }
    if (g.*(c.n) > kMaxGuardRtos || (g.*(c.n) && !window.count()))
      return InvalidArgument("a guard's " + std::string(c.one) + " count must lie between 0 and " +
                             std::to_string(kMaxGuardRtos) + ", with its window");
  }
  if (counts > 1) return InvalidArgument(kGuardCountsOne);
  if (g.retrans_window.count() || g.retrans != 0) {
    if (!g.retrans_window.count())
      return InvalidArgument("a guard's retransmit share needs its window");
    LOSSD_RETURN_IF_ERROR(CheckGuardDuration("a guard's retransmit share window", g.retrans_window));
    if (!(g.retrans >= kMinGuardRetrans && g.retrans < 1))
      return InvalidArgument("a guard's retransmit share must lie between 1ppm and 100% (not "
                             "included)");
  }
  if (g.watch_port > 65535)
    return InvalidArgument("a guard's watched port must lie between 1 and 65535");
  if (g.watch_port && !g.InKernel())
    return InvalidArgument("a guard's watch=PORT needs a condition to judge its flows by");
  return Status::Ok();
}

Status ParseGuard(const std::string& text, Guard* out) {
  if (text.size() > kMaxInputLength)
    return InvalidArgument("guard is at most " + std::to_string(kMaxInputLength) + " characters");
  Guard g;
  bool stall = false, watch = false;
  const GuardCount* counted = nullptr;
  std::stringstream in(text);
  std::string part;
  auto bad = [&](const std::string& why) {
    return InvalidArgument("invalid guard '" + Shown(TrimSpace(part)) + "': " + why);
  };
  while (std::getline(in, part, ',')) {
    std::string c = TrimSpace(part);
    size_t op = c.find_first_of(">=");
    std::string kind = op == std::string::npos ? c : TrimSpace(c.substr(0, op));
    for (auto& ch : kind) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    std::string value = op == std::string::npos ? "" : TrimSpace(c.substr(op + 1));
    std::string cause;  // stall(CAUSE): "stall ( rto )" too; "stall()" names none
    bool has_cause = false;
    if (kind.rfind("stall", 0) == 0) {
      std::string rest = TrimSpace(kind.substr(5));
      if (rest.size() >= 2 && rest.front() == '(' && rest.back() == ')') {
        cause = TrimSpace(rest.substr(1, rest.size() - 2));
        has_cause = true;
        kind = "stall";
      }
    }
    if (kind == "misbehaves" && op == std::string::npos) {
      if (g.misbehaves) return bad("misbehaves given twice");
      g.misbehaves = true;
      continue;
    }
    const GuardCount* count = nullptr;
    for (const GuardCount& k : kGuardCounts)
      if (kind == k.key) count = &k;
    const bool is_watch = kind == "watch";
    if (op == std::string::npos || (c[op] == '=') != is_watch ||
        (kind != "stall" && kind != "retrans" && !is_watch && !count))
      return bad(kGuardExpected);
    if (kind == "retrans") {
      if (g.retrans_window.count()) return bad("retrans given twice");
      size_t slash = value.find('/');
      if (slash == std::string::npos) return bad("expected retrans>RATE/WINDOW, e.g. retrans>5%/1s");
      auto r = ParseRate(value.substr(0, slash));
      if (!r.ok()) return bad("the share: " + r.status().message());
      auto w = ParseDuration(TrimSpace(value.substr(slash + 1)));
      if (!w.ok()) return bad("the window: " + w.status().message());
      g.retrans = *r;
      g.retrans_window = *w;
      Status st = CheckGuard(g);
      if (!st.ok()) return bad(st.message());
    } else if (is_watch) {
      if (watch) return bad("watch given twice");
      watch = true;
      uint64_t port = 0;
      if (!ParseUint(value, 65535, &port) || port == 0)
        return bad("the watched port must be a whole number from 1 to 65535");
      g.watch_port = static_cast<uint32_t>(port);
    } else if (kind == "stall") {
      if (stall) return bad("stall given twice");
      stall = true;
      auto d = ParseDuration(value);
      if (!d.ok()) return bad(d.status().message());
      g.stall = *d;
      g.stall_cause = cause;
      if (has_cause && cause.empty())
        return bad("a guard's stall cause must be rto, tlp, fast_recovery or zero_window");
      LOSSD_RETURN_IF_ERROR(CheckGuardDuration("a guard's stall", g.stall));
      Status st = CheckGuard(g);
      if (!st.ok()) return bad(st.message());
    } else {
      if (counted) return bad(counted == count ? kind + " given twice" : kGuardCountsOne);
      counted = count;
      size_t slash = value.find('/');
      if (slash == std::string::npos)
        return bad("expected " + kind + ">N/WINDOW, e.g. " + kind + ">5/2s");
      uint64_t n = 0;
      if (!ParseUint(TrimSpace(value.substr(0, slash)), kMaxGuardRtos, &n))
        return bad("the " + std::string(count->one) + " count must be a whole number from 0 to " +
                   std::to_string(kMaxGuardRtos));
      auto w = ParseDuration(value.substr(slash + 1));
      if (!w.ok()) return bad("the window: " + w.status().message());
      g.*(count->n) = static_cast<uint32_t>(n);
      g.*(count->window) = *w;
      LOSSD_RETURN_IF_ERROR(CheckGuardDuration(
          ("a guard's " + std::string(count->one) + " window").c_str(), *w));
    }
  }
  if (!g.Any() || (watch && !g.InKernel()))
    return InvalidArgument("invalid guard '" + Shown(text) + "': " +
                           (watch ? "watch=PORT needs a condition, e.g. stall>1s,watch=8080"
                                  : kGuardExpected));
  *out = g;
  return Status::Ok();
}

Result<std::vector<RampStep>> ParseRamp(const std::string& text) {
  if (text.size() > kMaxInputLength)
    return InvalidArgument("ramp is at most " + std::to_string(kMaxInputLength) + " characters");
  std::vector<RampStep> steps;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ',')) {
    std::string c = TrimSpace(part);
    size_t slash = c.find('/');
    if (slash == std::string::npos || c.find('/', slash + 1) != std::string::npos)
      return InvalidArgument("invalid ramp step '" + Shown(c) +
                             "': expected RATE/DURATION, e.g. 0.1%/2s,1%/2s,5%/2s");
    auto rate = ParseRate(c.substr(0, slash));
    if (!rate.ok()) return InvalidArgument("ramp step " + std::to_string(steps.size() + 1) + ": " +
                                           rate.status().message());
    auto d = ParseDuration(c.substr(slash + 1));
    if (!d.ok()) return InvalidArgument("ramp step " + std::to_string(steps.size() + 1) + ": " +
                                        d.status().message());
    steps.push_back({*rate, *d});
  }
  LossModel m;
  m.kind = LossModel::Kind::kRamp;
  m.steps = steps;
  LOSSD_RETURN_IF_ERROR(CheckRamp(m));
  return steps;
}

std::string Guard::Text() const {
  std::string t;
  if (stall.count())
    t = "stall" + (stall_cause.empty() ? "" : "(" + stall_cause + ")") + ">" + DurationText(stall);
  for (const GuardCount& c : kGuardCounts)
    if ((this->*(c.window)).count())
      t += (t.empty() ? "" : ",") + std::string(c.key) + ">" + std::to_string(this->*(c.n)) + "/" +
           DurationText(this->*(c.window));
  if (retrans_window.count())
    t += (t.empty() ? "" : ",") + std::string("retrans>") + ShareText(retrans) + "/" +
         DurationText(retrans_window);
  if (misbehaves) t += (t.empty() ? "" : ",") + std::string("misbehaves");
  if (watch_port) t += (t.empty() ? "" : ",") + std::string("watch=") + std::to_string(watch_port);
  return t;
}

std::string Guard::Describe() const {
  std::string d;
  if (stall.count())
    d = (stall_cause.empty() ? "a stall" : "a stall (" + stall_cause + ")") + " > " +
        DurationText(stall);
  for (const GuardCount& c : kGuardCounts)
    if ((this->*(c.window)).count())
      d += (d.empty() ? "" : " or ") + std::string("> ") + std::to_string(this->*(c.n)) + " " +
           c.plural + " in " + DurationText(this->*(c.window));
  if (retrans_window.count())
    d += (d.empty() ? "" : " or ") + std::string("a flow resending > ") + ShareText(retrans) +
         " of its segments in " + DurationText(retrans_window);
  if (watch_port && !d.empty()) d += " of port " + std::to_string(watch_port) + "'s flows";
  if (misbehaves)
    d += (d.empty() ? "" : " or ") + std::string("its loss above its rate's 99.9 % interval");
  return d.empty() ? d : "stop on " + d;
}

std::string Schedule::Describe() const {
  std::string d;
  if (start_after.count()) d = "start after " + DurationText(start_after);
  if (Pulse()) {
    d += (d.empty() ? "" : ", ") + std::string("pulse ") + DurationText(active) + " on / " +
         DurationText(dormant) + " off";
    if (cycles) d += " x" + std::to_string(cycles);
  }
  return d;
}

std::string ServiceTarget::Describe() const {
  std::string d;
  auto add = [&](const std::string& part) { d += (d.empty() ? "" : ", ") + part; };
  if (pid) add("pid " + std::to_string(pid));
  if (!unit.empty()) add("unit " + unit);
  if (!pod.empty()) add("pod " + pod);
  if (!container.empty()) add("container " + container);
  return d;
}

Status CheckNoControlChars(const std::string& what, const std::string& text) {
  auto control = [](unsigned char c) { return c < 0x20 || c == 0x7f; };
  size_t at = 0;
  while (at < text.size() && !control(static_cast<unsigned char>(text[at]))) at++;
  if (at == text.size()) return Status::Ok();
  std::string shown;  // the input quoted with its control characters as \xNN
  for (unsigned char c : Shown(text)) {
    char esc[8];
    snprintf(esc, sizeof(esc), "\\x%02x", c);
    shown += control(c) ? std::string(esc) : std::string(1, static_cast<char>(c));
  }
  return InvalidArgument(what + " holds a control character at byte " + std::to_string(at) + ": '" +
                         shown + "'");
}

Status Validate(const RuleSpec& s) {
  const ServiceTarget& t = s.service;
  LOSSD_RETURN_IF_ERROR(CheckNoControlChars("interface name", s.iface));
  LOSSD_RETURN_IF_ERROR(CheckNoControlChars("cgroup path", s.cgroup));
  LOSSD_RETURN_IF_ERROR(CheckNoControlChars("unit name", t.unit));
  LOSSD_RETURN_IF_ERROR(CheckNoControlChars("container name", t.container));
  LOSSD_RETURN_IF_ERROR(CheckNoControlChars("pod name", t.pod));
  for (const auto& [k, v] : s.labels) {
    LOSSD_RETURN_IF_ERROR(CheckNoControlChars("label key", k));
    LOSSD_RETURN_IF_ERROR(CheckNoControlChars("label '" + Shown(k) + "'", v));
  }
  if (s.iface.empty() && !NamesCgroup(s))
    return InvalidArgument(
        "a rule needs a target: an interface, a cgroup, or a pid, unit, container or pod");
  for (const std::string* v : {&t.unit, &t.container, &t.pod})
    if (v->size() > kMaxInputLength)
      return InvalidArgument("a unit, container or pod name is at most " +
                             std::to_string(kMaxInputLength) + " characters: '" + Shown(*v) + "'");
  int kinds =
      !s.cgroup.empty() + (t.pid != 0) + !t.unit.empty() + !(t.container.empty() && t.pod.empty());
  if (kinds > 1)
    return InvalidArgument(
        "name one cgroup target: a cgroup path, a pid, a unit, or a container and/or pod (got " +
        std::string(s.cgroup.empty() ? "" : "cgroup, ") + t.Describe() + ")");
  if (s.hook == Hook::kCgroup && !NamesCgroup(s))
    return InvalidArgument("hook 'cgroup' needs a cgroup path (or a pid, unit, container or pod)");
  if ((s.hook == Hook::kXdp || s.hook == Hook::kTc) && s.iface.empty())
    return InvalidArgument(std::string("hook '") + HookName(s.hook) + "' needs an interface");
  if (s.hook == Hook::kXdp && s.dir != Direction::kIngress)
    return InvalidArgument("XDP sees ingress only: use --hook tc (or auto) for egress");
  if (s.hook == Hook::kXdp && NamesCgroup(s))
    return InvalidArgument(
        "XDP runs before any socket exists: a cgroup match needs hook tc or cgroup");
  if (s.action != Action::kDrop) {
    std::string a = std::string("action ") + ActionName(s.action);
    if (s.hook == Hook::kXdp)
      return InvalidArgument(a + " changes or copies the packet, which XDP cannot here (a frame "
                                 "the device already checked, no copy): use hook tc (or auto)");
    if (NamesCgroup(s) && s.dir != Direction::kEgress)
      return InvalidArgument(
          a + " needs tc, and a cgroup target's ingress is decided by a cgroup_skb program, "
              "which cannot change or copy packets: use --dir egress for the cgroup, or a rule on "
              "the interface its traffic arrives by");
  }
  if (s.per_segment && s.iface.empty() && s.dir != Direction::kEgress)
    return InvalidArgument(
        "per-segment loss for a cgroup target is for its egress (its devices are made "
        "single-segment): at ingress the sender builds the multi-segment packets; use "
        "--dir egress, or a rule on the sender");
  if (s.reattach && (s.iface.empty() || s.hook == Hook::kCgroup))
    return InvalidArgument(
        "reattach follows an interface that is deleted and created again: name the interface "
        "(and a hook other than cgroup)");

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
  if (s.payload != LOSS_PAYLOAD_ANY && s.payload != LOSS_PAYLOAD_ONLY &&
      s.payload != LOSS_PAYLOAD_NONE)
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
    case LossModel::Kind::kRamp:
      LOSSD_RETURN_IF_ERROR(CheckRamp(m));
      if (s.schedule.Pulse())
        return InvalidArgument("a ramp's steps are its timeline: give no pulse with it");
      break;
    case LossModel::Kind::kMarkov4:
      if (Status st = CheckMarkov(m); !st.ok())
        return InvalidArgument("Markov model: " + st.message());
      break;
    case LossModel::Kind::kPolice:
      LOSSD_RETURN_IF_ERROR(CheckPolice(m));
      if (s.seed)
        return InvalidArgument("seed: a policer draws nothing (what it drops follows the "
                               "traffic): give no seed with police");
      break;
  }
  if (s.priority > kMaxPriority)
    return InvalidArgument("priority must lie between 0 and " + std::to_string(kMaxPriority));
  if (s.ttl.count() < 0) return InvalidArgument("TTL must not be negative");

  const Schedule& sc = s.schedule;
  if (sc.start_after.count() < 0 || sc.start_after.count() > kMaxDurationSeconds * 1000000000LL)
    return InvalidArgument("schedule: start_after must lie between 0 and " +
                           std::to_string(kMaxDurationSeconds) + " s");
  if (sc.active.count() || sc.dormant.count()) {
    Status st = CheckPulse(sc.active, sc.dormant);
    if (!st.ok()) return InvalidArgument("schedule: " + st.message());
  }
  if (sc.cycles && !sc.Pulse())
    return InvalidArgument("schedule: cycles count a pulse's active windows: give a pulse too");
  if (sc.cycles > kMaxPulseCycles)
    return InvalidArgument("schedule: at most " + std::to_string(kMaxPulseCycles) + " cycles");
  if (sc.cycles &&
      sc.cycles > uint64_t(kMaxDurationSeconds) * 1000000000ull / uint64_t(sc.Period().count()))
    return InvalidArgument("schedule: the pulses would last longer than " +
                           std::to_string(kMaxDurationSeconds) + " s");
  const Guard& g = s.guard;
  if (g.misbehaves && s.model.kind != LossModel::Kind::kBernoulli &&
      s.model.kind != LossModel::Kind::kRamp)
    return InvalidArgument("guard: misbehaves judges a Bernoulli rate or a ramp's steps (a "
                           "binomial interval); this model's drops are not binomial");
  if (g.Any() || g.rtos || g.resends || g.resets || g.retrans != 0 || g.watch_port) {
    Status st = CheckGuard(s.guard);
    if (!st.ok()) return InvalidArgument("guard: " + st.message());
  }
  return Status::Ok();
}

std::string UnmatchedHint(const RuleSpec& s, const std::string& cgroup,
                          std::chrono::nanoseconds age) {
  std::string out = "matched no packet in " +
                    std::to_string(std::chrono::duration_cast<std::chrono::seconds>(age).count()) +
                    "s: ";
  const bool in = s.dir == Direction::kIngress, eg = s.dir == Direction::kEgress;
  if (!cgroup.empty()) {
    out += std::string("it sees the packets that the sockets in ") + cgroup + " " +
           (in ? "receive" : eg ? "send" : "send and receive") +
           "; check that the service's sockets are there (lossctl flows shows each flow's owner)";
    if (!s.iface.empty()) out += " and that they use " + s.iface;
    if (in || eg) out += std::string(", and the direction (--dir ") + (in ? "egress" : "ingress") +
                         " for what they " + (in ? "send" : "receive") + ")";
  } else if (in) {
    out += "it sees what arrives on " + s.iface + "; what this host sends leaves by egress " +
           "(--dir egress), and traffic by another interface never passes " + s.iface;
  } else if (eg) {
    out += "it sees what leaves by " + s.iface + "; what this host receives arrives by ingress " +
           "(--dir ingress), and traffic by another interface never passes " + s.iface;
  } else {
    out += "it sees what arrives on and leaves by " + s.iface +
           ": traffic by another interface never passes it";
  }
  if (!s.sport.Any() || !s.dport.Any())
    out += std::string("; ports are as the packet has them: ") +
           (eg ? "what a local server sends has its port as --sport"
               : in ? "what a local server receives has its port as --dport"
                    : "a local server's port is --dport on ingress and --sport on egress");
  if (s.src || s.dst) out += "; --src and --dst are the packet's own addresses";
  return out;
}

}  // namespace lossd
