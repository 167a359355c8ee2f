// Actions beside drop (bpf/loss.bpf.c, "actions beside drop (tc only)"), run
// through BPF_PROG_TEST_RUN on the tc programs at 100 % (every matched packet
// is acted on) and at 0 % (nothing changes; only `matched` moves): ECN and
// ECN_PASS, CORRUPT, CORRUPT_PAYLOAD, DUPLICATE and the copy it sends, and
// XDP, which never acts. Each run is one packet (repeat 1) and its output is
// compared with its input bit by bit; checksums are recomputed here. Then the
// same actions on real packets, for the checksum states a test run cannot
// give: datagrams sent over lo, frames written to a tap device.
//
// What BPF_PROG_TEST_RUN gives a tc program on this kernel (6.18), as the
// probes below find it:
//  - ip_summed: CHECKSUM_NONE, whatever the __sk_buff handed in says (no
//    field of it reaches ip_summed; gso_segs and gso_size do not change it).
//    So in a test run CORRUPT takes its NONE path (a bit of the L4 segment,
//    checksum left stale). PARTIAL comes from a socket sending on lo, or a
//    tap frame with NEEDS_CSUM; UNNECESSARY from GRO (a TCP segment written
//    to a tap in NAPI mode; tun ignores DATA_VALID); COMPLETE from nothing
//    here (see the report on act_corrupt).
//  - tc_index: ctx_in refuses a non-zero tc_index (EINVAL) and ctx_out does
//    not return it, so a duplicate's copy is tested as a real copy: the one
//    bpf_clone_redirect sends to the namespace's lo.
//  - bpf_clone_redirect works from a test run: to a device that is down it
//    fails (ingress: NET_RX_DROP, 1; egress: the noop qdisc's NET_XMIT_CN, 2,
//    after the copy went through the device's egress tc programs), to lo up
//    it returns 0 and the copy meets lo's tc programs (egress: synchronously,
//    inside the helper; ingress: from lo's backlog).
#include <arpa/inet.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/if_tun.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <fstream>
#include <functional>
#include <iterator>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"

namespace lossd::bpftest {
namespace {

constexpr Prog kTcProgs[] = {Prog::kTcIn, Prog::kTcOut};
constexpr uint32_t kEnotsupp = 524;  // the kernel's ENOTSUPP (not in user space's errno.h)

// Bits that differ between two frames of one length: byte * 8 + bit (bit 0
// the least significant).
std::vector<size_t> DiffBits(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  std::vector<size_t> bits;
  for (size_t i = 0; i < a.size() && i < b.size(); i++)
    for (int j = 0; j < 8; j++)
      if (((a[i] ^ b[i]) >> j) & 1) bits.push_back(i * 8 + j);
  return bits;
}

// Bytes that differ, as "offset: in -> out" (failure messages).
std::string DiffText(const std::vector<uint8_t>& in, const std::vector<uint8_t>& out) {
  if (in.size() != out.size())
    return "length " + std::to_string(in.size()) + " -> " + std::to_string(out.size());
  std::string s;
  char buf[32];
  for (size_t i = 0; i < in.size(); i++) {
    if (in[i] == out[i]) continue;
    snprintf(buf, sizeof(buf), " [%zu] %02x->%02x", i, in[i], out[i]);
    s += buf;
  }
  return s.empty() ? "no change" : s;
}

// The end of the IP datagram (where Ethernet padding starts).
size_t IpEnd(const std::vector<uint8_t>& b, const Packet& pkt) {
  size_t l3 = pkt.l3_off;
  if ((b[l3] >> 4) == 4) return l3 + (size_t(b[l3 + 2]) << 8 | b[l3 + 3]);
  return l3 + 40 + (size_t(b[l3 + 4]) << 8 | b[l3 + 5]);
}

PacketSpec Csum(PacketSpec s) {
  s.l4_checksum = true;
  return s;
}
PacketSpec Tos(PacketSpec s, uint8_t tos) {
  s.tos = tos;
  return s;
}

// Hand-written tc programs (no BTF, no maps), to ask the kernel what lossd's
// programs see.
bpf_insn Ins(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  bpf_insn i{};
  i.code = code;
  i.dst_reg = dst;
  i.src_reg = src;
  i.off = off;
  i.imm = imm;
  return i;
}

int LoadTcProgram(const std::vector<bpf_insn>& p) {
  char log[4096] = "";
  LIBBPF_OPTS(bpf_prog_load_opts, o, .log_level = 1, .log_size = sizeof(log), .log_buf = log);
  int fd = bpf_prog_load(BPF_PROG_TYPE_SCHED_CLS, "lossd_probe", "GPL", p.data(), p.size(), &o);
  if (fd < 0) ADD_FAILURE() << "loading a probe: " << strerror(errno) << "\n" << log;
  return fd;
}

// A probe: runs `helpers` one after the other on the skb and stores each
// one's return value (its low 32 bits) in skb->cb[i], which ctx_out gives
// back. A helper: its id, r2 (`arg2`, or the skb's ifindex) and r3; r1 is
// the skb.
struct HelperCall {
  int id;
  int32_t arg2;
  int32_t arg3 = 0;
  bool arg2_is_ifindex = false;  // r2 = skb->ifindex instead of arg2
};
int LoadProbe(const std::vector<HelperCall>& helpers) {
  std::vector<bpf_insn> p;
  p.push_back(Ins(BPF_ALU64 | BPF_MOV | BPF_X, 6, 1, 0, 0));  // r6 = skb
  for (size_t i = 0; i < helpers.size() && i < 5; i++) {
    const HelperCall& h = helpers[i];
    p.push_back(Ins(BPF_ALU64 | BPF_MOV | BPF_X, 1, 6, 0, 0));  // r1 = skb
    if (h.arg2_is_ifindex)
      p.push_back(Ins(BPF_LDX | BPF_MEM | BPF_W, 2, 6, offsetof(__sk_buff, ifindex), 0));
    else
      p.push_back(Ins(BPF_ALU64 | BPF_MOV | BPF_K, 2, 0, 0, h.arg2));
    p.push_back(Ins(BPF_ALU64 | BPF_MOV | BPF_K, 3, 0, 0, h.arg3));
    p.push_back(Ins(BPF_JMP | BPF_CALL, 0, 0, 0, h.id));
    p.push_back(Ins(BPF_STX | BPF_MEM | BPF_W, 6, 0, int16_t(offsetof(__sk_buff, cb) + 4 * i),
                    0));  // cb[i] = r0
  }
  p.push_back(Ins(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, -1));  // TC_ACT_UNSPEC
  p.push_back(Ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  return LoadTcProgram(p);
}

// Runs the probe once over pkt with the context `skb`; the helpers' return
// values (cb[0..]).
std::vector<int32_t> Probe(const std::vector<HelperCall>& helpers, const Packet& pkt,
                           __sk_buff skb = __sk_buff{}) {
  int fd = LoadProbe(helpers);
  if (fd < 0) return {};
  RunOpts o;
  o.skb = &skb;
  TestRun(fd, Prog::kTcIn, pkt.bytes, o);
  close(fd);
  std::vector<int32_t> r;
  for (size_t i = 0; i < helpers.size(); i++) r.push_back(int32_t(skb.cb[i]));
  return r;
}

class Actions : public BpfTest {
 protected:
  void SetUp() override {
    BpfTest::SetUp();
    // lo's tc programs stay attached both ways: a duplicate's copy meets them.
    HoldAttachments();
  }

  // A rule on lo for the direction of p (tc), acting with `a` at `rate`.
  uint32_t AddAction(Prog p, Action a, double rate = 1.0) {
    RuleSpec s = Rule(p, rate);
    s.action = a;
    return Add(s);
  }

  // One run of pkt through p: the verdict; the packet as it comes out in *out.
  int RunOut(Prog p, const Packet& pkt, std::vector<uint8_t>* out, RunOpts o = {}) {
    o.out = out;
    return Run(p, pkt, o);
  }

  // The rule's packet counters: matched, dropped, acted on, picked but not acted on.
  void ExpectCounts(uint32_t id, uint64_t matched, uint64_t dropped, uint64_t acted,
                    uint64_t unacted) {
    RuleCounters c = Counters(id);
    EXPECT_EQ(c.matched_pkts, matched) << "matched";
    EXPECT_EQ(c.dropped_pkts, dropped) << "dropped";
    EXPECT_EQ(c.acted_pkts, acted) << "acted";
    EXPECT_EQ(c.unacted_pkts, unacted) << "unacted";
  }

  // Runs pkt through p once and expects it to pass unchanged.
  void ExpectPassedUnchanged(Prog p, const Packet& pkt) {
    std::vector<uint8_t> out;
    EXPECT_VERDICT(p, RunOut(p, pkt, &out), PassVerdict(p));
    EXPECT_EQ(out, pkt.bytes) << DiffText(pkt.bytes, out);
  }

  // Waits (up to 2 s) until get() reaches n (a packet lo's backlog hands to
  // the tc ingress program); returns its last value.
  static uint64_t WaitFor(const std::function<uint64_t()>& get, uint64_t n) {
    auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    uint64_t v = get();
    while (v < n && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
      v = get();
    }
    return v;
  }
};

// Sets lo up or down for the scope, then back as it was.
class LoState {
 public:
  explicit LoState(bool up) : was_(SetLinkUp("lo", up)) {}
  ~LoState() { SetLinkUp("lo", was_); }

 private:
  bool was_;
};

// ---- what a test run's skb is ----------------------------------------------

// A test run's skb is CHECKSUM_NONE: not COMPLETE (bpf_csum_update answers
// -ENOTSUPP), not UNNECESSARY (bpf_csum_level's query answers -EACCES), and
// not PARTIAL (CORRUPT flips an L4 bit below, which it does not under
// PARTIAL); a GSO-looking context (gso_segs, gso_size) changes nothing.
TEST_F(Actions, TestRunSkbsAreChecksumNone) {
  const std::vector<HelperCall> probe = {{BPF_FUNC_csum_update, 0},
                                         {BPF_FUNC_csum_level, BPF_CSUM_LEVEL_QUERY}};
  Packet pkt = Build(Csum(Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kAck, 1400)));
  std::vector<int32_t> r = Probe(probe, pkt);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0], -int32_t(kEnotsupp)) << "bpf_csum_update: the skb is CHECKSUM_COMPLETE";
  EXPECT_EQ(r[1], -EACCES) << "bpf_csum_level(QUERY): the skb is CHECKSUM_UNNECESSARY";
  __sk_buff gso{};
  gso.gso_segs = 4;
  gso.gso_size = 350;
  r = Probe(probe, pkt, gso);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0], -int32_t(kEnotsupp));
  EXPECT_EQ(r[1], -EACCES);
}

