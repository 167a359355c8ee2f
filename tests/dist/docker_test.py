"""dist/docker/Dockerfile, checked without a container engine (there is none on these machines:
the image has never been built here). What it checks, against this machine's Debian 12:

  - every package either stage installs is in the apt cache (apt-cache show), and the build
    stage's are among the Makefile's DEPS (`make deps` is what builds lossd here);
  - the runtime stage installs exactly the libraries dpkg-shlibdeps derives from the built lossd
    (as `make package` does for the .deb), less those debian:12-slim has, plus libjs-chart.js,
    which holds the file the live page serves (daemon/live/live.h's default path; dpkg -S);
  - the binary copied from the build stage is this build's lossd (its path in the build tree),
    and the ENTRYPOINT runs it where it was copied;
  - every flag of the CMD and of the DaemonSet's args is one `lossd --help` lists, and the
    DaemonSet does not replace the ENTRYPOINT (no `command:`);
  - the tag of the `docker build` line in the Dockerfile and in docs/dashboards.md is the
    DaemonSet's image and lossd:<the project's version>.

Not checked: that the build stage configures and builds (nothing runs it), or that the image
starts. Exit 77 (skipped) off Debian 12, whose apt cache would not be the image's.

    /usr/bin/python3 tests/dist/docker_test.py --repo . --lossd build/daemon/lossd \\
        --build-dir build --version 0.1.0
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile

import yaml

SLIM_HAS = {"libc6", "libgcc-s1", "libstdc++6"}   # debian:12-slim (apt needs them)
ALSO_AT_RUNTIME = {"libjs-chart.js"}                # read at run time, not linked
BUILD_CMD = re.compile(r"docker build -f dist/docker/Dockerfile -t (\S+) \.")

failures = []


def check(ok, what, detail=""):
    print("%s: %s%s" % ("ok" if ok else "FAIL", what, (" (%s)" % detail) if detail and not ok else ""))
    if not ok:
        failures.append(what)


def instructions(path):
    """[(stage index, INSTRUCTION, argument text)], continuation lines joined, comments dropped."""
    out, cur, stage = [], "", -1
    with open(path) as f:
        for line in f:
            s = line.rstrip("\n")
            if not cur and (not s.strip() or s.lstrip().startswith("#")):
                continue
            if s.endswith("\\"):
                cur += s[:-1] + " "
                continue
            cur += s
            word, _, rest = cur.strip().partition(" ")
            if word.upper() == "FROM":
                stage += 1
            out.append((stage, word.upper(), rest.strip()))
            cur = ""
    return out


def apt_packages(run_arg):
    """The packages of an `apt-get install ...` in a RUN, up to the next && or ;."""
    for part in re.split(r"&&|;", run_arg):
        words = shlex.split(part)
        if "apt-get" in words and "install" in words:
            return [w for w in words[words.index("install") + 1:] if not w.startswith("-")]
    return []


def makefile_deps(path):
    text = open(path).read().replace("\\\n", " ")
    m = re.search(r"^DEPS\s*:=(.*)$", text, re.M)
    return set(m.group(1).split())


def shlibdeps(binary):
    """Package names of dpkg-shlibdeps's Depends for binary (what CPack's DEB generator runs)."""
    with tempfile.TemporaryDirectory() as d:
        os.mkdir(os.path.join(d, "debian"))
        with open(os.path.join(d, "debian", "control"), "w") as f:
            f.write("Source: lossd\n\nPackage: lossd\nArchitecture: any\n")
        r = subprocess.run(["dpkg-shlibdeps", "-O", os.path.abspath(binary)], cwd=d, text=True,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=True)
    line = [x for x in r.stdout.splitlines() if x.startswith("shlibs:Depends=")][0]
    return {re.split(r"[\s(]", dep.strip())[0] for dep in line.split("=", 1)[1].split(",")}


def help_flags(lossd):
    out = subprocess.run([lossd, "--help"], text=True, stdout=subprocess.PIPE, check=True).stdout
    return set(re.findall(r"(?<![\w-])(--[a-z0-9][a-z0-9-]*)", out))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repo", required=True)
    ap.add_argument("--lossd", required=True, help="the built lossd ($<TARGET_FILE:lossd>)")
    ap.add_argument("--build-dir", required=True)
    ap.add_argument("--version", required=True)
    a = ap.parse_args()
    osr = open("/etc/os-release").read()
    if not re.search(r'^ID=debian$', osr, re.M) or not re.search(r'^VERSION_ID="12"$', osr, re.M):
        print("skipped: not Debian 12 (the image's packages are checked against this machine's apt cache)")
        return 77
    dockerfile = os.path.join(a.repo, "dist", "docker", "Dockerfile")
    ins = instructions(dockerfile)
    froms = [arg for _, i, arg in ins if i == "FROM"]
    check(froms == ["debian:12 AS build", "debian:12-slim"], "two stages: debian:12 (build), debian:12-slim",
          froms)
    pkgs = {0: [], 1: []}
    for stage, i, arg in ins:
        if i == "RUN":
            pkgs[stage] += apt_packages(arg)
    build, runtime = pkgs[0], pkgs[1]

    r = subprocess.run(["apt-cache", "show", "--no-all-versions"] + build + runtime, text=True,
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    known = set(re.findall(r"^Package: (\S+)$", r.stdout, re.M))
    for p in build + runtime:
        check(p in known, "apt-cache show %s" % p)
    deps = makefile_deps(os.path.join(a.repo, "Makefile"))
    check(set(build) <= deps, "the build stage's packages are among the Makefile's DEPS",
          sorted(set(build) - deps))

    linked = shlibdeps(a.lossd)
    want = (linked - SLIM_HAS) | ALSO_AT_RUNTIME
    check(set(runtime) == want, "the runtime stage's packages are dpkg-shlibdeps of lossd, less "
          "debian:12-slim's, plus libjs-chart.js", "missing %s, not needed %s" % (
              sorted(want - set(runtime)), sorted(set(runtime) - want)))
    live_h = open(os.path.join(a.repo, "daemon", "live", "live.h")).read()
    chart = re.search(r'chart_js\s*=\s*"([^"]+)"', live_h).group(1)
    owner = subprocess.run(["dpkg", "-S", chart], text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    check(owner.returncode == 0 and owner.stdout.split(":")[0] in ALSO_AT_RUNTIME,
          "the live page's %s is libjs-chart.js's" % chart, owner.stdout + owner.stderr)

    workdir = [arg for s, i, arg in ins if i == "WORKDIR" and s == 0][-1]
    copies = [arg.split() for s, i, arg in ins if i == "COPY" and s == 1]
    check(len(copies) == 1 and copies[0][0] == "--from=build", "one COPY --from=build", copies)
    src, dest = copies[0][1], copies[0][2]
    in_tree = os.path.relpath(os.path.abspath(a.lossd), os.path.abspath(a.build_dir))
    check(src == os.path.join(workdir, "build", in_tree), "the COPY's source is the build's lossd (%s)" % in_tree,
          src)
    entry = json.loads([arg for s, i, arg in ins if i == "ENTRYPOINT"][-1])
    cmd = json.loads([arg for s, i, arg in ins if i == "CMD"][-1])
    check(entry == [dest], "ENTRYPOINT runs the copied lossd", entry)

    with open(os.path.join(a.repo, "dist", "kubernetes", "lossd-daemonset.yaml")) as f:
        ds = [d for d in yaml.safe_load_all(f) if d and d["kind"] == "DaemonSet"][0]
    c = ds["spec"]["template"]["spec"]["containers"][0]
    check("command" not in c, "the DaemonSet keeps the image's ENTRYPOINT (no command:)")
    flags = help_flags(a.lossd)
    for arg in cmd + c["args"]:
        name = arg.split("=", 1)[0]
        check(name in flags, "lossd --help lists %s" % name)

    tag = "lossd:" + a.version
    check(c["image"] == tag, "the DaemonSet's image is %s" % tag, c["image"])
    for doc in (dockerfile, os.path.join(a.repo, "docs", "dashboards.md")):
        tags = BUILD_CMD.findall(open(doc).read())
        check(tags == [tag], "%s: `docker build -f dist/docker/Dockerfile -t %s .`" % (
            os.path.relpath(doc, a.repo), tag), tags)
    print("not checked: the build stage's build, the image's start (no container engine here)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
