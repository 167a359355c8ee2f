#!/usr/bin/python3
"""Python's http.server (HTTP/1.0, a thread per connection) with a chosen TCP congestion
control: the listening socket gets TCP_CONGESTION, which every accepted connection inherits.

  http_server.py --bind ADDR --port P --directory DIR [--cc cubic]

Needs CAP_NET_ADMIN for a congestion control outside net.ipv4.tcp_allowed_congestion_control.
Prints READY once listening.
"""
import argparse
import functools
import http.server
import socket
import sys


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bind", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--directory", required=True)
    ap.add_argument("--cc", default=None, help="e.g. cubic, bbr, reno (default: the namespace's)")
    a = ap.parse_args()

    class Server(http.server.ThreadingHTTPServer):
        def server_bind(self):
            if a.cc:
                self.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, a.cc.encode())
            super().server_bind()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    srv = Server((a.bind, a.port), functools.partial(Quiet, directory=a.directory))
    print("READY", flush=True)
    srv.serve_forever()


if __name__ == "__main__":
    sys.exit(main())