// tc_index cannot be handed in: the kernel refuses a context with it set, so
// a copy's mark is tested on real copies (Duplicate* below).
TEST_F(Actions, TestRunRefusesATcIndexInTheContext) {
  Packet pkt = Build(Udp4("10.0.0.1", "10.0.0.2", 1, 2));
  __sk_buff skb{};
  skb.tc_index = LOSS_DUP_TC_INDEX;
  LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = pkt.bytes.data(),
              .data_size_in = static_cast<__u32>(pkt.bytes.size()));
  opts.ctx_in = &skb;
  opts.ctx_size_in = sizeof(skb);
  opts.ctx_out = &skb;
  opts.ctx_size_out = sizeof(skb);
  int err = bpf_prog_test_run_opts(inj_->ProgFd(LossHook(Prog::kTcIn)), &opts);
  EXPECT_EQ(err, -EINVAL) << "the kernel now takes tc_index in ctx_in: test the copy's "
                             "mark through it (passed undecided, copies + 1, tc_index 0 out)";
  EXPECT_EQ(Totals(Prog::kTcIn).seen, 0u);
}

// ---- ECN, ECN_PASS ----------------------------------------------------------

// ECT(0) and ECT(1) come out CE with the IPv4 header checksum valid (it is
// recomputed here) and every other byte as it was: the DSCP, the L4 segment
// (its checksum stays valid: the TOS is not in the pseudo-header), behind
// VLAN tags and IP options too. Counted acted (packets, bytes, segments).
TEST_F(Actions, EcnMarksIpv4EctCeWithAValidHeaderChecksum) {
  std::vector<PacketSpec> specs;
  for (uint8_t tos : {0x02, 0x01, 0xb8 | 0x02, 0xb8 | 0x01}) {
    specs.push_back(Tos(Csum(Tcp4("10.0.0.1", "10.0.0.2", 40000, 80, kAck | kPsh, 100)), tos));
    specs.push_back(Tos(Csum(Udp4("10.0.0.1", "10.0.0.2", 5000, 53, 40)), tos));
  }
  PacketSpec vlan = Tos(Csum(Udp4("10.0.0.1", "10.0.0.2", 5000, 53, 40)), 0x02);
  vlan.vlans = {kTpid8021Q};
  specs.push_back(vlan);
  PacketSpec opts = Tos(Csum(Tcp4("10.0.0.1", "10.0.0.2", 40000, 80, kAck, 10)), 0x01);
  opts.ip_options = 8;
  specs.push_back(opts);
  for (Action a : {Action::kEcn, Action::kEcnPass}) {
    for (Prog p : kTcProgs) {
      SCOPED_TRACE(std::string(ProgName(p)) + " " + ActionName(a));
      uint32_t id = AddAction(p, a);
      ASSERT_NE(id, 0u);
      uint64_t bytes = 0;
      for (const PacketSpec& s : specs) {
        Packet pkt = Build(s);
        SCOPED_TRACE("tos " + std::to_string(s.tos) + ": " + Hex(pkt.bytes));
        ASSERT_TRUE(Ip4ChecksumOk(pkt.bytes, pkt));
        bytes += pkt.bytes.size();
        std::vector<uint8_t> out;
        EXPECT_VERDICT(p, RunOut(p, pkt, &out), PassVerdict(p));
        ASSERT_EQ(out.size(), pkt.bytes.size());
        const size_t l3 = pkt.l3_off;
        EXPECT_EQ(out[l3 + 1], pkt.bytes[l3 + 1] | 3) << "TOS";
        EXPECT_TRUE(Ip4ChecksumOk(out, pkt)) << "IPv4 header checksum " << DiffText(pkt.bytes, out);
        EXPECT_TRUE(L4ChecksumOk(out, pkt));
        for (size_t i = 0; i < out.size(); i++)
          if (i != l3 + 1 && i != l3 + 10 && i != l3 + 11) {
            EXPECT_EQ(out[i], pkt.bytes[i]) << "byte " << i;
          }
      }
      RuleCounters c = Counters(id);
      EXPECT_EQ(c.matched_pkts, specs.size());
      EXPECT_EQ(c.acted_pkts, specs.size());
      EXPECT_EQ(c.acted_segs, specs.size());
      EXPECT_EQ(c.acted_bytes, bytes);
      EXPECT_EQ(c.dropped_pkts, 0u);
      EXPECT_EQ(c.unacted_pkts, 0u);
      Remove(id);
    }
  }
}

// IPv6: the traffic class's ECN bits (bits 4-5 of the header's second byte)
// become CE; nothing else changes (the flow label, the DSCP, the segment and
// its checksum, extension headers).
TEST_F(Actions, EcnMarksIpv6TrafficClassCe) {
  std::vector<PacketSpec> specs;
  for (uint8_t tc : {0x02, 0x01, 0xb8 | 0x02, 0xb8 | 0x01}) {
    specs.push_back(Tos(Csum(Tcp6("2001:db8::1", "2001:db8::2", 40000, 80, kAck, 100)), tc));
    specs.push_back(Tos(Csum(Udp6("2001:db8::1", "2001:db8::2", 5000, 53, 40)), tc));
  }
  PacketSpec ext = Tos(Csum(Udp6("2001:db8::1", "2001:db8::2", 5000, 53, 40)), 0x01);
  ext.ext = {{kExtHop}, {kExtDest, 16}};
  specs.push_back(ext);
  for (Action a : {Action::kEcn, Action::kEcnPass}) {
    for (Prog p : kTcProgs) {
      SCOPED_TRACE(std::string(ProgName(p)) + " " + ActionName(a));
      uint32_t id = AddAction(p, a);
      ASSERT_NE(id, 0u);
      for (const PacketSpec& s : specs) {
        Packet pkt = Build(s);
        SCOPED_TRACE("traffic class " + std::to_string(s.tos) + ": " + Hex(pkt.bytes));
        std::vector<uint8_t> out;
        EXPECT_VERDICT(p, RunOut(p, pkt, &out), PassVerdict(p));
        std::vector<uint8_t> want = pkt.bytes;
        want[pkt.l3_off + 1] |= 0x30;
        EXPECT_EQ(out, want) << DiffText(pkt.bytes, out);
        EXPECT_TRUE(L4ChecksumOk(out, pkt));
      }
      ExpectCounts(id, specs.size(), 0, specs.size(), 0);
      Remove(id);
    }
  }
}

// Not ECN-capable (ECN bits 00): ECN drops it (a drop: counted dropped, the
// hook's drop verdict), ECN_PASS passes it unchanged (counted unacted).
TEST_F(Actions, NonEctIsDroppedByEcnAndPassedByEcnPass) {
  const Packet pkts[] = {
      Build(Tos(Csum(Tcp4("10.0.0.1", "10.0.0.2", 40000, 80, kAck, 100)), 0xb8)),
      Build(Csum(Udp6("2001:db8::1", "2001:db8::2", 5000, 53, 40))),
  };
  for (Prog p : kTcProgs) {
    SCOPED_TRACE(ProgName(p));
    uint32_t ecn = AddAction(p, Action::kEcn);
    ASSERT_NE(ecn, 0u);
    uint64_t bytes = 0;
    for (const Packet& pkt : pkts) {
      EXPECT_VERDICT(p, Run(p, pkt), DropVerdict(p));
      bytes += pkt.bytes.size();
    }
    RuleCounters c = Counters(ecn);
    EXPECT_EQ(c.matched_pkts, 2u);
    EXPECT_EQ(c.dropped_pkts, 2u);
    EXPECT_EQ(c.dropped_bytes, bytes);
    EXPECT_EQ(c.acted_pkts, 0u);
    EXPECT_EQ(c.unacted_pkts, 0u);
    EXPECT_EQ(Totals(p).dropped, 2u);
    Remove(ecn);

    uint32_t pass = AddAction(p, Action::kEcnPass);
    ASSERT_NE(pass, 0u);
    for (const Packet& pkt : pkts) ExpectPassedUnchanged(p, pkt);
    ExpectCounts(pass, 2, 0, 0, 2);
    EXPECT_EQ(Totals(p).dropped, 2u) << "no drop under ECN_PASS";
    Remove(pass);
  }
}

// Already CE: passes unchanged under both, counted unacted.
TEST_F(Actions, AlreadyCePassesUnchanged) {
  const Packet pkts[] = {
      Build(Tos(Csum(Tcp4("10.0.0.1", "10.0.0.2", 40000, 80, kAck, 100)), 0x03)),
      Build(Tos(Csum(Udp4("10.0.0.1", "10.0.0.2", 5000, 53, 40)), 0xbb)),
      Build(Tos(Csum(Tcp6("2001:db8::1", "2001:db8::2", 40000, 80, kAck, 100)), 0x03)),
  };
  for (Action a : {Action::kEcn, Action::kEcnPass}) {
    for (Prog p : kTcProgs) {
      SCOPED_TRACE(std::string(ProgName(p)) + " " + ActionName(a));
      uint32_t id = AddAction(p, a);
      ASSERT_NE(id, 0u);
      for (const Packet& pkt : pkts) ExpectPassedUnchanged(p, pkt);
      ExpectCounts(id, 3, 0, 0, 3);
      Remove(id);
    }
  }
}

