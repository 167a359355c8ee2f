"""Finding the generated modules; each case in a fresh interpreter (loading is per process)."""

import os
import subprocess
import tempfile
import unittest

import support

PROBE = "import lossd_client, sys\ntry:\n    s = lossd_client.load_stubs(*sys.argv[1:])\n" \
        "    print('OK', s.root)\nexcept lossd_client.StubsNotFound as e:\n    print('ERR', e)\n"


def probe(env_stubs, *args, pythonpath=support.ROOT):
    env = dict(os.environ)
    env.pop("LOSSD_PYTHON_STUBS", None)
    if env_stubs is not None:
        env["LOSSD_PYTHON_STUBS"] = env_stubs
    env["PYTHONPATH"] = pythonpath
    with tempfile.TemporaryDirectory() as cwd:   # nothing importable by accident
        r = subprocess.run([support.PYTHON, "-c", PROBE, *args], env=env, cwd=cwd,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    if r.returncode:
        raise AssertionError(r.stderr)
    return r.stdout.strip()


class StubsTest(unittest.TestCase):
    def test_no_stubs_anywhere(self):
        out = probe(None)
        self.assertTrue(out.startswith("ERR lossd Python stubs not found: set LOSSD_PYTHON_STUBS"), out)
        self.assertIn("lossd_proto_python", out)

    def test_bad_directory(self):
        with tempfile.TemporaryDirectory() as d:
            out = probe(d)
            self.assertIn("ERR lossd Python stubs: %s/lossd/v1/lossd_pb2.py is missing" % os.path.realpath(d), out)
            out = probe(None, os.path.join(d, "nope"))
            self.assertIn("is not a directory", out)

    def test_found(self):
        root = support.stubs().root
        self.assertEqual(probe(root), "OK " + root)                 # the environment variable
        self.assertEqual(probe(None, root), "OK " + root)           # the argument
        self.assertEqual(probe(None, pythonpath=support.ROOT + os.pathsep + root), "OK " + root)  # importable

    def test_bundled_first(self):
        # An installed package (the wheel) carries lossd_client/_generated: it is used before
        # $LOSSD_PYTHON_STUBS (a build tree's lossctl sets one that may not exist here).
        import shutil
        root = support.stubs().root
        with tempfile.TemporaryDirectory() as d:
            pkg = os.path.join(d, "lossd_client")
            shutil.copytree(os.path.join(support.ROOT, "lossd_client"), pkg,
                            ignore=shutil.ignore_patterns("__pycache__"))
            shutil.copytree(os.path.join(root, "lossd"), os.path.join(pkg, "_generated", "lossd"),
                            ignore=shutil.ignore_patterns("__pycache__"))
            bundled = os.path.realpath(os.path.join(pkg, "_generated"))
            self.assertEqual(probe(None, pythonpath=d), "OK " + bundled)
            self.assertEqual(probe(os.path.join(d, "nope"), pythonpath=d), "OK " + bundled)
            self.assertEqual(probe(None, root, pythonpath=d), "OK " + root)   # the argument still wins


if __name__ == "__main__":
    unittest.main()
