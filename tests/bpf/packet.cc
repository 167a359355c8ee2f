#include "packet.h"

#include <arpa/inet.h>

#include <cstdio>
#include <stdexcept>

namespace lossd::bpftest {
namespace {

void Put8(std::vector<uint8_t>& b, uint8_t v) {
  b.push_back(v);
}
void Put16(std::vector<uint8_t>& b, uint16_t v) {
  b.push_back(uint8_t(v >> 8));
  b.push_back(uint8_t(v));
}
void Put32(std::vector<uint8_t>& b, uint32_t v) {
  Put16(b, uint16_t(v >> 16));
  Put16(b, uint16_t(v));
}
void Set16(std::vector<uint8_t>& b, size_t off, uint16_t v) {
  b[off] = uint8_t(v >> 8);
  b[off + 1] = uint8_t(v);
}

void PutAddr(std::vector<uint8_t>& b, int family, const std::string& text) {
  uint8_t a[16] = {};
  if (inet_pton(family == 4 ? AF_INET : AF_INET6, text.c_str(), a) != 1)
    throw std::invalid_argument("bad address " + text);
  b.insert(b.end(), a, a + (family == 4 ? 4 : 16));
}

uint32_t Sum(uint32_t sum, const uint8_t* p, size_t n) {
  for (size_t i = 0; i + 1 < n; i += 2) sum += uint32_t(p[i]) << 8 | p[i + 1];
  if (n & 1) sum += uint32_t(p[n - 1]) << 8;
  return sum;
}

uint16_t Fold(uint32_t sum) {
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  return uint16_t(~sum);
}

uint16_t Checksum(const uint8_t* p, size_t n) {
  return Fold(Sum(0, p, n));
}

uint16_t Get16(const std::vector<uint8_t>& b, size_t off) {
  return uint16_t(b[off] << 8 | b[off + 1]);
}

// The L4 segment's length by its IP header.
size_t L4Len(const std::vector<uint8_t>& b, const Packet& pkt) {
  if ((b[pkt.l3_off] >> 4) == 4) return Get16(b, pkt.l3_off + 2) - (b[pkt.l3_off] & 0xf) * 4;
  return Get16(b, pkt.l3_off + 4) - (pkt.l4_off - pkt.l3_off - 40);
}

// The folded checksum over the L4 segment (and its pseudo-header where the
// protocol has one), with the checksum field as it is: 0 when it verifies.
uint16_t L4Residue(const std::vector<uint8_t>& b, const Packet& pkt) {
  size_t len = L4Len(b, pkt);
  if (pkt.l4_off + len > b.size()) throw std::invalid_argument("L4 length past the frame");
  uint32_t sum = 0;
  bool v4 = (b[pkt.l3_off] >> 4) == 4;
  if (!(v4 && pkt.l4_proto == 1)) {  // ICMP has no pseudo-header
    uint8_t ph[4] = {0, pkt.l4_proto, uint8_t(len >> 8), uint8_t(len)};
    sum = Sum(sum, &b[pkt.l3_off + (v4 ? 12 : 8)], v4 ? 8 : 32);  // source, destination
    sum = Sum(sum, ph, 4);
  }
  return Fold(Sum(sum, &b[pkt.l4_off], len));
}

// The L4 header and payload. Returns the L4 bytes; *need is how many of them
// the parser reads (its truncation point).
std::vector<uint8_t> L4(const PacketSpec& s, bool later_fragment, size_t* need) {
  std::vector<uint8_t> b;
  if (later_fragment) {
    *need = 0;
    b.assign(s.payload ? s.payload : 24, 0xAB);
    return b;
  }
  switch (s.proto) {
    case 6: {  // TCP
      Put16(b, s.sport);
      Put16(b, s.dport);
      Put32(b, s.seq);
      Put32(b, (s.tcp_flags & kAck) ? 0x0a0b0c0d : 0);
      Put8(b, uint8_t(s.tcp_doff << 4));
      Put8(b, s.tcp_flags);
      Put16(b, 65535);  // window
      Put16(b, 0);      // checksum (0 unless spec.l4_checksum: see Build)
      Put16(b, 0);      // urgent
      for (int i = 5; i < s.tcp_doff; i++) Put32(b, 0x01010101);  // NOPs
      *need = 20;
      break;
    }
    case 17:  // UDP
      Put16(b, s.sport);
      Put16(b, s.dport);
      Put16(b, uint16_t(8 + s.payload));
      Put16(b, 0);
      *need = 8;
      break;
    case 1:
    case 58:  // ICMP / ICMPv6: type, code, checksum, rest of header
      Put8(b, s.icmp_type);
      Put8(b, 0);
      Put16(b, 0);
      Put32(b, 0x00010001);
      *need = 1;
      break;
    default: *need = 0; break;
  }
  for (size_t i = 0; i < s.payload; i++) b.push_back(uint8_t(0xA0 + i % 16));
  return b;
}

}  // namespace

Packet Build(const PacketSpec& s) {
  Packet pkt;
  std::vector<uint8_t>& b = pkt.bytes;
  // Ethernet: dst, src, tags, type.
  const uint8_t dmac[6] = {0x02, 0, 0, 0, 0, 0x02}, smac[6] = {0x02, 0, 0, 0, 0, 0x01};
  b.insert(b.end(), dmac, dmac + 6);
  b.insert(b.end(), smac, smac + 6);
  uint16_t etype = s.family == 4 ? 0x0800 : s.family == 6 ? 0x86DD : s.ethertype;
  // Ethernet's type field holds the first TPID; each tag is TCI + the next type.
  std::vector<uint16_t> types = s.vlans;
  types.push_back(etype);
  Put16(b, types[0]);
  for (size_t i = 1; i < types.size(); i++) {
    Put16(b, uint16_t(100 + i));  // TCI
    Put16(b, types[i]);
  }
  pkt.l3_off = b.size();

  if (s.family == 0) {
    if (s.ethertype == 0x0806) {
      Put16(b, 1);       // htype ethernet
      Put16(b, 0x0800);  // ptype
      Put8(b, 6);
      Put8(b, 4);
      Put16(b, 1);  // request
      b.insert(b.end(), smac, smac + 6);
      PutAddr(b, 4, "10.0.0.1");
      for (int i = 0; i < 6; i++) Put8(b, 0);
      PutAddr(b, 4, "10.0.0.2");
    } else {
      for (size_t i = 0; i < s.raw_len; i++) Put8(b, uint8_t(i));
    }
    pkt.l4_off = b.size();
    pkt.parse_end = pkt.l3_off;  // the ethertype alone decides
  } else if (s.family == 4) {
    std::string src = s.src.empty() ? "10.0.0.1" : s.src;
    std::string dst = s.dst.empty() ? "10.0.0.2" : s.dst;
    bool later = s.frag_offset != 0;
    size_t need = 0;
    std::vector<uint8_t> l4 = L4(s, later, &need);
    size_t hl = 20 + s.ip_options;
    size_t ip = b.size();
    int ihl = s.ihl_override >= 0 ? s.ihl_override : int(hl / 4);
    Put8(b, uint8_t(((s.ip_version ? s.ip_version : 4) << 4) | (ihl & 0xf)));
    Put8(b, s.tos);
    Put16(b, uint16_t(s.tot_len_override >= 0 ? s.tot_len_override : int(hl + l4.size())));
    Put16(b, 0x1234);  // id
    Put16(b, uint16_t((s.more_fragments ? 0x2000 : 0) | (s.frag_offset & 0x1fff)));
    Put8(b, 64);
    Put8(b, s.proto);
    Put16(b, 0);
    PutAddr(b, 4, src);
    PutAddr(b, 4, dst);
    for (size_t i = 0; i < s.ip_options; i++) Put8(b, i + 1 == s.ip_options ? 0 : 1);  // NOPs, EOL
    Set16(b, ip + 10, Checksum(&b[ip], hl));
    pkt.l4_off = b.size();
    b.insert(b.end(), l4.begin(), l4.end());
    pkt.parse_end = pkt.l4_off + need;
  } else {
    std::string src = s.src.empty() ? "2001:db8::1" : s.src;
    std::string dst = s.dst.empty() ? "2001:db8::2" : s.dst;
    bool later = false;
    for (const auto& e : s.ext)
      if (e.type == kExtFragment && s.frag_offset) later = true;
    size_t need = 0;
    std::vector<uint8_t> l4 = L4(s, later, &need);
    std::vector<uint8_t> ext;
    for (size_t i = 0; i < s.ext.size(); i++) {
      uint8_t next = i + 1 < s.ext.size() ? s.ext[i + 1].type : s.proto;
      const Ext6& e = s.ext[i];
      if (e.type == kExtFragment) {
        Put8(ext, next);
        Put8(ext, 0);
        Put16(ext, uint16_t((s.frag_offset << 3) | (s.more_fragments ? 1 : 0)));
        Put32(ext, 0xdeadbeef);
      } else if (e.type == kExtAuth) {
        Put8(ext, next);
        Put8(ext, uint8_t(e.len / 4 - 2));
        for (size_t j = 2; j < e.len; j++) Put8(ext, 0);
      } else {
        Put8(ext, next);
        Put8(ext, uint8_t(e.len / 8 - 1));
        for (size_t j = 2; j < e.len; j++) Put8(ext, 0);  // Pad1 options
      }
    }
    Put32(b, uint32_t(s.ip_version ? s.ip_version : 6) << 28 | uint32_t(s.tos) << 20);
    Put16(b, uint16_t(s.tot_len_override >= 0 ? s.tot_len_override : int(ext.size() + l4.size())));
    Put8(b, s.ext.empty() ? s.proto : s.ext[0].type);
    Put8(b, 64);
    PutAddr(b, 6, src);
    PutAddr(b, 6, dst);
    b.insert(b.end(), ext.begin(), ext.end());
    pkt.l4_off = b.size();
    b.insert(b.end(), l4.begin(), l4.end());
    pkt.parse_end = pkt.l4_off + need;
  }
  if (s.family == 4 || s.family == 6) pkt.l4_proto = s.proto;
  bool later = s.family == 4 && s.frag_offset != 0;
  for (const auto& e : s.ext)
    if (s.family == 6 && e.type == kExtFragment && s.frag_offset) later = true;
  if (s.l4_checksum && !later && pkt.l4_proto && L4ChecksumOffset(pkt.l4_proto)) {
    size_t at = pkt.l4_off + L4ChecksumOffset(pkt.l4_proto);
    Set16(b, at, 0);
    uint16_t c = L4Residue(b, pkt);  // with the field 0: the complemented sum
    if (c == 0 && pkt.l4_proto == 17) c = 0xffff;  // UDP: 0 means "no checksum"
    Set16(b, at, c);
  }
  if (b.size() < s.pad_to) b.resize(s.pad_to, 0);
  return pkt;
}

size_t L4ChecksumOffset(uint8_t proto) {
  switch (proto) {
    case 6: return 16;
    case 17: return 6;
    case 1:
    case 58: return 2;
  }
  return 0;
}

bool Ip4ChecksumOk(const std::vector<uint8_t>& frame, const Packet& layout) {
  size_t hl = (frame[layout.l3_off] & 0xf) * 4;
  return Checksum(&frame[layout.l3_off], hl) == 0;
}

bool L4ChecksumOk(const std::vector<uint8_t>& frame, const Packet& layout) {
  bool v4 = (frame[layout.l3_off] >> 4) == 4;
  if (v4 && layout.l4_proto == 17 && Get16(frame, layout.l4_off + 6) == 0) return true;
  return L4Residue(frame, layout) == 0;
}

PacketSpec Udp4(const std::string& src, const std::string& dst, uint16_t sport, uint16_t dport,
                size_t payload) {
  PacketSpec s;
  s.src = src;
  s.dst = dst;
  s.proto = 17;
  s.sport = sport;
  s.dport = dport;
  s.payload = payload;
  return s;
}

PacketSpec Tcp4(const std::string& src, const std::string& dst, uint16_t sport, uint16_t dport,
                uint8_t flags, size_t payload) {
  PacketSpec s = Udp4(src, dst, sport, dport, payload);
  s.proto = 6;
  s.tcp_flags = flags;
  return s;
}

PacketSpec Udp6(const std::string& src, const std::string& dst, uint16_t sport, uint16_t dport,
                size_t payload) {
  PacketSpec s = Udp4(src, dst, sport, dport, payload);
  s.family = 6;
  return s;
}

PacketSpec Tcp6(const std::string& src, const std::string& dst, uint16_t sport, uint16_t dport,
                uint8_t flags, size_t payload) {
  PacketSpec s = Tcp4(src, dst, sport, dport, flags, payload);
  s.family = 6;
  return s;
}

PacketSpec Icmp4(uint8_t type) {
  PacketSpec s;
  s.proto = 1;
  s.icmp_type = type;
  s.payload = 16;
  return s;
}

PacketSpec Icmp6(uint8_t type) {
  PacketSpec s;
  s.family = 6;
  s.proto = 58;
  s.icmp_type = type;
  s.payload = 16;
  return s;
}

PacketSpec Arp() {
  PacketSpec s;
  s.family = 0;
  s.ethertype = 0x0806;
  return s;
}

PacketSpec Raw(uint16_t ethertype, size_t len) {
  PacketSpec s;
  s.family = 0;
  s.ethertype = ethertype;
  s.raw_len = len;
  return s;
}

std::string Hex(const std::vector<uint8_t>& bytes) {
  std::string out;
  char buf[4];
  for (size_t i = 0; i < bytes.size(); i++) {
    snprintf(buf, sizeof(buf), "%02x", bytes[i]);
    out += buf;
    if (i + 1 < bytes.size() && (i % 4) == 3) out += ' ';
  }
  return out;
}

}  // namespace lossd::bpftest
