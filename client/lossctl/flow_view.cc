#include "flow_view.h"

#include <cctype>
#include <cinttypes>
#include <cmath>

#include "format.h"

namespace lossctl {
namespace {

// "rwnd_limited" -> "rwnd" (the short names of the column).
std::string ShortLimit(std::string name) {
  const std::string suffix = "_limited";
  if (name.size() > suffix.size() &&
      name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0)
    name.resize(name.size() - suffix.size());
  return name;
}

std::string Srtt(uint32_t us) {
  return FormatDuration(static_cast<uint64_t>(us) * 1000);
}

std::string Bytes(uint32_t b) {
  return FormatBytes(b);
}

}  // namespace

std::string LimitCell(const v1::Flow& f) {
  if (f.dominant_limit().empty()) return "-";
  double pct = std::round(std::min(1.0, std::max(0.0, f.dominant_share())) * 100);
  char buf[16];
  snprintf(buf, sizeof(buf), " %.0f%%", pct);
  return ShortLimit(f.dominant_limit()) + buf;
}

std::string StallsCell(const v1::Flow& f) {
  uint64_t total = 0;
  for (const auto& kv : f.stall_ns()) total += kv.second;
  std::string s = f.stalls() ? std::to_string(f.stalls()) + "/" + FormatDuration(total) : "-";
  if (f.stalled_ns()) s += " stalled " + FormatDuration(f.stalled_ns());
  return s;
}

std::vector<std::string> FlowsTable(const v1::ListFlowsResponse& resp, uint64_t now_mono_ns,
                                    size_t width) {
  enum {
    kLocal,
    kRemote,
    kCa,
    kCwnd,
    kCwndRange,
    kSrtt,
    kSrttRange,
    kSent,
    kAcked,
    kRetrans,
    kByType,
    kLimit,
    kStalls,
    kAge,
    kCookie,
    kOwner
  };
  Table t({"LOCAL", "REMOTE", "CA", "CWND", "MIN-MAX", "SRTT", "MIN-MAX", "SENT", "ACKED",
           "RETRANS", "BY-TYPE", "LIMIT", "STALLS", "AGE", "COOKIE", "OWNER"});
  for (size_t c : {kCwnd, kCwndRange, kSent, kAcked, kRetrans, kAge, kCookie}) t.RightAlign(c);
  for (const auto& fl : resp.flows()) {
    uint64_t total = 0;
    std::string by_type;
    for (const auto& kv : OrderedByType(fl.retransmitted_segments())) {
      if (!kv.second) continue;
      total += kv.second;
      by_type += (by_type.empty() ? "" : ",") + kv.first + ":" + std::to_string(kv.second);
    }
    std::string age = "-";
    if (fl.closed())
      age = FormatDuration(fl.duration_ns());
    else if (now_mono_ns && fl.opened_mono_ns() && fl.opened_mono_ns() <= now_mono_ns)
      age = (fl.preexisting() ? ">" : "") + FormatDuration(now_mono_ns - fl.opened_mono_ns());
    t.AddRow({FormatEndpoint(fl.tuple().local_addr(), fl.tuple().local_port()),
              FormatEndpoint(fl.tuple().remote_addr(), fl.tuple().remote_port()),
              CaStateName(fl.ca_state()) + (fl.closed() ? " (closed)" : ""),
              std::to_string(fl.cwnd()),
              std::to_string(fl.cwnd_min()) + "-" + std::to_string(fl.cwnd_max()),
              Srtt(fl.srtt_us()), Srtt(fl.srtt_min_us()) + "-" + Srtt(fl.srtt_max_us()),
              FormatBytes(fl.bytes_sent()), FormatBytes(fl.bytes_acked()), std::to_string(total),
              by_type.empty() ? "-" : by_type, LimitCell(fl), StallsCell(fl), age,
              std::to_string(fl.cookie()), OwnerSummary(fl.owner())});
  }
  // What a narrow terminal loses first: ranges, details, then the rest of
  // what `flows` adds to the 4-tuple, its state, retransmits, limit and stalls.
  return t.FitLines(width, {kSrttRange, kCwndRange, kByType, kOwner, kAcked, kAge, kSent, kCwnd,
                            kSrtt, kCookie, kCa});
}

std::string StallCauseText(v1::StallCause c) {
  std::string n = v1::StallCause_Name(c);
  if (n.empty()) return "cause " + std::to_string(static_cast<int>(c));
  const std::string prefix = "STALL_CAUSE_";
  if (n.rfind(prefix, 0) == 0) n = n.substr(prefix.size());
  for (auto& ch : n) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  return n;
}

std::string StallEvidence(const v1::StallEvent& e) {
  std::vector<std::string> parts;
  auto resends = [&] {
    if (e.retransmits())
      parts.push_back(std::to_string(e.retransmits()) + " resend" +
                      (e.retransmits() == 1 ? "" : "s") +
                      (e.first_retransmit() != v1::RETRANSMIT_TYPE_UNSPECIFIED
                           ? std::string(" (first ") + RetransmitTypeName(e.first_retransmit()) +
                                 " seq " + std::to_string(e.first_retransmit_seq()) + ")"
                           : ""));
  };
  switch (e.cause()) {
    case v1::STALL_CAUSE_RTO:
      parts.push_back("rto backoff " + std::to_string(e.backoff()));
      resends();
      break;
    case v1::STALL_CAUSE_TLP:
      parts.push_back("tail loss probe");
      resends();
      break;
    case v1::STALL_CAUSE_FAST_RECOVERY:
      parts.push_back("fast retransmit after " + std::to_string(e.acks()) + " dupack" +
                      (e.acks() == 1 ? "" : "s"));
      resends();
      break;
    case v1::STALL_CAUSE_ZERO_WINDOW:
      parts.push_back("zero window, " + std::to_string(e.acks()) + " probe answer" +
                      (e.acks() == 1 ? "" : "s"));
      if (e.backoff()) parts.push_back("probe backoff " + std::to_string(e.backoff()));
      break;
    case v1::STALL_CAUSE_RWND_LIMITED:
      parts.push_back("peer window " + Bytes(e.min_window()) + ", " + Bytes(e.unsent_bytes()) +
                      " waiting");
      break;
    case v1::STALL_CAUSE_NAGLE_DELAYED_ACK:
      parts.push_back("nagle: " + Bytes(e.unsent_bytes()) + " held, peer ACK after " +
                      FormatDuration(e.duration_ns()));
      break;
    case v1::STALL_CAUSE_CWND_LIMITED:
      parts.push_back("in flight " + std::to_string(e.state().in_flight()) + " >= cwnd " +
                      std::to_string(e.state().cwnd()) + ", " + Bytes(e.unsent_bytes()) +
                      " waiting");
      break;
    case v1::STALL_CAUSE_SNDBUF_LIMITED: parts.push_back("send buffer full"); break;
    case v1::STALL_CAUSE_APP_LIMITED:
      parts.push_back("nothing more to send (not a network stall)");
      break;
    default:
      // Nothing fits: every piece of evidence, so the reader can judge.
      parts.push_back("hole at seq " + std::to_string(e.snd_una()));
      parts.push_back(std::to_string(e.acks()) + " ack" + (e.acks() == 1 ? "" : "s") +
                      " delivering nothing");
      resends();
      parts.push_back("window " + Bytes(e.min_window()));
      parts.push_back(Bytes(e.unsent_bytes()) + " unsent");
      parts.push_back(std::string("nagle ") + (e.nagle() ? "on" : "off"));
      if (e.backoff()) parts.push_back("backoff " + std::to_string(e.backoff()));
      break;
  }
  if (e.caused_by().rule_id())
    parts.push_back("caused by rule " + std::to_string(e.caused_by().rule_id()) +
                    "'s drop of seq " + std::to_string(e.caused_by().seq()) + "+" +
                    std::to_string(e.caused_by().length()));
  if (e.closing()) parts.push_back("after the application's close");
  if (e.at_close()) parts.push_back("ended by the close");
  std::string out;
  for (const auto& p : parts) out += (out.empty() ? "" : ", ") + p;
  return out;
}

std::string StallLine(const v1::StallEvent& e, const std::string& time) {
  char head[256];
  snprintf(head, sizeof(head), "%s %s > %s %-17s %7s", time.c_str(),
           FormatEndpoint(e.tuple().local_addr(), e.tuple().local_port()).c_str(),
           FormatEndpoint(e.tuple().remote_addr(), e.tuple().remote_port()).c_str(),
           StallCauseText(e.cause()).c_str(), FormatDuration(e.duration_ns()).c_str());
  std::string line = std::string(head) + "  " + StallEvidence(e);
  if (e.rule_ids_size()) {
    std::string ids;
    for (uint32_t id : e.rule_ids()) ids += (ids.empty() ? "" : ",") + std::to_string(id);
    line += "; rules " + ids;
  }
  if (!e.owner().path().empty() && e.owner().path() != "/")
    line += "; owner " + OwnerSummary(e.owner());
  if (e.cookie()) line += "; cookie " + std::to_string(e.cookie());  // for `flow trace --cookie`
  return line;
}

}  // namespace lossctl