// A test run with repeat > 1 runs the program again on the same skb: the
// first run marks it CE, the next ones find it CE (acted once, then unacted).
TEST_F(Actions, EcnActsOnceOnTheSameSkb) {
  for (Prog p : kTcProgs) {
    SCOPED_TRACE(ProgName(p));
    uint32_t id = AddAction(p, Action::kEcnPass);
    ASSERT_NE(id, 0u);
    Packet pkt = Build(Tos(Udp4("10.0.0.1", "10.0.0.2", 1, 2), 0x02));
    std::vector<uint8_t> out;
    RunOpts o;
    o.repeat = 5;
    EXPECT_VERDICT(p, RunOut(p, pkt, &out, o), PassVerdict(p));
    ASSERT_EQ(out.size(), pkt.bytes.size());
    EXPECT_EQ(out[pkt.l3_off + 1], 0x03);
    EXPECT_TRUE(Ip4ChecksumOk(out, pkt));
    ExpectCounts(id, 5, 0, 1, 4);
    Remove(id);
  }
}

// A GSO-looking skb (gso_segs, gso_size in the context) counts its segments:
// acted_segs and dropped_segs grow by gso_segs per packet.
TEST_F(Actions, ActedAndDroppedCountGsoSegments) {
  const uint32_t kSegs = 7;
  Packet ect = Build(Tos(Csum(Tcp4("10.0.0.1", "10.0.0.2", 40000, 80, kAck, 1400)), 0x02));
  Packet not_ect = Build(Csum(Tcp4("10.0.0.1", "10.0.0.2", 40000, 80, kAck, 1400)));
  for (Prog p : kTcProgs) {
    SCOPED_TRACE(ProgName(p));
    for (Action a : {Action::kEcn, Action::kCorrupt, Action::kCorruptPayload}) {
      SCOPED_TRACE(ActionName(a));
      uint32_t id = AddAction(p, a);
      ASSERT_NE(id, 0u);
      __sk_buff skb{};
      skb.gso_size = 200;
      RunOpts o;
      o.gso_segs = kSegs;
      o.skb = &skb;
      EXPECT_VERDICT(p, Run(p, ect, o), PassVerdict(p));
      RuleCounters c = Counters(id);
      EXPECT_EQ(c.matched_segs, kSegs);
      EXPECT_EQ(c.acted_pkts, 1u);
      EXPECT_EQ(c.acted_segs, kSegs);
      EXPECT_EQ(c.acted_bytes, ect.bytes.size());
      EXPECT_EQ(c.dropped_segs, 0u);
      if (a == Action::kEcn) {
        skb = {};
        skb.gso_size = 200;
        EXPECT_VERDICT(p, Run(p, not_ect, o), DropVerdict(p));
        c = Counters(id);
        EXPECT_EQ(c.matched_segs, 2 * kSegs);
        EXPECT_EQ(c.dropped_pkts, 1u);
        EXPECT_EQ(c.dropped_segs, kSegs);
        EXPECT_EQ(c.acted_segs, kSegs);
      }
      Remove(id);
    }
  }
}

// ---- 0 % --------------------------------------------------------------------

// At 0 % no action runs: the packet passes unchanged and only `matched` moves
// (no copy is sent either).
TEST_F(Actions, ZeroPercentChangesNothing) {
  const Packet pkts[] = {
      Build(Tos(Csum(Tcp4("10.0.0.1", "10.0.0.2", 40000, 80, kAck, 100)), 0x02)),
      Build(Csum(Udp4("10.0.0.1", "10.0.0.2", 5000, 53, 40))),  // not ECT
      Build(Tos(Csum(Udp6("2001:db8::1", "2001:db8::2", 5000, 53, 40)), 0x01)),
  };
  LoState up(true);  // a copy, if one were sent, would be seen
  for (Action a : {Action::kCorrupt, Action::kCorruptPayload, Action::kDuplicate, Action::kEcn,
                   Action::kEcnPass}) {
    for (Prog p : kTcProgs) {
      SCOPED_TRACE(std::string(ProgName(p)) + " " + ActionName(a));
      uint32_t id = AddAction(p, a, 0.0);
      ASSERT_NE(id, 0u);
      for (const Packet& pkt : pkts) ExpectPassedUnchanged(p, pkt);
      RuleCounters c = Counters(id);
      EXPECT_EQ(c.matched_pkts, 3u);
      EXPECT_EQ(c.dropped_pkts + c.acted_pkts + c.acted_segs + c.acted_bytes + c.unacted_pkts, 0u);
      Remove(id);
    }
  }
  EXPECT_EQ(Totals(Prog::kTcIn).copies + Totals(Prog::kTcOut).copies, 0u);
  EXPECT_EQ(Totals(Prog::kTcIn).dropped + Totals(Prog::kTcOut).dropped, 0u);
}

// ---- CORRUPT ----------------------------------------------------------------

// On a CHECKSUM_NONE skb (every test run's), CORRUPT flips exactly one bit
// of the L4 segment where its checksum covers it and a receiver would not
// judge it first: TCP from byte 4 (past the ports) to the end, UDP its
// payload, ICMP/ICMPv6 from byte 4. The checksum field is left as it was
// (unless the flipped bit is in it), so the recomputed checksum no longer
// verifies; the IP header is untouched. The bit is random: 32 runs each.
TEST_F(Actions, CorruptFlipsOneL4BitAndLeavesTheChecksumStale) {
  const int kRuns = 32;
  PacketSpec vlan = Csum(Tcp4("10.0.0.1", "10.0.0.2", 40000, 80, kAck, 60));
  vlan.vlans = {kTpid8021AD, kTpid8021Q};
  vlan.ip_options = 12;
  PacketSpec ext = Csum(Udp6("2001:db8::1", "2001:db8::2", 5000, 53, 60));
  ext.ext = {{kExtHop}, {kExtDest, 16}};
  struct Case {
    PacketSpec spec;
    size_t from;  // first byte the bit may be in, from the L4 header
  };
  const Case cases[] = {
      {Csum(Tcp4("10.0.0.1", "10.0.0.2", 40000, 80, kAck | kPsh, 100)), 4},
      {Csum(Tcp6("2001:db8::1", "2001:db8::2", 40000, 80, kAck, 100)), 4},
      {Csum(Udp4("10.0.0.1", "10.0.0.2", 5000, 53, 100)), 8},
      {Csum(Udp6("2001:db8::1", "2001:db8::2", 5000, 53, 100)), 8},
      {Csum(Tcp4("10.0.0.1", "10.0.0.2", 40000, 80, kAck, 0)), 4},  // pure ACK: its header
      {Csum(Icmp4()), 4},
      {Csum(Icmp6()), 4},
      {vlan, 4},
      {ext, 8},
  };
  for (Prog p : kTcProgs) {
    SCOPED_TRACE(ProgName(p));
    uint32_t id = AddAction(p, Action::kCorrupt);
    ASSERT_NE(id, 0u);
    uint64_t runs = 0;
    for (const Case& k : cases) {
      Packet pkt = Build(k.spec);
      SCOPED_TRACE(Hex(pkt.bytes));
      ASSERT_TRUE(L4ChecksumOk(pkt.bytes, pkt));
      const size_t csum = pkt.l4_off + L4ChecksumOffset(pkt.l4_proto);
      for (int i = 0; i < kRuns; i++, runs++) {
        std::vector<uint8_t> out;
        EXPECT_VERDICT(p, RunOut(p, pkt, &out), PassVerdict(p));
        ASSERT_EQ(out.size(), pkt.bytes.size());
        std::vector<size_t> bits = DiffBits(pkt.bytes, out);
        ASSERT_EQ(bits.size(), 1u) << DiffText(pkt.bytes, out);
        size_t byte = bits[0] / 8;
        EXPECT_GE(byte, pkt.l4_off + k.from) << DiffText(pkt.bytes, out);
        EXPECT_LT(byte, IpEnd(out, pkt));
        EXPECT_FALSE(L4ChecksumOk(out, pkt))
            << "the checksum still verifies" << DiffText(pkt.bytes, out);
        if (byte != csum && byte != csum + 1) {
          EXPECT_TRUE(out[csum] == pkt.bytes[csum] && out[csum + 1] == pkt.bytes[csum + 1]);
        }
        if (k.spec.family == 4) {
          EXPECT_TRUE(Ip4ChecksumOk(out, pkt));
        }
      }
    }
    RuleCounters c = Counters(id);
    EXPECT_EQ(c.acted_pkts, runs);
    EXPECT_EQ(c.unacted_pkts, 0u);
    EXPECT_EQ(c.dropped_pkts, 0u);
    EXPECT_EQ(Totals(p).dropped, 0u);
    Remove(id);
  }
}

