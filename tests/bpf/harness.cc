#include "harness.h"

#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <linux/bpf.h>
#include <net/if.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "loss_abi.h"

namespace lossd::bpftest {

const char* ProgName(Prog p) {
  switch (p) {
    case Prog::kXdp: return "xdp";
    case Prog::kTcIn: return "tc_ingress";
    case Prog::kTcOut: return "tc_egress";
  }
  return "?";
}

int LossHook(Prog p) {
  switch (p) {
    case Prog::kXdp: return LOSS_HOOK_XDP;
    case Prog::kTcIn: return LOSS_HOOK_TC_INGRESS;
    case Prog::kTcOut: return LOSS_HOOK_TC_EGRESS;
  }
  return -1;
}

int DropVerdict(Prog p) {
  switch (p) {
    case Prog::kXdp: return XDP_DROP;
    case Prog::kTcIn: return 2;   // TC_ACT_SHOT
    case Prog::kTcOut: return 4;  // TC_ACT_STOLEN
  }
  return 0;
}

int PassVerdict(Prog p) {
  return p == Prog::kXdp ? XDP_PASS : -1 /* TC_ACT_UNSPEC */;
}

std::string VerdictName(Prog p, int v) {
  std::string n = std::to_string(v);
  if (p == Prog::kXdp) {
    if (v == XDP_DROP) return n + " (XDP_DROP)";
    if (v == XDP_PASS) return n + " (XDP_PASS)";
    return n;
  }
  if (v == -1) return n + " (TC_ACT_UNSPEC)";
  if (v == 2) return n + " (TC_ACT_SHOT)";
  if (v == 4) return n + " (TC_ACT_STOLEN)";
  return n;
}

int TestRun(int prog_fd, Prog p, const std::vector<uint8_t>& data, const RunOpts& o) {
  LIBBPF_OPTS(bpf_test_run_opts, opts, .data_in = data.data(),
              .data_size_in = static_cast<__u32>(data.size()),
              .repeat = static_cast<int>(o.repeat));
  struct xdp_md xctx;
  struct __sk_buff sctx;
  std::memset(&xctx, 0, sizeof(xctx));
  std::memset(&sctx, 0, sizeof(sctx));
  if (p == Prog::kXdp) {
    if (o.ifindex) {
      xctx.data_end = static_cast<__u32>(data.size());
      xctx.ingress_ifindex = o.ifindex;
      opts.ctx_in = &xctx;
      opts.ctx_size_in = sizeof(xctx);
    }
  } else if (o.ifindex || o.gso_segs) {
    sctx.ifindex = o.ifindex;
    sctx.gso_segs = o.gso_segs;
    opts.ctx_in = &sctx;
    opts.ctx_size_in = sizeof(sctx);
  }
  if (p != Prog::kXdp && o.skb) {
    if (o.ifindex) o.skb->ifindex = o.ifindex;
    if (o.gso_segs) o.skb->gso_segs = o.gso_segs;
    opts.ctx_in = o.skb;
    opts.ctx_size_in = sizeof(*o.skb);
    opts.ctx_out = o.skb;
    opts.ctx_size_out = sizeof(*o.skb);
  }
  std::vector<uint8_t> out;
  if (o.out) {
    out.resize(data.size() + 512);  // the programs never grow a packet by this much
    opts.data_out = out.data();
    opts.data_size_out = static_cast<__u32>(out.size());
  }
  int err = bpf_prog_test_run_opts(prog_fd, &opts);
  if (o.out) {
    out.resize(err ? 0 : std::min<size_t>(opts.data_size_out, out.size()));
    *o.out = std::move(out);
  }
  if (err) {
    ADD_FAILURE() << "BPF_PROG_TEST_RUN on " << ProgName(p) << " (" << data.size()
                  << " bytes, repeat " << o.repeat << "): " << strerror(errno);
    return INT32_MIN;
  }
  return static_cast<int>(opts.retval);
}

bool SetLinkUp(const std::string& name, bool up) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    ADD_FAILURE() << "socket: " << strerror(errno);
    return false;
  }
  struct ifreq ifr;
  std::memset(&ifr, 0, sizeof(ifr));
  std::snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "%s", name.c_str());
  bool was = false;
  if (ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) {
    ADD_FAILURE() << "SIOCGIFFLAGS " << name << ": " << strerror(errno);
  } else {
    was = ifr.ifr_flags & IFF_UP;
    if (up)
      ifr.ifr_flags |= IFF_UP;
    else
      ifr.ifr_flags &= ~IFF_UP;
    if (ioctl(fd, SIOCSIFFLAGS, &ifr) != 0)
      ADD_FAILURE() << "SIOCSIFFLAGS " << name << (up ? " up: " : " down: ") << strerror(errno);
  }
  close(fd);
  return was;
}

