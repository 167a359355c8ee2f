#include "base/status.h"

namespace lossd {

const char* CodeName(Code code) {
  switch (code) {
    case Code::kOk: return "OK";
    case Code::kInvalidArgument: return "INVALID_ARGUMENT";
    case Code::kNotFound: return "NOT_FOUND";
    case Code::kAlreadyExists: return "ALREADY_EXISTS";
    case Code::kPermissionDenied: return "PERMISSION_DENIED";
    case Code::kFailedPrecondition: return "FAILED_PRECONDITION";
    case Code::kResourceExhausted: return "RESOURCE_EXHAUSTED";
    case Code::kUnavailable: return "UNAVAILABLE";
    case Code::kInternal: return "INTERNAL";
    case Code::kDeadlineExceeded: return "DEADLINE_EXCEEDED";
  }
  return "UNKNOWN";
}

Status Status::FromErrno(int err, const std::string& context) {
  if (err < 0) err = -err;
  Code code = Code::kInternal;
  switch (err) {
    case EPERM:
    case EACCES: code = Code::kPermissionDenied; break;
    case ENOENT:
    case ENODEV:
    case ENXIO: code = Code::kNotFound; break;
    case EEXIST:
    case EBUSY: code = Code::kAlreadyExists; break;
    case EINVAL:
    case ERANGE:
    case ENOTDIR:
    case ELOOP:
    case ENAMETOOLONG: code = Code::kInvalidArgument; break;
    case ENOSPC:
    case EDQUOT:
    case ENOMEM:
    case EMFILE:  // out of file descriptors: the process's, or the host's
    case ENFILE:
    case E2BIG: code = Code::kResourceExhausted; break;
    case EOPNOTSUPP:  // == ENOTSUP on Linux
    case ENOSYS: code = Code::kFailedPrecondition; break;
    default: break;
  }
  return Status(code, context + ": " + std::strerror(err));
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  return std::string(CodeName(code_)) + ": " + message_;
}

}  // namespace lossd
