// Loss models other than plain Bernoulli, run packet by packet (repeat=1) so
// the verdict sequence can be examined: Gilbert-Elliott (mean loss and burst
// lengths), every-Nth (exact pattern), first-K (per flow), and seeds
// (reproducible sequences).
#include <cmath>
#include <cstdio>

#include "harness.h"

namespace lossd::bpftest {
namespace {

constexpr double kZ999 = 3.2905;  // two-sided 99.9 % normal quantile

class Models : public BpfTest {
 protected:
  void SetUp() override {
    BpfTest::SetUp();
    HoldAttachments();  // rules come and go; the programs stay attached
  }

  std::vector<bool> Sequence(Prog p, const Packet& pkt, int n) {
    std::vector<bool> seq;
    seq.reserve(n);
    for (int i = 0; i < n; i++) {
      int v = Run(p, pkt);
      if (v != DropVerdict(p) && v != PassVerdict(p)) {
        ADD_FAILURE() << "unexpected verdict " << VerdictName(p, v);
        break;
      }
      seq.push_back(v == DropVerdict(p));
    }
    return seq;
  }
  // Adds `spec`, runs pkt n times through p, removes the rule: the drop
  // sequence in *seq and the rule's counters in *rc; "" or what went wrong.
  std::string RuleSequence(Prog p, const RuleSpec& spec, const Packet& pkt, int n,
                           std::vector<bool>* seq, RuleCounters* rc) {
    uint32_t id = Add(spec);
    if (!id) return "rule refused";
    *seq = Sequence(p, pkt, n);
    *rc = Counters(id);
    Remove(id);
    return seq->size() == size_t(n) ? "" : "short sequence";
  }
  static std::string Pattern(const std::vector<bool>& seq, size_t n = 64) {
    std::string s;
    for (size_t i = 0; i < seq.size() && i < n; i++) s += seq[i] ? 'D' : '.';
    return s;
  }
};

// Every-Nth or First-K with its n.
RuleSpec CountingRule(Prog p, LossModel::Kind kind, uint32_t n) {
  RuleSpec s = Rule(p);
  s.model.kind = kind;
  s.model.n = n;
  return s;
}

RuleSpec GeRule(Prog p, double pgb, double rbg, double bad_loss, double good_loss) {
  RuleSpec s = Rule(p, pgb);
  s.model.kind = LossModel::Kind::kGilbertElliott;
  s.model.p = pgb;
  s.model.r = rbg;
  s.model.bad_loss = bad_loss;
  s.model.good_loss = good_loss;
  return s;
}

// Gilbert-Elliott p = 1 %, r = 20 %, 1-h = 100 %, 1-k = 0 (netem gemodel):
// drops are exactly the bad-state packets, so the mean loss is
// p / (p + r) = 4.76 %, bursts are geometric with mean 1/r = 5 packets and
// gaps geometric with mean 1/p = 100 packets.
// Tolerances (99.9 %, z = 3.29): the mean of a two-state Markov chain's
// indicator has variance pi_B pi_G (1 + l) / (1 - l) / N with l = 1 - p - r;
// the mean of B geometric burst lengths has variance (1 - r) / r^2 / B.
TEST_F(Models, GilbertElliottBurstsMatchTheChain) {
  const Prog p = Prog::kXdp;
  const double P = 0.01, R = 0.20;
  Packet pkt = Build(Udp4("10.0.0.1", "10.0.0.2", 1, 2));
  StatCheck([&]() -> std::string {
    const int N = 200000;
    std::vector<bool> seq;
    RuleCounters rc;
    std::string err = RuleSequence(p, GeRule(p, P, R, 1.0, 0.0), pkt, N, &seq, &rc);
    if (!err.empty()) return err;

    uint64_t drops = 0;
    std::vector<uint64_t> bursts, gaps;
    uint64_t run = 0;
    for (int i = 0; i < N; i++) {
      drops += seq[i];
      if (i > 0 && seq[i] != seq[i - 1]) {
        (seq[i - 1] ? bursts : gaps).push_back(run);
        run = 0;
      }
      run++;
    }  // the last, unfinished run is left out
    EXPECT_EQ(rc.matched_pkts, uint64_t(N));
    EXPECT_EQ(rc.dropped_pkts, drops);
    if (bursts.size() < 1000 || gaps.size() < 1000)
      return std::to_string(bursts.size()) + " bursts, " + std::to_string(gaps.size()) +
             " gaps: far too few; pattern " + Pattern(seq, 400);

    double pi_b = P / (P + R), pi_g = 1 - pi_b, l = 1 - P - R;
    double loss = double(drops) / N;
    double loss_tol = kZ999 * std::sqrt(pi_b * pi_g * (1 + l) / (1 - l) / N);
    double mean_burst = 0, mean_gap = 0;
    for (auto b : bursts) mean_burst += b;
    for (auto g : gaps) mean_gap += g;
    mean_burst /= bursts.size();
    mean_gap /= gaps.size();
    double burst_tol = kZ999 * std::sqrt((1 - R) / (R * R) / bursts.size());
    // The first gap starts at the chain's start (good state): geometric too.
    double gap_tol = kZ999 * std::sqrt((1 - P) / (P * P) / gaps.size());
    char msg[512];
    snprintf(msg, sizeof(msg),
             "mean loss %.5f (expected %.5f +- %.5f), mean burst %.3f (expected %.3f +- %.3f, "
             "%zu bursts), mean gap %.2f (expected %.2f +- %.2f, %zu gaps)",
             loss, pi_b, loss_tol, mean_burst, 1 / R, burst_tol, bursts.size(), mean_gap, 1 / P,
             gap_tol, gaps.size());
    RecordProperty("ge", msg);
    bool ok = std::fabs(loss - pi_b) <= loss_tol && std::fabs(mean_burst - 1 / R) <= burst_tol &&
              std::fabs(mean_gap - 1 / P) <= gap_tol;
    return ok ? "" : msg;
  });
}

// Partial losses in both states: mean loss = pi_B (1-h) + pi_G (1-k). The
// loss indicator's variance: [m (1 - m) + 2 (qB - qG)^2 pi_B pi_G l / (1 - l)] / N.
TEST_F(Models, GilbertElliottPartialLossMean) {
  const Prog p = Prog::kTcIn;
  const double P = 0.05, R = 0.30, QB = 0.6, QG = 0.02;
  Packet pkt = Build(Tcp4("10.0.0.1", "10.0.0.2", 1, 2, kAck, 100));
  StatCheck([&]() -> std::string {
    const int N = 100000;
    std::vector<bool> seq;
    RuleCounters rc;
    std::string err = RuleSequence(p, GeRule(p, P, R, QB, QG), pkt, N, &seq, &rc);
    if (!err.empty()) return err;
    uint64_t drops = 0;
    for (bool d : seq) drops += d;
    EXPECT_EQ(rc.dropped_pkts, drops);
    double pi_b = P / (P + R), pi_g = 1 - pi_b, l = 1 - P - R;
    double m = pi_b * QB + pi_g * QG;
    double var = (m * (1 - m) + 2 * (QB - QG) * (QB - QG) * pi_b * pi_g * l / (1 - l)) / N;
    double tol = kZ999 * std::sqrt(var), loss = double(drops) / N;
    char msg[256];
    snprintf(msg, sizeof(msg), "mean loss %.5f, expected %.5f +- %.5f", loss, m, tol);
    return std::fabs(loss - m) <= tol ? "" : msg;
  });
}

// Every-Nth: exactly packets N, 2N, 3N, ... of each flow.
TEST_F(Models, EveryNthExactPattern) {
  for (Prog p : {Prog::kXdp, Prog::kTcIn, Prog::kTcOut}) {
    SCOPED_TRACE(ProgName(p));
    RuleSpec s = CountingRule(p, LossModel::Kind::kEveryNth, 4);
    uint32_t id = Add(s);
    ASSERT_NE(id, 0u);
    Packet a = Build(Udp4("10.0.0.1", "10.0.0.2", 1000, 2000));
    Packet b = Build(Udp4("10.0.0.1", "10.0.0.2", 1001, 2000));
    std::string got_a, got_b;
    // Interleave two flows: each counts its own packets.
    for (int i = 0; i < 24; i++) {
      got_a += Run(p, a) == DropVerdict(p) ? 'D' : '.';
      if (i % 2 == 0) got_b += Run(p, b) == DropVerdict(p) ? 'D' : '.';
    }
    EXPECT_EQ(got_a, "...D...D...D...D...D...D");
    EXPECT_EQ(got_b, "...D...D...D");
    // With repeat: a fresh flow of 1000 packets loses exactly 250.
    RunOpts o;
    o.repeat = 1000;
    Run(p, Build(Udp4("10.0.0.1", "10.0.0.2", 1002, 2000)), o);
    RuleCounters rc = Counters(id);
    EXPECT_EQ(rc.matched_pkts, 24u + 12u + 1000u);
    EXPECT_EQ(rc.dropped_pkts, 6u + 3u + 250u);
    Remove(id);
  }
}

TEST_F(Models, EveryFirstPacketDropsAll) {
  const Prog p = Prog::kXdp;
  RuleSpec s = Rule(p);
  s.model.kind = LossModel::Kind::kEveryNth;
  s.model.n = 1;
  uint32_t id = Add(s);
  ASSERT_NE(id, 0u);
  RunOpts o;
  o.repeat = 1000;
  Run(p, Udp4("10.0.0.1", "10.0.0.2", 1, 2), o);
  EXPECT_EQ(Counters(id).dropped_pkts, 1000u);
}

// First-K: the first K packets of each flow, then none; another flow (other
// source port) gets its own K; re-adding the rule starts over.
TEST_F(Models, FirstKPerFlow) {
  for (Prog p : {Prog::kXdp, Prog::kTcIn, Prog::kTcOut}) {
    SCOPED_TRACE(ProgName(p));
    RuleSpec s = CountingRule(p, LossModel::Kind::kFirstK, 3);
    s.l4proto = 6;
    uint32_t id = Add(s);
    ASSERT_NE(id, 0u);
    Packet a = Build(Tcp4("10.0.0.1", "10.0.0.2", 40000, 80, kSyn));
    Packet b = Build(Tcp4("10.0.0.1", "10.0.0.2", 40001, 80, kSyn));
    Packet a6 = Build(Tcp6("2001:db8::1", "2001:db8::2", 40000, 80, kSyn));
    EXPECT_EQ(Pattern(Sequence(p, a, 10)), "DDD.......");
    EXPECT_EQ(Pattern(Sequence(p, b, 5)), "DDD..");
    EXPECT_EQ(Pattern(Sequence(p, a, 5)), ".....");
    EXPECT_EQ(Pattern(Sequence(p, a6, 5)), "DDD..");  // same ports, other addresses
    RunOpts o;
    o.repeat = 1000;
    Run(p, Build(Tcp4("10.0.0.9", "10.0.0.2", 40000, 80, kSyn)), o);
    RuleCounters rc = Counters(id);
    EXPECT_EQ(rc.matched_pkts, 10u + 5u + 5u + 5u + 1000u);
    EXPECT_EQ(rc.dropped_pkts, 3u + 3u + 0u + 3u + 3u);
    Remove(id);
    // A new rule (the same spec) knows nothing of the old flows.
    id = Add(s);
    ASSERT_NE(id, 0u);
    EXPECT_EQ(Pattern(Sequence(p, a, 5)), "DDD..");
    Remove(id);
  }
}

// Seeds: the same seed gives the same drop sequence for the same flow after
// removing and re-adding the rule (even in another slot); another seed gives
// another sequence; different flows under one seed differ too.
TEST_F(Models, SeededSequencesReproduce) {
  const Prog p = Prog::kXdp;
  Packet flow = Build(Udp4("10.0.0.1", "10.0.0.2", 1234, 5000));
  Packet other = Build(Udp4("10.0.0.1", "10.0.0.2", 1235, 5000));
  const int N = 3000;
  auto seeded = [&](uint64_t seed) {
    RuleSpec s = Rule(p, 0.3);
    s.seed = seed;
    return s;
  };
  uint32_t id = Add(seeded(42));
  ASSERT_NE(id, 0u);
  std::vector<bool> first = Sequence(p, flow, N);
  std::vector<bool> first_other = Sequence(p, other, N);
  Remove(id);

  id = Add(seeded(42));
  ASSERT_NE(id, 0u);
  EXPECT_EQ(Pattern(Sequence(p, flow, N), N), Pattern(first, N)) << "same seed, re-added";
  Remove(id);

  // Occupy the lowest free slot so the rule lands elsewhere.
  RuleSpec filler = Rule(p, 0.0);
  filler.dport = *ParsePortRange("1");
  uint32_t fill = Add(filler);
  ASSERT_NE(fill, 0u);
  id = Add(seeded(42));
  ASSERT_NE(id, 0u);
  EXPECT_EQ(Pattern(Sequence(p, flow, N), N), Pattern(first, N)) << "same seed, other slot";
  Remove(id);

  id = Add(seeded(43));
  ASSERT_NE(id, 0u);
  std::vector<bool> other_seed = Sequence(p, flow, N);
  EXPECT_NE(Pattern(other_seed, N), Pattern(first, N)) << "seed 43 repeated seed 42";
  Remove(id);
  EXPECT_NE(Pattern(first_other, N), Pattern(first, N)) << "two flows, one sequence";

  // The seeded sequences are Bernoulli(0.3) too.
  for (const auto* seq : {&first, &first_other, &other_seed}) {
    uint64_t d = 0;
    for (bool x : *seq) d += x;
    Interval iv = BinomialInterval(N, 0.3, 0.001);
    EXPECT_GE(d, iv.lo);
    EXPECT_LE(d, iv.hi);
  }
}

TEST_F(Models, SeededGilbertElliottReproduces) {
  const Prog p = Prog::kTcOut;
  Packet flow = Build(Udp4("10.0.0.1", "10.0.0.2", 1234, 5000));
  RuleSpec s = GeRule(p, 0.05, 0.3, 0.9, 0.01);
  s.seed = 7;
  uint32_t id = Add(s);
  ASSERT_NE(id, 0u);
  std::vector<bool> a = Sequence(p, flow, 2000);
  Remove(id);
  id = Add(s);
  ASSERT_NE(id, 0u);
  std::vector<bool> b = Sequence(p, flow, 2000);
  EXPECT_EQ(Pattern(a, 2000), Pattern(b, 2000));
  Remove(id);
  s.seed = 8;
  id = Add(s);
  ASSERT_NE(id, 0u);
  EXPECT_NE(Pattern(Sequence(p, flow, 2000), 2000), Pattern(a, 2000));
}

}  // namespace
}  // namespace lossd::bpftest
