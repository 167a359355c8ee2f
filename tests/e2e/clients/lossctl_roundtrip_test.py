"""Client e2e: one JSON shape for a rule. Every accepted rule shape of the rule parsers'
test vectors (tests/vectors/rule_parsers.json: each flag as a user types it, on the base
rule) goes `lossctl rule add FLAGS` -> `lossctl -o json rule get ID` -> `lossctl rule add
--file` (the get's output, as printed) and lists identical: `-o json rule ls` shows the
re-added rules with the originals' specs, field for field. `rule ls`'s own output replays
too ({"rules": [...]}), and a bare spec (its "spec" alone). A vector the daemon refuses at the
first `rule add` (an XDP program on this veth, a TTL below its floor...) has nothing to replay:
counted, and the refusals must stay few.

test_one_shot_speaks_the_api_json: one-shot `lossd --json --observe --events` with a rule, beside
the daemon in the same namespace, under a lossy TCP flow. Every line is read with the lossd.v1
types (the lab's json_format parse: an unknown name or enum spelling fails); the ready line's
rule replays through `lossctl rule add --file` as printed (the same spec); a retransmit item
has exactly the fields, at every level, of the event `lossctl -o json watch` prints for the
same flow; the final line's counters are the rule's.
"""
import json
import os
import shutil
import subprocess
import tempfile

from lab import config, traffic
from lab.config import main
from lab.netns import measured
from lab.clients import ClientTestCase, client_popen
from lab.lossd import type_name

VECTORS = os.path.join(os.path.dirname(__file__), "..", "..", "vectors", "rule_parsers.json")
TTL = "10m"
CHUNK = 24


def flag(name):
    return "--" + name.replace("_", "-")


