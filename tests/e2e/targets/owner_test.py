"""Who it was: retransmit events and flows carry the socket's owner by name (issue 14).

Two paced TCP senders in namespace A, one in a docker container's cgroup (systemd driver
layout: <top>/system.slice/docker-ID.scope) and one in a systemd unit's
(<top>/system.slice/<tag>-api.service), both through a rule on A's egress that drops 10 % of
their data skbs (of ~45 segments: about 12 drops per sender), so each retransmits. Every
event (and flow) of each carries CgroupOwner: the path below the cgroup v2 mount, and the container id with its runtime or
the unit; streams filtered by container prefix, by unit and by cgroup path get exactly that
sender's events. The daemon resolves the names from the cgroup id, in user space.
"""
import binascii
import os

from lab import daemon, traffic, web
from lab.config import main
from lab.daemon import DaemonTestCase, events_of
from lab.netns import cgroup2_mount, measured


class Owners(DaemonTestCase):
    daemon_nsenter = True

    def test_events_and_flows_name_the_owner(self):
        lab = self.lab
        top = lab.make_cgroup()
        tag = os.path.basename(top)
        cid = binascii.hexlify(os.urandom(32)).decode()
        unit = tag + "-api.service"
        ccg = lab.sub_cgroup(top, "system.slice", "docker-%s.scope" % cid)
        ucg = lab.sub_cgroup(top, "system.slice", unit)
        rel = lambda p: p[len(cgroup2_mount()):]
        port = 5301
        self.egress_rule(lo=port, rate=0.1)  # of skbs of ~45 segments: ~12 events per sender
        every = self.watch("all")
        by_container = self.watch("container", allow=[self.pb.EventFilter(container=cid[:10])])
        by_unit = self.watch("unit", allow=[self.pb.EventFilter(unit=tag + "-api")])  # .service implied
        by_path = self.watch("path", allow=[self.pb.EventFilter(cgroup=rel(ccg))])
        traffic.tcp_flow(lab, lab.b, lab.a, lab.V4_B, port=port, mbytes=8, rate_mbit=200, cgroup=ccg)
        traffic.tcp_flow(lab, lab.b, lab.a, lab.V4_B, port=port, mbytes=8, rate_mbit=200, cgroup=ucg)
        mine = lambda ms: [e for e in events_of(ms) if e.tuple.remote_port == port]
        ev = every.wait_for(lambda ms: {e.owner.path for e in mine(ms)} >= {rel(ccg), rel(ucg)}, 20,
                            "events of both senders")
        owners = {}
        for e in mine(ev):
            owners.setdefault(e.owner.path, []).append(e)
        c_ev, u_ev = owners[rel(ccg)], owners[rel(ucg)]
        for e in c_ev:
            self.assertEqual((e.owner.container, e.owner.runtime, e.owner.unit, e.owner.pod),
                             (cid, "docker", "docker-%s.scope" % cid, ""), e)
            self.assertEqual(e.cgroup_id, os.stat(ccg).st_ino)
        for e in u_ev:
            self.assertEqual((e.owner.unit, e.owner.container), (unit, ""), e)
        self.assertEqual(set(owners), {rel(ccg), rel(ucg)}, "events of other sockets: %s" % set(owners))
        n_c = by_container.wait_for(lambda ms: len(mine(ms)) >= len(c_ev), 10, "container events")
        n_u = by_unit.wait_for(lambda ms: len(mine(ms)) >= len(u_ev), 10, "unit events")
        n_p = by_path.wait_for(lambda ms: len(mine(ms)) >= len(c_ev), 10, "path events")
        self.assertEqual({e.owner.path for e in events_of(n_c)}, {rel(ccg)})
        self.assertEqual({e.owner.path for e in events_of(n_u)}, {rel(ucg)})
        self.assertEqual({e.owner.path for e in events_of(n_p)}, {rel(ccg)})
        self.assertEqual(len(mine(n_c)), len(c_ev))
        self.assertEqual(len(mine(n_u)), len(u_ev))
        # Flows: an open one in the unit, another in the container; ListFlows by unit.
        held = [traffic.TcpFlow(lab, lab.b, lab.a, lab.V4_B, p, 1_000_000, 100, hold=True, cgroup=cg)
                for p, cg in ((port + 1, ucg), (port + 2, ccg))]
        try:
            for h in held:
                h.wait_sent()
            flows = self.d.obs.ListFlows(self.pb.ListFlowsRequest(filter=[self.pb.EventFilter(unit=unit)]),
                                         timeout=10).flows
            every_flow = self.d.obs.ListFlows(self.pb.ListFlowsRequest(), timeout=10).flows
        finally:
            for h in held:
                h.release()
        self.assertEqual({(f.tuple.remote_port, f.owner.unit) for f in flows}, {(port + 1, unit)})
        theirs = [f for f in every_flow if f.tuple.remote_port == port + 2]
        self.assertTrue(theirs, "the container's flow is listed")
        self.assertEqual({(f.owner.container, f.owner.runtime) for f in theirs}, {(cid, "docker")})
        # Prometheus gets the owner on per-rule series only: a rule by unit and one by
        # container, their lossd_rule_info labels.
        by_u = self.d.create(unit=unit, direction="egress", protocol="udp", dport=9, rate=0.0)
        by_c = self.d.create(container=cid[:12], direction="egress", protocol="udp", dport=9, rate=0.0)
        text = web.request(lab.a, "127.0.0.1", self.d.http_port, "/metrics").body.decode()
        info = lambda rid: [l for l in text.splitlines() if l.startswith('lossd_rule_info{rule="%d"' % rid)]
        self.assertEqual(len(info(by_u.id)), 1, text[:2000])
        self.assertIn('cgroup="%s"' % rel(ucg), info(by_u.id)[0])
        self.assertIn('unit="%s"' % unit, info(by_u.id)[0])
        self.assertNotIn("container=", info(by_u.id)[0])
        self.assertIn('container="%s"' % cid, info(by_c.id)[0])
        self.assertNotIn("remote_port", text)  # no per-flow labels by default
        measured("owners_on_events", container_events=len(c_ev), unit_events=len(u_ev),
                 unit_flows=len(flows), container_owner=str(c_ev[0].owner).replace("\n", " "),
                 rule_info=info(by_u.id) + info(by_c.id))


if __name__ == "__main__":
    main()
