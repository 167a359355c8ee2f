"""The live page's clients: a plain Server-Sent Events reader and a real browser (Debian's
chromium + chromium-driver, driven by python3-selenium), both inside a lab namespace.

lossd's HTTP listener is on the loopback of the daemon's namespace. The SSE reader's socket is
made there (lab.web.in_netns: a thread that entered the namespace creates it).
chromedriver runs inside the namespace too, so Chromium reaches nothing but that namespace
(its loopback and the lab's veth); the test talks to chromedriver through a relay from a
loopback port of the host (Relay). Everything is killed by Lab.close().

    netns_socket(ns, host, port, rcvbuf=None)   a TCP socket connected inside ns
    SseStream(ns, port, path, rcvbuf=None)      GET path; .headers, .status; .read(timeout)
                                                -> [Sse(id, event, data)], .close()
    Relay(lab, ns, port)                        127.0.0.1:relay.port (host) -> ns's port
    Browser(lab, ns)                            headless Chromium in ns; .driver (selenium),
                                                .open(url), .text(css), .wait(fn, t, what),
                                                .screenshot(path)
"""

import json
import os
import re
import socket
import subprocess
import threading
import time

from lab.web import in_netns


def num(text):
    """A count as the page shows it ("12,345"), or None (a dash, empty, anything else)."""
    return int(text.replace(",", "")) if text and re.match(r"^[\d,]+$", text) else None


def netns_socket(ns, host, port, rcvbuf=None, timeout=10):
    """A TCP socket connected to host:port inside ns, usable from any thread. rcvbuf: a small
    receive buffer (set before connecting: it bounds the window) for a slow reader."""
    def make():
        s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
        if rcvbuf:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
        s.settimeout(timeout)
        s.connect((host, port))
        return s
    return in_netns(ns, make)


class Sse:
    def __init__(self, id, event, data):
        self.id, self.event, self.data = id, event, data

    def json(self):
        return json.loads(self.data)

    def __repr__(self):
        return "Sse(%r, %r, %r)" % (self.id, self.event, self.data[:120])


class SseStream:
    """GET path from 127.0.0.1:port in ns over a raw socket (HTTP/1.1, chunked): the status,
    the headers, and the messages parsed strictly (every field line 'name: value', a blank
    line ends a message; comments ':' skipped). A framing error raises."""

    def __init__(self, ns, port, path, rcvbuf=None):
        self.sock = netns_socket(ns, "127.0.0.1", port, rcvbuf=rcvbuf)
        self.sock.sendall(("GET %s HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: text/event-stream\r\n\r\n"
                           % path).encode())
        self.raw = b""      # bytes read, not yet de-chunked
        self.body = b""     # de-chunked, not yet parsed
        self.ended = False
        head = self._until(b"\r\n\r\n", 10)
        lines = head.decode("latin-1").split("\r\n")
        self.status = int(lines[0].split()[1])
        self.headers = {}
        for l in lines[1:]:
            if ":" in l:
                k, v = l.split(":", 1)
                self.headers[k.strip().lower()] = v.strip()
        if self.headers.get("transfer-encoding") != "chunked":
            # an error reply: its body is content-length bytes
            n = int(self.headers.get("content-length", "0"))
            while len(self.raw) < n and self._recv(5):
                pass
            self.error_body = self.raw[:n].decode("utf-8", "replace")

    def _recv(self, timeout):
        self.sock.settimeout(timeout)
        try:
            chunk = self.sock.recv(65536)
        except socket.timeout:
            return False
        if not chunk:
            self.ended = True
            return False
        self.raw += chunk
        return True

    def _until(self, sep, timeout):
        end = time.monotonic() + timeout
        while sep not in self.raw:
            left = end - time.monotonic()
            if left <= 0 or (not self._recv(left) and self.ended):
                raise AssertionError("no %r within %ss: %r" % (sep, timeout, self.raw[:200]))
        head, self.raw = self.raw.split(sep, 1)
        return head

    def _dechunk(self):
        while True:
            i = self.raw.find(b"\r\n")
            if i < 0:
                return
            size = int(self.raw[:i].split(b";")[0], 16)
            if len(self.raw) < i + 2 + size + 2:
                return
            if self.raw[i + 2 + size:i + 4 + size] != b"\r\n":
                raise AssertionError("bad chunk framing: %r" % self.raw[:100])
            self.body += self.raw[i + 2:i + 2 + size]
            self.raw = self.raw[i + 4 + size:]
            if size == 0:
                self.ended = True
                return

    def read(self, timeout=1.0):
        """The messages complete within timeout seconds (reads at least once)."""
        end = time.monotonic() + timeout
        while True:
            self._recv(max(0.0, end - time.monotonic()) or 0.01)
            if time.monotonic() >= end or self.ended:
                break
        self._dechunk()
        out = []
        while b"\n\n" in self.body:
            block, self.body = self.body.split(b"\n\n", 1)
            fields = {}
            for line in block.decode("utf-8").split("\n"):
                if line.startswith(":"):
                    continue
                if ": " not in line:
                    raise AssertionError("SSE line without 'name: value': %r in %r" % (line, block))
                k, v = line.split(": ", 1)
                if k in fields:
                    raise AssertionError("SSE field %r twice in one message: %r" % (k, block))
                fields[k] = v
            if not fields:
                continue
            if set(fields) != {"id", "event", "data"}:
                raise AssertionError("SSE message fields %s, want id, event, data: %r" % (sorted(fields), block))
            out.append(Sse(int(fields["id"]), fields["event"], fields["data"]))
        return out

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass


