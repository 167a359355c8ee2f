"""The standard health surfaces (issue 20), probed with independent clients: grpc-js with the
grpc project's health.proto and a server-reflection client from npm (tests/e2e/npm, installed
by `make deps`), and plain HTTP.

  test_health_across_a_start
      a Health/Watch on lossd.v1.Observer opened the moment the socket accepts sees SERVING
      last, after NOT_SERVING when the observer was still loading (how it went is printed);
      Check says SERVING for "", lossd.v1.Injector and lossd.v1.System, NOT_FOUND for a
      service lossd does not have
  test_no_observer
      --no-observer: lossd.v1.Observer NOT_SERVING (it will never serve), "" SERVING (all
      that was asked is ready), /readyz 200
  test_reflection
      the reflection client lists lossd.v1.Injector, Observer, System and grpc.health.v1.Health,
      and resolves CreateRule's descriptor (request CreateRuleRequest, response Rule) and
      WatchRetransmits as server streaming
  test_error_details
      a refusal's reason is in gRPC's standard detail trailer, decoded by grpc-js with
      googleapis' own google.rpc.Status and ErrorInfo (google-proto-files, not lossd's
      protos): with --no-observer, ListFlows is FAILED_PRECONDITION carrying ErrorInfo
      PART_DISABLED {part: observer}; a ListFlows sent the moment the socket accepts, with a
      200 ms deadline (the observer loads for 0.4 s or more), is DEADLINE_EXCEEDED carrying
      PART_LOADING (lossd answers 50 ms before the deadline, so the reason arrives; a fresh
      daemon is tried up to 3 times, as load can delay that answer past the client's
      deadline). Before: no details, and clients grepped the message for "loading"
  test_http_probes
      /healthz 200 "ok"; /readyz 200 with every part READY once loaded (JSON naming each
      part's state)
"""
import json
import os
import subprocess
import time

from lab import web
from lab.config import main
from lab.daemon import Daemon
from lab.netns import Lab, measured
import unittest

NPM = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "npm")
PROBE = os.path.join(NPM, "probe.js")


def probe(*args, timeout=30):
    return subprocess.run(["node", PROBE] + list(args), capture_output=True, text=True, timeout=timeout,
                          cwd=NPM)


