"""Package e2e: the INSTALLED clients against the real daemon.

One daemon (`lossd --socket SOCK`, the build's) in the lab's namespace A; lossctl (the
build's) is the independent witness. Neither client below sees the source tree:

  test_1_wheel_script_outside_the_tree
      the wheel (target lossd_wheel, $LOSSD_WHEEL) installed into a fresh virtualenv
      (--system-site-packages, pip --no-index); a script written to a temporary directory
      and run from there with no PYTHONPATH and no LOSSD_PYTHON_STUBS creates a rule on
      e2ea egress, reads it back and its effect, and deletes it: while it waits, lossctl
      lists that rule (labels client=wheel); afterwards no rule is left.
      `python3 -m lossd_client status` and `rules` from the venv work against it too.
  test_2_cxx_client_from_find_package
      `cmake --install` of the build tree ($LOSSD_BUILD) into a temporary DESTDIR, then
      tests/package/cxx_client configured with find_package(lossd) against that prefix,
      built, and run: it creates a rule, lists it (the daemon's listing names it, ACTIVE,
      with its port), deletes it; lossctl confirms none is left.
"""
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

from lab.config import main
from lab.clients import ClientTestCase
from lab.daemon import wait_until

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def clean_env():
    env = dict(os.environ)
    for k in ("PYTHONPATH", "LOSSD_PYTHON_STUBS", "LOSSD_ADDR", "PYTHONHOME"):
        env.pop(k, None)
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def run(cmd, cwd=None, timeout=300, env=None):
    p = subprocess.run(cmd, cwd=cwd, env=env or clean_env(), stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=timeout)
    if p.returncode:
        raise AssertionError("$ %s\n-> exit %d\nstdout:\n%s\nstderr:\n%s"
                             % (" ".join(cmd), p.returncode, p.stdout, p.stderr))
    return p.stdout


SCRIPT = textwrap.dedent('''
    import os, sys, time
    import lossd_client
    from lossd_client import Client

    sock, iface, port, go = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    print("module", lossd_client.__file__)
    print("stubs", lossd_client.load_stubs().root)
    with Client(sock) as c:
        c.wait_ready(("injector",), timeout=30)
        rule = c.add_rule(iface, direction="egress", protocol="tcp", dport=port, rate="1%",
                          ttl="60s", labels={"client": "wheel"})
        print("created", rule.id, rule.state)
        back = c.get_rule(rule)
        print("read", back.id, back.state, back.interface, back.direction, back.match.dport[0],
              back.labels["client"])
        eff = c.rule_effect(rule)
        print("effect", eff.id, eff.configured_rate)
        sys.stdout.flush()
        # the test checks lossctl's listing meanwhile, then creates this file
        deadline = time.monotonic() + 30
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.05)
        final = c.delete_rule(rule)
        print("deleted", final.id)
''')


