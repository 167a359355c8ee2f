"""e2e: the state dir (--state-dir) has one owner, and its offload records name an interface
by network namespace and ifindex (issue 10 item 11). Each test failed before the fix.

  test_one_lossd_per_state_dir
      While a one-shot rule holds state dir S, a second one-shot rule and a daemon with S are
      refused (exit 1, stderr naming the holder's pid); `--observe` (which keeps no state)
      still runs with S; once the holder has gone, S is free again. Before: both started,
      and each start "restored" the live holder's offloads (clearing its record).
  test_records_of_another_namespace_are_restored_there
      A --per-segment rule in namespace A is SIGKILLed (gso_max_segs stays 1, the record
      stays). A lossd in namespace B with the same S restores A's interface inside A's
      namespace (the record names it; a cgroup target's devices live in containers'
      namespaces, issue 19) and drops the record; B's own interface is untouched. Before
      issue 10: B tried to restore A's interface by name in B, failed, and deleted the
      record anyway, so A's interface stayed at gso_max_segs 1 for good.
  test_records_follow_the_ifindex
      The SIGKILLed owner's interface is renamed before the next start: that start restores
      it under its new name (the record's ifindex). Before: restored by the old name, which
      no longer existed, and the record was deleted.
  test_full_state_dir_refuses_the_rule (issue 25 item 6)
      The state dir is a full tmpfs: a --per-segment rule is refused (RESOURCE_EXHAUSTED,
      naming the file) and the interface keeps its gso_max_segs. Before: the record writer
      renamed an empty temp file over the records, the rule was created anyway, and after a
      SIGKILL nothing could restore the interface.
  test_invalid_records_are_dropped (issue 25 item 7)
      Records with gso_max_segs 0 or 2^32, junk lines and a 50 MB junk file: none is applied,
      the junk is dropped from the file (so is a record of a namespace that is gone), and a
      start over the 50 MB file is ready and ends on time. Before: gso 0 was applied (the
      interface left at gso_max_segs 0), junk was kept for ever, and the 50 MB file kept a
      daemon from being ready for over 15 s.
"""
import json
import os
import subprocess
import time
import unittest

from lab import config
from lab.config import main
from lab.netns import Lab, measured


RULE = ["--dir", "egress", "--proto", "tcp", "--dport", "5201", "--payload", "only", "--rate", "1%",
        "--per-segment"]


def gso_max_segs(lab, ns, ifname):
    return json.loads(lab.run(ns, "ip", "-d", "-j", "link", "show", "dev", ifname).stdout)[0].get("gso_max_segs")


def brief(lab, ns, sd, iface):
    """A one-shot lossd with state dir sd and a rule that drops nothing on iface, for 1 s
    (its start restores what sd's records say); the finished process."""
    return lab.run(ns, config.LOSSD, "--json", "--state-dir", sd, "--iface", iface, "--proto", "udp",
                   "--dport", "9", "--rate", "0", "--duration", "1s", check=False, timeout=60)


def records(state_dir):
    try:
        with open(os.path.join(state_dir, "offloads")) as f:
            return [l.strip() for l in f if l.strip()]
    except FileNotFoundError:
        return []


