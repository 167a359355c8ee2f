// The policers, run packet by packet through BPF_PROG_TEST_RUN: one bucket
// per rule (LOSS_MODEL_POLICE, loss_policers: every flow draws on it) and one
// per flow (LOSS_MODEL_POLICE_FLOW: GCRA on loss_flow_state.tat, each flow
// starting with a full bucket of its own), and the per-flow one's refill
// against the GCRA arithmetic of loss.bpf.c, run here over each packet's
// clock readings (docs/architecture.md#police).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "harness.h"

namespace lossd::bpftest {
namespace {

constexpr uint64_t kNsBits16 = 8ULL * 1000000000ULL * 16;  // bits -> 1/16 ns at 1 bit/s

// A packet's cost and the bucket's depth as loss.bpf.c and encode.cc compute
// them: in 1/16 ns, the cost rounded up, the depth down (and capped).
uint64_t Cost16(uint64_t len, uint64_t rate_bps) {
  unsigned __int128 bits16 = static_cast<unsigned __int128>(len) * kNsBits16;
  return static_cast<uint64_t>((bits16 + rate_bps - 1) / rate_bps);
}
uint64_t Tau16(uint64_t burst, uint64_t rate_bps) {
  unsigned __int128 t = static_cast<unsigned __int128>(burst) * kNsBits16 / rate_bps;
  return t > LOSS_POLICE_TAU_MAX ? LOSS_POLICE_TAU_MAX : static_cast<uint64_t>(t);
}

uint64_t MonoNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);  // bpf_ktime_get_ns's clock
  return uint64_t(ts.tv_sec) * 1000000000ULL + uint64_t(ts.tv_nsec);
}

// GCRA as loss_police_flow() runs it, for a packet decided at an unknown
// moment between two clock readings [a, b] (1/16 ns): tat is known within
// [lo, hi]. A verdict is certain when it holds for every moment and tat of
// those ranges; else the kernel's stands (its moment fell on the edge), and
// each verdict narrows tat's range as it must have been for it. A range that
// empties: no GCRA run over those moments gives those verdicts.
struct Gcra {
  uint64_t cost, tau;
  uint64_t lo = 0, hi = 0;  // a new flow state: tat 0, a full bucket
  // +1 passes for sure, -1 is picked for sure, 0 either.
  int Expect(uint64_t a, uint64_t b) const {
    uint64_t least = (lo > b ? lo - b : 0) + cost;  // the latest moment, the earliest tat
    uint64_t most = (hi > a ? hi - a : 0) + cost;
    if (least > tau) return -1;
    if (most <= tau) return 1;
    return 0;
  }
  // The kernel's verdict; false when no tat of the range and moment in [a, b]
  // gives it.
  bool Saw(bool passed, uint64_t a, uint64_t b) {
    if (cost > tau) return !passed;  // nothing ever fits
    if (passed) {
      // max(tat, now) + cost - now <= tau: tat <= now + tau - cost <= b + tau - cost.
      hi = std::min(hi, b + tau - cost);
      if (lo > hi) return false;
      lo = std::max(lo, a) + cost;
      hi = std::max(hi, b) + cost;
    } else {
      // max(tat, now) + cost - now > tau >= cost: tat > now + tau - cost >= a + tau - cost.
      lo = std::max(lo, a + tau - cost + 1);
      if (lo > hi) return false;
    }
    return true;
  }
};

RuleSpec PoliceRule(Prog p, uint64_t rate_bps, uint64_t burst_bytes, bool per_flow) {
  RuleSpec s = Rule(p);
  s.l4proto = 17;
  s.model = LossModel{};
  s.model.kind = LossModel::Kind::kPolice;
  s.model.rate_bps = rate_bps;
  s.model.burst_bytes = burst_bytes;
  s.model.police_per_flow = per_flow;
  return s;
}

class Police : public BpfTest {
 protected:
  void SetUp() override {
    BpfTest::SetUp();
    HoldAttachments();  // rules come and go; the programs stay attached
  }
  // 'D' picked (dropped), '.' passed.
  char Verdict(Prog p, const Packet& pkt) {
    int v = Run(p, pkt);
    if (v != DropVerdict(p) && v != PassVerdict(p)) {
      ADD_FAILURE() << "unexpected verdict " << VerdictName(p, v);
      return '?';
    }
    return v == DropVerdict(p) ? 'D' : '.';
  }
  std::string Pattern(Prog p, const Packet& pkt, int n) {
    std::string s;
    for (int i = 0; i < n; i++) s += Verdict(p, pkt);
    return s;
  }
};