def fields(obj):
    """The field names of a JSON value at every level (lists: their first element's)."""
    if isinstance(obj, dict):
        return {k: fields(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [fields(obj[0])] if obj else []
    return None


# The vectors' model flags: each replaces the base rule's rate (the vectors' "how").
MODEL_FLAGS = ("rate", "ge", "every", "first", "ramp", "markov", "police")


class LossctlRoundTrip(ClientTestCase):
    daemon_ns = "b"
    daemon_nsenter = True  # the cgroup vector's target is a real cgroup of the host's tree
    daemon_args = ["--max-rules", "1000"]

    def test_vectors_round_trip(self):
        d, lab = self.d, self.lab
        with open(VECTORS) as f:
            doc = json.load(f)
        cg = lab.make_cgroup()
        tmp = tempfile.mkdtemp(prefix="lossd-e2e-roundtrip-")
        self.addCleanup(shutil.rmtree, tmp, True)
        path = os.path.join(tmp, "rules.jsonl")
        vectors = [v for v in doc["vectors"] if "error" not in v]
        replayed, refused = 0, []
        # In groups (the originals and their copies at once stay within the rule lists' room).
        for i in range(0, len(vectors), CHUNK):
            added = []
            for v in vectors[i:i + CHUNK]:
                flags = {**doc["base"], "iface": lab.IF_B}
                if v["flag"] in MODEL_FLAGS:
                    flags.pop("rate")
                flags[v["flag"]] = v["input"]
                for k, val in v.get("with", {}).items():
                    flags[k] = cg if k == "cgroup" else val
                flags.setdefault("ttl", TTL)
                args = [a for k, val in flags.items() for a in (flag(k), str(val))]
                r = d.ctl("-o", "json", "rule", "add", *args)
                if r.rc != 0:
                    refused.append((v["flag"], v["input"], r.err.strip()))
                    continue
                added.append((v, r.json()["id"]))
            if not added:  # every vector of the chunk refused (counted above)
                continue
            # Each rule as `-o json rule get` prints it, replayed as printed (JSON lines).
            printed = [d.ctl_ok("-o", "json", "rule", "get", rid).out.strip() for _, rid in added]
            before = {r["id"]: r for r in d.ctlj("rule", "ls")["rules"]}
            with open(path, "w") as f:
                f.write("\n".join(printed) + "\n")
            res = d.ctlj("rule", "add", "--file", path)
            new_ids = [r["id"] for r in res["rules"]]
            self.assertEqual(len(new_ids), len(added), res)
            after = {r["id"]: r for r in d.ctlj("rule", "ls")["rules"]}
            for (v, old), new in zip(added, new_ids):
                with self.subTest(flag=v["flag"], input=v["input"]):
                    self.assertEqual(after[new]["spec"], before[old]["spec"])
                    # A rule that ends on its own (a short TTL, a pulse's last cycle, a ramp's
                    # last step) may have ended meanwhile, its copy not yet.
                    spec = before[old]["spec"]
                    ends = 0 < int(spec["ttl_ns"]) < 60e9 or "cycles" in spec.get("schedule", {}) or \
                        "ramp" in spec.get("loss", {})
                    if not ends:
                        self.assertEqual(after[new]["state"], before[old]["state"])
                        self.assertEqual(after[new]["attachments"], before[old]["attachments"])
            replayed += len(added)
            for rid in new_ids:
                d.ctl_ok("rule", "rm", rid)
            if i == 0:
                # `rule ls`'s output as a whole, and a spec alone.
                with open(path, "w") as f:
                    f.write(d.ctl_ok("-o", "json", "rule", "ls").out)
                res = d.ctlj("rule", "add", "--file", path)
                self.assertEqual(len(res["rules"]), len(added))
                again = {r["id"]: r for r in d.ctlj("rule", "ls")["rules"]}
                for (_, old), new in zip(added, [r["id"] for r in res["rules"]]):
                    self.assertEqual(again[new]["spec"], before[old]["spec"])
                for r in res["rules"]:
                    d.ctl_ok("rule", "rm", r["id"])
                spec = before[added[0][1]]["spec"]
                res = d.ctlj("rule", "add", "--file", "-", stdin=json.dumps(spec))
                self.assertEqual(d.ctlj("rule", "get", res["rules"][0]["id"])["spec"], spec)
            d.ctl_ok("rule", "clear")
        # What this daemon refuses in a lab of its own (XDP on a veth, ...): few.
        self.assertLessEqual(len(refused), 15, refused)
        self.assertGreater(replayed, 120)
        measured("rule_json_round_trip", vectors=len(vectors), replayed=replayed,
                 refused_at_first_add=len(refused), refusals=sorted({e for _, _, e in refused})[:5])


    def test_one_shot_speaks_the_api_json(self):
        d, lab = self.d, self.lab
        port = 5307
        # The daemon's stream of the flow's retransmissions, started before the flow.
        watch = client_popen(lab, d.ctl_cmd("-o", "json", "watch", "--count", "1", "--port", port),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        one = lab.lossd(lab.b, ["--observe", "--events", "--iface", lab.IF_B, "--dir", "egress", "--proto",
                                "tcp", "--dport", str(port), "--payload", "only", "--rate", "3%",
                                "--interval", "300ms"], nsenter=True)
        traffic.tcp_flow(lab, lab.a, lab.b, lab.V4_A, port=port, mbytes=20, rate_mbit=200)
        out_w, err_w = watch.communicate(timeout=60)
        final = one.stop()
        out = one.output()  # every line parsed as the API's messages
        self.assertEqual(out.bad_lines, [])
        self.assertTrue(out.retransmits, out.summary())
        # The ready line's rule, replayed as printed.
        tmp = tempfile.mkdtemp(prefix="lossd-e2e-oneshot-")
        self.addCleanup(shutil.rmtree, tmp, True)
        path = os.path.join(tmp, "rule.json")
        with open(path, "w") as f:
            json.dump(one.ready["rule"], f)
        res = d.ctlj("rule", "add", "--file", path)
        got = d.ctlj("rule", "get", res["rules"][0]["id"])
        want = dict(one.ready["rule"]["spec"])
        for spec in (want, got["spec"]):
            spec.pop("ttl_ns", None)  # unset in the one-shot's: the daemon's default TTL applies
        self.assertEqual(got["spec"], want)
        self.assertEqual(got["attachments"], one.ready["rule"]["attachments"])
        d.ctl_ok("rule", "rm", got["id"])
        # An event's fields, as the daemon's stream prints them.
        lines = [json.loads(l) for l in out_w.splitlines() if l.strip()]
        ev = [l["event"] for l in lines if "event" in l]
        self.assertTrue(ev, "lossctl watch printed no event: %s %s" % (out_w, err_w))
        mine = [e for e in one.events if e.get("event") == "retransmit"]
        self.assertEqual(fields(mine[0]), {"event": None, "seq": None, "retransmit": fields(ev[0])})
        self.assertEqual({type_name(e) for e in out.retransmits} - {"fast", "rto", "loss", "tlp"}, set())
        # The final counters are the rule's, in the API's names.
        self.assertGreater(final["dropped_segments"], 0, final)
        self.assertEqual(final["state"], "RULE_STATE_DELETED", final)  # removed at the exit, kept
        measured("one_shot_api_json", retransmit_items=len(out.retransmits), closed=len(out.closes),
                 dropped_segments=final["dropped_segments"], lines=len(one.events))


if __name__ == "__main__":
    main()
