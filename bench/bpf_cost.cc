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
// Usage: bpf_cost [--repeat N] [--rounds R] [--variant NAME=OBJ]...   JSON on stdout
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <fcntl.h>
#include <linux/bpf.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdlib.h>
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
std::vector<uint8_t> MakePacket(int proto, uint16_t sport, uint16_t dport) {
  std::vector<uint8_t> pkt(64, 0);
  uint8_t* eth = pkt.data();
  const uint8_t dmac[6] = {0x02, 0, 0, 0, 0, 2}, smac[6] = {0x02, 0, 0, 0, 0, 1};
  memcpy(eth, dmac, 6);
  memcpy(eth + 6, smac, 6);
  Put16(eth + 12, 0x0800);
  uint8_t* ip = eth + 14;
  ip[0] = 0x45;
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
  return pkt;
}

// ---- programs -----------------------------------------------------------

constexpr int kTcActUnspec = -1;  // what lossd_tc_in returns to pass

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
  // runtime
  int netns_fd = -1;
  int prog_fd = -1;
  std::unique_ptr<Injector> inj;
  uint32_t match_id = 0;
  double setup_s = 0;
  std::array<std::vector<double>, 2> wall, kernel;  // per packet
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

void Setup(Case& c, const std::string& state_root) {
  NewNetns(c);
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

}  // namespace

int main(int argc, char** argv) {
  int repeat = 10000000, rounds = 7;
  std::vector<std::pair<std::string, std::string>> variants;  // name, object
  for (int i = 1; i < argc; i++) {
    std::string a = argv[i];
    if (a == "--repeat" && i + 1 < argc)
      repeat = atoi(argv[++i]);
    else if (a == "--rounds" && i + 1 < argc)
      rounds = atoi(argv[++i]);
    else if (a == "--variant" && i + 1 < argc && strchr(argv[i + 1], '=')) {
      std::string v = argv[++i];
      variants.emplace_back(v.substr(0, v.find('=')), v.substr(v.find('=') + 1));
    } else {
      fprintf(stderr,
              "usage: %s [--repeat N (>= 1000000)] [--rounds R (>= 3)] [--variant NAME=OBJ]...\n",
              argv[0]);
      return 2;
    }
  }
  if (repeat < 1000000 || rounds < 3) Die("need --repeat >= 1000000 and --rounds >= 3");

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

  double load_start[1] = {-1};
  getloadavg(load_start, 1);
  for (auto& c : cases) {
    double t0 = NowNs();
    if (c.base >= 0)
      SetupVariant(c, cases[c.base]);
    else
      Setup(c, state_root);
    c.setup_s = (NowNs() - t0) / 1e9;
  }

  const std::array<std::vector<uint8_t>, 2> pkts = {MakePacket(IPPROTO_UDP, kUdpSport, kDport),
                                                    MakePacket(IPPROTO_TCP, kTcpSport, kDport)};
  const char* pkt_names[2] = {"udp", "tcp"};

  // Warm-up: one short run of everything.
  for (auto& c : cases) {
    EnterNetns(c);
    for (const auto& p : pkts) TestRun(c.prog_fd, p, 100000, c.tc);
  }

  // Interleaved rounds: every case, both packets, the starting case rotating.
  std::string problems;
  for (int r = 0; r < rounds; r++) {
    for (size_t k = 0; k < cases.size(); k++) {
      Case& c = cases[(k + r) % cases.size()];
      EnterNetns(c);
      for (int pi = 0; pi < 2; pi++) {
        RunResult res = TestRun(c.prog_fd, pkts[pi], repeat, c.tc);
        uint32_t pass = c.tc ? uint32_t(kTcActUnspec) : uint32_t(XDP_PASS);
        if (res.retval != pass) {
          problems += c.name + "/" + pkt_names[pi] + ": verdict " +
                      std::to_string(int32_t(res.retval)) + " (expected pass); ";
        }
        c.wall[pi].push_back(res.wall_ns);
        c.kernel[pi].push_back(res.kernel_ns);
      }
    }
  }

  // The matching rule must have seen every packet and dropped none; nothing
  // may have been dropped anywhere.
  for (auto& c : cases) {
    if (!c.inj) continue;  // variants: counted in their base case's maps
    auto h = c.inj->HookTotals(c.tc ? LOSS_HOOK_TC_INGRESS : LOSS_HOOK_XDP);
    if (h.dropped) problems += c.name + ": " + std::to_string(h.dropped) + " dropped; ";
    if (h.unparsable) problems += c.name + ": " + std::to_string(h.unparsable) + " unparsable; ";
    if (c.matching) {
      auto rc = c.inj->Counters(c.match_id);
      if (!rc.ok()) {
        problems += c.name + ": counters: " + rc.status().message() + "; ";
      } else if (rc->matched_pkts < uint64_t(repeat) * rounds * 2) {
        problems += c.name + ": matching rule matched " + std::to_string(rc->matched_pkts) +
                    " packets, expected >= " + std::to_string(uint64_t(repeat) * rounds * 2) + "; ";
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
      out += "      \"" + c.name + "\": {\"median_ns\": " + Json(m) +
             ", \"added_ns\": " + Json(m - (c.tc ? base_tc[pi] : base[pi])) +
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
  out += std::string("    \"pass\": ") + (all_added && all_ratio ? "true" : "false") + "\n  },\n";

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
    c.inj.reset();
    if (!c.injector && c.prog_fd >= 0) close(c.prog_fd);
    close(c.netns_fd);
  }
  std::string rm = "rm -rf '" + state_root + "'";
  if (system(rm.c_str()) != 0)
    fprintf(stderr, "bpf_cost: could not remove %s\n", state_root.c_str());
  return problems.empty() ? 0 : 1;
}
