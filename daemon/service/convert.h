// Translation between the public API (lossd.v1 messages) and the injector/
// observer types, and from Status to grpc::Status. No kernel access here.
#pragma once

#include <grpcpp/grpcpp.h>

#include "common/status.h"
#include "injector/injector.h"
#include "lossd/v1/lossd.pb.h"
#include "observer/observer.h"

namespace lossd {

grpc::Status ToGrpc(const Status& st);

// Validates as it converts; messages name the field ("match.src: ...").
Status SpecFromProto(const v1::RuleSpec& in, RuleSpec* out);
void SpecToProto(const RuleSpec& in, v1::RuleSpec* out);
void CountersToProto(const RuleCounters& c, v1::RuleCounters* out);

// The model's long-run loss rate (Bernoulli p, Gilbert-Elliott's stationary
// mean, 1/n for every-n-th); -1 where it has none (first-k).
double ModelMeanLoss(const LossModel& m);
// 99.9 % Wilson score interval of k successes in n trials.
void WilsonInterval(uint64_t k, uint64_t n, double* lo, double* hi);

v1::RetransmitType TypeToProto(int obs_type);
void TupleToProto(const obs_tuple& t, v1::Tuple* out);
void EventToProto(const obs_event& e, v1::RetransmitEvent* out);
void FlowToProto(uint64_t cookie, const obs_flow& f, v1::Flow* out);

// Whether an address (network byte order words, AF_INET/AF_INET6) lies in c.
bool AddrInCidr(const Cidr& c, uint16_t family, const uint32_t* addr);

// Whether packets of a TCP flow (local -> remote as seen by this host) can
// match the rule's address/port/protocol conditions in the rule's direction.
bool RuleCoversFlow(const RuleSpec& spec, const obs_tuple& t);

}  // namespace lossd
