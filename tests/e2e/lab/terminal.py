"""A program on a real terminal: tmux (Debian's) with a server of its own, for the terminal
views (`lossctl top`). The server's socket is in a Lab temp dir; Lab.close() kills the server
(and the program with it), whatever happened.

    Tmux(lab, cmd, width=160, height=48)   cmd running in a detached session of that size
        .capture()        the screen as text (capture-pane -p), one string
        .capture(escapes=True)   with its bold/reverse attributes as escape codes (-e)
        .send(*keys)      keys as tmux send-keys names them ("q", "s", "C-c")
        .dead()           None while cmd runs, else its exit status (-N: killed by signal N)
        .wait_exit(t)     its exit status, within t seconds (AssertionError otherwise)
        .wait_screen(pred, t, what)   the first capture for which pred(text) is true
"""

import os
import shlex
import subprocess
import time


class Tmux:
    def __init__(self, lab, cmd, width=160, height=48, env=None):
        self.lab = lab
        self.sock = os.path.join(lab.tempdir(), "tmux.sock")
        self.env = dict(os.environ, TERM="xterm-256color")
        self.env.pop("TMUX", None)
        self.env.update(env or {})
        line = " ".join(shlex.quote(str(c)) for c in cmd)
        self._tmux("new-session", "-d", "-s", "t", "-x", str(width), "-y", str(height), line)
        lab.finalizers.append(self.close)
        # keep the pane (and its exit status) after the program ends
        self._tmux("set-option", "-t", "t", "remain-on-exit", "on")

    def _tmux(self, *args, check=True):
        r = subprocess.run(["tmux", "-S", self.sock] + list(args), env=self.env, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        if check and r.returncode != 0:
            raise AssertionError("tmux %s: exit %d: %s" % (" ".join(args), r.returncode, r.stderr))
        return r.stdout

    def capture(self, escapes=False):
        return self._tmux("capture-pane", "-p", "-t", "t", *(["-e"] if escapes else []))

    def send(self, *keys):
        self._tmux("send-keys", "-t", "t", *keys)

    def dead(self):
        out = self._tmux("display-message", "-p", "-t", "t",
                         "#{pane_dead}:#{pane_dead_status}:#{pane_dead_signal}").strip().split(":")
        if out[0] != "1":
            return None
        return int(out[1]) if out[1] else -int(out[2] or 0)

    def wait_exit(self, timeout=10):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            st = self.dead()
            if st is not None:
                return st
            time.sleep(0.05)
        raise AssertionError("the program under tmux did not exit within %ss; screen:\n%s"
                             % (timeout, self.capture()))

    def wait_screen(self, pred, timeout, what="screen"):
        end = time.monotonic() + timeout
        text = ""
        while time.monotonic() < end:
            text = self.capture()
            if pred(text):
                return text
            time.sleep(0.2)
        raise AssertionError("no %s within %ss; last screen:\n%s" % (what, timeout, text))

    def close(self):
        if os.path.exists(self.sock):
            self._tmux("kill-server", check=False)


def screen_html(text, title="terminal"):
    """A capture (capture(escapes=True)) as an HTML page: white on a dark terminal background,
    monospace, bold where the program drew bold (other attributes dropped). A browser
    screenshot of it is a picture of the terminal (docs, artifacts)."""
    import html
    import re
    out, bold = [], False
    for part in re.split(r"(\x1b\[[0-9;]*m)", text):
        if part.startswith("\x1b["):
            codes = part[2:-1].split(";") if part[2:-1] else ["0"]
            want = bold
            for c in codes:
                if c == "1":
                    want = True
                elif c in ("0", "22", ""):
                    want = False
            if want != bold:
                out.append("<b>" if want else "</b>")
                bold = want
            continue
        out.append(html.escape(part))
    if bold:
        out.append("</b>")
    return ("<!doctype html><meta charset='utf-8'><title>%s</title><style>body{margin:0;background:#1e1e1e}"
            "pre{margin:0;padding:12px 14px;color:#d4d4d4;font:13px/1.35 'DejaVu Sans Mono',monospace}"
            "b{color:#ffffff}</style><pre>%s</pre>" % (html.escape(title), "".join(out)))
