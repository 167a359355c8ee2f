// bpf_cost: per-packet cost of the loss injector's XDP program, measured
// with BPF_PROG_TEST_RUN against an empty XDP program in the same run
// (docs/architecture.md#how-we-measure).
//
// Cases (each with its own Injector, i.e. its own maps and programs):
//   a_empty          empty XDP program (r0 = XDP_PASS; exit): the baseline
//   b_0_rules        injector, no rules
//   c_1_nomatch      1 rule the packet does not match (another dport)
//   d_1_match        1 rule the packet matches, at 0 %
//   e_10k_nomatch    10,000 rules (5,000 on distinct dports, 5,000 on distinct
//                    destination hosts), the packet matches none
//   f_10k_match      9,999 of those plus 1 rule the packet matches, at 0 %
// and, to tell where a cost comes from:
//   c_1_host_nomatch 1 host-anchored rule the packet does not match
//   e_10k_ports      10,000 rules on distinct dports only, no match
//   e_10k_hosts      10,000 rules on distinct destination hosts only, no match
//   d_1_match_nolease  d_1_match with the lease off (no bpf_ktime_get_ns)
//   d_1_match_ttl    d_1_match with a TTL on the rule (expiry check)
//   a_empty_tc, d_1_match_tc  the same through the tc ingress program (the
//                    hook lossd picks on veth), against an empty tc program
// and, to split the cost of a matching rule into steps (same packet, the
// rule's bucket is found each time; each case goes one step further):
//   c_1_bucket_hookmiss  a rule on the packet's dport for another hook (tc):
//                    bucket lookup + candidate scan + loss_rank's rule lookup,
//                    rejected at its first field checks
//   c_1_bucket_addrmiss  a rule on the packet's dport and another dst host:
//                    every field check of loss_rank, rejected at the last one
//   d_1_match        (above) the rule matches: the chosen rule, its counters,
//                    the decision
// and the actions beside drop, at tc only (JSON "actions"; --no-actions
// leaves them out), each a rule on the tc ingress program matching the
// packet (an ECT(0) UDP/TCP packet with valid checksums):
//   t_empty          an empty tc program (the group's baseline)
//   t_drop_0, t_drop_100      drop at 0 % and 100 %: the baseline of each action
//   t_<action>_0, t_<action>_100  corrupt, corrupt_payload, duplicate, ecn,
//                    ecn_pass at 0 % and at 100 % (every matched packet acted on)
//   t_ecn_100_nonect, t_ecn_pass_100_nonect  the same on a non-ECT packet
//                    (ecn drops it, ecn-pass passes it unchanged)
//   t_markov4_0      a drop rule with the 4-state Markov model that never
//                    leaves state 1 (p13 = p14 = 0): 0 % with the model's flow state
//   t_markov4_100    p13 = 1, p31 = 1e-6: the chain stays in state 3, ~100 % dropped
//   t_police_0       a drop rule with a policer it never exceeds (100 Gbit/s, 1 GiB)
//   t_police_100     a policer every packet exceeds (8 bit/s, 1 byte burst)
//   t_police_flow_0, t_police_flow_100  the same with a bucket per flow (GCRA
//                    on the flow state: a hash lookup, a compare-and-swap)
// BPF_PROG_TEST_RUN runs one skb `repeat` times, so what an action writes
// would stay for the next run (a CE mark: the next runs find CE and do
// nothing; flipped bits pile up until the TCP header no longer parses).
// Each group case therefore runs through a wrapper tc program that first
// writes the original 64 bytes back (bpf_skb_store_bytes) and then
// tail-calls the case's program (lossd_tc_in, or the empty program for
// t_empty): every run sees the same packet, and the wrapper's cost is in
// every group case alike. Under BPF_PROG_TEST_RUN nothing happens to the skb
// after the program (test_run discards it whatever the verdict), so a drop at
// 100 % and an action at 100 % differ by the program's own work only. The
// exception is duplicate: bpf_clone_redirect clones the skb (copying the
// original's head, which the clone now shares) and queues the copy to the
// namespace's lo (brought up for the group: a device that is down refuses
// it); the copy is received from the backlog in the NET_RX softirq that the
// test-run loop's local_bh_enable() runs after each run, i.e. inside the timed
// loop: the copy's receive (lossd_tc_in again, which passes a copy undecided,
// then ip_rcv, which drops it: it is not addressed to lo) and its free are in
// the figure. (If the softirq were deferred to ksoftirqd, that time would be
// in the wall clock figure, not the kernel's.)
// Group cases use --action-repeat (default 2,000,000) runs per measurement.
//
// --variant NAME=OBJ (repeatable): also run the XDP program of another build
// of loss.bpf.c (e.g. the previous commit's build/bpf/loss.bpf.o, or an
// experiment) against the very maps and rules of the cases c_1_nomatch,
// d_1_match, d_1_match_ttl and f_10k_match, in the same interleaved rounds:
// reported as "<case>@NAME". The object must have the same map definitions.
//
// Cost is the kernel's own per-run average (integer ns; it leaves out the
// time the run loop yields the CPU to other work); the wall-clock figure is
// reported beside it.
//
// Every packet is run through every case once per round, the order of the
// cases rotating from round to round (interleaved A/B rounds); medians over
// rounds are reported. Non-matching rules drop 100 %, so a false match shows
// up as XDP_DROP and fails the run; the matching rule's counters must show
// the packets it saw.
//
// Nothing on the host is touched: the process first moves into a new network
// namespace; each injector gets its own namespace (one XDP program per
// interface) and attaches to that namespace's "lo" (ifindex 1).
//
// Usage: bpf_cost [--repeat N] [--rounds R] [--variant NAME=OBJ]...
//                 [--action-repeat N] [--no-actions]          JSON on stdout
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "base/log.h"
#include "injector/injector.h"
#include "loader/libbpf_log.h"