// Where no L4 checksum would find the bit, CORRUPT flips one bit of the IPv4
// identification (header bytes 4-5) and leaves the header checksum stale,
// which every receiver checks: UDP over IPv4 with checksum 0, UDP without
// payload, a protocol without a known checksum (GRE here).
TEST_F(Actions, CorruptFlipsTheIpv4IdentificationWhereNoL4ChecksumCoversIt) {
  const int kRuns = 16;
  PacketSpec gre;
  gre.proto = 47;
  gre.payload = 40;
  const PacketSpec specs[] = {
      Udp4("10.0.0.1", "10.0.0.2", 5000, 53, 100),           // checksum 0
      Csum(Udp4("10.0.0.1", "10.0.0.2", 5000, 53, 0)),      // no payload
      gre,
  };
  for (Prog p : kTcProgs) {
    SCOPED_TRACE(ProgName(p));
    uint32_t id = AddAction(p, Action::kCorrupt);
    ASSERT_NE(id, 0u);
    for (const PacketSpec& s : specs) {
      Packet pkt = Build(s);
      SCOPED_TRACE(Hex(pkt.bytes));
      for (int i = 0; i < kRuns; i++) {
        std::vector<uint8_t> out;
        EXPECT_VERDICT(p, RunOut(p, pkt, &out), PassVerdict(p));
        std::vector<size_t> bits = DiffBits(pkt.bytes, out);
        ASSERT_EQ(bits.size(), 1u) << DiffText(pkt.bytes, out);
        EXPECT_GE(bits[0] / 8, pkt.l3_off + 4) << DiffText(pkt.bytes, out);
        EXPECT_LE(bits[0] / 8, pkt.l3_off + 5) << DiffText(pkt.bytes, out);
        EXPECT_FALSE(Ip4ChecksumOk(out, pkt));
      }
    }
    ExpectCounts(id, 3 * kRuns, 0, 3 * kRuns, 0);
    Remove(id);
  }
}

// IPv6 has no header checksum: where no L4 checksum would find a bit (UDP
// without payload, GRE), CORRUPT cannot act: unchanged, counted unacted.
TEST_F(Actions, CorruptCannotActOnIpv6WithoutAnL4Checksum) {
  PacketSpec gre;
  gre.family = 6;
  gre.proto = 47;
  gre.payload = 40;
  const Packet pkts[] = {Build(Csum(Udp6("2001:db8::1", "2001:db8::2", 5000, 53, 0))),
                         Build(gre)};
  for (Prog p : kTcProgs) {
    SCOPED_TRACE(ProgName(p));
    uint32_t id = AddAction(p, Action::kCorrupt);
    ASSERT_NE(id, 0u);
    for (const Packet& pkt : pkts) ExpectPassedUnchanged(p, pkt);
    ExpectCounts(id, 2, 0, 0, 2);
    Remove(id);
  }
}

// A later fragment has no L4 header (the parser leaves it without ports):
// IPv4: the identification's bit (header checksum stale); IPv6: unacted.
TEST_F(Actions, CorruptOnALaterFragment) {
  const int kRuns = 16;
  PacketSpec udp4 = Udp4("10.0.0.1", "10.0.0.2", 5000, 53, 64);
  udp4.frag_offset = 100;
  PacketSpec tcp4 = Tcp4("10.0.0.1", "10.0.0.2", 40000, 80, kAck, 64);
  tcp4.frag_offset = 100;
  tcp4.more_fragments = true;
  PacketSpec udp6 = Udp6("2001:db8::1", "2001:db8::2", 5000, 53, 64);
  udp6.ext = {{kExtFragment}};
  udp6.frag_offset = 100;
  for (Prog p : kTcProgs) {
    SCOPED_TRACE(ProgName(p));
    uint32_t id = AddAction(p, Action::kCorrupt);
    ASSERT_NE(id, 0u);
    for (const PacketSpec& s : {udp4, tcp4}) {
      Packet pkt = Build(s);
      SCOPED_TRACE(Hex(pkt.bytes));
      for (int i = 0; i < kRuns; i++) {
        std::vector<uint8_t> out;
        EXPECT_VERDICT(p, RunOut(p, pkt, &out), PassVerdict(p));
        std::vector<size_t> bits = DiffBits(pkt.bytes, out);
        ASSERT_EQ(bits.size(), 1u) << DiffText(pkt.bytes, out);
        EXPECT_GE(bits[0] / 8, pkt.l3_off + 4) << DiffText(pkt.bytes, out);
        EXPECT_LE(bits[0] / 8, pkt.l3_off + 5) << DiffText(pkt.bytes, out);
        EXPECT_FALSE(Ip4ChecksumOk(out, pkt));
      }
    }
    ExpectPassedUnchanged(p, Build(udp6));
    ExpectCounts(id, 2 * kRuns + 1, 0, 2 * kRuns, 1);
    Remove(id);
  }
}

// ---- CORRUPT_PAYLOAD --------------------------------------------------------

// CORRUPT_PAYLOAD flips exactly one bit of the TCP/UDP payload (past TCP
// options too) and changes the checksum field so that it still verifies
// (recomputed here); the IPv4 header is untouched. 32 runs each (the bit is
// random). The segments are of even length (see the odd-length case below).
TEST_F(Actions, CorruptPayloadFlipsOnePayloadBitAndKeepsTheChecksumValid) {
  const int kRuns = 32;
  PacketSpec opts = Csum(Tcp4("10.0.0.1", "10.0.0.2", 40000, 80, kAck, 50));
  opts.tcp_doff = 8;
  PacketSpec vlan = Csum(Tcp4("10.0.0.1", "10.0.0.2", 40000, 80, kAck, 60));
  vlan.vlans = {kTpid8021Q};
  vlan.ip_options = 4;
  PacketSpec ext = Csum(Tcp6("2001:db8::1", "2001:db8::2", 40000, 80, kAck, 60));
  ext.ext = {{kExtDest, 24}};
  const PacketSpec specs[] = {
      Csum(Tcp4("10.0.0.1", "10.0.0.2", 40000, 80, kAck | kPsh, 100)),
      Csum(Tcp6("2001:db8::1", "2001:db8::2", 40000, 80, kAck, 100)),
      Csum(Udp4("10.0.0.1", "10.0.0.2", 5000, 53, 100)),
      Csum(Udp6("2001:db8::1", "2001:db8::2", 5000, 53, 100)),
      Csum(Udp4("10.0.0.1", "10.0.0.2", 5000, 53, 2)),
      opts,
      vlan,
      ext,
  };
  for (Prog p : kTcProgs) {
    SCOPED_TRACE(ProgName(p));
    uint32_t id = AddAction(p, Action::kCorruptPayload);
    ASSERT_NE(id, 0u);
    uint64_t runs = 0;
    for (const PacketSpec& s : specs) {
      Packet pkt = Build(s);
      SCOPED_TRACE(Hex(pkt.bytes));
      ASSERT_TRUE(L4ChecksumOk(pkt.bytes, pkt));
      const size_t csum = pkt.l4_off + L4ChecksumOffset(pkt.l4_proto);
      const size_t payload = pkt.l4_off + (s.proto == 6 ? s.tcp_doff * 4 : 8);
      for (int i = 0; i < kRuns; i++, runs++) {
        std::vector<uint8_t> out;
        EXPECT_VERDICT(p, RunOut(p, pkt, &out), PassVerdict(p));
        ASSERT_EQ(out.size(), pkt.bytes.size());
        std::vector<size_t> bits;
        for (size_t b : DiffBits(pkt.bytes, out))
          if (b / 8 != csum && b / 8 != csum + 1) bits.push_back(b);
        ASSERT_EQ(bits.size(), 1u) << DiffText(pkt.bytes, out);
        EXPECT_GE(bits[0] / 8, payload) << DiffText(pkt.bytes, out);
        EXPECT_LT(bits[0] / 8, IpEnd(out, pkt));
        EXPECT_TRUE(L4ChecksumOk(out, pkt)) << DiffText(pkt.bytes, out);
        if (s.family == 4) {
          EXPECT_TRUE(Ip4ChecksumOk(out, pkt));
        }
      }
    }
    ExpectCounts(id, runs, 0, runs, 0);
    Remove(id);
  }
}

// A UDP/IPv4 datagram without a checksum (0) keeps it 0 ("none"): only its
// payload bit changes.
TEST_F(Actions, CorruptPayloadKeepsAUdp4ChecksumOfZero) {
  const int kRuns = 16;
  Packet pkt = Build(Udp4("10.0.0.1", "10.0.0.2", 5000, 53, 100));
  for (Prog p : kTcProgs) {
    SCOPED_TRACE(ProgName(p));
    uint32_t id = AddAction(p, Action::kCorruptPayload);
    ASSERT_NE(id, 0u);
    for (int i = 0; i < kRuns; i++) {
      std::vector<uint8_t> out;
      EXPECT_VERDICT(p, RunOut(p, pkt, &out), PassVerdict(p));
      std::vector<size_t> bits = DiffBits(pkt.bytes, out);
      ASSERT_EQ(bits.size(), 1u) << DiffText(pkt.bytes, out);
      EXPECT_GE(bits[0] / 8, pkt.l4_off + 8);
      EXPECT_EQ(out[pkt.l4_off + 6], 0);
      EXPECT_EQ(out[pkt.l4_off + 7], 0);
    }
    ExpectCounts(id, kRuns, 0, kRuns, 0);
    Remove(id);
  }
}

// Nothing to corrupt (a pure ACK, a SYN, an empty UDP datagram, ICMP, a later
// fragment): passes unchanged, counted unacted.
TEST_F(Actions, CorruptPayloadPassesPacketsWithoutPayloadUnchanged) {
  PacketSpec frag = Udp4("10.0.0.1", "10.0.0.2", 5000, 53, 64);
  frag.frag_offset = 100;
  const Packet pkts[] = {
      Build(Csum(Tcp4("10.0.0.1", "10.0.0.2", 40000, 80, kAck, 0))),
      Build(Csum(Tcp6("2001:db8::1", "2001:db8::2", 40000, 80, kAck, 0))),
      Build(Csum(Tcp4("10.0.0.1", "10.0.0.2", 40000, 80, kSyn, 0))),
      Build(Csum(Udp4("10.0.0.1", "10.0.0.2", 5000, 53, 0))),
      Build(Csum(Icmp4())),
      Build(frag),
  };
  for (Prog p : kTcProgs) {
    SCOPED_TRACE(ProgName(p));
    uint32_t id = AddAction(p, Action::kCorruptPayload);
    ASSERT_NE(id, 0u);
    for (const Packet& pkt : pkts) ExpectPassedUnchanged(p, pkt);
    ExpectCounts(id, std::size(pkts), 0, 0, std::size(pkts));
    Remove(id);
  }
}