class Health(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        assert os.path.isdir(os.path.join(NPM, "node_modules")), \
            "tests/e2e/npm has no node_modules: run `make deps` (npm ci there)"

    def setUp(self):
        self.lab = Lab()

    def tearDown(self):
        self.lab.close()

    def test_health_across_a_start(self):
        sockdir = self.lab.tempdir()
        sock = os.path.join(sockdir, "lossd.sock")
        watcher = subprocess.Popen(["node", PROBE, "watch", sock, "lossd.v1.Observer"], cwd=NPM,
                                   stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(0.3)  # node is up and polling for the socket
        d = Daemon(self.lab, self.lab.a, [], sockdir=sockdir, wait_parts=False)
        out, err = watcher.communicate(timeout=60)
        seen = out.split()
        d.wait_parts()
        checks = {s: probe("health", sock, s).stdout.strip()
                  for s in ("", "lossd.v1.Injector", "lossd.v1.Observer", "lossd.v1.System", "lossd.v1.Nope")}
        measured("grpc_health_across_start", watch=seen, checks=checks)
        self.assertEqual(watcher.returncode, 0, out + err)
        self.assertEqual(seen[-1], "SERVING", seen)
        self.assertTrue(set(seen[:-1]) <= {"NOT_SERVING", "SERVICE_UNKNOWN"}, seen)
        self.assertEqual(checks, {"": "SERVING", "lossd.v1.Injector": "SERVING", "lossd.v1.Observer": "SERVING",
                                  "lossd.v1.System": "SERVING", "lossd.v1.Nope": "NOT_FOUND"})
        self.assertEqual(d.term(), 0, d.stderr())

    def test_no_observer(self):
        d = Daemon(self.lab, self.lab.a, ["--no-observer"])
        checks = {s: probe("health", d.sock, s).stdout.strip() for s in ("", "lossd.v1.Observer")}
        ready = web.request(self.lab.a, "127.0.0.1", d.http_port, "/readyz")
        measured("grpc_health_no_observer", checks=checks, readyz=ready.status)
        self.assertEqual(checks, {"": "SERVING", "lossd.v1.Observer": "NOT_SERVING"})
        self.assertEqual(ready.status, 200, ready.body)
        self.assertEqual(json.loads(ready.body)["observer"]["state"], "DISABLED")
        self.assertEqual(d.term(), 0, d.stderr())

    def test_reflection(self):
        d = Daemon(self.lab, self.lab.a, [])
        r = probe("reflect", d.sock, "lossd.v1.Injector")
        self.assertEqual(r.returncode, 0, r.stderr)
        got = json.loads(r.stdout)
        o = json.loads(probe("reflect", d.sock, "lossd.v1.Observer").stdout)
        measured("grpc_reflection", services=got["services"], injector_methods=len(got["methods"]))
        for s in ("lossd.v1.Injector", "lossd.v1.Observer", "lossd.v1.System", "grpc.health.v1.Health"):
            self.assertIn(s, got["services"])
        create = [m for m in got["methods"] if m["name"] == "CreateRule"]
        self.assertEqual(create, [{"name": "CreateRule", "request": ".lossd.v1.CreateRuleRequest",
                                   "response": ".lossd.v1.Rule", "server_streaming": False}])
        watch = [m for m in o["methods"] if m["name"] == "WatchRetransmits"]
        self.assertEqual(len(watch), 1, o)
        self.assertTrue(watch[0]["server_streaming"])
        self.assertEqual(d.term(), 0, d.stderr())

    def details(self, sock, method, timeout_ms=2000):
        r = probe("details", sock, method, str(timeout_ms))
        self.assertEqual(r.returncode, 0, r.stderr)
        return json.loads(r.stdout)

    def test_error_details(self):
        info_type = "type.googleapis.com/google.rpc.ErrorInfo"
        d = Daemon(self.lab, self.lab.a, ["--no-observer"])
        disabled = self.details(d.sock, "/lossd.v1.Observer/ListFlows")
        self.assertEqual(d.term(), 0, d.stderr())
        self.assertEqual(disabled["code"], "FAILED_PRECONDITION", disabled)
        self.assertEqual(disabled["details"]["code"], 9, disabled)  # FAILED_PRECONDITION's number
        self.assertEqual(disabled["details"]["details"], [
            {"@type": info_type, "reason": "PART_DISABLED", "domain": "lossd",
             "metadata": {"part": "observer", "state": "disabled"}}])

        # The probe waits for the socket, connects the moment it accepts and calls with a
        # 200 ms deadline: the observer's load takes longer (0.4-0.6 s when the machine is
        # idle). lossd answers 50 ms before that deadline; on a machine loaded enough to
        # delay that answer by 50 ms the client's own deadline wins (no details), and one
        # loaded enough to delay node's connect until the load is nearly done sees the
        # call wait for the observer and succeed (OK, the observer READY after it: what a
        # call within its deadline must get). So a fresh daemon is tried up to five times,
        # and every answer that has details must be right.
        tries = []
        for _ in range(5):
            sockdir = self.lab.tempdir()
            sock = os.path.join(sockdir, "lossd.sock")
            caller = subprocess.Popen(["node", PROBE, "details", sock, "/lossd.v1.Observer/ListFlows", "200"],
                                      cwd=NPM, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            time.sleep(0.3)  # node is up and polling for the socket
            d = Daemon(self.lab, self.lab.a, [], sockdir=sockdir, wait_parts=False)
            out, err = caller.communicate(timeout=60)
            after = {k: v[0] for k, v in d.components().items()}["observer"]
            d.wait_parts()
            ready_after = {c.name: round(c.ready_after_ns / 1e9, 3) for c in d.health().components}
            self.assertEqual(d.term(), 0, d.stderr())
            self.assertEqual(caller.returncode, 0, out + err)
            loading = json.loads(out)
            tries.append(dict(loading=loading, observer_after_the_call=after, ready_after_s=ready_after))
            if loading["code"] == "OK":  # called late: the call waited and the observer was ready
                self.assertEqual(after, "COMPONENT_STATE_READY", tries)
                continue
            self.assertEqual(loading["code"], "DEADLINE_EXCEEDED", tries)  # the observer still loaded
            if loading["details"] is not None:
                break
        measured("error_details", disabled=disabled, tries=tries)
        self.assertIsNotNone(tries[-1]["loading"]["details"],
                             "no call both found the observer loading and got lossd's answer before its "
                             "deadline: %s" % tries)
        for t in tries:
            if t["loading"]["details"] is not None:
                self.assertEqual(t["loading"]["details"]["details"], [
                    {"@type": info_type, "reason": "PART_LOADING", "domain": "lossd",
                     "metadata": {"part": "observer", "state": "loading"}}])

    def test_http_probes(self):
        d = Daemon(self.lab, self.lab.a, [])
        alive = web.request(self.lab.a, "127.0.0.1", d.http_port, "/healthz")
        ready = web.request(self.lab.a, "127.0.0.1", d.http_port, "/readyz")
        body = json.loads(ready.body)
        measured("http_probes", healthz=alive.status, readyz=ready.status, body=body)
        self.assertEqual((alive.status, alive.body), (200, b"ok\n"))
        self.assertEqual(ready.status, 200, body)
        self.assertEqual((body["ready"], body["injector"]["state"], body["observer"]["state"]),
                         (True, "READY", "READY"))
        self.assertEqual(d.term(), 0, d.stderr())


if __name__ == "__main__":
    main()
