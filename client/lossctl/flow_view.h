// Why a flow is slow, as lossctl prints it: the LIMIT and STALLS cells of
// `lossctl flows`, the table itself (fitted to the terminal), and one line per
// stall for `lossctl stalls` (docs/observer.md#limits, #stalls). Pure
// functions of the API's messages.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "lossd/v1/lossd.pb.h"

namespace lossctl {

namespace v1 = ::lossd::v1;

// The dominant limit and its share of busy time: "rwnd 96%"; "-" while
// nothing was busy.
std::string LimitCell(const v1::Flow& f);
// Stalls that ended, count and total time: "3/131ms" ("-": none), and
// " stalled 2.1s" while the flow is stalled now.
std::string StallsCell(const v1::Flow& f);

// `lossctl flows`: one line per flow and a header; columns that matter least
// go first when the table is wider than `width` (0: no limit). `now_mono_ns`
// (0: unknown, as when lossd is on another host) gives open flows their age.
std::vector<std::string> FlowsTable(const v1::ListFlowsResponse& resp, uint64_t now_mono_ns,
                                    size_t width);

// "rto", "nagle_delayed_ack", ...: the StallCause name, lower case, without
// its prefix (the keys of Flow.stall_ns).
std::string StallCauseText(v1::StallCause c);
// The evidence that decided a stall's cause: "rto backoff 2", "zero window,
// 5 probe answers", "nagle: 120B held, peer ACK after 41ms", ... and
// "caused by rule 3's drop of seq 1234+1448" when a drop made its hole.
std::string StallEvidence(const v1::StallEvent& e);
// One stall: time (as given), flow, cause, duration, evidence.
std::string StallLine(const v1::StallEvent& e, const std::string& time);

}  // namespace lossctl