// ---- what these fixtures caught in the first version (fixed since) ------

// Was a bug (act_corrupt_payload): the 16-bit word holding the chosen byte is read
// as 2 bytes at woff; when the segment's length is odd and the last byte is
// chosen, that read runs past the end and the action gives up (unacted). A
// 1-byte payload (TCP keepalive probes, interactive keystrokes) is never
// corrupted; an n-byte odd one only (n-1)/n of the time. The checksum treats
// the odd last byte as the high half of a word padded with 0: it can be
// changed like any other.
TEST_F(Actions, CorruptPayloadActsOnAnOddLastByte) {
  const PacketSpec specs[] = {
      Csum(Udp4("10.0.0.1", "10.0.0.2", 5000, 53, 1)),
      Csum(Tcp4("10.0.0.1", "10.0.0.2", 40000, 80, kAck | kPsh, 1)),
      Csum(Tcp6("2001:db8::1", "2001:db8::2", 40000, 80, kAck | kPsh, 1)),
  };
  for (Prog p : kTcProgs) {
    SCOPED_TRACE(ProgName(p));
    uint32_t id = AddAction(p, Action::kCorruptPayload);
    ASSERT_NE(id, 0u);
    for (const PacketSpec& s : specs) {
      Packet pkt = Build(s);
      std::vector<uint8_t> out;
      EXPECT_VERDICT(p, RunOut(p, pkt, &out), PassVerdict(p));
      ASSERT_EQ(out.size(), pkt.bytes.size());
      EXPECT_NE(out.back(), pkt.bytes.back()) << "the 1-byte payload is not changed";
      EXPECT_TRUE(L4ChecksumOk(out, pkt)) << DiffText(pkt.bytes, out);
    }
    ExpectCounts(id, 3, 0, 3, 0);
    Remove(id);
  }
}

// Was a bug (act_corrupt, act_corrupt_payload): both pick their byte up to
// skb->len, which counts a short frame's Ethernet padding (a frame from a
// NIC, at tc ingress, is padded to 60 bytes). A bit flipped there is no
// corruption at all (ip_rcv trims the padding) yet is counted acted; under
// CORRUPT_PAYLOAD the checksum is changed for a word it does not cover, so the
// receiver discards the packet (and its payload was not changed). The end of
// the range must be the IP datagram's (tot_len / payload_len), as the
// parser's has_payload already is.
TEST_F(Actions, CorruptStaysInsideThePaddedFramesDatagram) {
  const int kRuns = 32;
  PacketSpec ack = Csum(Tcp4("10.0.0.1", "10.0.0.2", 40000, 80, kAck, 0));
  ack.pad_to = 60;
  PacketSpec udp = Csum(Udp4("10.0.0.1", "10.0.0.2", 5000, 53, 2));
  udp.pad_to = 60;
  const Prog p = Prog::kTcIn;
  for (Action a : {Action::kCorrupt, Action::kCorruptPayload}) {
    SCOPED_TRACE(ActionName(a));
    uint32_t id = AddAction(p, a);
    ASSERT_NE(id, 0u);
    for (const PacketSpec& s : {ack, udp}) {
      if (a == Action::kCorruptPayload && s.proto == 6) continue;  // no payload: unacted
      Packet pkt = Build(s);
      SCOPED_TRACE(Hex(pkt.bytes));
      const size_t end = IpEnd(pkt.bytes, pkt);
      ASSERT_LT(end, pkt.bytes.size());
      for (int i = 0; i < kRuns; i++) {
        std::vector<uint8_t> out;
        EXPECT_VERDICT(p, RunOut(p, pkt, &out), PassVerdict(p));
        ASSERT_EQ(out.size(), pkt.bytes.size());
        for (size_t b : DiffBits(pkt.bytes, out)) {
          EXPECT_LT(b / 8, end) << "a bit of the Ethernet padding: " << DiffText(pkt.bytes, out);
        }
        if (a == Action::kCorruptPayload) {
          EXPECT_TRUE(L4ChecksumOk(out, pkt)) << DiffText(pkt.bytes, out);
        } else {
          EXPECT_FALSE(L4ChecksumOk(out, pkt)) << DiffText(pkt.bytes, out);
        }
      }
    }
    Remove(id);
  }
}

// Was a bug (act_corrupt with parse_l3): a later fragment leaves p->l4off 0 (the
// parser returns before setting it), and l4_flip_start gives ICMP/ICMPv6 4
// even without an L4 header, so CORRUPT on a later ICMP fragment (a large
// ping) flips a bit anywhere from byte 4 of the frame: the Ethernet
// addresses, the ethertype, the IP header. It should take the IPv4 header's
// path like any later fragment (IPv6: unacted).
TEST_F(Actions, CorruptOnALaterIcmpFragmentFlipsTheIpv4Identification) {
  const int kRuns = 32;
  PacketSpec icmp = Icmp4();
  icmp.payload = 64;
  icmp.frag_offset = 100;
  for (Prog p : kTcProgs) {
    SCOPED_TRACE(ProgName(p));
    uint32_t id = AddAction(p, Action::kCorrupt);
    ASSERT_NE(id, 0u);
    Packet pkt = Build(icmp);
    for (int i = 0; i < kRuns; i++) {
      std::vector<uint8_t> out;
      EXPECT_VERDICT(p, RunOut(p, pkt, &out), PassVerdict(p));
      std::vector<size_t> bits = DiffBits(pkt.bytes, out);
      ASSERT_EQ(bits.size(), 1u) << DiffText(pkt.bytes, out);
      EXPECT_GE(bits[0] / 8, pkt.l3_off + 4) << DiffText(pkt.bytes, out);
      EXPECT_LE(bits[0] / 8, pkt.l3_off + 5) << DiffText(pkt.bytes, out);
    }
    Remove(id);
  }
}

// ---- DUPLICATE ----------------------------------------------------------------

// With lo down, bpf_clone_redirect to it fails (the probe gets its return
// value: ingress NET_RX_DROP, egress NET_XMIT_CN from the noop qdisc of a
// device that is down), and DUPLICATE counts exactly that: the packet passes
// unchanged, unacted. The egress copy still went through lo's egress tc
// program before the qdisc dropped it: it was seen there as a copy.
TEST_F(Actions, DuplicateToADeviceThatIsDownIsUnacted) {
  LoState down(false);
  Packet pkt = Build(Csum(Udp4("10.0.0.1", "10.0.0.2", 5000, 53, 40)));
  for (Prog p : kTcProgs) {
    SCOPED_TRACE(ProgName(p));
    // What the helper answers here, before any rule would decide the probe's copy.
    std::vector<int32_t> r = Probe(
        {{BPF_FUNC_clone_redirect, 0, p == Prog::kTcIn ? int32_t(BPF_F_INGRESS) : 0, true}}, pkt);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0], p == Prog::kTcIn ? 1 /* NET_RX_DROP */ : 2 /* NET_XMIT_CN */);
    uint64_t copies = Totals(p).copies;
    uint32_t id = AddAction(p, Action::kDuplicate);
    ASSERT_NE(id, 0u);
    ExpectPassedUnchanged(p, pkt);
    ExpectCounts(id, 1, 0, r[0] == 0 ? 1 : 0, r[0] == 0 ? 0 : 1);
    // The egress copy met lossd_tc_out (a copy: passed undecided) before the
    // qdisc dropped it; the ingress copy never reached the device.
    EXPECT_EQ(Totals(p).copies - copies, p == Prog::kTcOut ? 1u : 0u);
    Remove(id);
  }
}

