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
    """

    def __init__(self, code, message, hint="", local=False):
        self.code = code
        self.message = message
        self.hint = hint
        self.local = local
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


def from_rpc_error(err, target=None):
    """A grpc.RpcError as a LossdError (code name, the daemon's message)."""
    try:
        code = err.code()
        name = code.name if code is not None else "UNKNOWN"
    except Exception:  # not a grpc.Call
        name = "UNKNOWN"
    try:
        message = err.details() or ""
    except Exception:
        message = str(err)
    hint = ""
    if name == "DEADLINE_EXCEEDED" and "loading" in message:
        hint = "lossd is starting; a longer timeout, or Client.wait_ready(), waits for it"
    elif name == "UNAVAILABLE" and target:
        hint = unreachable_hint(target)
    return LossdError(name, message, hint=hint)


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
