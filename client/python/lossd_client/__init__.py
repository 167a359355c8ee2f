"""lossd_client: a Python client for lossd's gRPC API (lossd.v1).

    from lossd_client import Client
    with Client() as c:                           # unix:///run/lossd/lossd.sock
        rule = c.add_rule(iface="eth0", dport=8080, rate="1%", ttl="30s")
        for ev in c.watch_retransmits(rule=rule):
            ...

The generated modules (lossd_pb2, lossd_pb2_grpc) are found through the
stubs= argument, $LOSSD_PYTHON_STUBS (<build>/python) or an importable
lossd.v1 package. Everything except Client works without them.
"""

from ._stubs import ENV_VAR as STUBS_ENV_VAR, StubsNotFound, load_stubs
from .client import DEFAULT_SOCKET, DEFAULT_TARGET, Client, Stream, normalize_target
from .errors import LossdError, LossdInputError
from .spec import Filter, Spec, event_filter, rule_spec
from .types import (Aggregate, Capabilities, Counters, CountersUpdate, DropLink, Flow,
                    FlowUpdate, Gap, Health, HookAvailability, LossModel, Match, RetransmitEvent,
                    Rule, RuleEffect, StallEvent, TraceDrop, TraceFlow, TraceSample, Tuple,
                    Version)
from .units import (format_duration, format_rate, parse_duration, parse_ports, parse_rate,
                    wilson_interval)

__all__ = [
    "Client", "Stream", "LossdError", "LossdInputError", "StubsNotFound", "load_stubs",
    "STUBS_ENV_VAR", "DEFAULT_SOCKET", "DEFAULT_TARGET", "normalize_target",
    "rule_spec", "Spec", "event_filter", "Filter",
    "Rule", "RuleEffect", "Counters", "Match", "LossModel", "CountersUpdate",
    "RetransmitEvent", "Gap", "Flow", "FlowUpdate", "Aggregate", "Tuple",
    "StallEvent", "DropLink", "TraceSample", "TraceDrop", "TraceFlow",
    "Capabilities", "HookAvailability", "Health", "Version",
    "parse_rate", "format_rate", "parse_duration", "format_duration", "parse_ports",
    "wilson_interval",
]