// With lo up the copy goes out: bpf_clone_redirect returns 0 (the probe), the
// packet passes unchanged, counted acted; the copy meets lo's tc program of
// the same direction, which passes it undecided (it carries
// LOSS_DUP_TC_INDEX): that hook counts a copy and nothing else (not `seen`),
// and no rule counter moves (matched stays 1 a packet: a decided copy would
// be duplicated again). Egress copies are seen inside bpf_clone_redirect;
// ingress ones from lo's backlog. An egress copy then loops back in at lo's
// ingress as a plain packet: lossd_tc_out cleared its mark.
TEST_F(Actions, DuplicateCopyIsPassedUndecided) {
  LoState up(true);
  const Packet pkts[] = {
      Build(Csum(Udp4("10.0.0.1", "10.0.0.2", 5000, 53, 40))),
      Build(Csum(Tcp6("2001:db8::1", "2001:db8::2", 40000, 80, kAck, 100))),
  };
  const uint64_t n = std::size(pkts);
  for (Prog p : kTcProgs) {
    SCOPED_TRACE(ProgName(p));
    const bool ingress = p == Prog::kTcIn;
    uint64_t seen = Totals(Prog::kTcIn).seen;
    std::vector<int32_t> r = Probe(
        {{BPF_FUNC_clone_redirect, 0, ingress ? int32_t(BPF_F_INGRESS) : 0, true}}, pkts[0]);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0], 0) << "bpf_clone_redirect to lo (up)";
    // The probe's copy (unmarked: a plain packet to lossd) ends at lo's
    // ingress either way; wait for it, so that no rule of this test meets it.
    EXPECT_EQ(WaitFor([&] { return Totals(Prog::kTcIn).seen; }, seen + 1), seen + 1);

    const HookCounters in0 = Totals(Prog::kTcIn), out0 = Totals(Prog::kTcOut);
    uint32_t id = AddAction(p, Action::kDuplicate);
    ASSERT_NE(id, 0u);
    for (uint64_t i = 0; i < n; i++) {
      ExpectPassedUnchanged(p, pkts[i]);
      if (ingress) {
        EXPECT_EQ(WaitFor([&] { return Totals(Prog::kTcIn).copies; }, in0.copies + i + 1),
                  in0.copies + i + 1);
      } else {
        EXPECT_EQ(Totals(Prog::kTcOut).copies, out0.copies + i + 1) << "not seen synchronously";
      }
    }
    RuleCounters c = Counters(id);
    EXPECT_EQ(c.matched_pkts, n) << "a copy was decided";
    EXPECT_EQ(c.acted_pkts, n);
    EXPECT_EQ(c.acted_bytes, pkts[0].bytes.size() + pkts[1].bytes.size());
    EXPECT_EQ(c.unacted_pkts, 0u);
    EXPECT_EQ(c.dropped_pkts, 0u);
    HookCounters in = Totals(Prog::kTcIn), out = Totals(Prog::kTcOut);
    if (ingress) {
      EXPECT_EQ(in.seen - in0.seen, n) << "the originals only";
      EXPECT_EQ(out.seen - out0.seen, 0u);
      EXPECT_EQ(out.copies - out0.copies, 0u);
    } else {
      EXPECT_EQ(out.seen - out0.seen, n) << "the originals only";
      EXPECT_EQ(WaitFor([&] { return Totals(Prog::kTcIn).seen; }, in0.seen + n), in0.seen + n)
          << "the copies, back in at lo's ingress";
      EXPECT_EQ(Totals(Prog::kTcIn).copies - in0.copies, 0u) << "a copy kept its mark";
    }
    Remove(id);
  }
}

// ---- real packets on lo ------------------------------------------------------

// A test run's skb is always CHECKSUM_NONE; a UDP datagram a socket sends on
// lo is CHECKSUM_PARTIAL (lo offers checksum offload and never computes it;
// its receiver trusts PARTIAL), at lo's tc egress and again at its ingress.
// These send real datagrams over lo (up) through both tc programs.

// A counter of /proc/net/snmp or /proc/net/netstat (this namespace's), e.g.
// ("Ip", "InHdrErrors"), ("IpExt", "InCsumErrors"); 0 if absent.
uint64_t NetStat(const std::string& file, const std::string& group, const std::string& name) {
  std::ifstream in("/proc/net/" + file);
  std::string names, values;
  while (std::getline(in, names) && std::getline(in, values)) {
    std::istringstream n(names), v(values);
    std::string key, val;
    n >> key;
    v >> val;
    if (key != group + ":") continue;
    while (n >> key && v >> val)
      if (key == name) return std::stoull(val);
  }
  return 0;
}

struct Datagram {
  std::string data;
  int tos = -1;  // IPv4 TOS / IPv6 traffic class as received
};

// A UDP socket bound to the loopback address of `family`, its port in *port,
// receiving the TOS / traffic class of each datagram.
int UdpOnLoopback(int family, uint16_t* port) {
  int fd = socket(family == 4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  if (family == 4) {
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    setsockopt(fd, IPPROTO_IP, IP_RECVTOS, &one, sizeof(one));
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return close(fd), -1;
  } else {
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    setsockopt(fd, IPPROTO_IPV6, IPV6_RECVTCLASS, &one, sizeof(one));
    if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) return close(fd), -1;
  }
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
  *port = ntohs(family == 4 ? reinterpret_cast<sockaddr_in*>(&ss)->sin_port
                            : reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port);
  return fd;
}

