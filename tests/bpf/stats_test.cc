// Loss statistics with BPF_PROG_TEST_RUN repeat=1,000,000 on one packet: the
// dropped count must fall inside the 99.9 % binomial interval of the
// configured rate (exact binomial quantiles, so tiny rates get the exact
// tail, not a normal approximation); 0 % drops exactly nothing and 100 %
// drops everything (docs/architecture.md#how-we-measure).
#include <cmath>

#include "harness.h"

namespace lossd::bpftest {
namespace {

constexpr double kAlpha = 0.001;  // 99.9 % interval

TEST(BinomialHelper, MatchesNormalApproximationForLargeMeans) {
  // n p = 500,000, sd = 500: z(0.9995) = 3.2905 -> about +-1645.
  Interval iv = BinomialInterval(1000000, 0.5, kAlpha);
  EXPECT_NEAR(double(iv.lo), 500000 - 3.2905 * 500, 3);
  EXPECT_NEAR(double(iv.hi), 500000 + 3.2905 * 500, 3);
  iv = BinomialInterval(1000000, 0.01, kAlpha);
  double sd = std::sqrt(1e6 * 0.01 * 0.99);
  EXPECT_NEAR(double(iv.lo), 10000 - 3.2905 * sd, 6);
  EXPECT_NEAR(double(iv.hi), 10000 + 3.2905 * sd, 6);
}

TEST(BinomialHelper, TinyRatesUseTheExactTail) {
  // Binomial(1e6, 5e-5), about Poisson(50): P(X <= 27) = 0.00027,
  // P(X <= 28) = 0.00051; P(X >= 75) = 0.00058, P(X >= 76) = 0.00037. So the
  // interval is [28, 75]: skewed to the right, as it must be (a normal
  // approximation would say [27, 73]).
  Interval iv = BinomialInterval(1000000, 5e-5, kAlpha);
  EXPECT_EQ(iv.lo, 28u);
  EXPECT_EQ(iv.hi, 75u);
  Interval zero = BinomialInterval(1000000, 0, kAlpha);
  EXPECT_EQ(zero.lo, 0u);
  EXPECT_EQ(zero.hi, 0u);
  Interval one = BinomialInterval(1000000, 1, kAlpha);
  EXPECT_EQ(one.lo, 1000000u);
  EXPECT_EQ(one.hi, 1000000u);
}

struct RateCase {
  const char* rate;  // as a user writes it
  bool seeded;
  Prog prog;
};

class Bernoulli : public BpfTest {
 protected:
  void SetUp() override {
    BpfTest::SetUp();
    HoldAttachments();  // rules come and go; the programs stay attached
  }