// 800 bit/s: a 74-byte frame costs 740 ms of the bucket, so the microseconds
// between the runs refill nothing that matters. A burst of exactly three
// frames passes three of each flow (one byte less: two); the per-rule bucket
// passes three in all, whichever flow they belong to.
TEST_F(Police, PerFlowEachFlowHasAFullBucketOfItsOwn) {
  const Packet a = Build(Udp4("10.0.0.1", "10.0.0.2", 1000, 2000));
  const Packet b = Build(Udp4("10.0.0.1", "10.0.0.2", 1001, 2000));
  const Packet c6 = Build(Udp6("2001:db8::1", "2001:db8::2", 1000, 2000));
  const uint64_t len = a.bytes.size();  // the frame: what XDP and tc count
  ASSERT_EQ(len, 74u);
  ASSERT_EQ(b.bytes.size(), len);
  for (Prog p : kAllProgs) {
    SCOPED_TRACE(ProgName(p));
    uint32_t id = Add(PoliceRule(p, 800, 3 * len, /*per_flow=*/true));
    ASSERT_NE(id, 0u);
    std::string got_a, got_b;
    for (int i = 0; i < 6; i++) {  // interleaved: each flow its own bucket
      got_a += Verdict(p, a);
      got_b += Verdict(p, b);
    }
    EXPECT_EQ(got_a, "...DDD");
    EXPECT_EQ(got_b, "...DDD");
    // Another flow (other addresses, other family) starts full too; a
    // packet the bucket has not the room for takes nothing.
    Packet big = Build(Udp4("10.0.0.1", "10.0.0.2", 1002, 2000, 32 + 2 * len));  // 3 frames' bytes
    Packet c = Build(Udp4("10.0.0.1", "10.0.0.2", 1002, 2000));
    EXPECT_EQ(Verdict(p, big), '.');  // the whole bucket at once
    EXPECT_EQ(Verdict(p, c), 'D');
    ASSERT_EQ(c6.bytes.size(), 94u);  // 2 x 94 <= 3 x 74 < 3 x 94
    EXPECT_EQ(Pattern(p, c6, 3), "..D");
    RuleCounters rc = Counters(id);
    EXPECT_EQ(rc.matched_pkts, 12u + 2u + 3u);
    EXPECT_EQ(rc.dropped_pkts, 3u + 3u + 1u + 1u);
    Remove(id);
    // A new rule: new buckets (the flow state is keyed by its generation).
    id = Add(PoliceRule(p, 800, 3 * len, true));
    ASSERT_NE(id, 0u);
    EXPECT_EQ(Pattern(p, a, 4), "...D");
    Remove(id);
    // One byte short of three frames: two pass.
    id = Add(PoliceRule(p, 800, 3 * len - 1, true));
    ASSERT_NE(id, 0u);
    EXPECT_EQ(Pattern(p, a, 4), "..DD");
    EXPECT_EQ(Pattern(p, b, 4), "..DD");
    Remove(id);
    // The per-rule policer, as before: one bucket for both flows.
    id = Add(PoliceRule(p, 800, 3 * len, /*per_flow=*/false));
    ASSERT_NE(id, 0u);
    got_a.clear();
    got_b.clear();
    for (int i = 0; i < 3; i++) {
      got_a += Verdict(p, a);
      got_b += Verdict(p, b);
    }
    EXPECT_EQ(got_a + "|" + got_b, "..D|.DD");
    EXPECT_EQ(Pattern(p, c6, 2), "DD");
    rc = Counters(id);
    EXPECT_EQ(rc.matched_pkts, 8u);
    EXPECT_EQ(rc.dropped_pkts, 5u);
    Remove(id);
  }
}

// The refill, packet by packet, against the GCRA arithmetic over each run's
// clock readings: one packet of one flow per entry of `gaps` (the pause after
// it, 0 for none). Every verdict the readings leave certain must be the
// kernel's.
struct RefillRun {
  int passed = 0, uncertain = 0, n = 0;
  std::string verdicts;    // 'D' picked, '.' passed
  std::string mismatches;  // the certain verdicts the kernel did not give
  uint64_t width = 0;      // how well the verdicts pinned tat down at the end (1/16 ns)
};

class PoliceRefill : public Police {
 protected:
  RefillRun Drive(Prog p, const Packet& pkt, uint64_t rate, uint64_t burst,
                  const std::vector<std::chrono::microseconds>& gaps) {
    RefillRun out;
    uint32_t id = Add(PoliceRule(p, rate, burst, true));
    if (!id) return out;
    Gcra m{Cost16(pkt.bytes.size(), rate), Tau16(burst, rate)};
    for (size_t i = 0; i < gaps.size(); i++) {
      // 200 ns either side: the two reads of the clock (vDSO, the kernel's
      // fast accessor) need not agree to the ns.
      uint64_t a = (MonoNs() - 200) * 16;
      char v = Verdict(p, pkt);
      uint64_t b = (MonoNs() + 200) * 16;
      int want = m.Expect(a, b);
      out.n++;
      out.verdicts += v;
      if (want == 0) out.uncertain++;
      if ((want > 0 && v != '.') || (want < 0 && v != 'D')) {
        if (out.mismatches.size() < 400)
          out.mismatches += "packet " + std::to_string(i) + ": " + v + " (tat in [" +
                            std::to_string(m.lo) + ", " + std::to_string(m.hi) + "], now in [" +
                            std::to_string(a) + ", " + std::to_string(b) + "]); ";
      }
      if (!m.Saw(v == '.', a, b) && out.mismatches.size() < 400)
        out.mismatches += "packet " + std::to_string(i) + ": " + v + " fits no GCRA run; ";
      if (v == '.') out.passed++;
      if (gaps[i].count()) std::this_thread::sleep_for(gaps[i]);
    }
    out.width = m.hi - m.lo;
    RuleCounters rc = Counters(id);
    EXPECT_EQ(rc.matched_pkts, uint64_t(out.n));
    EXPECT_EQ(rc.dropped_pkts, uint64_t(out.n - out.passed));
    Remove(id);
    return out;
  }
};