// Sends `data` from a new socket with TOS / traffic class `tos` to the
// loopback address of `family`, port `port`.
bool SendOnLoopback(int family, uint16_t port, const std::string& data, int tos) {
  int fd = socket(family == 4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  ssize_t n;
  if (family == 4) {
    setsockopt(fd, IPPROTO_IP, IP_TOS, &tos, sizeof(tos));
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(port);
    n = sendto(fd, data.data(), data.size(), 0, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  } else {
    setsockopt(fd, IPPROTO_IPV6, IPV6_TCLASS, &tos, sizeof(tos));
    sockaddr_in6 a{};
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    a.sin6_port = htons(port);
    n = sendto(fd, data.data(), data.size(), 0, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  }
  close(fd);
  return n == ssize_t(data.size());
}

// The next datagram on fd, waiting up to timeout_ms.
std::optional<Datagram> Receive(int fd, int timeout_ms) {
  pollfd pfd{fd, POLLIN, 0};
  if (poll(&pfd, 1, timeout_ms) != 1) return std::nullopt;
  char buf[2048], cbuf[256];
  iovec iov{buf, sizeof(buf)};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  m.msg_control = cbuf;
  m.msg_controllen = sizeof(cbuf);
  ssize_t n = recvmsg(fd, &m, MSG_DONTWAIT);
  if (n < 0) return std::nullopt;
  Datagram d;
  d.data.assign(buf, size_t(n));
  for (cmsghdr* c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
    if (c->cmsg_level == IPPROTO_IP && c->cmsg_type == IP_TOS) d.tos = *CMSG_DATA(c);
    if (c->cmsg_level == IPPROTO_IPV6 && c->cmsg_type == IPV6_TCLASS) {
      int tc;
      memcpy(&tc, CMSG_DATA(c), sizeof(tc));
      d.tos = tc;
    }
  }
  return d;
}

// Sets a sysctl of this namespace (path under /proc/sys) for the scope.
class Sysctl {
 public:
  Sysctl(const std::string& path, const std::string& value) : path_("/proc/sys/" + path) {
    std::ifstream(path_) >> old_;
    std::ofstream(path_) << value;
    std::string now;
    std::ifstream(path_) >> now;
    EXPECT_EQ(now, value) << path_;
  }
  ~Sysctl() {
    if (!old_.empty()) std::ofstream(path_) << old_;
  }

 private:
  std::string path_, old_;
};

class OnLoopback : public Actions {
 protected:
  void SetUp() override {
    Actions::SetUp();
    lo_ = std::make_unique<LoState>(true);
  }
  void TearDown() override {
    lo_.reset();
    Actions::TearDown();
  }

  // A receiver on lo's `family` address and a rule on its port for the
  // direction of p, acting with `a`.
  struct Receiver {
    int fd = -1;
    uint16_t port = 0;
    uint32_t rule = 0;
    ~Receiver() {
      if (fd >= 0) close(fd);
    }
  };
  void Listen(Prog p, int family, Action a, Receiver* r) {
    r->fd = UdpOnLoopback(family, &r->port);
    ASSERT_GE(r->fd, 0) << strerror(errno);
    RuleSpec s = Rule(p);
    s.action = a;
    s.dport = *ParsePortRange(std::to_string(r->port));
    r->rule = Add(s);
    ASSERT_NE(r->rule, 0u);
  }

  static std::string Payload() {
    std::string s(200, '\0');
    for (size_t i = 0; i < s.size(); i++) s[i] = char('a' + i % 26);
    return s;
  }

 private:
  std::unique_ptr<LoState> lo_;
};

// CORRUPT on a PARTIAL skb: IPv4 (one segment) gets a bit of its
// identification flipped and the header checksum stale, so lo's receiving IP
// layer discards it (a checksum error, counted in this namespace's IP
// counters) and nothing arrives. IPv6 has no header checksum and its L4
// checksum is computed after tc: nothing can be corrupted; it arrives intact,
// counted unacted.
TEST_F(OnLoopback, CorruptOfAPartialChecksumBreaksTheIpv4Header) {
  for (Prog p : kTcProgs) {
    SCOPED_TRACE(ProgName(p));
    Receiver v4, v6;
    Listen(p, 4, Action::kCorrupt, &v4);
    Listen(p, 6, Action::kCorrupt, &v6);
    if (HasFatalFailure()) return;
    const uint64_t csum_errors = NetStat("netstat", "IpExt", "InCsumErrors");
    const uint64_t hdr_errors = NetStat("snmp", "Ip", "InHdrErrors");
    ASSERT_TRUE(SendOnLoopback(4, v4.port, Payload(), 0));
    EXPECT_EQ(WaitFor([&] { return NetStat("netstat", "IpExt", "InCsumErrors"); },
                      csum_errors + 1),
              csum_errors + 1);
    EXPECT_EQ(NetStat("snmp", "Ip", "InHdrErrors"), hdr_errors + 1);
    EXPECT_FALSE(Receive(v4.fd, 0).has_value()) << "a corrupted datagram was delivered";
    ExpectCounts(v4.rule, 1, 0, 1, 0);

    ASSERT_TRUE(SendOnLoopback(6, v6.port, Payload(), 0));
    std::optional<Datagram> d = Receive(v6.fd, 2000);
    ASSERT_TRUE(d.has_value());
    EXPECT_EQ(d->data, Payload());
    ExpectCounts(v6.rule, 1, 0, 0, 1);
    Remove(v4.rule);
    Remove(v6.rule);
  }
}

// CORRUPT_PAYLOAD on a PARTIAL skb leaves the checksum to the device (which
// on lo nobody computes nor checks): the datagram arrives with exactly one
// bit of its payload flipped, IPv4 and IPv6.
TEST_F(OnLoopback, CorruptPayloadOfAPartialChecksumDeliversOneWrongBit) {
  for (Prog p : kTcProgs) {
    SCOPED_TRACE(ProgName(p));
    for (int family : {4, 6}) {
      SCOPED_TRACE("IPv" + std::to_string(family));
      Receiver r;
      Listen(p, family, Action::kCorruptPayload, &r);
      if (HasFatalFailure()) return;
      const int kDatagrams = 8;
      for (int i = 0; i < kDatagrams; i++) {
        ASSERT_TRUE(SendOnLoopback(family, r.port, Payload(), 0));
        std::optional<Datagram> d = Receive(r.fd, 2000);
        ASSERT_TRUE(d.has_value());
        const std::string pl = Payload();
        std::vector<uint8_t> sent(pl.begin(), pl.end());
        std::vector<uint8_t> got(d->data.begin(), d->data.end());
        ASSERT_EQ(got.size(), sent.size());
        EXPECT_EQ(DiffBits(sent, got).size(), 1u) << DiffText(sent, got);
      }
      ExpectCounts(r.rule, kDatagrams, 0, kDatagrams, 0);
      Remove(r.rule);
    }
  }
}

// ECN: ECT(0) / ECT(1) arrive CE (the receiver's IP_TOS / IPV6_TCLASS says so;
// an IPv4 header checksum left wrong would have had it discarded); a non-ECT
// datagram does not arrive (dropped: at egress stolen, so the sender's
// sendto still succeeds); under ECN_PASS it arrives as it was.
TEST_F(OnLoopback, EcnMarksRealDatagrams) {
  for (Prog p : kTcProgs) {
    SCOPED_TRACE(ProgName(p));
    for (int family : {4, 6}) {
      SCOPED_TRACE("IPv" + std::to_string(family));
      Receiver ecn, pass;
      Listen(p, family, Action::kEcn, &ecn);
      Listen(p, family, Action::kEcnPass, &pass);
      if (HasFatalFailure()) return;
      for (int tos : {0x02, 0x01, 0xb8 | 0x02}) {
        ASSERT_TRUE(SendOnLoopback(family, ecn.port, Payload(), tos));
        std::optional<Datagram> d = Receive(ecn.fd, 2000);
        ASSERT_TRUE(d.has_value()) << "tos " << tos;
        EXPECT_EQ(d->tos, tos | 3);
        EXPECT_EQ(d->data, Payload());
      }
      ASSERT_TRUE(SendOnLoopback(family, ecn.port, Payload(), 0xb8));
      ASSERT_TRUE(SendOnLoopback(family, pass.port, Payload(), 0xb8));
      std::optional<Datagram> d = Receive(pass.fd, 2000);
      ASSERT_TRUE(d.has_value());
      EXPECT_EQ(d->tos, 0xb8);
      EXPECT_FALSE(Receive(ecn.fd, 0).has_value()) << "a non-ECT datagram passed under ECN";
      ExpectCounts(ecn.rule, 4, 1, 3, 0);
      ExpectCounts(pass.rule, 1, 0, 0, 1);
      Remove(ecn.rule);
      Remove(pass.rule);
    }
  }
}

// DUPLICATE: each datagram arrives twice, and the copy is passed undecided
// by the tc program of the rule's direction (counted a copy there).
//
// An ingress copy has lost the route the original carries (dev_forward_skb
// drops it), so IPv4 looks it up again, and a datagram from 127.0.0.1 to
// 127.0.0.1 arriving on lo is a martian twice over: its destination (unless
// route_localnet) and its local source (unless accept_local). Without these
// two the kernel silently discards the IPv4 ingress copy on lo (lossd has
// counted it duplicated); IPv6 and egress copies are not affected.
TEST_F(OnLoopback, DuplicateDeliversTwice) {
  Sysctl localnet("net/ipv4/conf/lo/route_localnet", "1");
  Sysctl accept_local("net/ipv4/conf/lo/accept_local", "1");
  for (Prog p : kTcProgs) {
    SCOPED_TRACE(ProgName(p));
    for (int family : {4, 6}) {
      SCOPED_TRACE("IPv" + std::to_string(family));
      Receiver r;
      Listen(p, family, Action::kDuplicate, &r);
      if (HasFatalFailure()) return;
      const uint64_t copies = Totals(p).copies;
      ASSERT_TRUE(SendOnLoopback(family, r.port, Payload(), 0));
      for (int i = 0; i < 2; i++) {
        std::optional<Datagram> d = Receive(r.fd, 2000);
        ASSERT_TRUE(d.has_value()) << "datagram " << i;
        EXPECT_EQ(d->data, Payload());
      }
      EXPECT_FALSE(Receive(r.fd, 50).has_value()) << "a third one";
      EXPECT_EQ(Totals(p).copies, copies + 1);
      ExpectCounts(r.rule, 1, 0, 1, 0);
      Remove(r.rule);
    }
  }
}

// ---- frames from a device, by checksum state ---------------------------------

// A tap device (gone when closed) with IPv4 address 10.77.0.1/24: a frame
// written to it arrives at its ingress like one from a NIC. The
// virtio_net_hdr in front of it sets the skb's checksum state: no flag
// NONE, NEEDS_CSUM PARTIAL (this kernel's tun ignores DATA_VALID: NONE too).
// In NAPI mode the frames go through GRO, which checks a TCP segment's
// checksum and marks it UNNECESSARY. No way here gives COMPLETE.

// struct virtio_net_hdr (<linux/virtio_net.h> is not C++), little-endian
// fields (the tap's default on this host).
struct VnetHdr {
  uint8_t flags;
  uint8_t gso_type;
  uint16_t hdr_len, gso_size, csum_start, csum_offset;
};
static_assert(sizeof(VnetHdr) == 10, "virtio_net_hdr layout");
constexpr uint8_t kVnetNeedsCsum = 1;  // VIRTIO_NET_HDR_F_NEEDS_CSUM
constexpr int kBpfTcxIngress = 46;     // enum bpf_attach_type (Linux 6.6; not in these headers)

class Tap {
 public:
  static constexpr const char* kName = "lossdtap0";

  explicit Tap(bool napi = false) {
    fd_ = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
    if (fd_ < 0) {
      ADD_FAILURE() << "/dev/net/tun: " << strerror(errno);
      return;
    }
    ifreq ifr{};
    snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", kName);
    ifr.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR | (napi ? IFF_NAPI : 0);
    if (ioctl(fd_, TUNSETIFF, &ifr) != 0) {
      ADD_FAILURE() << "TUNSETIFF: " << strerror(errno);
      close(fd_);
      fd_ = -1;
      return;
    }
    // No IPv6 (DAD, router solicitations): nothing but the test's frames.
    std::ofstream(std::string("/proc/sys/net/ipv6/conf/") + kName + "/disable_ipv6") << "1";
    int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    inet_pton(AF_INET, "10.77.0.1", &a.sin_addr);
    memcpy(&ifr.ifr_addr, &a, sizeof(a));
    if (ioctl(s, SIOCSIFADDR, &ifr) != 0) ADD_FAILURE() << "SIOCSIFADDR: " << strerror(errno);
    inet_pton(AF_INET, "255.255.255.0", &a.sin_addr);
    memcpy(&ifr.ifr_netmask, &a, sizeof(a));
    if (ioctl(s, SIOCSIFNETMASK, &ifr) != 0) ADD_FAILURE() << "SIOCSIFNETMASK: " << strerror(errno);
    if (ioctl(s, SIOCGIFHWADDR, &ifr) == 0) memcpy(mac_, ifr.ifr_hwaddr.sa_data, 6);
    close(s);
    SetLinkUp(kName, true);
  }
  ~Tap() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0 && IfIndexOf(kName) != 0; }

  // Writes frame (its destination MAC set to the tap's) behind header h.
  bool Inject(const VnetHdr& h, std::vector<uint8_t> frame) {
    memcpy(frame.data(), mac_, 6);
    iovec iov[2] = {{const_cast<VnetHdr*>(&h), sizeof(h)}, {frame.data(), frame.size()}};
    return writev(fd_, iov, 2) == ssize_t(sizeof(h) + frame.size());
  }

 private:
  int fd_ = -1;
  uint8_t mac_[6] = {};
};

// A UDP socket on 10.77.0.1, its port in *port.
int UdpOnTap(uint16_t* port) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  inet_pton(AF_INET, "10.77.0.1", &a.sin_addr);
  if (fd < 0 || bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ADD_FAILURE() << "bind 10.77.0.1: " << strerror(errno);
    if (fd >= 0) close(fd);
    return -1;
  }
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  *port = ntohs(a.sin_port);
  return fd;
}

VnetHdr Header(bool partial, const Packet& pkt) {
  VnetHdr h{};
  if (partial) {
    h.flags = kVnetNeedsCsum;
    h.csum_start = uint16_t(pkt.l4_off);
    h.csum_offset = uint16_t(L4ChecksumOffset(pkt.l4_proto));
  }
  return h;
}

// A tcx program on the tap's ingress passing only CHECKSUM_UNNECESSARY skbs
// (bpf_csum_level's query answers the level, else -EACCES); its link fd.
int AttachUnnecessaryGate() {
  int fd = LoadTcProgram({
      Ins(BPF_ALU64 | BPF_MOV | BPF_K, 2, 0, 0, BPF_CSUM_LEVEL_QUERY),  // r1: the skb
      Ins(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_csum_level),
      Ins(BPF_JMP | BPF_JSLT | BPF_K, 0, 0, 2, 0),  // if r0 < 0: drop
      Ins(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, -1),  // TCX_NEXT
      Ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
      Ins(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 2),  // TCX_DROP
      Ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0),
  });
  if (fd < 0) return -1;
  int link = bpf_link_create(fd, int(IfIndexOf(Tap::kName)), bpf_attach_type(kBpfTcxIngress),
                             nullptr);
  if (link < 0) ADD_FAILURE() << "tcx ingress: " << strerror(errno);
  close(fd);
  return link;
}

