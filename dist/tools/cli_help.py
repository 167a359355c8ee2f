#!/usr/bin/python3
"""What a program's own --help says, as data: its (sub)commands and their options.

The man pages' COMMANDS section and the bash completion are generated from it at
build time (dist/CMakeLists.txt), so neither can offer what the programs do not
have; tests/package/completion_test.py holds the completion to the same --help.

    cli_help.py tree PROG                  JSON: {"path": [...], "options": [...], ...}
    cli_help.py completion OUT PROG...     a bash completion script for each PROG
    cli_help.py man-commands OUT PROG      a help2man include file: [COMMANDS] (every subcommand's --help)

PROG is run by path; its commands are named by its file name. Both CLI11's help
(lossd, lossctl) and argparse's (lossctl sweep, lossctl flow trace: the Python
client) are read: an option line starts with '-' and its names end at two
spaces; CLI11 lists subcommands under "Subcommands:", a name (", alias") then two spaces.
"""

import json
import os
import re
import subprocess
import sys

OPT_NAME = re.compile(r"^--?[A-Za-z0-9][A-Za-z0-9_-]*$")
CHOICES = re.compile(r"\{([^{}]*)\}")


def run_help(prog, path):
    env = dict(os.environ)
    env.pop("LOSSD_ADDR", None)
    p = subprocess.run([prog] + path + ["--help"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, env=env, timeout=60)
    if p.returncode != 0:
        raise SystemExit("%s %s --help exited %d:\n%s" % (prog, " ".join(path), p.returncode, p.stdout))
    return p.stdout


def described_choices(desc):
    """CLI11 descriptions that list the values: "auto (default) | xdp | tc | cgroup"."""
    words = [re.sub(r"\([^)]*\)", "", w).strip() for w in desc.split("|")]
    if len(words) < 2 or not all(re.match(r"^[A-Za-z0-9][\w-]*$", w) for w in words):
        return []
    return [w for w in words if not re.match(r"^\d+-\d+$", w)]  # a range (0-255) is not a value


def parse_help(text):
    """(options, subcommands): options as [{"names": [...], "arg": bool, "choices": [...]}],
    subcommands as [[name, alias...]] (CLI11's "Subcommands:" section only)."""
    options, subs = [], []
    section = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if not line.startswith(" "):
            section = line.strip().rstrip(":").lower()
            continue
        body = line.strip()
        if section == "subcommands":
            if len(line) - len(line.lstrip()) != 2:
                continue  # a wrapped description
            head = re.split(r"\s{2,}", body)[0]
            subs.append([n.strip() for n in head.split(",") if n.strip()])
            continue
        if not body.startswith("-"):
            continue
        head, desc = (re.split(r"\s{2,}", body, maxsplit=1) + [""])[:2]
        names, arg, choices = [], False, []
        m = CHOICES.search(head)  # {a,b}: CLI11's TEXT:{a,b}, argparse's {a,b}
        if m:
            choices = [c for c in m.group(1).split(",") if c]
            head = head[:m.start()] + "CHOICE" + head[m.end():]
        for part in re.split(r"[,\s]+", head):
            if not part:
                continue
            if OPT_NAME.match(part):
                names.append(part)
            elif part.startswith("-") and "=" in part and OPT_NAME.match(part.split("=")[0]):
                names.append(part.split("=")[0])  # argparse: --opt=VALUE
                arg = True
            else:
                arg = True  # TEXT, UINT, FILE, CHOICE, TEXT:CHOICE=default, ...
        if arg and not choices:
            choices = described_choices(desc)
        if names:
            options.append({"names": names, "arg": arg, "choices": choices})
    return options, subs


def tree(prog, path=None):
    """Every command of prog, depth first: [{"path": [...], "aliases": [...], "options": [...],
    "subcommands": [...], "help": text}]."""
    path = path or []
    text = run_help(prog, path)
    options, subs = parse_help(text)
    node = {"path": path, "options": options, "subcommands": subs, "help": text}
    out = [node]
    for names in subs:
        for child in tree(prog, path + [names[0]]):
            if len(child["path"]) == len(path) + 1:
                child["aliases"] = names[1:]
            out.append(child)
    return out


# ---- bash completion -----------------------------------------------------------------

def sh_quote(s):
    return "'" + s.replace("'", "'\\''") + "'"


def completion(prog):
    name = os.path.basename(prog)
    fn = "_" + re.sub(r"[^A-Za-z0-9_]", "_", name)
    nodes = tree(prog)
    subs, opts, args = {}, {}, {}
    choices = {}
    for n in nodes:
        # keys: the command path, the program's name first (bash has no empty key)
        keys = [" ".join([name] + n["path"])]
        for a in n.get("aliases", []):
            keys.append(" ".join([name] + n["path"][:-1] + [a]))
        sub_words = [w for names in n["subcommands"] for w in names]
        opt_words = [w for o in n["options"] for w in o["names"]]
        arg_words = [w for o in n["options"] if o["arg"] for w in o["names"]]
        for k in keys:
            subs[k] = " ".join(sub_words)
            opts[k] = " ".join(opt_words)
            args[k] = " ".join(arg_words)
            for o in n["options"]:
                if o["choices"]:
                    for w in o["names"]:
                        choices[k + "|" + w] = " ".join(o["choices"])
    # A global option (the root's) is accepted before the command only: CLI11 does not
    # pass them down, so the completion offers the current command's own.
    lines = [
        "# bash completion for %s: generated at build time from `%s --help` (and every" % (name, name),
        "# subcommand's) by dist/tools/cli_help.py; tests/package/completion_test.py holds it to them.",
        "# Do not edit: it is rebuilt from the program.",
    ]

    def table(var, d):
        lines.append("declare -gA %s=(" % var)
        for k in sorted(d):
            lines.append("  [%s]=%s" % (sh_quote(k), sh_quote(d[k])))
        lines.append(")")

    table(fn + "_subs", subs)
    table(fn + "_opts", opts)
    table(fn + "_args", args)
    table(fn + "_choices", choices)
    lines += [
        "%s() {" % fn,
        "  local cur=${COMP_WORDS[COMP_CWORD]} prev= path=%s i w skip=0" % name,
        "  (( COMP_CWORD > 0 )) && prev=${COMP_WORDS[COMP_CWORD-1]}",
        "  # the command path: words that name a subcommand of the path so far;",
        "  # an option's value is skipped",
        "  for (( i = 1; i < COMP_CWORD; i++ )); do",
        "    w=${COMP_WORDS[i]}",
        "    if (( skip )); then skip=0; continue; fi",
        "    case $w in",
        "      --*=*) continue ;;",
        "      -*) [[ \" ${%s_args[$path]} \" == *\" $w \"* ]] && skip=1; continue ;;" % fn,
        "    esac",
        "    if [[ \" ${%s_subs[$path]} \" == *\" $w \"* ]]; then path=\"$path $w\"; fi" % fn,
        "  done",
        "  if [[ $prev == -* && \" ${%s_args[$path]} \" == *\" $prev \"* ]]; then" % fn,
        "    local c=${%s_choices[$path|$prev]}" % fn,
        "    if [[ -n $c ]]; then COMPREPLY=($(compgen -W \"$c\" -- \"$cur\"));",
        "    else COMPREPLY=($(compgen -f -- \"$cur\")); compopt -o filenames 2>/dev/null; fi",
        "    return 0",
        "  fi",
        "  if [[ $cur == -* ]]; then",
        "    COMPREPLY=($(compgen -W \"${%s_opts[$path]}\" -- \"$cur\"))" % fn,
        "  else",
        "    COMPREPLY=($(compgen -W \"${%s_subs[$path]}\" -- \"$cur\"))" % fn,
        "    [[ -z ${%s_subs[$path]} ]] && { COMPREPLY=($(compgen -f -- \"$cur\")); compopt -o filenames 2>/dev/null; }" % fn,
        "  fi",
        "  return 0",
        "}",
        "complete -F %s %s" % (fn, name),
    ]
    return "\n".join(lines) + "\n"


# ---- man page: every subcommand's help -----------------------------------------------

def roff(s):
    s = s.replace("\\", "\\e").replace("-", "\\-")
    return ("\\&" + s) if s[:1] in (".", "'") else s


def man_commands(prog):
    name = os.path.basename(prog)
    nodes = [n for n in tree(prog) if n["path"]]
    if not nodes:
        return ""
    root = run_help(prog, []).rstrip("\n").splitlines()
    out = ["[COMMANDS]",
           "Each command's own help (%s COMMAND \\-\\-help), as this version prints it." % roff(name)]
    for n in nodes:
        lines = n["help"].rstrip("\n").splitlines()
        common = 0  # the footer every command repeats (values, exit codes): once, above
        while common < min(len(lines), len(root)) and lines[-1 - common] == root[-1 - common]:
            common += 1
        if common > 1:
            lines = lines[:-common]
        title = " ".join([name] + n["path"])
        if n.get("aliases"):
            title += " (also: %s)" % ", ".join(n["aliases"])
        out.append(".SS %s" % roff(title))
        out.append(".nf")
        for l in lines:
            out.append(roff(l))
        out.append(".fi")
    return "\n".join(out) + "\n"


def write(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv):
    if len(argv) >= 2 and argv[0] == "tree":
        json.dump(tree(argv[1]), sys.stdout, indent=1)
        return 0
    if len(argv) >= 3 and argv[0] == "completion":
        os.makedirs(argv[1], exist_ok=True)
        for prog in argv[2:]:
            write(os.path.join(argv[1], os.path.basename(prog)), completion(prog))
        return 0
    if len(argv) == 3 and argv[0] == "man-commands":
        write(argv[1], man_commands(argv[2]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
