// A rule between its API form (lossd.v1.RuleSpec) and its domain form
// (RuleSpec). Shared by the daemon's services and lossctl.
#pragma once

#include <grpcpp/support/status.h>

#include "base/json.h"
#include "base/status.h"
#include "lossd/v1/lossd.pb.h"
#include "rules/rule.h"

namespace lossd {

// Converts field by field; messages name the field ("match.src: ..."). The
// whole rule's consistency is Validate's (rules/rule.h), run by its owner.
Status SpecFromProto(const v1::RuleSpec& in, RuleSpec* out);
void SpecToProto(const RuleSpec& in, v1::RuleSpec* out);
Guard GuardFromProto(const v1::Guard& in);
void GuardToProto(const Guard& in, v1::Guard* out);  // nothing when none
// The schedule alone (lossctl describes it with Schedule::Describe).
Schedule ScheduleFromProto(const v1::Schedule& in);
Guard GuardFromProto(const v1::Guard& in);

// A gRPC status code's name ("NOT_FOUND"), as lossd logs it and lossctl
// prints it: here because this is the one library both link with gRPC.
const char* GrpcCodeName(grpc::StatusCode code);

// A refusal's reason in gRPC's detail trailer (lossd.proto, "Errors"): the
// serialized StatusDetails, with st's reason and metadata as its ErrorInfo
// (packed under Google's type URL), that grpc::Status's third argument sends
// as grpc-status-details-bin.
constexpr char kErrorDomain[] = "lossd";
constexpr char kErrorInfoTypeUrl[] = "type.googleapis.com/google.rpc.ErrorInfo";
std::string ErrorDetails(grpc::StatusCode code, const Status& st);
// The ErrorInfo a received status carries; false if it has none.
bool ErrorInfoOf(const grpc::Status& st, v1::ErrorInfo* out);

// The API's JSON, one definition for every place lossd prints a message
// (lossctl -o json, the live page's feed, one-shot lossd --json): proto3's
// JSON mapping with the field names as in the .proto, default values printed,
// enums by name, 64-bit integers as strings. One line.
std::string ToJson(const google::protobuf::Message& m);
// The same as a JSON value, to put messages inside an object (JsonLine).
Json JsonOf(const google::protobuf::Message& m);

}  // namespace lossd
