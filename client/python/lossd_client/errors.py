"""LossdError: every failure the client reports."""

import os


class LossdError(Exception):
    """A failed call, or input refused before any call.

    code:    the gRPC status code name ("INVALID_ARGUMENT", "NOT_FOUND",
             "UNAVAILABLE", ...).
    message: the daemon's message (for UNAVAILABLE and DEADLINE_EXCEEDED,
             gRPC's own).
    hint:    what the client adds (e.g. "is lossd running?"), or "".
    local:   True when the client refused the input itself (no call made).
    reason:  the daemon's machine-readable reason, if it gave one (its ErrorInfo
             detail; lossd.proto, "Errors"): "PART_LOADING" (a part the call needs
             is still loading: retry with a longer timeout), "PART_FAILED",
             "PART_DISABLED"; else "".
    metadata: that ErrorInfo's facts, e.g. {"part": "observer", "state": "loading"}.
    """

    def __init__(self, code, message, hint="", local=False, reason="", metadata=None):
        self.code = code
        self.message = message
        self.hint = hint
        self.local = local
        self.reason = reason
        self.metadata = dict(metadata or {})
        super().__init__(code, message)

    def __str__(self):
        s = "%s: %s" % (self.code, self.message)
        if self.hint:
            s += " (%s)" % self.hint
        return s


class LossdInputError(LossdError, ValueError):
    """Input the client refuses before calling the daemon (code INVALID_ARGUMENT)."""

    def __init__(self, message):
        super().__init__("INVALID_ARGUMENT", message, local=True)


ERROR_INFO_TYPE_URL = "type.googleapis.com/google.rpc.ErrorInfo"


def error_info(err, pb2):
    """The ErrorInfo (reason, metadata) a grpc.RpcError carries in its
    grpc-status-details-bin trailer, as ("REASON", {key: value}); ("", {}) if none."""
    try:
        trailers = err.trailing_metadata() or ()
    except Exception:  # not a grpc.Call
        return "", {}
    for key, value in trailers:
        if key != "grpc-status-details-bin" or pb2 is None or not hasattr(pb2, "StatusDetails"):
            continue
        try:
            details = pb2.StatusDetails.FromString(value)
            for any_ in details.details:
                if any_.type_url == ERROR_INFO_TYPE_URL:
                    info = pb2.ErrorInfo.FromString(any_.value)
                    return info.reason, dict(info.metadata)
        except Exception:  # a detail this client cannot read: as if none
            pass
    return "", {}


def from_rpc_error(err, target=None, pb2=None):
    """A grpc.RpcError as a LossdError (code name, the daemon's message, its reason)."""
    try:
        code = err.code()
        name = code.name if code is not None else "UNKNOWN"
    except Exception:  # not a grpc.Call
        name = "UNKNOWN"
    try:
        message = err.details() or ""
    except Exception:
        message = str(err)
    reason, metadata = error_info(err, pb2)
    hint = ""
    if reason == "PART_LOADING":
        hint = "lossd is starting (its %s is loading); a longer timeout, or Client.wait_ready(), " \
               "waits for it" % metadata.get("part", "parts")
    elif name == "UNAVAILABLE" and target:
        hint = unreachable_hint(target)
    return LossdError(name, message, hint=hint, reason=reason, metadata=metadata)


def unreachable_hint(target):
    path = unix_path(target)
    if path is not None:
        if not os.path.exists(path):
            return "lossd is not reachable at %s: no such socket; is lossd running? " \
                   "(--socket selects another)" % path
        if not os.access(path, os.R_OK | os.W_OK):
            return "lossd is not reachable at %s: permission denied (run as root?)" % path
        return "lossd is not reachable at %s: is lossd running?" % path
    return "lossd is not reachable at %s" % target


def unix_path(target):
    """The socket path of a unix: target, else None."""
    if target.startswith("unix://"):
        return target[len("unix://"):]
    if target.startswith("unix:"):
        return target[len("unix:"):]
    return None