uint32_t IfIndexOf(const std::string& name) {
  return if_nametoindex(name.c_str());
}

uint32_t EnsureVeth(const std::string& name, const std::string& peer) {
  if (uint32_t idx = IfIndexOf(name)) return idx;
  // This kernel has no dummy driver; a veth pair works everywhere we run.
  // Left down, so that no real traffic (IPv6 DAD, MLD, router solicitations)
  // reaches the programs attached to it; BPF_PROG_TEST_RUN does not care.
  std::string cmd = "ip link add " + name + " type veth peer name " + peer;
  if (system(cmd.c_str()) != 0) return 0;
  return IfIndexOf(name);
}

Interval BinomialInterval(uint64_t n, double p, double alpha) {
  if (p <= 0) return {0, 0};
  if (p >= 1) return {n, n};
  double mean = n * p, sd = std::sqrt(n * p * (1 - p));
  double span = 15 * sd + 50;
  uint64_t a = mean > span ? uint64_t(mean - span) : 0;
  uint64_t b = std::min<double>(n, mean + span);
  // Lower tail below a and upper tail above b are negligible (< 1e-40).
  double lgn = std::lgamma(double(n) + 1), lp = std::log(p), lq = std::log1p(-p);
  auto pmf = [&](uint64_t k) {
    return std::exp(lgn - std::lgamma(double(k) + 1) - std::lgamma(double(n - k) + 1) + k * lp +
                    (n - k) * lq);
  };
  Interval iv{a, b};
  double cdf = 0;
  bool have_lo = false;
  for (uint64_t k = a; k <= b; k++) {
    double before = cdf;
    cdf += pmf(k);
    // lo: smallest k with P(X < k) <= alpha/2 < P(X <= k)
    if (!have_lo && cdf > alpha / 2) {
      iv.lo = k;
      have_lo = true;
    }
    // hi: smallest k with P(X > k) = 1 - cdf <= alpha/2
    if (1 - cdf <= alpha / 2 && 1 - before > alpha / 2) {
      iv.hi = k;
      break;
    }
  }
  return iv;
}

void StatCheck(const std::function<std::string()>& attempt, bool retry) {
  std::string first = attempt();
  if (first.empty()) return;
  if (!retry) {
    ADD_FAILURE() << first;
    return;
  }
  std::string second = attempt();
  if (second.empty()) {
    ::testing::Test::RecordProperty("retried", first);
    return;
  }
  ADD_FAILURE() << "outside the 99.9 % interval twice in a row:\n  1st: " << first
                << "\n  2nd: " << second;
}

namespace {

// The injector shared by the tests of this process, and its state dir.
struct Shared {
  std::unique_ptr<Injector> inj;
  std::string dir;
  bool custom = false;  // made with a fixture's own options: dropped after the test

  void Drop() {
    inj.reset();
    std::error_code ec;
    if (!dir.empty()) std::filesystem::remove_all(dir, ec);
    dir.clear();
    custom = false;
  }
  Status Make(InjectorOptions opts) {
    Drop();
    char tmpl[] = "/tmp/lossd-bpf-test.XXXXXX";
    if (!mkdtemp(tmpl)) return Status::FromErrno(errno, "mkdtemp");
    dir = tmpl;
    opts.state_dir = dir;
    opts.xdp_mode = XdpMode::kGeneric;  // lo has no native XDP
    auto r = Injector::Create(opts);
    if (!r.ok()) return r.status();
    inj = std::move(*r);
    return Status::Ok();
  }
};

Shared& TheShared() {
  static Shared* s = new Shared();
  return *s;
}

class SharedCleanup : public ::testing::Environment {
 public:
  void TearDown() override { TheShared().Drop(); }
};
[[maybe_unused]] ::testing::Environment* const kCleanup =
    ::testing::AddGlobalTestEnvironment(new SharedCleanup);

}  // namespace

