#include "rules/match.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

namespace lossd {
namespace {

bool AddrIn(const std::optional<Cidr>& c, uint16_t family, const uint32_t* a) {
  return !c || AddrInCidr(*c, family, a);
}

}  // namespace

bool AddrInCidr(const Cidr& c, uint16_t family, const uint32_t* a) {
  if ((c.family == 4) != (family == AF_INET)) return false;
  const auto* b = reinterpret_cast<const uint8_t*>(a);
  for (int bit = 0; bit < c.prefix; bit++) {
    uint8_t m = 0x80 >> (bit % 8);
    if ((b[bit / 8] & m) != (c.addr[bit / 8] & m)) return false;
  }
  return true;
}

bool RuleCoversFlow(const RuleSpec& s, const obs_tuple& t) {
  if (s.l4proto != 0 && s.l4proto != IPPROTO_TCP) return false;
  if (s.family && (s.family == 4) != (t.family == AF_INET)) return false;
  // Ingress: packets remote -> local; egress: local -> remote.
  auto in = [&] {
    return AddrIn(s.src, t.family, t.daddr) && AddrIn(s.dst, t.family, t.saddr) &&
           s.sport.Contains(t.dport) && s.dport.Contains(t.sport);
  };
  auto out = [&] {
    return AddrIn(s.src, t.family, t.saddr) && AddrIn(s.dst, t.family, t.daddr) &&
           s.sport.Contains(t.sport) && s.dport.Contains(t.dport);
  };
  switch (s.dir) {
    case Direction::kIngress: return in();
    case Direction::kEgress: return out();
    case Direction::kBoth: return in() || out();
  }
  return false;
}

}  // namespace lossd
