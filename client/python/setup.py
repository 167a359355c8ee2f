"""Build step of the lossd-client wheel (pyproject.toml holds the metadata).

build_py also generates the lossd.v1 stubs (lossd_pb2.py, lossd_pb2_grpc.py)
into lossd_client/_generated/ of the build, from lossd/v1/lossd.proto, with
protoc and grpc_python_plugin (Debian: protobuf-compiler, protobuf-compiler-grpc).
Debian 12's python3-grpc-tools (1.14) cannot be used: its protoc predates
proto3 `optional`, which lossd.proto uses.

    LOSSD_PROTO_DIR       the directory holding lossd/v1/lossd.proto (default: ../../proto)
    PROTOC                protoc (default: on PATH)
    GRPC_PYTHON_PLUGIN    grpc_python_plugin (default: on PATH)
    LOSSD_VERSION         the version (default: project(lossd VERSION ...) in ../../CMakeLists.txt)
"""

import os
import re
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def version():
    if os.environ.get("LOSSD_VERSION"):
        return os.environ["LOSSD_VERSION"]
    try:
        with open(os.path.join(REPO, "CMakeLists.txt")) as f:
            m = re.search(r"project\(lossd\s+VERSION\s+([0-9.]+)", f.read())
    except OSError:
        m = None
    if not m:
        raise SystemExit("lossd-client: set LOSSD_VERSION (no ../../CMakeLists.txt to read it from)")
    return m.group(1)


def tool(env, name):
    path = os.environ.get(env) or shutil.which(name)
    if not path:
        raise SystemExit("lossd-client: %s not found (apt-get install %s, or set %s)"
                         % (name, "protobuf-compiler" if name == "protoc" else "protobuf-compiler-grpc", env))
    return path


class BuildWithStubs(build_py):
    def run(self):
        super().run()
        proto_dir = os.environ.get("LOSSD_PROTO_DIR") or os.path.join(REPO, "proto")
        proto = os.path.join(proto_dir, "lossd", "v1", "lossd.proto")
        if not os.path.isfile(proto):
            raise SystemExit("lossd-client: %s not found (set LOSSD_PROTO_DIR)" % proto)
        out = os.path.join(self.build_lib, "lossd_client", "_generated")
        os.makedirs(os.path.join(out, "lossd", "v1"), exist_ok=True)
        subprocess.check_call([tool("PROTOC", "protoc"), "-I", proto_dir,
                               "--python_out=" + out, "--grpc_python_out=" + out,
                               "--plugin=protoc-gen-grpc_python=" + tool("GRPC_PYTHON_PLUGIN", "grpc_python_plugin"),
                               proto])
        for d in ("lossd", os.path.join("lossd", "v1")):
            open(os.path.join(out, d, "__init__.py"), "a").close()


setup(version=version(), cmdclass={"build_py": BuildWithStubs})
