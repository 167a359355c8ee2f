// Shared fixture for the BPF_PROG_TEST_RUN suite: an Injector loaded in the
// test's own network namespace (main() unshares before any test runs), rules
// on that namespace's "lo", and BPF_PROG_TEST_RUN wrappers for the XDP and tc
// programs.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "injector/injector.h"
#include "loss_abi.h"
#include "packet.h"
#include "rules/rule.h"

struct __sk_buff;  // <linux/bpf.h>

namespace lossd::bpftest {

// The program a packet is run through.
enum class Prog { kXdp, kTcIn, kTcOut };

const char* ProgName(Prog p);
int LossHook(Prog p);     // enum loss_hook
int DropVerdict(Prog p);  // XDP_DROP 1, TC_ACT_SHOT 2, TC_ACT_STOLEN 4
int PassVerdict(Prog p);  // XDP_PASS 2, TC_ACT_UNSPEC -1
std::string VerdictName(Prog p, int v);

struct RunOpts {
  uint32_t repeat = 1;
  uint32_t ifindex = 0;   // 0: the kernel's default (the namespace's loopback)
  uint32_t gso_segs = 0;  // tc only
  // tc only: when set, the whole context given in (ctx_in; ifindex and
  // gso_segs above are written into it when not 0) and read back (ctx_out).
  // The kernel takes mark, priority, ingress_ifindex, ifindex, cb, tstamp,
  // wire_len, gso_segs, gso_size and hwtstamp; any other field not 0 is EINVAL.
  __sk_buff* skb = nullptr;
  // When set: the packet as the (last) run left it (data_out). Note that
  // repeat > 1 runs the program again on the same, already changed, packet.
  std::vector<uint8_t>* out = nullptr;
};

// One BPF_PROG_TEST_RUN; returns the program's return value of the last run.
// Fails the test (and returns INT32_MIN) if the syscall fails.
int TestRun(int prog_fd, Prog p, const std::vector<uint8_t>& data, const RunOpts& o = {});

// Sets an interface of this namespace up or down; returns whether it was up
// before (false also when it does not exist: see IfIndexOf).
bool SetLinkUp(const std::string& name, bool up);

// Ifindex of an interface of this namespace (0 if none).
uint32_t IfIndexOf(const std::string& name);
// Creates a veth pair in this namespace (idempotent). Returns the ifindex of
// `name`, 0 on failure.
uint32_t EnsureVeth(const std::string& name, const std::string& peer);

// Two-sided exact binomial interval: the smallest [lo, hi] with
// P(X < lo) <= alpha/2 and P(X > hi) <= alpha/2, X ~ Binomial(n, p).
struct Interval {
  uint64_t lo, hi;
};
Interval BinomialInterval(uint64_t n, double p, double alpha);

// Unseeded statistical checks draw from the kernel's PRNG: at a 99.9 %
// interval a correct data plane still fails one check in a thousand, and the
// suite makes a dozen such checks. An attempt that fails is repeated once
// from scratch (a fresh rule, fresh samples); the check fails only if both
// attempts fall outside (probability 1e-6 when the data plane is right; a
// real bias fails both). `attempt` returns "" on success, else what it saw.
// Deterministic (seeded) checks pass retry=false.
void StatCheck(const std::function<std::string()>& attempt, bool retry = true);

constexpr Prog kAllProgs[] = {Prog::kXdp, Prog::kTcIn, Prog::kTcOut};

// A rule on lo for program p: hook XDP (ingress) or tc with the direction
// of p, dropping with probability `rate`.
RuleSpec Rule(Prog p, double rate = 1.0);

// Loading the injector costs about a second (the verifier), so all tests of
// one process share one injector: each test starts with no rules (TearDown
// clears them), hook totals are reported relative to the test's start, and
// rule counters start from zero with every new rule. Tests that need other
// options override Options()/CustomOptions(); their injector is dropped
// after each test.
class BpfTest : public ::testing::Test {
 protected:
  void SetUp() override;
  void TearDown() override;

  // The options of this fixture's injector (state_dir and xdp_mode are
  // filled in). Fixtures that override this get an injector of their own,
  // dropped after each test.
  virtual InjectorOptions Options() const { return DefaultOptions(); }
  virtual bool CustomOptions() const { return false; }
  static InjectorOptions DefaultOptions();

  // Keeps the programs attached across Add/Remove cycles with rules that
  // match nothing the tests send (source ff02::dead:beef, a multicast
  // address). Generic XDP attach/detach flips a kernel static key, which
  // costs ~100 ms; tests that add and remove hundreds of rules call this.
  // Returns how many rules it added.
  size_t HoldAttachments();

  // Adds a rule; fails the test and returns 0 if the injector refuses it.
  uint32_t Add(const RuleSpec& spec);
  // Removes a rule and forgets it (Injector::Discard: the data plane's tests
  // keep no history); returns its final counters.
  RuleCounters Remove(uint32_t id);
  RuleCounters Counters(uint32_t id);
  // Hook counters accumulated since the test started.
  HookCounters Totals(Prog p);
  // Runs spec `repeat` times through p, expects `verdict` from each run, and
  // returns what the hook counted meanwhile.
  // `when` names the moment in failure messages.
  HookCounters RunCounted(Prog p, const PacketSpec& spec, uint32_t repeat, int verdict,
                          const char* when);

  int Run(Prog p, const Packet& pkt, const RunOpts& o = {}) {
    return TestRun(inj_->ProgFd(LossHook(p)), p, pkt.bytes, o);
  }
  int Run(Prog p, const PacketSpec& spec, const RunOpts& o = {}) { return Run(p, Build(spec), o); }

  Injector* inj_ = nullptr;

 private:
  void Snapshot();
  HookCounters base_[LOSS_HOOK_MAX];
};

}  // namespace lossd::bpftest

// Assert a verdict with the program's names in the message.
#define EXPECT_VERDICT(prog, got, want)                                                      \
  EXPECT_EQ((got), (want)) << "verdict " << ::lossd::bpftest::VerdictName((prog), (got))     \
                           << ", expected " << ::lossd::bpftest::VerdictName((prog), (want)) \
                           << " (" << ::lossd::bpftest::ProgName(prog) << ")"
