// `lossctl top`'s model and its rendering, without any I/O: what the command
// gathers from lossd each interval (the latest WatchAggregates window, the
// rules with their effect, the flows, the health) goes into a TopTracker,
// which keeps what needs two frames (drops per second, bytes per second, the
// totals since top started); RenderTop turns a frame into lines of text for
// a terminal of the given size (or for plain output: no size).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "lossd/v1/lossd.pb.h"

namespace lossctl {

namespace v1 = ::lossd::v1;

// The flows' sort keys (--sort, and the `s` key cycles through them).
enum class TopSort {
  kRetrans,  // retransmitted segments in the last window, then in all
  kTotal,    // retransmitted segments since the flow opened
  kRate,     // bytes sent per second
  kCwnd,
  kSrtt,
  kSent,  // bytes sent since the flow opened
};
bool ParseTopSort(const std::string& name, TopSort* out);
const char* TopSortName(TopSort s);
TopSort NextTopSort(TopSort s);
// "retrans, total, rate, cwnd, srtt, sent"
std::string TopSortNames();

struct TopRule {
  v1::Rule rule;
  bool has_effect = false;
  v1::RuleEffect effect;
  std::string effect_error;   // GetRuleEffect failed (e.g. the rule was just deleted)
  double drops_per_sec = -1;  // dropped segments per second; < 0: not known yet
};

struct TopFlow {
  v1::Flow flow;
  uint64_t window_retrans = 0;  // segments retransmitted in the latest window
  double bytes_per_sec = -1;    // bytes sent per second; < 0: not known yet
};

struct TopFrame {
  std::string server;  // what top is connected to
  uint64_t now_unix_ns = 0;
  uint64_t interval_ns = 0;  // the window asked for
  std::string note;          // a message for the user (waiting for the observer...)

  bool have_window = false;
  v1::Aggregate window;                         // the latest window
  std::map<std::string, uint64_t> since_start;  // segments by type, every window seen
  uint64_t lost_since_start = 0;                // events lost (gaps), every window seen
  uint64_t windows = 0;                         // windows seen

  bool have_health = false;
  v1::Health health;
  std::vector<std::string> not_attached;  // observer/injector hooks that did not attach
  std::string health_error;

  std::vector<TopRule> rules;  // the ones shown, with their effect
  size_t rules_total = 0;      // rules lossd holds
  std::string rules_error;

  std::vector<TopFlow> flows;  // every flow (RenderTop sorts and cuts)
  std::string flows_error;
};

// Keeps what one frame needs from the previous one.
class TopTracker {
 public:
  TopTracker(std::string server, uint64_t interval_ns);

  void AddWindow(const v1::Aggregate& a);
  void SetHealth(const v1::Health& h, const v1::Capabilities* caps);
  void SetHealthError(const std::string& error);
  // The rules shown (ShownRules) with their effects, of `total` rules, at
  // now_mono_ns (this host's monotonic clock, for the rates).
  void SetRules(std::vector<TopRule> rules, size_t total, uint64_t now_mono_ns);
  void SetRulesError(const std::string& error);
  void SetFlows(const v1::ListFlowsResponse& flows, uint64_t now_mono_ns);
  void SetFlowsError(const std::string& error);
  void SetNote(std::string note) { frame_.note = std::move(note); }

  // The frame as of now (wall clock time now_unix_ns).
  const TopFrame& Frame(uint64_t now_unix_ns);

 private:
  TopFrame frame_;
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> prev_drops_;  // id -> (created, dropped segs)
  uint64_t prev_rules_ns_ = 0;
  std::map<uint64_t, uint64_t> prev_sent_;  // cookie -> bytes_sent
  uint64_t prev_flows_ns_ = 0;
};

// Which rules top shows: active ones first, then by id, at most `max`.
std::vector<v1::Rule> ShownRules(const v1::ListRulesResponse& rules, size_t max);

// Flows in the order of `sort` (highest first; ties by cookie).
void SortFlows(std::vector<TopFlow>* flows, TopSort sort);

struct TopLayout {
  size_t width = 0;   // terminal columns; 0: lines are not cut (plain output)
  size_t height = 0;  // terminal rows; 0: no limit but max_rules / max_flows
  size_t max_rules = 10;
  size_t max_flows = 10;
  TopSort sort = TopSort::kRetrans;
  bool keys = false;  // say which keys work (an interactive terminal)
};

struct TopLine {
  std::string text;
  bool heading = false;  // a section or column heading (shown in bold / reverse)
};

// The frame as lines, at most layout.height of them (the flows, then the
// rules are cut to fit; their headings say how many are shown), each at
// most layout.width characters.
std::vector<TopLine> RenderTop(const TopFrame& frame, const TopLayout& layout);

}  // namespace lossctl
