#include "rules/match.h"

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstring>

#include "base/address.h"

namespace lossd {
namespace {

bool AddrIn(const std::optional<Cidr>& c, uint16_t family, const uint32_t* a) {
  return !c || AddrInCidr(*c, family, a);
}

}  // namespace

bool AddrInCidr(const Cidr& c, uint16_t family, const uint32_t* a) {
  if (c.family != VersionOfAf(family)) return false;
  const auto* b = reinterpret_cast<const uint8_t*>(a);
  const auto mask = PrefixMask(c.prefix);
  for (int i = 0; i < 16; i++)
    if ((b[i] & mask[i]) != (c.addr[i] & mask[i])) return false;
  return true;
}

bool RuleCoversFlow(const RuleSpec& s, const obs_tuple& t) {
  if (s.l4proto != 0 && s.l4proto != IPPROTO_TCP) return false;
  if (s.family && s.family != VersionOfAf(t.family)) return false;
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