// Paced: a 74-byte frame costs exactly 20 ms at 29.6 kbit/s, the bucket holds
// three (60 ms). Offered every ~7 ms (about 2.9 times the rate), then idle for
// 150 ms (the bucket refills, but to three frames only), then back to back.
TEST_F(PoliceRefill, PacedRefillFollowsGcra) {
  const Packet pkt = Build(Udp4("10.0.0.1", "10.0.0.2", 3000, 4000));
  const uint64_t rate = 29600, burst = 3 * pkt.bytes.size();
  ASSERT_EQ(Cost16(pkt.bytes.size(), rate), 20000000ULL * 16);
  for (Prog p : kAllProgs) {
    SCOPED_TRACE(ProgName(p));
    std::vector<std::chrono::microseconds> gaps(60, std::chrono::microseconds(7000));
    gaps.back() = std::chrono::microseconds(150000);
    gaps.resize(gaps.size() + 6, std::chrono::microseconds(0));
    uint64_t t0 = MonoNs();
    RefillRun r = Drive(p, pkt, rate, burst, gaps);
    double paced_ms = (MonoNs() - t0) / 1e6 - 150;
    ASSERT_EQ(r.n, 66);
    EXPECT_EQ(r.mismatches, "") << r.verdicts;
    // The paced part: the first full bucket, then at most one frame per 20 ms
    // (a loaded host that paces slower gets more through: that is the model's
    // to say, above); some picked. Then a full bucket again: three, no more.
    std::string paced = r.verdicts.substr(0, 60);
    int paced_passed = int(std::count(paced.begin(), paced.end(), '.'));
    EXPECT_LE(paced_passed, 3 + paced_ms / 20 + 1) << r.verdicts;
    EXPECT_NE(paced.find('D'), std::string::npos) << r.verdicts;
    EXPECT_EQ(r.verdicts.substr(60), "...DDD") << r.verdicts;
    EXPECT_LE(r.uncertain, 6) << r.verdicts;
    RecordProperty(std::string("paced_") + ProgName(p),
                   std::to_string(r.passed) + " of " + std::to_string(r.n) + " passed, " +
                       std::to_string(r.uncertain) + " uncertain: " + r.verdicts);
  }
}

// Back to back at full speed: 100 us a frame (5.92 Mbit/s), a bucket of 20
// frames (2 ms), 20,000 runs. Each pass falls on the run whose readings hold
// its moment, or the next.
TEST_F(PoliceRefill, BackToBackRefillFollowsGcra) {
  const Packet pkt = Build(Udp4("10.0.0.1", "10.0.0.2", 3001, 4000));
  const uint64_t rate = 5920000, burst = 20 * pkt.bytes.size();
  ASSERT_EQ(Cost16(pkt.bytes.size(), rate), 100000ULL * 16);
  for (Prog p : kAllProgs) {
    SCOPED_TRACE(ProgName(p));
    uint64_t t0 = MonoNs();
    std::vector<std::chrono::microseconds> gaps(20000, std::chrono::microseconds(0));
    RefillRun r = Drive(p, pkt, rate, burst, gaps);
    double secs = (MonoNs() - t0) / 1e9;
    EXPECT_EQ(r.mismatches, "");
    // What the rate allows over the run, and the first full bucket.
    EXPECT_LE(r.passed, 20 + secs / 100e-6 + 1) << secs << " s";
    EXPECT_GT(r.passed, 20);
    EXPECT_LT(r.passed, r.n * 3 / 4) << "the bucket hardly ran dry: little checked";
    // A pass's moment is uncertain only on the runs whose readings hold it
    // (consecutive readings overlap by the margins): the verdicts keep tat
    // pinned down to a few runs' readings while the bucket runs dry.
    EXPECT_LE(r.uncertain, 3 * r.passed + 5);
    EXPECT_LT(r.width, Cost16(pkt.bytes.size(), rate) / 2) << r.width / 16 << " ns";
    RecordProperty(std::string("back_to_back_") + ProgName(p),
                   std::to_string(r.passed) + " of " + std::to_string(r.n) + " passed, " +
                       std::to_string(r.uncertain) + " uncertain, tat within " +
                       std::to_string(r.width / 16) + " ns, " + std::to_string(secs) + " s");
  }
}

}  // namespace
}  // namespace lossd::bpftest