namespace {

using lossd::Injector;
using lossd::RuleSpec;

[[noreturn]] void Die(const std::string& msg) {
  fprintf(stderr, "bpf_cost: %s\n", msg.c_str());
  exit(1);
}

double NowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e9 + ts.tv_nsec;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// ---- packets ------------------------------------------------------------

uint16_t Csum(const uint8_t* p, size_t n) {
  uint32_t s = 0;
  for (size_t i = 0; i + 1 < n; i += 2) s += (p[i] << 8) | p[i + 1];
  while (s >> 16) s = (s & 0xffff) + (s >> 16);
  return static_cast<uint16_t>(~s);
}

void Put16(uint8_t* p, uint16_t v) {
  p[0] = v >> 8;
  p[1] = v & 0xff;
}

// Ethernet + IPv4 + UDP/TCP, 10.0.0.1:sport -> 10.0.0.2:dport, 64 bytes.
// tos: the IPv4 TOS byte (its low 2 bits the ECN field); l4csum: a valid UDP /
// TCP checksum (else 0, as the first cases' packets have).
std::vector<uint8_t> MakePacket(int proto, uint16_t sport, uint16_t dport, uint8_t tos = 0,
                                bool l4csum = false) {
  std::vector<uint8_t> pkt(64, 0);
  uint8_t* eth = pkt.data();
  const uint8_t dmac[6] = {0x02, 0, 0, 0, 0, 2}, smac[6] = {0x02, 0, 0, 0, 0, 1};
  memcpy(eth, dmac, 6);
  memcpy(eth + 6, smac, 6);
  Put16(eth + 12, 0x0800);
  uint8_t* ip = eth + 14;
  ip[0] = 0x45;
  ip[1] = tos;
  Put16(ip + 2, static_cast<uint16_t>(pkt.size() - 14));
  Put16(ip + 6, 0x4000);  // DF
  ip[8] = 64;
  ip[9] = static_cast<uint8_t>(proto);
  const uint8_t src[4] = {10, 0, 0, 1}, dst[4] = {10, 0, 0, 2};
  memcpy(ip + 12, src, 4);
  memcpy(ip + 16, dst, 4);
  Put16(ip + 10, Csum(ip, 20));
  uint8_t* l4 = ip + 20;
  Put16(l4, sport);
  Put16(l4 + 2, dport);
  if (proto == IPPROTO_UDP) {
    Put16(l4 + 4, static_cast<uint16_t>(pkt.size() - 34));
  } else {
    l4[4] = 0x12;     // seq
    l4[11] = 0x34;    // ack
    l4[12] = 5 << 4;  // doff
    l4[13] = 0x18;    // PSH|ACK
    Put16(l4 + 14, 65535);
  }
  for (size_t i = (proto == IPPROTO_UDP ? 42 : 54); i < pkt.size(); i++) pkt[i] = uint8_t(i);
  if (l4csum) {
    // pseudo-header (addresses, protocol, L4 length) + the L4 segment (even length)
    size_t l4len = pkt.size() - 34;
    std::vector<uint8_t> sum(12 + l4len, 0);
    memcpy(sum.data(), ip + 12, 8);
    sum[9] = static_cast<uint8_t>(proto);
    Put16(sum.data() + 10, static_cast<uint16_t>(l4len));
    memcpy(sum.data() + 12, l4, l4len);
    uint16_t c = Csum(sum.data(), sum.size());
    if (proto == IPPROTO_UDP && c == 0) c = 0xffff;
    Put16(l4 + (proto == IPPROTO_UDP ? 6 : 16), c);
  }
  return pkt;
}

// ---- programs -----------------------------------------------------------

constexpr int kTcActUnspec = -1;  // what lossd_tc_in returns to pass
constexpr int kTcActShot = 2;     // ... and to drop

// r0 = XDP_PASS (or TC_ACT_UNSPEC); exit.
int LoadEmpty(bool tc) {
  struct bpf_insn insns[2];
  memset(insns, 0, sizeof(insns));
  insns[0].code = BPF_ALU64 | BPF_MOV | BPF_K;
  insns[0].dst_reg = BPF_REG_0;
  insns[0].imm = tc ? kTcActUnspec : XDP_PASS;
  insns[1].code = BPF_JMP | BPF_EXIT;
  int fd = bpf_prog_load(tc ? BPF_PROG_TYPE_SCHED_CLS : BPF_PROG_TYPE_XDP, "bench_empty", "GPL",
                         insns, 2, nullptr);
  if (fd < 0) Die(std::string("load empty program: ") + strerror(errno));
  return fd;
}

// The actions' wrapper (see the header): writes `pkt` (64 bytes) over the
// skb's data, then tail-calls slot 0 of prog_array_fd; r0 = TC_ACT_UNSPEC
// if the tail call fails.
constexpr size_t kPktLen = 64;
int LoadRestoreWrapper(const std::vector<uint8_t>& pkt, int prog_array_fd) {
  if (pkt.size() != kPktLen) Die("wrapper: the packet must be 64 bytes");
  std::vector<struct bpf_insn> in;
  auto ins = [&](uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
    struct bpf_insn i;
    memset(&i, 0, sizeof(i));
    i.code = code;
    i.dst_reg = dst & 0xf;
    i.src_reg = src & 0xf;
    i.off = off;
    i.imm = imm;
    in.push_back(i);
  };
  ins(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_6, BPF_REG_1, 0, 0);  // r6 = ctx
  for (size_t k = 0; k < kPktLen; k += 4) {                      // the bytes onto the stack
    int32_t w;
    memcpy(&w, pkt.data() + k, 4);
    ins(BPF_ST | BPF_MEM | BPF_W, BPF_REG_10, 0, int16_t(-int(kPktLen) + int(k)), w);
  }
  ins(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_1, BPF_REG_6, 0, 0);
  ins(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_2, 0, 0, 0);  // offset 0: the Ethernet header
  ins(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_3, BPF_REG_10, 0, 0);
  ins(BPF_ALU64 | BPF_ADD | BPF_K, BPF_REG_3, 0, 0, -int(kPktLen));
  ins(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_4, 0, 0, int(kPktLen));
  ins(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_5, 0, 0, 0);
  ins(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_skb_store_bytes);
  ins(BPF_ALU64 | BPF_MOV | BPF_X, BPF_REG_1, BPF_REG_6, 0, 0);
  ins(BPF_LD | BPF_DW | BPF_IMM, BPF_REG_2, BPF_PSEUDO_MAP_FD, 0, prog_array_fd);
  ins(0, 0, 0, 0, 0);
  ins(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_3, 0, 0, 0);
  ins(BPF_JMP | BPF_CALL, 0, 0, 0, BPF_FUNC_tail_call);
  ins(BPF_ALU64 | BPF_MOV | BPF_K, BPF_REG_0, 0, 0, kTcActUnspec);
  ins(BPF_JMP | BPF_EXIT, 0, 0, 0, 0);
  char log[4096] = "";
  LIBBPF_OPTS(bpf_prog_load_opts, lo, .log_level = 1, .log_size = sizeof(log), .log_buf = log);
  int fd = bpf_prog_load(BPF_PROG_TYPE_SCHED_CLS, "bench_restore", "GPL", in.data(),
                         static_cast<uint32_t>(in.size()), &lo);
  if (fd < 0) Die(std::string("load the restore wrapper: ") + strerror(errno) + "\n" + log);
  return fd;
}

// ifup lo in the current network namespace (a copy redirected to a device
// that is down is refused).
void LoUp() {
  int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) Die(std::string("socket: ") + strerror(errno));
  struct ifreq ifr;
  memset(&ifr, 0, sizeof(ifr));
  strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
  if (ioctl(s, SIOCGIFFLAGS, &ifr)) Die(std::string("SIOCGIFFLAGS lo: ") + strerror(errno));
  ifr.ifr_flags |= IFF_UP;
  if (ioctl(s, SIOCSIFFLAGS, &ifr)) Die(std::string("SIOCSIFFLAGS lo: ") + strerror(errno));
  close(s);
}

struct RunResult {
  double wall_ns;      // wall clock around the syscall / repeat (fractional)
  uint32_t kernel_ns;  // the kernel's own average (integer ns)
  uint32_t retval;
};

