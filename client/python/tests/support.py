"""Test support: puts client/python on sys.path; finds the generated stubs.

Tests of pure logic need nothing. Tests that need the generated lossd/v1
modules call stubs(): with LOSSD_PYTHON_STUBS set (as ctest does) a problem
is an error; without it, and with no importable lossd.v1, they are skipped.
"""

import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
EXAMPLES = os.path.join(ROOT, "examples")
PYTHON = sys.executable or "/usr/bin/python3"


def stubs():
    from lossd_client import STUBS_ENV_VAR, StubsNotFound, load_stubs
    if os.environ.get(STUBS_ENV_VAR):
        return load_stubs()
    try:
        return load_stubs()
    except StubsNotFound as e:
        raise unittest.SkipTest("generated stubs not available (%s unset): %s" % (STUBS_ENV_VAR, e))


class StubsTestCase(unittest.TestCase):
    """A test case with the generated messages as self.pb2."""

    @classmethod
    def setUpClass(cls):
        cls.pb2 = stubs().pb2


class FakeLossdTestCase(unittest.TestCase):
    """A FakeLossd (fake_lossd.py) per test, a Client of it as self.c, the generated
    messages as self.pb2."""

    @classmethod
    def setUpClass(cls):
        cls.stubs = stubs()
        cls.pb2 = cls.stubs.pb2

    def setUp(self):
        from fake_lossd import FakeLossd
        from lossd_client import Client
        self.fake = FakeLossd(self.stubs).start()
        self.c = Client(self.fake.target, timeout=5)

    def tearDown(self):
        self.c.close()
        self.fake.stop()

    def wait_for(self, cond, timeout=5):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if cond():
                return
            time.sleep(0.02)
        self.fail("timed out")


def child_env(stubs_root):
    env = dict(os.environ)
    env["LOSSD_PYTHON_STUBS"] = stubs_root
    env["PYTHONPATH"] = ROOT
    env.pop("PYTHONHOME", None)
    return env
