#!/usr/bin/python3
"""The bash completion offers only what the programs' --help says they have, and all of it.

    completion_test.py COMPLETIONS_DIR LOSSCTL LOSSD

The completion (dist/tools/cli_help.py, at build time) is read back by sourcing it in
bash and dumping its tables; each command path it knows is then asked for its own
--help, read here with a parser of this test's own (not the generator's):
  - every subcommand offered is listed under that command's "Subcommands:" (CLI11),
    and every subcommand listed there is offered;
  - every option offered appears as an option name on one of that help's option lines,
    and every option name there is offered;
  - every option said to take a value shows a value on its line, and its offered
    values (choices) appear on it;
and bash really completes: `lossctl rule a<TAB>` -> add, `lossctl -o <TAB>` -> table json,
a value after --addr is skipped, `lossd --hoo<TAB>` -> --hook.
"""

import os
import re
import subprocess
import sys
import unittest

DIR = LOSSCTL = LOSSD = None
BIN = None


def bash(script):
    p = subprocess.run(["bash", "--norc", "--noprofile", "-c", script], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=30)
    if p.returncode or p.stderr:
        raise AssertionError("bash failed (%d): %s\n%s" % (p.returncode, p.stderr, script))
    return p.stdout


def tables(prog):
    name = os.path.basename(prog)
    out = {}
    src = os.path.join(DIR, name)
    for t in ("subs", "opts", "args", "choices"):
        text = bash('source "%s"\nfor k in "${!_%s_%s[@]}"; do printf "%%s\\t%%s\\n" "$k" "${_%s_%s[$k]}"; done'
                    % (src, name, t, name, t))
        out[t] = dict(l.split("\t", 1) for l in text.splitlines())
    return out


def complete(prog, words):
    """COMPREPLY for the command line `words` (the last one being completed)."""
    name = os.path.basename(prog)
    arr = " ".join("'%s'" % w.replace("'", "'\\''") for w in words)
    return bash('source "%s"\nCOMP_WORDS=(%s); COMP_CWORD=%d; _%s\nprintf "%%s\\n" "${COMPREPLY[@]}"'
                % (os.path.join(DIR, name), arr, len(words) - 1, name)).split()


def help_of(prog, path):
    env = dict(os.environ)
    env.pop("LOSSD_ADDR", None)
    env["PATH"] = BIN + os.pathsep + env.get("PATH", "")
    p = subprocess.run([os.path.basename(prog)] + path + ["--help"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stdout
    return p.stdout


def option_lines(text):
    """{option name: its line's text before the description} for every line that starts
    with an option (indented, '-' first)."""
    got = {}
    for line in text.splitlines():
        body = line.strip()
        if not line.startswith(" ") or not body.startswith("-"):
            continue
        head = re.split(r"\s{2,}", body)[0]
        for name in re.findall(r"(?:^|[\s,])(--?[A-Za-z0-9][\w-]*)(?=[\s,=]|$)", head):
            got.setdefault(name, body)  # the option table comes first (an epilog may repeat a name)
    return got


def subcommands(text):
    subs, on = [], False
    for line in text.splitlines():
        if not line.startswith(" "):
            on = line.strip() == "Subcommands:"
            continue
        if on and re.match(r"^  \S", line):
            subs += [w.strip() for w in re.split(r"\s{2,}", line.strip())[0].split(",")]
    return subs


class Completion(unittest.TestCase):
    def check_prog(self, prog):
        t = tables(prog)
        name = os.path.basename(prog)
        self.assertIn(name, t["opts"], "no table for %s itself" % name)
        for key in sorted(t["opts"]):
            path = key.split()[1:]
            self.assertEqual(key.split()[0], name)
            with self.subTest(command=key):
                text = help_of(prog, path)
                opts = option_lines(text)
                offered = t["opts"][key].split()
                self.assertEqual(sorted(set(offered)), sorted(opts), "options offered vs --help")
                subs = t["subs"].get(key, "").split()
                self.assertEqual(sorted(subs), sorted(subcommands(text)), "subcommands offered vs --help")
                for s in subs:
                    self.assertIn(key + " " + s, t["opts"], "no table for %s %s" % (key, s))
                for a in t["args"].get(key, "").split():
                    self.assertIn(a, opts, "a value option not in --help")
                    line = re.split(r"\s{2,}", opts[a])[0]
                    self.assertRegex(line, r"%s(?:,\s*--?[\w-]+)*[ =](?:[A-Z]|\{)" % re.escape(a),
                                     "%s takes no value in --help: %r" % (a, line))
                for k, v in t["choices"].items():
                    if k.split("|")[0] != key:
                        continue
                    opt = k.split("|")[1]
                    for c in v.split():
                        self.assertIn(c, opts[opt], "value %r of %s not on its --help line" % (c, opt))
        for k in t["args"]:
            self.assertIn(k, t["opts"])

    def test_lossctl_offers_what_help_says(self):
        self.check_prog(LOSSCTL)

    def test_lossd_offers_what_help_says(self):
        self.check_prog(LOSSD)

    def test_bash_completes(self):
        self.assertEqual(complete(LOSSCTL, ["lossctl", "rule", "a"]), ["add"])
        self.assertEqual(complete(LOSSCTL, ["lossctl", "--addr", "unix:///x", "rule", "l"]), ["ls", "list"])
        self.assertEqual(complete(LOSSCTL, ["lossctl", "-o", ""]), ["table", "json"])
        self.assertIn("--dport", complete(LOSSCTL, ["lossctl", "rule", "add", "--dp"]))
        self.assertEqual(complete(LOSSCTL, ["lossctl", "flow", ""]), ["trace"])
        self.assertIn("--max-samples", complete(LOSSCTL, ["lossctl", "flow", "trace", "--max"]))
        self.assertEqual(complete(LOSSD, ["lossd", "--hoo"]), ["--hook"])
        self.assertEqual(complete(LOSSD, ["lossd", "--hook", ""]), ["auto", "xdp", "tc", "cgroup"])
        self.assertEqual(complete(LOSSD, ["lossd", "--dir", "e"]), ["egress"])
        self.assertEqual(bash('source "%s/lossctl"; complete -p lossctl' % DIR).strip(),
                         "complete -F _lossctl lossctl")


if __name__ == "__main__":
    DIR, LOSSCTL, LOSSD = (os.path.abspath(a) for a in sys.argv[1:4])
    # the programs under their own names (their help shows argv[0])
    import tempfile
    with tempfile.TemporaryDirectory() as BIN:
        for p in (LOSSCTL, LOSSD):
            os.symlink(p, os.path.join(BIN, os.path.basename(p)))
        unittest.main(argv=[sys.argv[0]] + sys.argv[4:], verbosity=2)