  // 1,000,000 runs of one packet at each rate; each count must fall in the
  // 99.9 % binomial interval, 0 % must drop nothing and 100 % everything.
  void CheckRates(const std::vector<RateCase>& cases) {
    for (const RateCase& c : cases) {
      const Prog p = c.prog;
      std::string what = std::string(c.rate) + (c.seeded ? " seeded" : "") + " on " + ProgName(p);
      SCOPED_TRACE(what);
      auto rate = ParseRate(c.rate);
      ASSERT_TRUE(rate.ok()) << rate.status().ToString();
      StatCheck(
          [&]() -> std::string {
            RuleSpec s = Rule(p, *rate);
            s.dport = *ParsePortRange("5201");
            if (c.seeded) s.seed = 0x5eed5eedULL;
            uint32_t id = Add(s);
            if (!id) return "rule refused";
            const uint64_t n = 1000000;
            HookCounters h0 = Totals(p);
            RunOpts o;
            o.repeat = uint32_t(n);
            Run(p, Udp4("10.0.0.1", "10.0.0.2", 40000, 5201, 1200), o);
            RuleCounters rc = Counters(id);
            HookCounters h1 = Totals(p);
            Remove(id);
            // Exact bookkeeping, whatever the draw.
            EXPECT_EQ(rc.matched_pkts, n);
            EXPECT_EQ(rc.dropped_segs, rc.dropped_pkts);
            EXPECT_EQ(h1.dropped - h0.dropped, rc.dropped_pkts);
            EXPECT_EQ(h1.passed - h0.passed, n - rc.dropped_pkts);
            Interval iv = BinomialInterval(n, *rate, kAlpha);
            std::string msg = what + ": " + std::to_string(rc.dropped_pkts) + " dropped of " +
                              std::to_string(n) + ", 99.9% interval [" + std::to_string(iv.lo) +
                              ", " + std::to_string(iv.hi) + "]";
            RecordProperty(what, msg);
            bool ok = rc.dropped_pkts >= iv.lo && rc.dropped_pkts <= iv.hi;
            return ok ? "" : msg;
          },
          /*retry=*/!c.seeded && *rate > 0 && *rate < 1);
    }
  }
};

TEST_F(Bernoulli, XdpRatesWithinBinomialInterval) {
  CheckRates({{"0%", false, Prog::kXdp},
              {"0.005%", false, Prog::kXdp},
              {"0.01%", false, Prog::kXdp},
              {"0.1%", false, Prog::kXdp},
              {"1%", false, Prog::kXdp},
              {"10%", false, Prog::kXdp},
              {"50%", false, Prog::kXdp},
              {"100%", false, Prog::kXdp}});
}

TEST_F(Bernoulli, TcRatesWithinBinomialInterval) {
  CheckRates({{"0%", false, Prog::kTcIn},
              {"0.01%", false, Prog::kTcIn},
              {"1%", false, Prog::kTcIn},
              {"100%", false, Prog::kTcIn},
              {"0%", false, Prog::kTcOut},
              {"10%", false, Prog::kTcOut},
              {"100%", false, Prog::kTcOut}});
}

TEST_F(Bernoulli, SeededRatesWithinBinomialInterval) {
  CheckRates({{"0%", true, Prog::kXdp},
              {"0.005%", true, Prog::kXdp},
              {"0.1%", true, Prog::kXdp},
              {"1%", true, Prog::kXdp},
              {"50%", true, Prog::kXdp},
              {"100%", true, Prog::kXdp},
              {"10%", true, Prog::kTcIn}});
}

// Bernoulli drops are independent from packet to packet: over single runs,
// P(drop | previous dropped) and P(drop | previous passed) are both the
// configured rate (each within its own 99.9 % binomial interval).
TEST_F(Bernoulli, ConsecutiveVerdictsAreIndependent) {
  const Prog p = Prog::kXdp;
  const double rate = 0.2;
  Packet pkt = Build(Udp4("10.0.0.1", "10.0.0.2", 1, 2));
  for (bool seeded : {false, true}) {
    SCOPED_TRACE(seeded ? "seeded" : "unseeded");
    StatCheck(
        [&]() -> std::string {
          RuleSpec s = Rule(p, rate);
          if (seeded) s.seed = 99;
          uint32_t id = Add(s);
          if (!id) return "rule refused";
          const int kRuns = 50000;
          uint64_t after_drop = 0, drop_after_drop = 0, after_pass = 0, drop_after_pass = 0;
          bool prev = Run(p, pkt) == DropVerdict(p);
          for (int i = 1; i < kRuns; i++) {
            bool d = Run(p, pkt) == DropVerdict(p);
            (prev ? after_drop : after_pass)++;
            if (d) (prev ? drop_after_drop : drop_after_pass)++;
            prev = d;
          }
          Remove(id);
          Interval a = BinomialInterval(after_drop, rate, kAlpha);
          Interval b = BinomialInterval(after_pass, rate, kAlpha);
          std::string msg = "P(drop | drop) " + std::to_string(drop_after_drop) + " of " +
                            std::to_string(after_drop) + " [" + std::to_string(a.lo) + ", " +
                            std::to_string(a.hi) + "]; P(drop | pass) " +
                            std::to_string(drop_after_pass) + " of " + std::to_string(after_pass) +
                            " [" + std::to_string(b.lo) + ", " + std::to_string(b.hi) + "]";
          bool ok = drop_after_drop >= a.lo && drop_after_drop <= a.hi && drop_after_pass >= b.lo &&
                    drop_after_pass <= b.hi;
          return ok ? "" : msg;
        },
        /*retry=*/!seeded);
  }
}

}  // namespace
}  // namespace lossd::bpftest