// tc: the kernel gives the skb the namespace's loopback device (ifindex 1).
RunResult TestRun(int prog_fd, const std::vector<uint8_t>& pkt, int repeat, bool tc) {
  struct xdp_md ctx;
  memset(&ctx, 0, sizeof(ctx));
  ctx.data = 0;
  ctx.data_end = static_cast<uint32_t>(pkt.size());
  ctx.ingress_ifindex = 1;  // lo of the current namespace: rules name "lo"
  LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = pkt.data(),
              .data_size_in = static_cast<uint32_t>(pkt.size()), .ctx_in = tc ? nullptr : &ctx,
              .ctx_size_in = tc ? 0u : uint32_t(sizeof(ctx)), .repeat = repeat);
  double t0 = NowNs();
  int err = bpf_prog_test_run_opts(prog_fd, &opts);
  double t1 = NowNs();
  if (err) Die(std::string("BPF_PROG_TEST_RUN: ") + strerror(errno));
  return RunResult{(t1 - t0) / repeat, opts.duration, opts.retval};
}

// ---- cases --------------------------------------------------------------

constexpr uint16_t kDport = 5201;
constexpr uint16_t kUdpSport = 40000, kTcpSport = 40001;

RuleSpec BaseRule() {
  RuleSpec r;
  r.iface = "lo";
  r.hook = lossd::Hook::kXdp;
  r.dir = lossd::Direction::kIngress;
  r.model.kind = lossd::LossModel::Kind::kBernoulli;
  return r;
}

// Drops everything it matches: the packet must never match it.
RuleSpec PortRule(uint16_t dport) {
  RuleSpec r = BaseRule();
  r.dport.lo = r.dport.hi = dport;
  r.model.p = 1.0;
  return r;
}

RuleSpec HostRule(uint32_t i) {
  RuleSpec r = BaseRule();
  lossd::Cidr c;
  c.family = 4;
  c.prefix = 32;
  c.addr[0] = 10;
  c.addr[1] = 200;
  c.addr[2] = uint8_t(i >> 8);
  c.addr[3] = uint8_t(i);
  r.dst = c;
  r.model.p = 1.0;
  return r;
}

// Matches both benchmark packets (any protocol, dport 5201, dst 10.0.0.2), 0 %.
RuleSpec MatchRule() {
  RuleSpec r = BaseRule();
  r.dport.lo = r.dport.hi = kDport;
  lossd::Cidr c;
  c.family = 4;
  c.prefix = 32;
  c.addr = {10, 0, 0, 2};
  r.dst = c;
  r.model.p = 0.0;
  return r;
}

// The actions' group: MatchRule at tc ingress with this action, Bernoulli p.
RuleSpec ActRule(lossd::Action a, double p) {
  RuleSpec r = MatchRule();
  r.hook = lossd::Hook::kTc;
  r.action = a;
  r.model.p = p;
  return r;
}

// What a group case's rule counters must show over the whole run.
enum class Expect {
  kNothing,   // 0 %: matched, nothing picked
  kDropAll,   // every matched packet dropped
  kDropMost,  // >= 99.9 % dropped (markov4 "100 %")
  kActAll,    // every matched packet acted on (corrupted, copied, marked)
  kUnactAll,  // every matched packet picked, passed unchanged (ecn-pass, non-ECT)
};

struct Case {
  std::string name, description;
  std::vector<RuleSpec> rules;  // empty for the baseline and b
  bool injector = true;
  bool matching = false;  // the last rule is the matching one
  bool lease = true;      // false: InjectorOptions.lease = 0 (no lease check)
  bool tc = false;        // tc ingress program (tcx) instead of XDP
  int base = -1;          // variant: index of the case whose netns and maps it uses
  std::string obj_path;   // variant: the object whose lossd_xdp it runs
  struct bpf_object* obj = nullptr;
  // The actions' group (tc, lo up, run through the restore wrapper).
  bool act = false;
  std::string act_key, rate_key;  // "corrupt", "100pct": its place in JSON "actions"
  bool nonect = false;            // the group's non-ECT packets
  Expect expect = Expect::kNothing;
  // runtime
  int netns_fd = -1;
  int prog_fd = -1;
  int prog_array_fd = -1;
  std::array<int, 2> wrap_fd{-1, -1};  // group: the wrapper per packet
  int repeat = 0;                      // runs per measurement
  std::unique_ptr<Injector> inj;
  uint32_t match_id = 0;
  double setup_s = 0;
  std::array<std::vector<double>, 2> wall, kernel;  // per packet
  lossd::RuleCounters rc;                           // the matching rule's, at the end
  lossd::HookCounters hook;                         // its hook's, at the end
};

std::vector<RuleSpec> TenKMixed(int n_port, int n_host) {
  std::vector<RuleSpec> v;
  for (int i = 0; i < n_port; i++) v.push_back(PortRule(uint16_t(20000 + i)));
  for (int i = 0; i < n_host; i++) v.push_back(HostRule(uint32_t(i)));
  return v;
}

void NewNetns(Case& c) {
  if (unshare(CLONE_NEWNET)) Die(std::string("unshare(CLONE_NEWNET): ") + strerror(errno));
  c.netns_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
  if (c.netns_fd < 0) Die(std::string("open netns: ") + strerror(errno));
}

void EnterNetns(const Case& c) {
  if (setns(c.netns_fd, CLONE_NEWNET)) Die(std::string("setns: ") + strerror(errno));
}

// The group's wrappers: one per packet, each tail-calling c.prog_fd.
void SetupWrappers(Case& c, const std::array<std::vector<uint8_t>, 2>& pkts) {
  c.prog_array_fd = bpf_map_create(BPF_MAP_TYPE_PROG_ARRAY, "bench_tail", 4, 4, 1, nullptr);
  if (c.prog_array_fd < 0) Die(std::string("prog array: ") + strerror(errno));
  for (int pi = 0; pi < 2; pi++) c.wrap_fd[pi] = LoadRestoreWrapper(pkts[pi], c.prog_array_fd);
  uint32_t zero = 0;
  if (bpf_map_update_elem(c.prog_array_fd, &zero, &c.prog_fd, BPF_ANY))
    Die("tail call slot for " + c.name + ": " + strerror(errno) +
        " (the program must be compatible with the wrapper: same type, both JIT-ed)");
}

void Setup(Case& c, const std::string& state_root) {
  NewNetns(c);
  if (c.act) LoUp();
  if (!c.injector) {
    c.prog_fd = LoadEmpty(c.tc);
    return;
  }
  lossd::InjectorOptions o;
  o.state_dir = state_root + "/" + c.name;
  o.limits.max_rules = LOSS_MAX_RULES - 1;  // the data plane's limit, not a daemon's
  o.limits.protected_ports.clear();         // a namespace of its own: no SSH to protect
  // Defaults otherwise (3 s lease renewed by the background thread), as lossd runs.
  if (!c.lease) o.lease = std::chrono::milliseconds(0);
  auto inj = Injector::Create(o);
  if (!inj.ok()) Die("create injector for " + c.name + ": " + inj.status().ToString());
  c.inj = std::move(*inj);
  for (size_t i = 0; i < c.rules.size(); i++) {
    auto id = c.inj->Add(c.rules[i]);
    if (!id.ok())
      Die("add rule " + std::to_string(i) + " for " + c.name + ": " + id.status().ToString());
    if (c.matching && i + 1 == c.rules.size()) c.match_id = *id;
  }
  c.prog_fd = c.inj->ProgFd(c.tc ? LOSS_HOOK_TC_INGRESS : LOSS_HOOK_XDP);
  if (c.prog_fd < 0) Die("no program fd");
}