class StateDir(unittest.TestCase):
    def test_one_lossd_per_state_dir(self):
        with Lab() as lab:
            holder = lab.lossd(lab.a, ["--iface", lab.IF_A] + RULE)
            sd = holder.state_dir
            rec = records(sd)
            self.assertEqual(len(rec), 1, rec)
            second = brief(lab, lab.a, sd, lab.IF_A)
            sock = os.path.join(lab.tempdir(), "lossd.sock")
            try:
                daemon = lab.run(lab.a, config.LOSSD, "--json", "--state-dir", sd, "--socket", sock,
                                 "--no-observer", check=False, timeout=20)
            except subprocess.TimeoutExpired:  # killed by run()
                self.fail("a daemon started with a state dir another lossd holds (second one-shot: "
                          "exit %d)" % second.returncode)
            observe = lab.run(lab.a, config.LOSSD, "--json", "--state-dir", sd, "--observe",
                              "--duration", "1s", check=False, timeout=120)
            measured("state_dir_lock", holder_pid=holder.pid, second_rc=second.returncode,
                     second_stderr=second.stderr.strip()[-300:], daemon_rc=daemon.returncode,
                     daemon_stderr=daemon.stderr.strip()[-300:], observe_rc=observe.returncode)
            want = "held by lossd pid %d" % holder.pid
            self.assertEqual(second.returncode, 1, second.stderr)
            self.assertIn(want, second.stderr)
            self.assertEqual(daemon.returncode, 1, daemon.stderr)
            self.assertIn(want, daemon.stderr)
            self.assertEqual(observe.returncode, 0, observe.stderr)
            # The holder's state is untouched by all three.
            self.assertEqual(records(sd), rec)
            self.assertEqual(gso_max_segs(lab, lab.a, lab.IF_A), 1)
            holder.stop()
            self.assertEqual(records(sd), [])
            again = brief(lab, lab.a, sd, lab.IF_A)
            self.assertEqual(again.returncode, 0, again.stderr)

    def test_records_of_another_namespace_are_restored_there(self):
        with Lab() as lab:
            segs_before = gso_max_segs(lab, lab.a, lab.IF_A)
            segs_b = gso_max_segs(lab, lab.b, lab.IF_B)
            d = lab.lossd(lab.a, ["--iface", lab.IF_A] + RULE)
            sd = d.state_dir
            d.kill9()
            rec = records(sd)
            self.assertEqual(len(rec), 1, rec)
            self.assertEqual(gso_max_segs(lab, lab.a, lab.IF_A), 1, "SIGKILL cannot restore")
            # Another namespace, same state dir (its own rule on B's interface).
            b = brief(lab, lab.b, sd, lab.IF_B)
            after_b = records(sd)
            measured("state_dir_other_netns", record=rec, after_b=after_b,
                     segs_before=segs_before, segs_after=gso_max_segs(lab, lab.a, lab.IF_A),
                     b_stderr=b.stderr.strip()[-300:])
            self.assertEqual(b.returncode, 0, b.stderr)
            self.assertEqual(gso_max_segs(lab, lab.a, lab.IF_A), segs_before,
                             "B's start did not restore A's interface in A:\n" + b.stderr)
            self.assertEqual(after_b, [], "restored, yet kept:\n" + b.stderr)
            self.assertEqual(gso_max_segs(lab, lab.b, lab.IF_B), segs_b, b.stderr)

    def test_records_follow_the_ifindex(self):
        with Lab() as lab:
            segs_before = gso_max_segs(lab, lab.a, lab.IF_A)
            d = lab.lossd(lab.a, ["--iface", lab.IF_A] + RULE)
            sd = d.state_dir
            d.kill9()
            new = "e2eren"
            lab.run(lab.a, "ip", "link", "set", "dev", lab.IF_A, "down")
            lab.run(lab.a, "ip", "link", "set", "dev", lab.IF_A, "name", new)
            try:
                lab.run(lab.a, "ip", "link", "set", "dev", new, "up")
                self.assertEqual(gso_max_segs(lab, lab.a, new), 1)
                r = brief(lab, lab.a, sd, new)
                segs = gso_max_segs(lab, lab.a, new)
                measured("state_dir_renamed", segs_before=segs_before, segs_after=segs,
                         left=records(sd), stderr=r.stderr.strip()[-300:])
                self.assertEqual(r.returncode, 0, r.stderr)
                self.assertEqual(segs, segs_before, r.stderr)
                self.assertEqual(records(sd), [])
            finally:
                lab.run(lab.a, "ip", "link", "set", "dev", new, "down", check=False)
                lab.run(lab.a, "ip", "link", "set", "dev", new, "name", lab.IF_A, check=False)
                lab.run(lab.a, "ip", "link", "set", "dev", lab.IF_A, "up", check=False)

    def test_full_state_dir_refuses_the_rule(self):
        with Lab() as lab:
            sd = lab.tempdir()
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16k,mode=0700", "tmpfs", sd], check=True)
            try:
                with open(os.path.join(sd, "lock"), "w") as f:  # its page, before the disk fills
                    f.write("0\n")
                fd = os.open(os.path.join(sd, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
                try:
                    while os.write(fd, b"x" * 4096) > 0:
                        pass
                except OSError:  # ENOSPC: full
                    pass
                finally:
                    os.close(fd)
                before = gso_max_segs(lab, lab.a, lab.IF_A)
                r = lab.run(lab.a, config.LOSSD, "--json", "--state-dir", sd, "--iface", lab.IF_A, *RULE,
                            "--duration", "1s", check=False, timeout=60)
                after = gso_max_segs(lab, lab.a, lab.IF_A)
                measured("state_dir_full", rc=r.returncode, stderr=r.stderr.strip()[-300:],
                         segs_before=before, segs_after=after)
                self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
                self.assertIn("RESOURCE_EXHAUSTED", r.stderr)
                self.assertIn(os.path.join(sd, "offloads"), r.stderr)
                self.assertEqual(after, before, "the interface changed without a record")
                self.assertEqual(records(sd), [])
            finally:
                subprocess.run(["umount", sd], check=False)

    def test_invalid_records_are_dropped(self):
        with Lab() as lab:
            sd = lab.tempdir()
            netns_a = os.stat("/run/netns/" + lab.a).st_ino
            ifindex = json.loads(lab.run(lab.a, "ip", "-j", "link", "show", "dev", lab.IF_A).stdout)[0]["ifindex"]
            before = gso_max_segs(lab, lab.a, lab.IF_A)
            other = "%d 7 eth9 1 64" % (netns_a + 1)  # valid, of a namespace that is gone
            lines = ["%d %d %s 1 0" % (netns_a, ifindex, lab.IF_A),            # gso_max_segs 0
                     "%d %d %s 1 4294967296" % (netns_a, ifindex, lab.IF_A),   # wraps to 0
                     "%d %d %s 7 64" % (netns_a, ifindex, lab.IF_A),           # gro 7
                     "%s 1 -5" % lab.IF_A, "hello world", "\x01\x02 3 4 5 6", other]
            with open(os.path.join(sd, "offloads"), "w") as f:
                f.write("\n".join(lines) + "\n")
            r = brief(lab, lab.a, sd, lab.IF_A)
            after = gso_max_segs(lab, lab.a, lab.IF_A)
            left = records(sd)
            measured("state_dir_invalid_records", rc=r.returncode, segs_before=before, segs_after=after,
                     left=left, stderr=r.stderr.strip()[-400:])
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(after, before, "an invalid record was applied")
            self.assertEqual(left, [], "junk kept, or a gone namespace's record")
            self.assertIn("not valid: dropped", r.stderr)
            # 50 MB of junk: read up to 1 MiB, dropped; the start is not held by it.
            with open(os.path.join(sd, "offloads"), "w") as f:
                line = "junk " * 20 + "\n"
                f.write(line * (50_000_000 // len(line)))
            t0 = time.monotonic()
            r = brief(lab, lab.a, sd, lab.IF_A)
            took = time.monotonic() - t0
            measured("state_dir_50mb_junk", rc=r.returncode, secs=round(took, 2), left=len(records(sd)))
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(records(sd), [], "junk kept")
            self.assertIn("only its first", r.stderr)


if __name__ == "__main__":
    main()
