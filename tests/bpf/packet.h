// Test packet builder for the BPF_PROG_TEST_RUN fixtures: Ethernet (with up
// to any number of VLAN tags), IPv4 (with options, fragments), IPv6 (with
// extension headers, fragments), TCP/UDP/ICMP/ICMPv6, ARP and raw ethertypes.
// Lengths (IPv4 tot_len, IPv6 payload_len, UDP len) are filled in correctly;
// the IPv4 header checksum too (the data plane does not check it, but the
// frames should be real frames).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace lossd::bpftest {

constexpr uint16_t kTpid8021Q = 0x8100;
constexpr uint16_t kTpid8021AD = 0x88A8;
constexpr uint8_t kFin = 0x01, kSyn = 0x02, kRst = 0x04, kPsh = 0x08, kAck = 0x10;

// IPv6 extension header types.
constexpr uint8_t kExtHop = 0, kExtRouting = 43, kExtFragment = 44, kExtAuth = 51, kExtDest = 60;

struct Ext6 {
  uint8_t type;
  size_t len = 8;  // bytes; a multiple of 8 (AUTH: of 4, at least 8); fragment: always 8
};

struct PacketSpec {
  std::vector<uint16_t> vlans;  // TPIDs, outermost first
  int family = 4;               // 4, 6, or 0 for `ethertype` + `raw_len` bytes
  uint16_t ethertype = 0;       // family 0 only (0x0806 builds an ARP request)
  size_t raw_len = 46;          // family 0, non-ARP: bytes after the ethertype
  std::string src, dst;         // default 10.0.0.1 -> 10.0.0.2 / 2001:db8::1 -> 2001:db8::2
  uint8_t proto = 17;           // IPPROTO_*
  uint16_t sport = 1234, dport = 80;
  uint8_t tcp_flags = kAck;
  uint8_t tcp_doff = 5;      // 32-bit words; options filled with NOPs
  size_t payload = 0;        // L4 payload bytes
  uint8_t icmp_type = 8;     // ICMP echo request; use 128 for ICMPv6 echo
  size_t ip_options = 0;     // IPv4 option bytes (multiple of 4, <= 40)
  std::vector<Ext6> ext;     // IPv6 extension headers, in order
  uint16_t frag_offset = 0;  // 8-byte units: IPv4 header, or the IPv6 fragment header
  bool more_fragments = false;
  size_t pad_to = 0;          // Ethernet padding (zeros) up to this frame length
  uint8_t ip_version = 0;     // override the IP version nibble (malformed frames)
  int ihl_override = -1;      // override IPv4 ihl (malformed frames)
  int tot_len_override = -1;  // override IPv4 tot_len / IPv6 payload_len
  uint32_t seq = 0x01020304;  // TCP sequence number
  uint8_t tos = 0;            // IPv4 TOS / IPv6 traffic class (DSCP << 2 | ECN)
  bool l4_checksum = false;   // a valid TCP/UDP/ICMP/ICMPv6 checksum (else 0)
};

struct Packet {
  std::vector<uint8_t> bytes;
  size_t l3_off = 0;
  size_t l4_off = 0;
  // How many leading bytes the parser needs to reach a verdict on this
  // frame: every shorter prefix is truncated inside a header it reads.
  size_t parse_end = 0;
  uint8_t l4_proto = 0;  // the L4 protocol (IP families)
};

Packet Build(const PacketSpec& spec);

// Checksums of a frame laid out as `layout` (Build's, the bytes possibly
// changed since, by a program): lengths are read from its IP header, so
// Ethernet padding is not covered, as by a receiver.
// The IPv4 header checksum verifies.
bool Ip4ChecksumOk(const std::vector<uint8_t>& frame, const Packet& layout);
// The TCP/UDP/ICMP/ICMPv6 checksum verifies (with the pseudo-header where the
// protocol has one; a UDP/IPv4 checksum 0, "none", verifies too). The L4
// header must be in the frame (not a later fragment).
bool L4ChecksumOk(const std::vector<uint8_t>& frame, const Packet& layout);
// Offset of the L4 checksum field from the L4 header (TCP 16, UDP 6, ICMP 2).
size_t L4ChecksumOffset(uint8_t proto);

// Convenience constructors.
PacketSpec Udp4(const std::string& src, const std::string& dst, uint16_t sport, uint16_t dport,
                size_t payload = 32);
PacketSpec Tcp4(const std::string& src, const std::string& dst, uint16_t sport, uint16_t dport,
                uint8_t flags, size_t payload = 0);
PacketSpec Udp6(const std::string& src, const std::string& dst, uint16_t sport, uint16_t dport,
                size_t payload = 32);
PacketSpec Tcp6(const std::string& src, const std::string& dst, uint16_t sport, uint16_t dport,
                uint8_t flags, size_t payload = 0);
PacketSpec Icmp4(uint8_t type = 8);
PacketSpec Icmp6(uint8_t type = 128);
PacketSpec Arp();
PacketSpec Raw(uint16_t ethertype, size_t len = 46);

std::string Hex(const std::vector<uint8_t>& bytes);

}  // namespace lossd::bpftest