InjectorOptions BpfTest::DefaultOptions() {
  InjectorOptions o;
  o.lease = std::chrono::hours(1);
  o.background = false;  // no reaper: the data plane alone enforces deadlines
  o.xdp_mode = XdpMode::kGeneric;
  o.limits.max_rules = LOSS_MAX_RULES - 1;  // the data plane's limit, not a daemon's
  o.limits.protected_ports.clear();         // a namespace of its own: no SSH to protect
  return o;
}

void BpfTest::Snapshot() {
  for (int h = 0; h < LOSS_HOOK_MAX; h++) base_[h] = inj_->HookTotals(h);
}

void BpfTest::SetUp() {
  Shared& s = TheShared();
  if (!s.inj || s.custom || CustomOptions()) {
    Status st = s.Make(Options());
    ASSERT_TRUE(st.ok()) << "Injector::Create: " << st.ToString();
    s.custom = CustomOptions();
  }
  inj_ = s.inj.get();
  ASSERT_TRUE(inj_->Rules().empty());
  Snapshot();
}

void BpfTest::TearDown() {
  Shared& s = TheShared();
  if (s.inj) s.inj->Clear();
  if (s.custom) s.Drop();
  inj_ = nullptr;
}

HookCounters BpfTest::Totals(Prog p) {
  HookCounters now = inj_->HookTotals(LossHook(p)), b = base_[LossHook(p)];
  now.seen -= b.seen;
  now.passed -= b.passed;
  now.dropped -= b.dropped;
  now.unparsable -= b.unparsable;
  now.always_pass -= b.always_pass;
  now.lease_expired -= b.lease_expired;
  now.copies -= b.copies;
  return now;
}

size_t BpfTest::HoldAttachments() {
  RuleSpec x = Rule(Prog::kXdp, 0.0), t = Rule(Prog::kTcIn, 0.0);
  auto never = ParseCidr("ff02::dead:beef/128");
  x.src = t.src = *never;
  t.dir = Direction::kBoth;
  EXPECT_NE(Add(x), 0u);
  EXPECT_NE(Add(t), 0u);
  return 2;
}

RuleSpec Rule(Prog p, double rate) {
  RuleSpec s;
  s.iface = "lo";
  s.hook = p == Prog::kXdp ? Hook::kXdp : Hook::kTc;
  s.dir = p == Prog::kTcOut ? Direction::kEgress : Direction::kIngress;
  s.model.kind = LossModel::Kind::kBernoulli;
  s.model.p = rate;
  return s;
}

uint32_t BpfTest::Add(const RuleSpec& spec) {
  auto r = inj_->Add(spec);
  if (!r.ok()) {
    ADD_FAILURE() << "Injector::Add: " << r.status().ToString();
    return 0;
  }
  return *r;
}

RuleCounters BpfTest::Remove(uint32_t id) {
  auto r = inj_->Discard(id);  // out and forgotten: no deleted rule kept between cases
  if (!r.ok()) {
    ADD_FAILURE() << "Injector::Remove(" << id << "): " << r.status().ToString();
    return {};
  }
  return r->counters;
}

HookCounters BpfTest::RunCounted(Prog p, const PacketSpec& spec, uint32_t repeat, int verdict,
                                 const char* when) {
  HookCounters before = Totals(p);
  RunOpts o;
  o.repeat = repeat;
  EXPECT_VERDICT(p, Run(p, spec, o), verdict) << when;
  HookCounters d = Totals(p);
  auto* w = reinterpret_cast<uint64_t*>(&d);
  const auto* b = reinterpret_cast<const uint64_t*>(&before);
  for (size_t i = 0; i < sizeof(d) / sizeof(uint64_t); i++) w[i] -= b[i];
  return d;
}

RuleCounters BpfTest::Counters(uint32_t id) {
  auto r = inj_->Counters(id);
  if (!r.ok()) {
    ADD_FAILURE() << "Injector::Counters(" << id << "): " << r.status().ToString();
    return {};
  }
  return *r;
}

}  // namespace lossd::bpftest