class Relay:
    """A TCP relay from 127.0.0.1:<self.port> in the host namespace to 127.0.0.1:port inside
    ns (for the test's selenium client to reach chromedriver). Closed by Lab.close()."""

    def __init__(self, lab, ns, port):
        self.ns, self.target = ns, port
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(16)
        self.port = self.srv.getsockname()[1]
        self.closed = False
        self.socks = []
        threading.Thread(target=self._accept, daemon=True).start()
        lab.finalizers.append(self.close)

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            try:
                u = netns_socket(self.ns, "127.0.0.1", self.target)
            except OSError:
                c.close()
                continue
            u.settimeout(None)
            self.socks += [c, u]
            for a, b in ((c, u), (u, c)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    @staticmethod
    def _pump(a, b):
        try:
            while True:
                data = a.recv(65536)
                if not data:
                    break
                b.sendall(data)
        except OSError:
            pass
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def close(self):
        self.closed = True
        for s in [self.srv] + self.socks:
            try:
                s.close()
            except OSError:
                pass


CHROMIUM = "/usr/bin/chromium"
CHROMEDRIVER = "/usr/bin/chromedriver"


class Browser:
    """Headless Chromium inside ns (its chromedriver started there), driven by selenium."""

    def __init__(self, lab, ns, width=1600, height=1500):
        from selenium import webdriver
        self.lab = lab
        port = self._free_port(ns)
        self.profile = lab.tempdir()
        self.proc = lab.popen(ns, [CHROMEDRIVER, "--port=%d" % port, "--allowed-ips=127.0.0.1"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.relay = Relay(lab, ns, port)
        end = time.monotonic() + 20
        while True:
            try:
                netns_socket(ns, "127.0.0.1", port, timeout=1).close()
                break
            except OSError:
                if time.monotonic() > end:
                    raise AssertionError("chromedriver did not listen on %d in %s" % (port, ns))
                time.sleep(0.1)
        opts = webdriver.ChromeOptions()
        opts.binary_location = CHROMIUM
        opts.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        for a in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                  "--window-size=%d,%d" % (width, height), "--user-data-dir=" + self.profile,
                  "--no-first-run", "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--disable-extensions", "--hide-scrollbars",
                  "--force-device-scale-factor=1"):
            opts.add_argument(a)
        self.driver = webdriver.Remote(command_executor="http://127.0.0.1:%d" % self.relay.port,
                                       options=opts)
        lab.finalizers.append(self.close)

    @staticmethod
    def _free_port(ns):
        def pick():
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
            s.close()
            return p
        return in_netns(ns, pick)

    def open(self, url):
        self.driver.get(url)

    def _fresh(self, read):
        """read() again when the page replaced an element while it was read (it re-renders
        its tables each second: a stale element)."""
        from selenium.common.exceptions import StaleElementReferenceException
        for attempt in range(20):
            try:
                return read()
            except StaleElementReferenceException:
                if attempt == 19:
                    raise
                time.sleep(0.05)

    def cells(self, css):
        """Each row css matches as the visible texts of its td cells."""
        from selenium.webdriver.common.by import By
        return self._fresh(lambda: [[c.text for c in tr.find_elements(By.CSS_SELECTOR, "td")]
                                    for tr in self.driver.find_elements(By.CSS_SELECTOR, css)])

    def text(self, css):
        t = self.texts(css)
        return t[0] if t else None

    def texts(self, css):
        """The visible text of every element css matches."""
        from selenium.webdriver.common.by import By
        return self._fresh(lambda: [e.text for e in self.driver.find_elements(By.CSS_SELECTOR, css)])

    def click(self, css):
        from selenium.webdriver.common.by import By
        self.driver.find_element(By.CSS_SELECTOR, css).click()

    def click_row(self, rows_css, needle, what, timeout=10, unless="(closed)"):
        """Clicks the first row of rows_css whose text holds needle (and not `unless`), waiting
        for one: found and clicked in one run of the page's script, since a table that re-sorts
        between a find and a click (the flows table, by retransmits) would give the click to
        another row."""
        js = ("const r = [...document.querySelectorAll(arguments[0])].find(e => "
              "e.textContent.includes(arguments[1]) && !(arguments[2] && e.textContent.includes(arguments[2])));"
              "if (!r) return false; r.click(); return true;")
        return self.wait(lambda: self.driver.execute_script(js, rows_css, needle, unless), timeout, what)

    def wait(self, fn, timeout, what):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            v = fn()
            if v:
                return v
            time.sleep(0.1)
        v = fn()
        if v:
            return v
        raise AssertionError("page: no %s within %ss" % (what, timeout))

    def console_errors(self):
        try:
            return [l for l in self.driver.get_log("browser") if l.get("level") == "SEVERE"]
        except Exception:
            return []

    def screenshot(self, path):
        self.driver.save_screenshot(path)
        return path

    def close(self):
        try:
            self.driver.quit()
        except Exception:
            pass
