"""Client e2e: one JSON shape for a rule. Every accepted rule shape of the rule parsers'
test vectors (tests/vectors/rule_parsers.json: each flag as a user types it, on the base
rule) goes `lossctl rule add FLAGS` -> `lossctl -o json rule get ID` -> `lossctl rule add
--file` (the get's output, as printed) and lists identical: `-o json rule ls` shows the
re-added rules with the originals' specs, field for field. `rule ls`'s own output replays
too ({"rules": [...]}), and a bare spec (its "spec" alone). A vector the daemon refuses at the
first `rule add` (an XDP program on this veth, a TTL below its floor...) has nothing to replay:
counted, and the refusals must stay few.
"""
import json
import os
import shutil
import tempfile

from lab import config
from lab.config import main
from lab.netns import measured
from lab.clients import ClientTestCase

VECTORS = os.path.join(os.path.dirname(__file__), "..", "..", "vectors", "rule_parsers.json")
TTL = "10m"
CHUNK = 24


def flag(name):
    return "--" + name.replace("_", "-")


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
                if v["flag"] in ("rate", "ge", "every", "first"):
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
                    if not 0 < int(before[old]["spec"]["ttl_ns"]) < 60e9:  # (a short TTL expires meanwhile)
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


if __name__ == "__main__":
    main()
