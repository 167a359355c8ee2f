"""The shared parser vectors (tests/vectors/rule_parsers.json) through
rule_spec(); tests/unit/rule_vectors_test.cc runs the same file through
lossd's flag builder, so the Python and C++ parsers cannot drift."""

import ipaddress
import json
import os
import unittest

import support  # noqa: F401  (sys.path)
from lossd_client import LossdInputError, rule_spec
from lossd_client.spec import MARKOV_KEYS, PROTOCOL_NUMBERS, TCP_FLAGS, action_name, short_name

VECTORS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "tests", "vectors",
                       "rule_parsers.json")
MODELS = ("rate", "ge", "every", "first", "ramp", "markov", "police")


def value_of(spec, flag):
    """What the spec holds for `flag`, in the vectors' form ("values" in the file)."""
    loss, match = spec["loss"], spec.get("match", {})
    if flag == "rate":
        return loss["bernoulli"]["rate"]
    if flag == "ge":
        g = loss["gilbert_elliott"]
        return [g["p"], g["r"], g["bad_loss"], g["good_loss"]]
    if flag == "markov":
        return [loss["markov"][k] for k in MARKOV_KEYS]
    if flag == "police":
        return [loss["police"]["rate_bps"], loss["police"]["burst_bytes"], loss["police"].get("per_flow", False)]
    if flag == "action":
        return action_name(spec.get("action", "ACTION_DROP"))
    if flag in ("every", "first"):
        return loss["every_nth" if flag == "every" else "first_k"]
    if flag == "seed":
        return loss.get("seed", 0)
    if flag == "priority":
        return spec.get("priority", 0)
    if flag == "ttl":
        return spec.get("ttl_ns", 0)
    sched = spec.get("schedule", {})
    if flag == "start_after":
        return sched.get("start_after_ns", 0)
    if flag == "pulse":
        return [sched["active_ns"], sched["dormant_ns"]]
    if flag == "pulse_cycles":
        return sched["cycles"]
    if flag == "ramp":
        return [[st["rate"], st["duration_ns"]] for st in loss["ramp"]["steps"]]
    if flag == "guard":
        g = spec.get("guard", {})
        return [g.get(k, 0) for k in ("stall_ns", "rtos", "rtos_window_ns", "resends", "resends_window_ns",
                                      "resets", "resets_window_ns", "watch_port", "retrans",
                                      "retrans_window_ns")] + [g.get("misbehaves", False),
                                                               g.get("stall_cause", "")[12:].lower()]
    if flag in ("sport", "dport"):
        pr = match.get(flag, {"lo": 0, "hi": 65535})
        return [pr["lo"], pr["hi"]]
    if flag in ("src", "dst"):
        return str(ipaddress.ip_network(match[flag]))
    if flag == "proto":
        p = match.get("protocol", "")
        return PROTOCOL_NUMBERS[p] if p in PROTOCOL_NUMBERS else int(p or 0)
    if flag == "family":
        return match.get("family", 0)
    if flag == "tcp_flags":
        mask = value = 0
        for f in filter(None, match["tcp_flags"].split(",")):
            bit = 1 << TCP_FLAGS.index(f.lstrip("!"))
            mask |= bit
            value |= 0 if f.startswith("!") else bit
        return [mask, value]
    if flag == "hook":
        return short_name(spec["hook"], "HOOK_")
    if flag == "dir":
        return short_name(spec["direction"], "DIRECTION_")
    if flag == "payload":
        return short_name(match.get("payload", "PAYLOAD_ANY"), "PAYLOAD_")
    raise KeyError(flag)


class VectorsTest(unittest.TestCase):
    def test_both_parsers_agree(self):
        with open(VECTORS, encoding="utf-8") as fh:
            doc = json.load(fh)
        names = doc["python_names"]
        self.assertGreater(len(doc["vectors"]), 100)
        for v in doc["vectors"]:
            flag = v["flag"]
            with self.subTest(flag=flag, input=v["input"]):
                kw = dict(doc["base"])
                if flag in MODELS:
                    del kw["rate"]
                kw.update({names.get(k, k): val for k, val in v.get("with", {}).items()})
                kw[names.get(flag, flag)] = v["input"]
                if "value" in v:
                    self.assertEqual(value_of(rule_spec(**kw), flag), v["value"])
                else:
                    with self.assertRaises(LossdInputError) as cm:
                        rule_spec(**kw)
                    msg = str(cm.exception)
                    self.assertIn(v["error"], msg)
                    self.assertIn(names.get(flag, flag), msg)


if __name__ == "__main__":
    unittest.main()