class OnTap : public Actions {
 protected:
  // A UDP datagram from 10.77.0.2 to the socket's port.
  static Packet Datagram4(uint16_t port) {
    return Build(Csum(Udp4("10.77.0.2", "10.77.0.1", 5000, port, 100)));
  }
  // A TCP segment with data from 10.77.0.2 to port 9 (closed: a segment the
  // stack accepts is answered with a reset, Tcp OutRsts).
  static Packet Segment4() {
    return Build(Csum(Tcp4("10.77.0.2", "10.77.0.1", 40000, 9, kAck | kPsh, 100)));
  }
  static std::string PayloadOf(const Packet& pkt) {
    return std::string(pkt.bytes.begin() + pkt.l4_off + 8, pkt.bytes.end());
  }
  // A rule at the tap's tc ingress acting with `a` on packets to port.
  uint32_t AddOnTap(Action a, uint16_t port) {
    RuleSpec s = Rule(Prog::kTcIn);
    s.iface = Tap::kName;
    s.action = a;
    s.dport = *ParsePortRange(std::to_string(port));
    return Add(s);
  }
  static uint64_t Snmp(const char* group, const char* name) { return NetStat("snmp", group, name); }
};

// The checksum states as the receiving stack sees them, without a rule: a
// datagram with a wrong UDP checksum is found (and dropped) under NONE, not
// under PARTIAL; through GRO (NAPI mode) a TCP segment is UNNECESSARY at tc
// ingress (a gate passing only those lets it through: it is answered).
TEST_F(OnTap, DeviceChecksumStatesReachTheStack) {
  {
    Tap tap;
    ASSERT_TRUE(tap.ok());
    uint16_t port;
    int fd = UdpOnTap(&port);
    ASSERT_GE(fd, 0);
    Packet good = Datagram4(port), bad = good;
    bad.bytes[bad.l4_off + 6] ^= 0x10;  // the UDP checksum
    for (bool partial : {false, true}) {
      SCOPED_TRACE(partial ? "CHECKSUM_PARTIAL" : "CHECKSUM_NONE");
      ASSERT_TRUE(tap.Inject(Header(partial, good), good.bytes));
      std::optional<Datagram> d = Receive(fd, 2000);
      ASSERT_TRUE(d.has_value());
      EXPECT_EQ(d->data, PayloadOf(good));
      const uint64_t errors = Snmp("Udp", "InCsumErrors");
      ASSERT_TRUE(tap.Inject(Header(partial, bad), bad.bytes));
      d = Receive(fd, partial ? 2000 : 50);
      EXPECT_EQ(d.has_value(), partial);
      EXPECT_EQ(Snmp("Udp", "InCsumErrors"), errors + (partial ? 0 : 1));
    }
    close(fd);
  }
  Tap tap(/*napi=*/true);
  ASSERT_TRUE(tap.ok());
  int gate = AttachUnnecessaryGate();
  ASSERT_GE(gate, 0);
  const uint64_t rsts = Snmp("Tcp", "OutRsts");
  ASSERT_TRUE(tap.Inject(Header(false, Segment4()), Segment4().bytes));
  EXPECT_EQ(WaitFor([&] { return Snmp("Tcp", "OutRsts"); }, rsts + 1), rsts + 1)
      << "the segment was not CHECKSUM_UNNECESSARY at tc ingress";
  close(gate);
}

// CORRUPT on frames from a device: NONE, the flipped L4 bit makes the UDP
// checksum wrong; PARTIAL, the IPv4 header's (its checksum stale);
// UNNECESSARY (a TCP segment through GRO), the L4 bit and the skb set back to
// NONE, without which the stack would not look. Each time the receiving
// stack discards the packet (a checksum error of UDP, IP or TCP): the socket
// gets nothing, the closed port sends no reset.
TEST_F(OnTap, CorruptIsFoundByTheReceivingStackInEveryChecksumState) {
  const int kFrames = 8;
  {
    Tap tap;
    ASSERT_TRUE(tap.ok());
    uint16_t port;
    int fd = UdpOnTap(&port);
    ASSERT_GE(fd, 0);
    uint32_t id = AddOnTap(Action::kCorrupt, port);
    ASSERT_NE(id, 0u);
    const Packet pkt = Datagram4(port);
    for (bool partial : {false, true}) {
      SCOPED_TRACE(partial ? "CHECKSUM_PARTIAL" : "CHECKSUM_NONE");
      for (int i = 0; i < kFrames; i++) {
        const uint64_t udp = Snmp("Udp", "InCsumErrors");
        const uint64_t ip = NetStat("netstat", "IpExt", "InCsumErrors");
        ASSERT_TRUE(tap.Inject(Header(partial, pkt), pkt.bytes));
        // UDP checks a NONE datagram's checksum when it is read (recvmsg
        // drops it then and counts the error): read while waiting.
        bool delivered = false;
        auto errors = [&] {
          if (Receive(fd, 0)) delivered = true;
          return Snmp("Udp", "InCsumErrors") - udp + NetStat("netstat", "IpExt", "InCsumErrors") -
                 ip;
        };
        EXPECT_EQ(WaitFor(errors, 1), 1u);
        EXPECT_EQ(NetStat("netstat", "IpExt", "InCsumErrors") - ip, partial ? 1u : 0u)
            << "IP header checksum errors";
        EXPECT_FALSE(delivered) << "a corrupted datagram was delivered";
      }
    }
    ExpectCounts(id, 2 * kFrames, 0, 2 * kFrames, 0);
    Remove(id);
    close(fd);
  }
  Tap tap(/*napi=*/true);
  ASSERT_TRUE(tap.ok());
  uint32_t id = AddOnTap(Action::kCorrupt, 9);
  ASSERT_NE(id, 0u);
  SCOPED_TRACE("CHECKSUM_UNNECESSARY (GRO)");
  const uint64_t rsts = Snmp("Tcp", "OutRsts");
  for (int i = 0; i < kFrames; i++) {
    // InErrs: checksum errors, and the segments whose flipped bit made the
    // header length too short (judged before the checksum).
    const uint64_t errors = Snmp("Tcp", "InErrs");
    ASSERT_TRUE(tap.Inject(Header(false, Segment4()), Segment4().bytes));
    EXPECT_EQ(WaitFor([&] { return Snmp("Tcp", "InErrs"); }, errors + 1), errors + 1);
  }
  EXPECT_EQ(Snmp("Tcp", "OutRsts"), rsts) << "a corrupted segment was accepted";
  ExpectCounts(id, kFrames, 0, kFrames, 0);
  Remove(id);
}

// CORRUPT_PAYLOAD on frames from a device: the datagram is delivered with
// one bit of its payload flipped; under NONE the stack checks the changed
// checksum, which must be right (no UDP checksum error).
TEST_F(OnTap, CorruptPayloadIsDeliveredWithOneWrongBit) {
  Tap tap;
  ASSERT_TRUE(tap.ok());
  uint16_t port;
  int fd = UdpOnTap(&port);
  ASSERT_GE(fd, 0);
  uint32_t id = AddOnTap(Action::kCorruptPayload, port);
  ASSERT_NE(id, 0u);
  const Packet pkt = Datagram4(port);
  const std::string sent = PayloadOf(pkt);
  const int kFrames = 16;
  const uint64_t errors = Snmp("Udp", "InCsumErrors");
  for (bool partial : {false, true}) {
    SCOPED_TRACE(partial ? "CHECKSUM_PARTIAL" : "CHECKSUM_NONE");
    for (int i = 0; i < kFrames; i++) {
      ASSERT_TRUE(tap.Inject(Header(partial, pkt), pkt.bytes));
      std::optional<Datagram> d = Receive(fd, 2000);
      ASSERT_TRUE(d.has_value());
      std::vector<uint8_t> a(sent.begin(), sent.end()), b(d->data.begin(), d->data.end());
      ASSERT_EQ(a.size(), b.size());
      EXPECT_EQ(DiffBits(a, b).size(), 1u) << DiffText(a, b);
    }
  }
  EXPECT_EQ(Snmp("Udp", "InCsumErrors"), errors);
  ExpectCounts(id, 2 * kFrames, 0, 2 * kFrames, 0);
  Remove(id);
  close(fd);
}

// ---- XDP ----------------------------------------------------------------------

// XDP never acts: a rule with an action beside drop cannot be given hook xdp
// (Validate refuses it), and a tc rule (ECN, everything on lo) does not match
// at XDP: an ECT packet run through the XDP program passes unchanged.
TEST_F(Actions, XdpNeverActs) {
  for (Action a : {Action::kCorrupt, Action::kCorruptPayload, Action::kDuplicate, Action::kEcn,
                   Action::kEcnPass}) {
    SCOPED_TRACE(ActionName(a));
    RuleSpec s = Rule(Prog::kXdp);
    s.action = a;
    auto r = inj_->Add(s);
    ASSERT_FALSE(r.ok()) << "hook xdp took a rule with action " << ActionName(a);
    EXPECT_EQ(r.status().code(), Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find("XDP cannot"), std::string::npos) << r.status().ToString();
  }
  uint32_t id = AddAction(Prog::kTcIn, Action::kEcn);
  ASSERT_NE(id, 0u);
  const Packet pkts[] = {
      Build(Tos(Csum(Tcp4("10.0.0.1", "10.0.0.2", 40000, 80, kAck, 100)), 0x02)),
      Build(Csum(Udp4("10.0.0.1", "10.0.0.2", 5000, 53, 40))),  // not ECT: ECN would drop it
  };
  for (const Packet& pkt : pkts) ExpectPassedUnchanged(Prog::kXdp, pkt);
  ExpectCounts(id, 0, 0, 0, 0);
  HookCounters h = Totals(Prog::kXdp);
  EXPECT_EQ(h.seen, 2u);
  EXPECT_EQ(h.passed, 2u);
  Remove(id);
}

}  // namespace
}  // namespace lossd::bpftest
