"""The lossd end-to-end lab (stdlib only, plus grpcio for lab.daemon): what every e2e suite
(tests/e2e/*/) and every benchmark (bench/) uses. Found through PYTHONPATH=tests/e2e, which
ctest and bench/run_all.sh set (tests/e2e/README.md: running a script by hand).

  lab.config    the binaries under test (--lossd, --lossctl, --stubs) and main(), the entry
                point of every e2e script (exit 77 without root)
  lab.netns     Lab: unique namespaces, veth pairs, documentation addresses, cgroups, temp
                dirs, processes inside; cleanup on exit, failure and signals; stale-lab reaping
  lab.stats     kernel counters (/proc/net/snmp, netstat, snmp6 of a namespace), the binomial
                interval, /proc CPU times and fdinfo
  lab.lossd     Lossd: a lossd process (one-shot or --observe) and its JSON lines; Output
  lab.traffic   TCP and UDP traffic (the tcpflow.py and udpflow.py tools run inside namespaces)
  lab.daemon    Daemon: `lossd --socket` with gRPC stubs; rule specs, stream readers, the
                DaemonTestCase base class
  lab.clients   ClientDaemon (the daemon seen through lossctl), client processes, lossctl output
  lab.observer  the observer's exact relations with the kernel (reconcile, observe)
  lab.web       HTTP clients inside a namespace (a thread that entered it opens the socket)
  lab.prom      a real Prometheus and node_exporter inside lab namespaces; promtool
"""
