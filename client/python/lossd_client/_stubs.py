"""Finding and importing the generated lossd/v1 Python modules.

The build generates them into <build>/python/lossd/v1/ (target
lossd_proto_python); they are never committed. An installed package (the
wheel: client/python/pyproject.toml) carries its own, generated when the wheel
was built, in lossd_client/_generated/. Where to look, in order: an explicit
path, the bundled ones (an installed package uses the stubs it was built
with, whatever LOSSD_PYTHON_STUBS a build tree's lossctl sets), the
LOSSD_PYTHON_STUBS environment variable, then an already importable
``lossd.v1`` package (e.g. <build>/python on PYTHONPATH).
"""

import importlib
import os
import sys
import threading
import types

ENV_VAR = "LOSSD_PYTHON_STUBS"
# The installed package's own stubs (setup.py generates them into the wheel);
# absent in the source tree.
BUNDLED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_generated")

_lock = threading.Lock()
_loaded = None  # (root or None, Stubs)


class StubsNotFound(ImportError):
    """The generated lossd/v1 modules could not be found or imported."""


class Stubs(types.SimpleNamespace):
    """pb2 (messages) and pb2_grpc (service stubs) of lossd.v1, and where they came from."""


def _hint():
    here = os.path.dirname(os.path.abspath(__file__))
    repo = os.path.dirname(os.path.dirname(os.path.dirname(here)))
    lines = [
        "build them with: cmake -S <repo> -B <build> && "
        "cmake --build <build> --target lossd_proto_python",
        "then point %s (or --stubs) at <build>/python" % ENV_VAR,
    ]
    guess = os.path.join(repo, "build", "python")
    if os.path.isfile(os.path.join(guess, "lossd", "v1", "lossd_pb2.py")):
        lines.append("(there are stubs in %s)" % guess)
    return "; ".join(lines)


def _check_root(root, origin):
    if not os.path.isdir(root):
        raise StubsNotFound("lossd Python stubs: %s=%r is not a directory; %s"
                            % (origin, root, _hint()))
    for f in ("lossd_pb2.py", "lossd_pb2_grpc.py"):
        p = os.path.join(root, "lossd", "v1", f)
        if not os.path.isfile(p):
            raise StubsNotFound("lossd Python stubs: %s is missing (%s=%r should be <build>/python); %s"
                                % (p, origin, root, _hint()))


def _import():
    try:
        pb2 = importlib.import_module("lossd.v1.lossd_pb2")
        pb2_grpc = importlib.import_module("lossd.v1.lossd_pb2_grpc")
    except ImportError as e:
        raise StubsNotFound("lossd Python stubs: import failed (%s); %s" % (e, _hint())) from e
    return pb2, pb2_grpc


def load_stubs(path=None):
    """Import and return the generated modules as Stubs(pb2=..., pb2_grpc=..., root=...).

    path: <build>/python (the directory holding lossd/v1/). Without it, the
    installed package's own (lossd_client/_generated), then $LOSSD_PYTHON_STUBS,
    then whatever ``lossd.v1`` is already importable.
    The modules are loaded once per process; asking for a different
    directory afterwards is an error (protobuf registers each .proto once).
    """
    global _loaded
    origin = "path"
    if path is None and os.path.isfile(os.path.join(BUNDLED, "lossd", "v1", "lossd_pb2.py")):
        path, origin = BUNDLED, "the installed package's stubs"
    if path is None and os.environ.get(ENV_VAR):
        path, origin = os.environ[ENV_VAR], ENV_VAR
    root = os.path.realpath(path) if path else None
    with _lock:
        if _loaded is not None:
            old_root, stubs = _loaded
            if root is None or root == old_root or old_root is None and _same_module(stubs, root):
                return stubs
            raise StubsNotFound("lossd Python stubs already loaded from %s, cannot load %s as well"
                                % (old_root, root))
        if root is not None:
            _check_root(root, origin)
            if root not in [os.path.realpath(p) for p in sys.path if p]:
                sys.path.insert(0, root)
            pb2, pb2_grpc = _import()
            if not _same_module(types.SimpleNamespace(pb2=pb2), root):
                raise StubsNotFound("lossd Python stubs: 'lossd.v1' was imported from %s, not from %s=%r"
                                    % (os.path.dirname(pb2.__file__), origin, root))
        else:
            try:
                pb2, pb2_grpc = _import()
            except StubsNotFound:
                raise StubsNotFound("lossd Python stubs not found: set %s to <build>/python or pass "
                                    "the path (--stubs); %s" % (ENV_VAR, _hint())) from None
        stubs = Stubs(pb2=pb2, pb2_grpc=pb2_grpc, root=root or os.path.dirname(
            os.path.dirname(os.path.dirname(os.path.abspath(pb2.__file__)))))
        _loaded = (root, stubs)
        return stubs


def _same_module(stubs, root):
    f = os.path.realpath(stubs.pb2.__file__)
    return f.startswith(os.path.join(root, ""))