class InstalledClients(ClientTestCase):
    PORT = 5201

    def tmp(self):
        d = tempfile.mkdtemp(prefix="lossd-pkg-e2e.")
        self.addCleanup(shutil.rmtree, d, True)
        return d

    def test_1_wheel_script_outside_the_tree(self):
        wheel = os.environ.get("LOSSD_WHEEL")
        self.assertTrue(wheel and os.path.isfile(wheel), "no wheel: LOSSD_WHEEL=%r" % wheel)
        d = self.tmp()
        venv = os.path.join(d, "venv")
        run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv], cwd=d)
        run([os.path.join(venv, "bin", "pip"), "install", "--no-index", "--quiet", wheel], cwd=d)
        py = os.path.join(venv, "bin", "python")
        script = os.path.join(d, "make_rule.py")
        with open(script, "w") as f:
            f.write(SCRIPT)
        go = os.path.join(d, "go")
        env = clean_env()
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        p = subprocess.Popen([py, script, self.d.sock, self.lab.IF_A, str(self.PORT), go], cwd=d,
                             env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: p.poll() is None and (p.kill(), p.wait()))
        self.lab.procs.append(p)
        lines = []
        while True:
            l = p.stdout.readline()
            if not l:
                break
            lines.append(l.rstrip("\n"))
            if l.startswith("effect"):
                break
        self.assertTrue(any(l.startswith("effect") for l in lines),
                        "script stopped early: %s\n%s" % (lines, p.stderr.read() if p.poll() is not None else ""))
        out = dict(l.split(" ", 1) for l in lines)
        site = run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=d).strip()
        self.assertEqual(out["module"], os.path.join(site, "lossd_client", "__init__.py"))
        self.assertEqual(out["stubs"], os.path.join(site, "lossd_client", "_generated"))
        rid = int(out["created"].split()[0])
        self.assertEqual(out["created"], "%d active" % rid)
        self.assertEqual(out["read"], "%d active %s egress %d wheel" % (rid, self.lab.IF_A, self.PORT))
        self.assertEqual(out["effect"], "%d 0.01" % rid)
        # lossctl sees the rule the installed client made
        rules = self.d.ctlj("rule", "ls").get("rules", [])
        mine = [r for r in rules if int(r["id"]) == rid]
        self.assertEqual(len(mine), 1, rules)
        self.assertEqual(mine[0]["spec"].get("labels"), {"client": "wheel"})
        self.assertEqual(mine[0]["spec"].get("interface"), self.lab.IF_A)
        # python3 -m lossd_client from the venv
        st = run([py, "-m", "lossd_client", "status", "--socket", self.d.sock], cwd=d, env=env)
        self.assertIn("serving: yes", st)
        ls = run([py, "-m", "lossd_client", "rules", "--socket", self.d.sock, "--label", "client=wheel"],
                 cwd=d, env=env)
        self.assertEqual(len([l for l in ls.splitlines() if l.strip()]), 1, ls)
        self.assertIn("rule %d" % rid, ls)
        open(go, "w").close()
        rest, err = p.communicate(timeout=60)
        self.assertEqual(p.returncode, 0, err)
        self.assertIn("deleted %d" % rid, rest)
        self.assertEqual(self.d.ctlj("rule", "ls").get("rules", []), [])

    def test_2_cxx_client_from_find_package(self):
        build = os.environ.get("LOSSD_BUILD")
        self.assertTrue(build and os.path.isdir(build), "LOSSD_BUILD=%r" % build)
        d = self.tmp()
        dest, prefix = os.path.join(d, "dest"), "/opt/lossd-e2e"
        env = clean_env()
        env["DESTDIR"] = dest
        run(["cmake", "--install", build, "--prefix", prefix], env=env)
        root = dest + prefix
        launcher = ["-DCMAKE_CXX_COMPILER_LAUNCHER=ccache"] if shutil.which("ccache") else []
        run(["cmake", "-S", os.path.join(HERE, "cxx_client"), "-B", os.path.join(d, "b"),
             "-DCMAKE_PREFIX_PATH=" + root] + launcher)
        run(["cmake", "--build", os.path.join(d, "b")])
        out = run([os.path.join(d, "b", "cxx_client"), self.d.addr, self.lab.IF_A, str(self.PORT + 1)],
                  timeout=60)
        lines = out.splitlines()
        self.assertTrue(lines[0].startswith("version "), out)
        created = [l.split() for l in lines if l.startswith("created ")]
        self.assertEqual(len(created), 1, out)
        rid, state = created[0][1], created[0][2]
        self.assertEqual(state, "RULE_STATE_ACTIVE", out)
        listed = [l.split() for l in lines if l.startswith("listed ")]
        self.assertIn(["listed", rid, self.lab.IF_A, "RULE_STATE_ACTIVE", "dport", str(self.PORT + 1)],
                      listed, out)
        self.assertIn("deleted " + rid, lines, out)
        self.assertEqual(self.d.ctlj("rule", "ls").get("rules", []), [])


if __name__ == "__main__":
    main()
