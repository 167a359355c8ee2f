// A rule between its API form (lossd.v1.RuleSpec) and its domain form
// (RuleSpec). Shared by the daemon's services and lossctl.
#pragma once

#include <grpcpp/support/status.h>

#include "common/status.h"
#include "lossd/v1/lossd.pb.h"
#include "rules/rule.h"

namespace lossd {

// Converts field by field; messages name the field ("match.src: ..."). The
// whole rule's consistency is Validate's (rules/rule.h), run by its owner.
Status SpecFromProto(const v1::RuleSpec& in, RuleSpec* out);
void SpecToProto(const RuleSpec& in, v1::RuleSpec* out);

// A gRPC status code's name ("NOT_FOUND"), as lossd logs it and lossctl
// prints it: here because this is the one library both link with gRPC.
const char* GrpcCodeName(grpc::StatusCode code);

}  // namespace lossd
