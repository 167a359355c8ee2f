// Human units out (rates in %, bytes, durations, times), names of the API's
// enums, one-line summaries of rules, aligned tables, and JSON lines.
#pragma once

#include <google/protobuf/message.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "base/json.h"
#include "lossd/v1/lossd.pb.h"
#include "rules/proto.h"

namespace lossctl {

namespace v1 = ::lossd::v1;
using ::lossd::JsonLine;

// 0.01 -> "1%", 0.00005 -> "0.005%", about 6 significant digits, no exponent.
std::string FormatRate(double fraction);
// 1536 -> "1.5KiB"; below 1 KiB exact: "512B".
std::string FormatBytes(uint64_t bytes);
// 1500000000 -> "1.5s", 90 s -> "1m30s", 0 -> "0s".
std::string FormatDuration(uint64_t ns);
// Local time: "2024-05-01 12:00:03" (with_micros: "12:00:03.123456", time only).
std::string FormatUnixTime(uint64_t unix_ns, bool with_micros = false);
// A CLOCK_MONOTONIC time of this host as local wall-clock time of day.
std::string FormatMonoTime(uint64_t mono_ns);
// "8080", "8000-8100", "" for any.
std::string FormatPorts(const v1::PortRange& p);
// "10.0.0.1:80", "[::1]:80".
std::string FormatEndpoint(const std::string& addr, uint32_t port);

// Names as lossctl reads and prints them.
const char* HookName(v1::Hook h);
const char* DirectionName(v1::Direction d);
const char* PayloadName(v1::Payload p);
const char* RuleStateName(v1::RuleState s);
const char* OutcomeName(v1::Outcome o);
const char* GapSourceText(v1::GapSource s);
std::string CaStateName(uint32_t ca_state);
// "fast", "rto", "loss", "tlp", "syn", "synack", "probe0", "unknown": the
// keys the daemon uses in its retransmitted_segments / retransmits_by_type maps.
const char* RetransmitTypeName(v1::RetransmitType t);
bool ParseRetransmitType(const std::string& name, v1::RetransmitType* out);
// The type names above in their order (the columns of `stats`).
const std::vector<std::string>& RetransmitTypeNames();
// Map entries in RetransmitTypeNames() order, then any other key.
std::vector<std::pair<std::string, uint64_t>> OrderedByType(
    const google::protobuf::Map<std::string, uint64_t>& m);

// "eth0", "cgroup /sys/fs/cgroup/x", "eth0 + cgroup /x".
std::string TargetSummary(const v1::RuleSpec& s);
// The same, and for a service (pid, unit, container, pod) the cgroup it
// resolved to: "unit nginx.service (cgroup /system.slice/nginx.service)".
std::string TargetSummary(const v1::Rule& r);
// A socket's owner as the user names it: "nginx.service", "docker 3f2a9c01b2c4",
// "pod 8d1e... containerd 3f2a...", else its cgroup path; "-" if unknown.
std::string OwnerSummary(const v1::CgroupOwner& o);
// "tcp dport 8080 src 10.0.0.0/24 flags syn,!ack", "any" when unset.
std::string MatchSummary(const v1::Match& m);
// A rate for a glance: 3 significant digits ("1.62%", "0.452%", "20%").
std::string Rate3(double fraction);
// "1%", "ge 1%,20%,100%,0%", "every 10", "first 3"; " seed 7" appended.
std::string LossSummary(const v1::LossModel& l);
// The model, then the action when it is not drop: "5% ecn", "police 50mbit,64KiB".
std::string ImpairmentSummary(const v1::RuleSpec& s);
// "k=v,k2=v2" sorted by key.
std::string LabelsSummary(const google::protobuf::Map<std::string, std::string>& labels);

// Columns aligned on the widest cell; numeric columns right-aligned.
class Table {
 public:
  explicit Table(std::vector<std::string> header);
  void RightAlign(size_t column);
  void AddRow(std::vector<std::string> row);
  size_t rows() const { return rows_.size(); }
  // The header and each row as one line, without the newline.
  std::vector<std::string> Lines() const;
  // Lines() without the columns of `drop_order` (in that order, as many as it
  // takes) while a line is wider than max_width (0: no limit).
  std::vector<std::string> FitLines(size_t max_width, const std::vector<size_t>& drop_order) const;
  void Print(FILE* out) const;

 private:
  std::vector<std::string> header_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

// A message as the API's JSON (rules/proto.h: one definition for lossd and lossctl).
using lossd::JsonOf;
using lossd::ToJson;
// Writes a line to stdout and flushes it; false once stdout is gone (EPIPE).
// Writes line + newline to stdout; flushes unless told not to (a caller
// printing a batch flushes once at its end). False once stdout is closed.
bool PrintLine(const std::string& line, bool flush = true);

}  // namespace lossctl