// Loads lossd_xdp from another build of loss.bpf.c, its maps replaced by the
// maps of the base case's program (found by name through the program's map ids).
void SetupVariant(Case& v, const Case& b) {
  v.netns_fd = b.netns_fd;
  std::vector<uint32_t> ids(64);
  struct bpf_prog_info info;
  memset(&info, 0, sizeof(info));
  info.nr_map_ids = static_cast<uint32_t>(ids.size());
  info.map_ids = reinterpret_cast<uint64_t>(ids.data());
  uint32_t len = sizeof(info);
  if (bpf_obj_get_info_by_fd(b.prog_fd, &info, &len))
    Die("prog info of " + b.name + ": " + strerror(errno));
  ids.resize(std::min<size_t>(info.nr_map_ids, ids.size()));
  v.obj = bpf_object__open_file(v.obj_path.c_str(), nullptr);
  if (!v.obj) Die("open " + v.obj_path + ": " + strerror(errno));
  std::vector<int> fds;
  for (uint32_t id : ids) {
    int fd = bpf_map_get_fd_by_id(id);
    if (fd < 0) Die("map id " + std::to_string(id) + ": " + strerror(errno));
    struct bpf_map_info mi;
    memset(&mi, 0, sizeof(mi));
    uint32_t ml = sizeof(mi);
    if (bpf_obj_get_info_by_fd(fd, &mi, &ml)) Die(std::string("map info: ") + strerror(errno));
    struct bpf_map* m = bpf_object__find_map_by_name(v.obj, mi.name);
    if (m && bpf_map__reuse_fd(m, fd))
      Die(std::string("reuse map ") + mi.name + ": " + strerror(errno));
    fds.push_back(fd);
  }
  // Only the XDP program is needed.
  struct bpf_program* prog;
  bpf_object__for_each_program(prog, v.obj) {
    bpf_program__set_autoload(prog, strcmp(bpf_program__name(prog), "lossd_xdp") == 0);
  }
  if (bpf_object__load(v.obj)) Die("load " + v.obj_path + ": " + strerror(errno));
  for (int fd : fds) close(fd);  // the object holds its own references
  prog = bpf_object__find_program_by_name(v.obj, "lossd_xdp");
  if (!prog) Die(v.obj_path + ": no lossd_xdp");
  v.prog_fd = bpf_program__fd(prog);
}

std::string ReadFirstLine(const char* path) {
  std::ifstream in(path);
  std::string s;
  std::getline(in, s);
  return s;
}

std::string Json(double v) {
  char b[64];
  snprintf(b, sizeof(b), "%.2f", v);
  return b;
}

std::string JsonList(const std::vector<double>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); i++) s += (i ? "," : "") + Json(v[i]);
  return s + "]";
}

std::string Stats(const std::vector<double>& v) {
  return "\"median_ns\": " + Json(Median(v)) +
         ", \"min_ns\": " + Json(*std::min_element(v.begin(), v.end())) +
         ", \"max_ns\": " + Json(*std::max_element(v.begin(), v.end()));
}

