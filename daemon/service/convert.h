// Translation between the public API (lossd.v1 messages) and the injector/
// observer types, and from Status to grpc::Status. No kernel access here: the
// socket owners' names come from the observer's OwnerCache (`owners`, null:
// no owner shown), which looks each cgroup id up once.
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>

#include "base/status.h"
#include "effects/effects.h"
#include "host/targets.h"
#include "observer/windows.h"
#include "injector/injector.h"
#include "lossd/v1/lossd.pb.h"
#include "observer/filters.h"
#include "observer/hub.h"
#include "observer/observer.h"
#include "rules/match.h"
#include "rules/model.h"
#include "rules/proto.h"

namespace lossd {

grpc::Status ToGrpc(const Status& st);
// Finishes a unary call with st (translated by ToGrpc).
grpc::ServerUnaryReactor* Reply(grpc::CallbackServerContext* ctx, const Status& st);

// The counters of a rule whose action is `action` (what it acted on is
// counted under that action's name).
void CountersToProto(const RuleCounters& c, Action action, v1::RuleCounters* out);
void RuleToProto(const RuleInfo& r, v1::Rule* out);
void RuleEffectToProto(const RuleInfo& r, const RuleEffect& e, v1::RuleEffect* out);
void OwnerToProto(const CgroupOwner& o, v1::CgroupOwner* out);

// A stream's period (interval_ns, window_ns): 0 means the default of 1 s;
// anything outside 100 ms .. 1 h is INVALID_ARGUMENT naming the field.
Result<std::chrono::nanoseconds> StreamPeriod(uint64_t ns, const char* field);

v1::RetransmitType TypeToProto(int obs_type);
void TupleToProto(const obs_tuple& t, v1::Tuple* out);
void EventToProto(const obs_event& e, OwnerCache* owners, v1::RetransmitEvent* out);
// `closed_ns`: a closing summary's close time (the flow's life ends there;
// closed and duration_ns set); 0: an open flow, as of now.
void FlowToProto(uint64_t cookie, const obs_flow& f, OwnerCache* owners, v1::Flow* out,
                 uint64_t closed_ns = 0);
v1::StallCause StallCauseToProto(int obs_cause);
// Without caused_by, rule_ids (the service adds them).
void StallToProto(const obs_stall_event& e, OwnerCache* owners, v1::StallEvent* out);
void SampleToProto(const obs_sample_event& e, v1::TraceSample* out);
void DropToProto(const DropRecord& d, v1::DropLink* out);
void GapToProto(const StreamLoss& l, v1::Gap* out);
// One closed window of WatchAggregates (`window_ns` long; its start in unix
// time is the kernel's plus `unix_minus_mono`), without its gaps and seq.
void AggregateToProto(const RtxWindow& w, uint64_t window_ns, uint64_t unix_minus_mono,
                      v1::Aggregate* out);
void NetnsTotalsToProto(const NetnsTotals& n, v1::NetnsTotals* out);

// The typed filters of a request (`field`: allow, deny, filter, ...):
// INVALID_ARGUMENT naming the filter and its field (e.g. "allow[2].port").
Status FiltersFromProto(const google::protobuf::RepeatedPtrField<v1::EventFilter>& in,
                        const char* field, std::vector<StreamFilter>* out);

}  // namespace lossd