// JSON "actions": per packet, per action (keys as the cases' act_key), per
// rate ("0pct", "100pct"): the case's kernel ns (median, min and max over the
// rounds), added over t_empty, and beside it the drop rule at the same rate
// (t_drop_0 / t_drop_100, same run): its median, the difference of medians,
// and the per-round paired differences (median, min, max).
std::string ActionsJson(const std::vector<Case>& cases, const char* const pkt_names[2],
                        int action_repeat) {
  auto find = [&](const std::string& n) -> const Case* {
    for (const auto& c : cases)
      if (c.name == n) return &c;
    return nullptr;
  };
  const Case* empty = find("t_empty");
  std::vector<std::string> keys;  // in the order of the cases
  for (const auto& c : cases)
    if (c.act && c.act_key != "empty" &&
        std::find(keys.begin(), keys.end(), c.act_key) == keys.end())
      keys.push_back(c.act_key);
  std::string out = "  \"actions\": {\n";
  out += "    \"repeat\": " + std::to_string(action_repeat) + ",\n";
  out +=
      "    \"legend\": \"tc ingress program (lossd_tc_in) through the restore wrapper (writes the "
      "64-byte ECT(0) packet back, then tail-calls the case's program: every run sees the same "
      "packet; the wrapper's cost is in every case, t_empty included). median/min/max_ns: the "
      "kernel's ns per run over the rounds; added_ns: minus t_empty; drop_*: the drop rule at the "
      "same rate in the same run (t_drop_0, t_drop_100; ecn_nonect, ecn_pass_nonect: a non-ECT "
      "packet, against t_drop_100 on the ECT one; markov4, police, police_flow: drop rules with "
      "those models, against Bernoulli drop); vs_drop_ns: difference of medians; "
      "vs_drop_paired_ns: per-round differences; wall_*: wall clock per run (duplicate: the copy's receive runs in the "
      "softirq after each run, inside the kernel's figure unless deferred to ksoftirqd). Under "
      "BPF_PROG_TEST_RUN the skb is discarded after the program whatever the verdict: the "
      "figures are the program's own work (duplicate: plus the clone, the copy's receive up to "
      "ip_rcv and its free).\",\n";
  for (int pi = 0; pi < 2; pi++) {
    out += std::string("    \"") + pkt_names[pi] + "\": {\n";
    out += "      \"empty\": {" + Stats(empty->kernel[pi]) + "},\n";
    for (size_t ki = 0; ki < keys.size(); ki++) {
      out += "      \"" + keys[ki] + "\": {";
      bool first = true;
      for (const auto& c : cases) {
        if (!c.act || c.act_key != keys[ki]) continue;
        const Case* d = find(c.rate_key == "0pct" ? "t_drop_0" : "t_drop_100");
        const auto& v = c.kernel[pi];
        std::string e = std::string(first ? "" : ", ") + "\"" + c.rate_key + "\": {\"case\": \"" +
                        c.name + "\", " + Stats(v) +
                        ", \"added_ns\": " + Json(Median(v) - Median(empty->kernel[pi])) +
                        ", \"wall_median_ns\": " + Json(Median(c.wall[pi]));
        if (d && d != &c) {
          std::vector<double> diff;
          for (size_t r = 0; r < v.size() && r < d->kernel[pi].size(); r++)
            diff.push_back(v[r] - d->kernel[pi][r]);
          e += ", \"drop_case\": \"" + d->name +
               "\", \"drop_median_ns\": " + Json(Median(d->kernel[pi])) +
               ", \"drop_wall_median_ns\": " + Json(Median(d->wall[pi])) +
               ", \"vs_drop_ns\": " + Json(Median(v) - Median(d->kernel[pi])) +
               ", \"vs_drop_paired_ns\": {" + Stats(diff) + "}";
        }
        out += e + "}";
        first = false;
      }
      out += std::string("}") + (ki + 1 < keys.size() ? ",\n" : "\n");
    }
    out += "    },\n";
  }
  // The rules' counters over the whole run (both packets, warm-up included).
  out += "    \"counters\": {\n";
  bool first = true;
  for (const auto& c : cases) {
    if (!c.act || !c.injector) continue;
    out += std::string(first ? "" : ",\n") + "      \"" + c.name +
           "\": {\"matched\": " + std::to_string(c.rc.matched_pkts) +
           ", \"dropped\": " + std::to_string(c.rc.dropped_pkts) +
           ", \"acted\": " + std::to_string(c.rc.acted_pkts) +
           ", \"unacted\": " + std::to_string(c.rc.unacted_pkts) +
           ", \"logged\": " + std::to_string(c.rc.logged_pkts) +
           ", \"hook_copies\": " + std::to_string(c.hook.copies) + "}";
    first = false;
  }
  out += "\n    }\n  },\n";
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  int repeat = 10000000, rounds = 7, action_repeat = 2000000;
  bool actions = true;
  std::vector<std::pair<std::string, std::string>> variants;  // name, object
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--repeat" && i + 1 < argc)
      repeat = atoi(argv[++i]);
    else if (a == "--rounds" && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else if (a == "--action-repeat" && i + 1 < argc)
      action_repeat = atoi(argv[++i]);
    else if (a == "--no-actions")
      actions = false;
    else if (a == "--variant" && i + 1 < argc && strchr(argv[i + 1], '=')) {
      std::string v = argv[++i];
      variants.emplace_back(v.substr(0, v.find('=')), v.substr(v.find('=') + 1));
    } else {
      fprintf(stderr,
              "usage: %s [--repeat N (>= 1000000)] [--rounds R (>= 3)] [--variant NAME=OBJ]...\n"
              "          [--action-repeat N (>= 100000)] [--no-actions]\n",
              argv[0]);
      return 2;
    }
  }
  if (repeat < 1000000 || rounds < 3) Die("need --repeat >= 1000000 and --rounds >= 3");
  if (action_repeat < 100000) Die("need --action-repeat >= 100000");

  const std::string jit = ReadFirstLine("/proc/sys/net/core/bpf_jit_enable");  // init netns only
  // kernel.bpf_stats_enabled=1 (set by someone else) adds two clock reads to
  // every program run, baseline included: the absolute numbers then mean little.
  const std::string stats = ReadFirstLine("/proc/sys/kernel/bpf_stats_enabled");
  if (stats == "1")
    fprintf(stderr, "bpf_cost: warning: kernel.bpf_stats_enabled=1 inflates every figure\n");
  // First of all: a private network namespace, so nothing on the host is touched.
  if (unshare(CLONE_NEWNET)) Die(std::string("unshare(CLONE_NEWNET): ") + strerror(errno));
  lossd::SetLogLevel(lossd::LogLevel::kWarn);
  lossd::RouteLibbpfLogs();

  char tmpl[] = "/tmp/lossd-bpf-cost.XXXXXX";
  if (!mkdtemp(tmpl)) Die(std::string("mkdtemp: ") + strerror(errno));
  std::string state_root = tmpl;

  std::vector<Case> cases;
  auto add = [&](std::string name, std::string desc, std::vector<RuleSpec> rules, bool inj,
                 bool matching, bool lease = true, bool tc = false) {
    Case c;
    c.name = std::move(name);
    c.description = std::move(desc);
    c.rules = std::move(rules);
    c.injector = inj;
    c.matching = matching;
    c.lease = lease;
    c.tc = tc;
    cases.push_back(std::move(c));
  };
  add("a_empty", "empty XDP program (baseline)", {}, false, false);
  add("b_0_rules", "injector, 0 rules", {}, true, false);
  add("c_1_nomatch", "1 rule on another dport, no match", {PortRule(9999)}, true, false);
  add("d_1_match", "1 rule matching the packet at 0%", {MatchRule()}, true, true);
  add("e_10k_nomatch", "10,000 rules (5,000 distinct dports + 5,000 distinct dst hosts), no match",
      TenKMixed(5000, 5000), true, false);
  {
    auto v = TenKMixed(4999, 5000);
    v.push_back(MatchRule());
    add("f_10k_match", "10,000 rules (4,999 dports + 5,000 hosts + 1 matching at 0%)", v, true,
        true);
  }
  add("c_1_host_nomatch", "1 rule on another dst host, no match (diagnostic)", {HostRule(0)}, true,
      false);
  add("e_10k_ports", "10,000 rules on distinct dports only, no match (diagnostic)",
      TenKMixed(10000, 0), true, false);
  add("e_10k_hosts", "10,000 rules on distinct dst hosts only, no match (diagnostic)",
      TenKMixed(0, 10000), true, false);
  add("d_1_match_nolease", "1 rule matching the packet at 0%, lease off (diagnostic)",
      {MatchRule()}, true, true, false);
  {
    RuleSpec m = MatchRule();
    m.ttl = std::chrono::hours(1);
    add("d_1_match_ttl", "1 rule matching the packet at 0%, with a TTL (diagnostic)", {m}, true,
        true);
  }
  // The hook lossd picks on veth (tcx ingress): what each skb pays in e2e B.
  add("a_empty_tc", "empty tc program (baseline of the tc cases)", {}, false, false, true, true);
  {
    RuleSpec m = MatchRule();
    m.hook = lossd::Hook::kTc;
    add("d_1_match_tc", "tc ingress program, 1 rule matching the packet at 0% (diagnostic)", {m},
        true, true, true, true);
  }
  // Steps of the matched path (see the header).
  {
    RuleSpec m = PortRule(kDport);
    m.hook = lossd::Hook::kTc;  // in the bucket, rejected by the XDP program's hook check
    add("c_1_bucket_hookmiss",
        "1 rule on the packet's dport for the tc hook: bucket + scan + rule lookup, rejected at "
        "the "
        "hook check (step)",
        {m}, true, false);
    RuleSpec a = PortRule(kDport);
    lossd::Cidr c;
    c.family = 4;
    c.prefix = 32;
    c.addr = {10, 0, 0, 3};
    a.dst = c;
    add("c_1_bucket_addrmiss",
        "1 rule on the packet's dport and another dst host: every check, rejected at the address "
        "(step)",
        {a}, true, false);
  }
  const size_t n_base_cases = cases.size();
  for (const auto& [vname, vobj] : variants) {
    for (size_t k = 0; k < n_base_cases; k++) {
      const std::string& bn = cases[k].name;
      if (bn != "c_1_nomatch" && bn != "d_1_match" && bn != "d_1_match_ttl" && bn != "f_10k_match")
        continue;
      Case v;
      v.name = bn + "@" + vname;
      v.description = cases[k].description + "; XDP program of " + vobj;
      v.matching = cases[k].matching;
      v.base = static_cast<int>(k);
      v.obj_path = vobj;
      cases.push_back(std::move(v));
    }
  }

  // The actions beside drop (tc only; see the header).
  if (actions) {
    auto act = [&](std::string name, std::string desc, std::vector<RuleSpec> rules, bool inj,
                   std::string key, std::string rate, Expect expect, bool nonect = false) {
      Case c;
      c.name = std::move(name);
      c.description = std::move(desc);
      c.rules = std::move(rules);
      c.injector = inj;
      c.matching = inj;
      c.tc = true;
      c.act = true;
      c.act_key = std::move(key);
      c.rate_key = std::move(rate);
      c.expect = expect;
      c.nonect = nonect;
      cases.push_back(std::move(c));
    };
    using lossd::Action;
    act("t_empty", "actions: empty tc program through the restore wrapper (the group's baseline)",
        {}, false, "empty", "", Expect::kNothing);
    const struct {
      const char* key;
      Action a;
      Expect at100;
    } kActs[] = {{"drop", Action::kDrop, Expect::kDropAll},
                 {"corrupt", Action::kCorrupt, Expect::kActAll},
                 {"corrupt_payload", Action::kCorruptPayload, Expect::kActAll},
                 {"duplicate", Action::kDuplicate, Expect::kActAll},
                 {"ecn", Action::kEcn, Expect::kActAll},
                 {"ecn_pass", Action::kEcnPass, Expect::kActAll}};
    for (const auto& a : kActs) {
      std::string an = lossd::ActionName(a.a);
      act(std::string("t_") + a.key + "_0", "actions: tc rule, action " + an + " at 0%",
          {ActRule(a.a, 0.0)}, true, a.key, "0pct", Expect::kNothing);
      act(std::string("t_") + a.key + "_100",
          "actions: tc rule, action " + an + " at 100% (every matched packet)", {ActRule(a.a, 1.0)},
          true, a.key, "100pct", a.at100);
    }
    // A control: the 0 % drop rule again, in its own namespace and maps: how far
    // two identical setups differ in the same run.
    act("t_drop_0_again", "actions: tc rule, action drop at 0% (a second, identical setup)",
        {ActRule(Action::kDrop, 0.0)}, true, "drop_again", "0pct", Expect::kNothing);
    act("t_ecn_100_nonect", "actions: tc rule, action ecn at 100%, non-ECT packet (dropped)",
        {ActRule(Action::kEcn, 1.0)}, true, "ecn_nonect", "100pct", Expect::kDropAll, true);
    act("t_ecn_pass_100_nonect",
        "actions: tc rule, action ecn-pass at 100%, non-ECT packet (passes unchanged)",
        {ActRule(Action::kEcnPass, 1.0)}, true, "ecn_pass_nonect", "100pct", Expect::kUnactAll,
        true);
    {
      RuleSpec m = ActRule(Action::kDrop, 0.0);
      m.model.kind = lossd::LossModel::Kind::kMarkov4;
      m.model.p13 = 0;  // never leaves state 1
      m.model.p31 = 1;
      m.model.p32 = 0;
      m.model.p23 = 1;
      m.model.p14 = 0;
      act("t_markov4_0", "actions: tc drop rule, markov4 p13=p14=0 (0%, with flow state)", {m},
          true, "markov4", "0pct", Expect::kNothing);
      m.model.p13 = 1;  // 1 -> 3, and 3 is left with p31 = 1e-6 only
      m.model.p31 = 1e-6;
      act("t_markov4_100", "actions: tc drop rule, markov4 p13=1 p31=1e-6 (~100%)", {m}, true,
          "markov4", "100pct", Expect::kDropMost);
      RuleSpec q = ActRule(Action::kDrop, 0.0);
      q.model.kind = lossd::LossModel::Kind::kPolice;
      q.model.rate_bps = lossd::kMaxPoliceBps;  // 100 Gbit/s, 1 GiB: never exceeded here
      q.model.burst_bytes = lossd::kMaxPoliceBurst;
      act("t_police_0", "actions: tc drop rule, police 100gbit,1gib (never exceeded: 0%)", {q},
          true, "police", "0pct", Expect::kNothing);
      q.model.rate_bps = lossd::kMinPoliceBps;  // 8 bit/s, 1 byte: every packet over
      q.model.burst_bytes = 1;
      act("t_police_100", "actions: tc drop rule, police 8bit,1b (every packet over: 100%)", {q},
          true, "police", "100pct", Expect::kDropAll);
      q.model.police_per_flow = true;  // a bucket per flow: GCRA on the flow's state
      q.model.rate_bps = lossd::kMaxPoliceBps;
      q.model.burst_bytes = lossd::kMaxPoliceBurst;
      act("t_police_flow_0",
          "actions: tc drop rule, police 100gbit,1gib,flow (never exceeded: 0%)", {q}, true,
          "police_flow", "0pct", Expect::kNothing);
      q.model.rate_bps = lossd::kMinPoliceBps;
      q.model.burst_bytes = 1;
      act("t_police_flow_100",
          "actions: tc drop rule, police 8bit,1b,flow (every packet over: 100%)", {q}, true,
          "police_flow", "100pct", Expect::kDropAll);
    }
  }
  for (auto& c : cases) c.repeat = c.act ? action_repeat : repeat;

  const std::array<std::vector<uint8_t>, 2> pkts = {MakePacket(IPPROTO_UDP, kUdpSport, kDport),
                                                    MakePacket(IPPROTO_TCP, kTcpSport, kDport)};
  // The group's: ECT(0) (TOS 0x02) and not, both with valid L4 checksums.
  const std::array<std::vector<uint8_t>, 2> pkts_ect = {
      MakePacket(IPPROTO_UDP, kUdpSport, kDport, 0x02, true),
      MakePacket(IPPROTO_TCP, kTcpSport, kDport, 0x02, true)};
  const std::array<std::vector<uint8_t>, 2> pkts_nonect = {
      MakePacket(IPPROTO_UDP, kUdpSport, kDport, 0x00, true),
      MakePacket(IPPROTO_TCP, kTcpSport, kDport, 0x00, true)};
  auto pkts_of = [&](const Case& c) -> const std::array<std::vector<uint8_t>, 2>& {
    return !c.act ? pkts : c.nonect ? pkts_nonect : pkts_ect;
  };
  auto run_fd = [](const Case& c, int pi) { return c.act ? c.wrap_fd[pi] : c.prog_fd; };
  const char* pkt_names[2] = {"udp", "tcp"};

  double load_start[1] = {-1};
  getloadavg(load_start, 1);
  for (auto& c : cases) {
    double t0 = NowNs();
    if (c.base >= 0)
      SetupVariant(c, cases[c.base]);
    else
      Setup(c, state_root);
    if (c.act) SetupWrappers(c, pkts_of(c));
    c.setup_s = (NowNs() - t0) / 1e9;
  }

  // Warm-up: one short run of everything.
  for (auto& c : cases) {
    EnterNetns(c);
    for (int pi = 0; pi < 2; pi++) TestRun(run_fd(c, pi), pkts_of(c)[pi], 100000, c.tc);
  }

  // Interleaved rounds: every case, both packets, the starting case rotating.
  std::string problems;
  for (int r = 0; r < rounds; r++) {
    for (size_t k = 0; k < cases.size(); k++) {
      Case& c = cases[(k + r) % cases.size()];
      EnterNetns(c);
      for (int pi = 0; pi < 2; pi++) {
        RunResult res = TestRun(run_fd(c, pi), pkts_of(c)[pi], c.repeat, c.tc);
        uint32_t pass = c.tc ? uint32_t(kTcActUnspec) : uint32_t(XDP_PASS);
        const bool drops = c.expect == Expect::kDropAll;
        uint32_t want = drops ? uint32_t(kTcActShot) : pass;
        if (c.expect != Expect::kDropMost && res.retval != want) {
          problems += c.name + "/" + pkt_names[pi] + ": verdict " +
                      std::to_string(int32_t(res.retval)) + " (expected " +
                      (drops ? "drop" : "pass") + "); ";
        }
        c.wall[pi].push_back(res.wall_ns);
        c.kernel[pi].push_back(res.kernel_ns);
      }
    }
  }

  // The matching rule must have seen every packet and dropped none; nothing
  // may have been dropped anywhere. Group cases: what their Expect says.
  for (auto& c : cases) {
    if (!c.inj) continue;  // variants: counted in their base case's maps
    auto h = c.inj->HookTotals(c.tc ? LOSS_HOOK_TC_INGRESS : LOSS_HOOK_XDP);
    c.hook = h;
    const bool may_drop = c.expect == Expect::kDropAll || c.expect == Expect::kDropMost;
    if (h.dropped && !may_drop)
      problems += c.name + ": " + std::to_string(h.dropped) + " dropped; ";
    if (h.unparsable) problems += c.name + ": " + std::to_string(h.unparsable) + " unparsable; ";
    if (c.matching) {
      auto rc = c.inj->Counters(c.match_id);
      const uint64_t runs = uint64_t(c.repeat) * rounds * 2;
      if (!rc.ok()) {
        problems += c.name + ": counters: " + rc.status().message() + "; ";
      } else if (rc->matched_pkts < runs) {
        problems += c.name + ": matching rule matched " + std::to_string(rc->matched_pkts) +
                    " packets, expected >= " + std::to_string(runs) + "; ";
      } else {
        c.rc = *rc;
        const uint64_t m = rc->matched_pkts;
        auto want = [&](const char* what, uint64_t got, uint64_t exp) {
          if (got != exp)
            problems += c.name + ": " + what + " " + std::to_string(got) + " of " +
                        std::to_string(m) + " matched, expected " + std::to_string(exp) + "; ";
        };
        switch (c.expect) {
          case Expect::kNothing: want("picked", rc->picked_pkts(), 0); break;
          case Expect::kDropAll: want("dropped", rc->dropped_pkts, m); break;
          case Expect::kDropMost:
            if (rc->dropped_pkts < m - m / 1000)
              problems += c.name + ": dropped " + std::to_string(rc->dropped_pkts) + " of " +
                          std::to_string(m) + ", expected >= 99.9 %; ";
            break;
          case Expect::kActAll: want("acted on", rc->acted_pkts, m); break;
          case Expect::kUnactAll: want("passed unchanged", rc->unacted_pkts, m); break;
        }
        // a duplicate's copies must have come back through the program
        if (c.act && c.act_key == "duplicate") want("copies seen again", h.copies, rc->acted_pkts);
      }
    }
    if (h.lease_expired) problems += c.name + ": lease expired during the run; ";
  }

  // ---- report ------------------------------------------------------------
  struct utsname u;
  uname(&u);
  char date[64];
  time_t now = time(nullptr);
  strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));

  auto find = [&](const std::string& n) -> Case& {
    for (auto& c : cases)
      if (c.name == n) return c;
    Die("no case " + n);
  };
  std::array<double, 2> base;
  std::array<double, 2> base_tc;  // the tc cases' own baseline
  for (int pi = 0; pi < 2; pi++) {
    base[pi] = Median(find("a_empty").kernel[pi]);
    base_tc[pi] = Median(find("a_empty_tc").kernel[pi]);
  }

  std::string out = "{\n  \"benchmark\": \"bpf_cost\",\n";
  out += "  \"date\": \"" + std::string(date) + "\",\n";
  out += "  \"kernel\": \"" + std::string(u.release) + "\",\n";
  out += "  \"bpf_jit_enable\": \"" + jit + "\",\n";
  out += "  \"bpf_stats_enabled\": \"" + stats + "\",\n";
  double load_end[1] = {-1};
  getloadavg(load_end, 1);
  out += "  \"loadavg_1m_start_end\": [" + Json(load_start[0]) + ", " + Json(load_end[0]) + "],\n";
  out += "  \"repeat\": " + std::to_string(repeat) + ",\n  \"rounds\": " + std::to_string(rounds) +
         ",\n";
  out +=
      "  \"unit\": \"ns per packet, the kernel's own BPF_PROG_TEST_RUN average (integer ns; "
      "excludes time the run loop yields the CPU); wall_median_ns: wall clock around the "
      "syscall / repeat (includes preemption by other load)\",\n";
  out += "  \"packets\": {\n";
  for (int pi = 0; pi < 2; pi++) {
    out += std::string("    \"") + pkt_names[pi] + "\": {\n";
    for (size_t k = 0; k < cases.size(); k++) {
      const Case& c = cases[k];
      double m = Median(c.kernel[pi]);
      double b = c.act ? Median(find("t_empty").kernel[pi]) : c.tc ? base_tc[pi] : base[pi];
      out += "      \"" + c.name + "\": {\"median_ns\": " + Json(m) +
             ", \"added_ns\": " + Json(m - b) +
             ", \"wall_median_ns\": " + Json(Median(c.wall[pi])) + ", \"rules\": " +
             std::to_string(c.base >= 0 ? cases[c.base].rules.size() : c.rules.size()) +
             ", \"what\": \"" + c.description + "\"" + ", \"setup_s\": " + Json(c.setup_s) +
             ", \"rounds_ns\": " + JsonList(c.kernel[pi]) + "}" +
             (k + 1 < cases.size() ? ",\n" : "\n");
    }
    out += std::string("    }") + (pi == 0 ? ",\n" : "\n");
  }
  out += "  },\n";

  // Targets: added ns at 10,000 rules <= 25 (with and without a match), and
  // the 10,000-rule cost <= 1.5x the 1-rule cost (no match vs no match, match
  // vs match); each for both packets. "Cost" is what the injector adds over
  // the empty program: the test-run harness's own share (4 ns on the machine
  // the design brief measured, 22 ns here, ~90 ns with kernel.bpf_stats_enabled=1)
  // would otherwise decide the ratio. The ratio of totals is reported too.
  bool all_added = true, all_ratio = true;
  std::string t_added, t_ratio;
  for (int pi = 0; pi < 2; pi++) {
    for (auto [ten, one] : {std::pair<const char*, const char*>{"e_10k_nomatch", "c_1_nomatch"},
                            {"f_10k_match", "d_1_match"}}) {
      double m10 = Median(find(ten).kernel[pi]), m1 = Median(find(one).kernel[pi]);
      double added = m10 - base[pi];
      bool pa = added <= 25.0;
      double ratio_total = m10 / m1;
      double ratio = (m10 - base[pi]) / (m1 - base[pi]);
      bool pr = ratio <= 1.5;
      all_added &= pa;
      all_ratio &= pr;
      std::string key = std::string(pkt_names[pi]) + "/" + ten;
      if (!t_added.empty()) t_added += ",\n";
      t_added += "      \"" + key + "\": {\"added_ns\": " + Json(added) +
                 ", \"pass\": " + (pa ? "true" : "false") + "}";
      if (!t_ratio.empty()) t_ratio += ",\n";
      t_ratio += "      \"" + key + "_vs_" + one + "\": {\"ratio_of_added_ns\": " + Json(ratio) +
                 ", \"ratio_of_totals\": " + Json(ratio_total) +
                 ", \"pass\": " + (pr ? "true" : "false") + "}";
    }
  }
  out += "  \"targets\": {\n";
  out += "    \"added_ns_at_10k_rules_le_25\": {\n      \"limit\": 25,\n" + t_added +
         ",\n      \"pass\": " + (all_added ? "true" : "false") + "\n    },\n";
  out += "    \"cost_10k_rules_le_1.5x_1_rule\": {\n      \"limit\": 1.5,\n" + t_ratio +
         ",\n      \"pass\": " + (all_ratio ? "true" : "false") + "\n    },\n";
  // Issue: "a 0 % rule of any action costs what a 0 % drop rule costs": each
  // action's 0 % case within 3 ns of t_drop_0 (difference of medians; the
  // kernel's figure is whole ns), each packet. t_drop_0_again (the same drop
  // rule in a second setup) shows how far two identical setups land apart.
  bool all_zero = true;
  if (actions) {
    std::string t_zero;
    for (int pi = 0; pi < 2; pi++) {
      double d0 = Median(find("t_drop_0").kernel[pi]);
      for (const auto& c : cases) {
        if (!c.act || c.rate_key != "0pct" || c.name == "t_drop_0" || c.name == "t_drop_0_again" ||
            c.act_key == "markov4" || c.act_key == "police" || c.act_key == "police_flow")
          continue;
        double diff = Median(c.kernel[pi]) - d0;
        bool pz = diff <= 3.0;
        all_zero &= pz;
        t_zero += std::string(t_zero.empty() ? "" : ",\n") + "      \"" + pkt_names[pi] + "/" +
                  c.name + "\": {\"vs_drop_0_ns\": " + Json(diff) +
                  ", \"pass\": " + (pz ? "true" : "false") + "}";
      }
      t_zero += std::string(",\n      \"") + pkt_names[pi] +
                "/t_drop_0_again (control, not judged)\": {\"vs_drop_0_ns\": " +
                Json(Median(find("t_drop_0_again").kernel[pi]) - d0) + "}";
    }
    out += "    \"action_0pct_le_drop_0pct_plus_3ns\": {\n      \"limit\": 3,\n" + t_zero +
           ",\n      \"pass\": " + (all_zero ? "true" : "false") + "\n    },\n";
  }
  out += std::string("    \"pass\": ") + (all_added && all_ratio && all_zero ? "true" : "false") +
         "\n  },\n";

  // Where the cost comes from (differences of medians, same run).
  out += "  \"diagnostics\": {\n";
  for (int pi = 0; pi < 2; pi++) {
    auto m = [&](const char* n) { return Median(find(n).kernel[pi]); };
    out +=
        std::string("    \"") + pkt_names[pi] + "\": {" +
        "\"host_index_ns\": " + Json(m("c_1_host_nomatch") - m("c_1_nomatch")) +
        ", \"lease_check_ns\": " + Json(m("d_1_match") - m("d_1_match_nolease")) +
        ", \"match_path_ns\": " + Json(m("d_1_match_nolease") - m("c_1_nomatch")) +
        ", \"ttl_check_ns\": " + Json(m("d_1_match_ttl") - m("d_1_match")) +
        ", \"tc_1_match_added_ns\": " + Json(m("d_1_match_tc") - m("a_empty_tc")) +
        ", \"step_bucket_scan_rule_lookup_ns\": " +
        Json(m("c_1_bucket_hookmiss") - m("c_1_nomatch")) +
        ", \"step_field_checks_ns\": " + Json(m("c_1_bucket_addrmiss") - m("c_1_bucket_hookmiss")) +
        ", \"step_chosen_rule_counters_decision_ns\": " +
        Json(m("d_1_match") - m("c_1_bucket_addrmiss")) +
        ", \"ratio_10k_ports_vs_1_port_rule\": " + Json(m("e_10k_ports") / m("c_1_nomatch")) +
        ", \"ratio_10k_hosts_vs_1_host_rule\": " + Json(m("e_10k_hosts") / m("c_1_host_nomatch")) +
        ", \"ratio_10k_mixed_vs_1_host_rule\": " +
        Json(m("e_10k_nomatch") / m("c_1_host_nomatch")) + "}" + (pi == 0 ? ",\n" : "\n");
  }
  out += "  },\n";
  out +=
      "  \"diagnostics_legend\": \"host_index_ns: c_1_host_nomatch - c_1_nomatch (the host "
      "index is consulted once any host-anchored rule exists); lease_check_ns: d_1_match - "
      "d_1_match_nolease; ttl_check_ns: d_1_match_ttl - d_1_match; match_path_ns: "
      "d_1_match_nolease - c_1_nomatch; tc_1_match_added_ns: "
      "d_1_match_tc - a_empty_tc (per skb at the hook lossd picks on veth); step_*: the matched "
      "path in three steps, c_1_bucket_hookmiss - c_1_nomatch, c_1_bucket_addrmiss - "
      "c_1_bucket_hookmiss, d_1_match - c_1_bucket_addrmiss; ratios: the same "
      "kind of rule, 10,000 vs 1\",\n";
  if (actions) out += ActionsJson(cases, pkt_names, action_repeat);
  out += std::string("  \"checks_ok\": ") + (problems.empty() ? "true" : "false") + ",\n";
  out += "  \"problems\": \"" + problems + "\"\n}\n";
  fputs(out.c_str(), stdout);
  fflush(stdout);

  // Tear down each injector inside its own namespace.
  for (auto& c : cases) {  // variants first: they use their base's namespace and maps
    if (c.base < 0) continue;
    bpf_object__close(c.obj);
  }
  for (auto& c : cases) {
    if (c.base >= 0) continue;
    EnterNetns(c);
    for (int fd : c.wrap_fd)
      if (fd >= 0) close(fd);
    if (c.prog_array_fd >= 0) close(c.prog_array_fd);
    c.inj.reset();
    if (!c.injector && c.prog_fd >= 0) close(c.prog_fd);
    close(c.netns_fd);
  }
  std::string rm = "rm -rf '" + state_root + "'";
  if (system(rm.c_str()) != 0)
    fprintf(stderr, "bpf_cost: could not remove %s\n", state_root.c_str());
  return problems.empty() ? 0 : 1;
}
