#!/usr/bin/env python3
"""The systemd recipe (deploy/systemd/README.md) gives every worker and every shard its own
index: run without systemd, on fake roots, as the recipe says.

1. `meson install` the build (argument 1) into a DESTDIR, copied to one fake root per host.
2. On each root, run the README's `sh` blocks marked `<!-- recipe: ... -->` with bash, as
   written except: /etc/ps is the root's, `doc=` names the root's doc directory, `cluster=`
   is this test's (ipc sockets in the temp dir, two workers), the per-host variables
   (`shards=`, `gpus=`, `first=`) are set per host, EDITOR adds a short CPU job to
   WORKER_FLAGS, and `systemctl` only records what it was asked.
3. `systemd-analyze verify --root` on the installed units of the roots (skipped without it).
4. Renders every unit instance the recipe enabled from the installed unit, as systemd would:
   specifiers (%i, %S, %C, ...), Environment=, the EnvironmentFile= files in order (their
   quoting; a missing required one stops the unit), ExecStart with `$VAR` split at
   whitespace and `${VAR}` as one piece; paths are taken inside the fake root.
5. Runs them: psd@0 (host ps0) and psd@1 (host ps1) until READY=1 on a NOTIFY_SOCKET, then
   worker@0 and worker@1 (host gpu0, CPU). They must come up as index 0 (the chief) and
   index 1, one each (two chiefs fail at once), both exit 0, only the chief writes the
   summary, and both shards greet both workers. Then SIGTERM to the shards: exit 0.
6. A second GPU host (`first=2`) renders --index 2 and 3; worker@2 on gpu0 and psd@0 on ps1
   have no file and must not start.
Every wait has a deadline; every process is in its own group, killed at exit, and gets
PS_PARENT_PID; the temp dir is removed. Exit 0 ok, 1 failed.
"""
import glob
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

SANITIZED = os.environ.get("PS_SANITIZED") == "1"
READY_S = 90 if SANITIZED else 30  # a psd from start to READY=1
TRAIN_S = 300 if SANITIZED else 120  # both workers from start to exit
# The admin's edit of worker.env (step 2): a short job on the CPU, flags after the unit's.
JOB_FLAGS = ("--device cpu --epochs 1 --max-steps 6 --max-train 768 --max-test 256 "
             "--timeout 60")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class Fail(Exception):
    pass


class NotStarted(Exception):
    """systemd would not start the unit (what it would log)."""


def check(cond, what):
    """Raises Fail(what) unless cond."""
    if not cond:
        raise Fail(what)


# ---- the README's blocks -------------------------------------------------------------------

def recipe_blocks(readme):
    """{name: text} of the fenced sh blocks that follow a `<!-- recipe: NAME (...) -->`."""
    text = open(readme).read()
    found = re.findall(r"<!-- recipe: ([\w ]+?)(?: \(.*?\))? -->\n```sh\n(.*?)\n```", text, re.S)
    blocks = dict(found)
    check(len(blocks) == len(found), f"{readme}: two recipe blocks of one name")
    for name in ("cluster", "psd host", "gpu host"):
        check(name in blocks, f"{readme}: no '<!-- recipe: {name} -->' sh block")
    return blocks


def set_var(block, name, value):
    """block with its one `name=...` line set to value (the admin's choice for this host)."""
    pat = re.compile(r"^%s=.*$" % re.escape(name), re.M)
    check(len(pat.findall(block)) == 1, f"the recipe block has not exactly one '{name}=' line")
    return pat.sub(lambda _: f"{name}={shlex.quote(value)}", block)


def run_recipe(blocks, root, tmp, settings, block_name):
    """Runs the cluster block and block_name for one host in root; returns the systemctl calls
    (one string each)."""
    script = ""
    for name in ("cluster", block_name):
        b = blocks[name]
        for var, value in settings.items():
            if re.search(r"^%s=" % re.escape(var), b, re.M):
                b = set_var(b, var, value)
        script += b.replace("/etc/ps", root + "/etc/ps") + "\n"
    log = os.path.join(root, "systemctl.calls")
    prelude = ("set -eu\n"
               "systemctl() { printf '%s\\n' \"$*\" >>\"$SYSTEMCTL_CALLS\"; }\n")
    editor = os.path.join(tmp, "editor.sh")
    env = {"PATH": os.environ.get("PATH", DEFAULT_PATH), "EDITOR": editor,
           "SYSTEMCTL_CALLS": log}
    r = subprocess.run(["bash", "-c", prelude + script], env=env, capture_output=True,
                       text=True, timeout=60)
    check(r.returncode == 0, f"the recipe ({block_name}) failed in {root}: {r.stderr.strip()}")
    return open(log).read().splitlines() if os.path.exists(log) else []


def enabled_units(calls):
    """The units of the recorded `systemctl enable --now UNIT...` calls, in order."""
    units = []
    for c in calls:
        w = c.split()
        if w[:2] == ["enable", "--now"]:
            units += w[2:]
    return units


# ---- systemd's rules -----------------------------------------------------------------------

def read_unit(path):
    """[(section, key, value)] of a unit file (comments dropped, continuation lines joined)."""
    out, section, pending = [], None, ""
    for raw in open(path).read().splitlines():
        line = pending + raw.strip()
        pending = ""
        if not line or line[0] in "#;":
            continue
        if line.endswith("\\"):
            pending = line[:-1] + " "
            continue
        if line.startswith("["):
            section = line.strip("[]")
            continue
        key, sep, value = line.partition("=")
        check(sep, f"{path}: not KEY=VALUE: {line}")
        out.append((section, key.strip(), value.strip()))
    return out


def specifiers(s, unit, root):
    """systemd.unit(5)'s specifiers for a system unit; %S and %C inside root."""
    inst = unit.split("@", 1)[1].rsplit(".", 1)[0] if "@" in unit else ""
    table = {"i": inst, "I": inst, "n": unit, "N": unit.rsplit(".", 1)[0],
             "p": unit.split("@", 1)[0], "S": root + "/var/lib", "C": root + "/var/cache",
             "%": "%"}

    def one(m):
        check(m.group(1) in table, f"{unit}: specifier %{m.group(1)} not known to this test")
        return table[m.group(1)]
    return re.sub(r"%(.)", one, s)


def parse_env_file(path):
    """The variables of a systemd EnvironmentFile (systemd's env-file.c: # and ; comments,
    '...' literal, "..." with \\ before " \\ ` $ and newline, unquoted values with trailing
    blanks cut and \\ escaping the next character, \\ at a line's end continuing it)."""
    text = open(path).read() + "\n"
    out, state, key, value, keep = {}, "pre_key", "", "", 0

    def emit():
        k = key.strip()
        check(re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", k), f"{path}: bad variable name '{k}'")
        out[k] = value[:keep]
    for c in text:
        if state == "pre_key":
            if c in "#;":
                state = "comment"
            elif not c.isspace():
                state, key = "key", c
        elif state == "key":
            if c == "\n":
                raise Fail(f"{path}: a line without '=': {key}")
            elif c == "=":
                state, value, keep = "pre_value", "", 0
            else:
                key += c
        elif state == "pre_value":
            if c == "\n":
                emit()
                state = "pre_key"
            elif c == "'":
                state = "single"
            elif c == '"':
                state = "double"
            elif c == "\\":
                state = "value_escape"
            elif not c.isspace():
                state, value, keep = "value", c, 1
        elif state == "value":
            if c == "\n":
                value = value[:keep]
                emit()
                state = "pre_key"
            elif c == "\\":
                state = "value_escape"
            elif c == "'":
                state = "single"
            elif c == '"':
                state = "double"
            else:
                value += c
                if not c.isspace():
                    keep = len(value)
        elif state == "value_escape":
            state = "value"
            if c != "\n":
                value += c
                keep = len(value)
        elif state == "single":
            if c == "'":
                state, keep = "value", len(value)
            else:
                value += c
        elif state == "double":
            if c == '"':
                state, keep = "value", len(value)
            elif c == "\\":
                state = "double_escape"
            else:
                value += c
        elif state == "double_escape":
            state = "double"
            if c in '"\\`$':
                value += c
            elif c != "\n":
                value += "\\" + c
        elif state == "comment":
            if c == "\\":
                state = "comment_escape"
            elif c == "\n":
                state = "pre_key"
        elif state == "comment_escape":
            state = "comment"
    check(state in ("pre_key", "comment"), f"{path}: ends inside a quoted value")
    return out


def expand_exec(words, env, unit):
    """ExecStart's words after systemd's variable expansion: a word `$NAME` is the value split
    at whitespace (none when unset or empty); `${NAME}` in a word is the value as it is; `$$`
    is `$`; any other `$` stays."""
    argv = []
    for w in words:
        if w.startswith("$") and not w.startswith("${") and not w.startswith("$$"):
            argv += env.get(w[1:], "").split()
            continue

        def one(m):
            return "$" if m.group(0) == "$$" else env.get(m.group(1), "")
        argv.append(re.sub(r"\$\$|\$\{([A-Za-z_][A-Za-z0-9_]*)\}", one, w))
    return argv


def render(root, unit):
    """What systemd would run for unit (e.g. worker@0.service) from the installed unit file in
    root: {argv, env, cwd, notify, watchdog_usec}; NotStarted when it would refuse."""
    template = re.sub(r"@[^.]*\.", "@.", unit)
    paths = glob.glob(os.path.join(root, "**", "systemd", "system", template), recursive=True)
    check(len(paths) == 1, f"{root}: {template} installed {len(paths)} times")
    service = [(k, v) for s, k, v in read_unit(paths[0]) if s == "Service"]
    env, files, exec_start, cwd, info = {}, [], None, root, {"notify": False, "watchdog_usec": 0}
    for key, value in service:
        value = specifiers(value, unit, root)
        if key == "Environment":
            for word in shlex.split(value):
                k, sep, v = word.partition("=")
                check(sep, f"{unit}: Environment={word}")
                env[k] = v
        elif key == "EnvironmentFile":
            files.append(value)
        elif key == "ExecStart":
            check(exec_start is None, f"{unit}: two ExecStart=")
            check(value[:1] not in "-@:+!", f"{unit}: ExecStart prefixes not known to this test")
            exec_start = value
        elif key == "WorkingDirectory":
            cwd = value
        elif key in ("StateDirectory", "CacheDirectory"):
            base = root + ("/var/lib/" if key == "StateDirectory" else "/var/cache/")
            os.makedirs(base + value, exist_ok=True)
            env["STATE_DIRECTORY" if key == "StateDirectory" else "CACHE_DIRECTORY"] = base + value
        elif key == "Type":
            info["notify"] = value == "notify"
        elif key == "WatchdogSec":
            info["watchdog_usec"] = int(value) * 1000000
    check(exec_start, f"{unit}: no ExecStart=")
    # EnvironmentFile= beats Environment=; later files beat earlier ones, variable by variable
    for f in files:
        optional = f.startswith("-")
        path = root + f.lstrip("-")
        if not os.path.exists(path):
            if optional:
                continue
            raise NotStarted(f"{unit}: Failed to load environment files: {f} is missing")
        env.update(parse_env_file(path))
    argv = expand_exec(shlex.split(exec_start), env, unit)
    check(argv[0].startswith("/"), f"{unit}: ExecStart is not an absolute path: {argv[0]}")
    check(os.access(root + argv[0], os.X_OK), f"{unit}: {argv[0]} is not installed in {root}")
    argv[0] = root + argv[0]
    return dict(info, argv=argv, env=env, cwd=cwd)


def systemd_analyze_verify(root, units):
    analyze = shutil.which("systemd-analyze")
    if not analyze:
        print("skipped: systemd-analyze verify (not installed; Debian: apt-get install systemd)")
        return
    # the targets and slices the units are ordered against, from this machine's systemd
    host = "/lib/systemd/system" if os.path.exists("/lib/systemd/system/sysinit.target") \
        else "/usr/lib/systemd/system"
    dest = os.path.join(root, "usr", "lib", "systemd", "system")
    os.makedirs(dest, exist_ok=True)
    for f in glob.glob(host + "/*.target") + glob.glob(host + "/*.slice"):
        if not os.path.exists(os.path.join(dest, os.path.basename(f))):
            shutil.copy(f, dest)
    env = dict(os.environ, SYSTEMD_LOG_LEVEL="info", SYSTEMD_LOG_COLOR="0")
    r = subprocess.run([analyze, "verify", "--man=no", "--root=" + root] + units, env=env,
                       capture_output=True, text=True, timeout=60)
    said = (r.stdout + r.stderr).strip()
    check(r.returncode == 0 and not said,
          f"systemd-analyze verify --root={root} {' '.join(units)}: exit {r.returncode}: {said}")
    print(f"ok: systemd-analyze verify --root: {' '.join(units)}")


# ---- processes -----------------------------------------------------------------------------

class Procs:
    """Every process this test starts: each in its own group, killed at exit."""

    def __init__(self):
        self.all = []

    def start(self, r, log, extra):
        """Starts the rendered unit r (render()) with extra variables, output to log; returns
        its Popen, whose .log is log."""
        env = {"PATH": DEFAULT_PATH}
        env.update(r["env"])
        env.update(extra)
        for k, v in os.environ.items():  # the sanitizers' settings from meson test
            if re.match(r"(ASAN|UBSAN|LSAN)_OPTIONS$|MALLOC_PERTURB_$", k):
                env[k] = v
        env["PS_PARENT_PID"] = str(os.getpid())
        with open(log, "w") as out:
            p = subprocess.Popen(r["argv"], env=env, cwd=r["cwd"], stdin=subprocess.DEVNULL,
                                 stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        p.log = log
        self.all.append(p)
        return p

    def kill_all(self):
        """SIGTERM to every group still running, SIGKILL to any left after 10 s; reaps all."""
        for p in self.all:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGTERM)
                except ProcessLookupError:
                    pass
        deadline = time.monotonic() + 10
        for p in self.all:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait(10)


def tail(path, n=25):
    """The last n lines of a log, for a failure message."""
    try:
        return "".join(open(path, errors="replace").readlines()[-n:])
    except OSError:
        return "(no log)\n"


def wait_ready(p, sock, unit):
    """The STATUS= text of psd's READY=1 within READY_S; Fail when it exits or is late."""
    deadline = time.monotonic() + READY_S
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise Fail(f"{unit} exited {p.returncode} before READY=1:\n{tail(p.log)}")
        sock.settimeout(0.2)
        try:
            msg = sock.recv(4096).decode()
        except socket.timeout:
            continue
        fields = dict(line.partition("=")[::2] for line in msg.splitlines())
        if fields.get("READY") == "1":
            return fields.get("STATUS", "")
    raise Fail(f"{unit}: no READY=1 within {READY_S} s:\n{tail(p.log)}")


TAG = re.compile(r"^\d\d:\d\d:\d\d\.\d+ (chief|worker\[(\d+)\]) ", re.M)


def who(log):
    """The index a psworker's log lines give it (its tag: "chief" is 0), or None yet."""
    try:
        m = TAG.search(open(log, errors="replace").read())
    except OSError:
        return None
    return None if not m else (0 if m.group(1) == "chief" else int(m.group(2)))


def run_workers(procs, roots, libdir, units):
    """Starts units on roots (host, unit) and waits for them to exit; returns {unit: index}."""
    started = {}
    for host, unit in units:
        r = render(roots[host], unit)
        started[unit] = procs.start(r, os.path.join(roots[host], unit + ".log"),
                                    {"LD_LIBRARY_PATH": roots[host] + libdir})
    deadline = time.monotonic() + TRAIN_S
    index = {}
    while time.monotonic() < deadline:
        for unit, p in started.items():
            if unit not in index and who(p.log) is not None:
                index[unit] = who(p.log)
        if len(index) == len(started):
            got = sorted(index.values())
            check(got == sorted(set(got)),
                  "two workers with one index: " + ", ".join(f"{u} is index {i}"
                                                             for u, i in index.items()))
        if all(p.poll() is not None for p in started.values()):
            break
        time.sleep(0.1)
    for unit, p in started.items():
        check(p.poll() is not None, f"{unit} still running after {TRAIN_S} s:\n{tail(p.log)}")
        check(p.returncode == 0, f"{unit} exited {p.returncode}:\n{tail(p.log)}")
        check(unit in index, f"{unit}: no log line names its index:\n{tail(p.log)}")
    return index


# ---- the test ------------------------------------------------------------------------------

def main(build, tmp):
    src = os.environ.get("PS_SOURCE_ROOT") or os.path.dirname(os.path.dirname(
        os.path.dirname(os.path.abspath(__file__))))
    blocks = recipe_blocks(os.path.join(src, "deploy", "systemd", "README.md"))
    t0 = time.monotonic()

    # 1. the install, one fake root per host
    image = os.path.join(tmp, "image")
    r = subprocess.run(["meson", "install", "-C", build, "--no-rebuild", "--quiet",
                        "--destdir", image], capture_output=True, text=True, timeout=120)
    check(r.returncode == 0, f"meson install --destdir failed: {r.stdout}{r.stderr}")
    docs = glob.glob(os.path.join(image, "**", "doc", "ps", "systemd", "worker.env.example"),
                     recursive=True)
    check(len(docs) == 1, "worker.env.example is not installed (once) under share/doc/ps/systemd")
    doc = os.path.dirname(docs[0])[len(image):]
    libps = glob.glob(os.path.join(image, "**", "libps.so.0"), recursive=True)
    check(len(libps) == 1, "libps.so.0 is not installed (once)")
    libdir = os.path.dirname(libps[0])[len(image):]
    roots = {}
    for host in ("ps0", "ps1", "gpu0", "gpu1"):
        roots[host] = os.path.join(tmp, host)
        shutil.copytree(image, roots[host], symlinks=True)
    print(f"ok: installed into {len(roots)} fake roots (docs in {doc})")

    # 2. the recipe on each host
    with open(os.path.join(tmp, "editor.sh"), "w") as f:
        f.write("#!/bin/sh\n# the admin's edit: a short job on the CPU\n"
                f"exec sed -i 's/^WORKER_FLAGS=.*/& {JOB_FLAGS}/' \"$@\"\n")
    os.chmod(os.path.join(tmp, "editor.sh"), 0o755)
    cluster = json.dumps({"ps": [f"ipc://{tmp}/ps0.sock", f"ipc://{tmp}/ps1.sock"],
                          "worker": ["gpu0:2230", "gpu0:2231"]})
    host_settings = {"ps0": ("psd host", {"shards": "0"}),
                     "ps1": ("psd host", {"shards": "1"}),
                     "gpu0": ("gpu host", {"gpus": "0 1", "first": "0"}),
                     "gpu1": ("gpu host", {"gpus": "0 1", "first": "2"})}
    enabled = {}
    for host, (block, settings) in host_settings.items():
        settings = dict(settings, doc=roots[host] + doc, cluster=cluster)
        calls = run_recipe(blocks, roots[host], tmp, settings, block)
        check("daemon-reload" in calls, f"{host}: the recipe did not run systemctl daemon-reload")
        enabled[host] = enabled_units(calls)
    check(enabled["ps0"] == ["psd@0"] and enabled["ps1"] == ["psd@1"],
          f"the psd hosts enabled {enabled['ps0']} and {enabled['ps1']}")
    check(enabled["gpu0"] == ["worker@0", "worker@1"] == enabled["gpu1"],
          f"the GPU hosts enabled {enabled['gpu0']} and {enabled['gpu1']}")
    for host in ("ps0", "ps1", "gpu0"):
        for f in sorted(os.listdir(roots[host] + "/etc/ps")):
            print(f"  {host}:/etc/ps/{f}: " + " | ".join(
                line for line in open(f"{roots[host]}/etc/ps/{f}").read().splitlines()
                if line and not line.startswith("#")))

    # 3. the installed units
    systemd_analyze_verify(roots["gpu0"], ["worker@0.service", "worker@1.service"])
    systemd_analyze_verify(roots["ps0"], ["psd@0.service"])

    # 4. the instances as systemd would start them
    rendered = {}
    for host in ("ps0", "ps1", "gpu0", "gpu1"):
        for u in enabled[host]:
            rendered[host, u] = render(roots[host], u + ".service")
            print(f"  {host}: {u}: " + " ".join(shlex.quote(a) for a in rendered[host, u]["argv"]))
    for host in ("gpu0", "gpu1"):
        tf = json.loads(rendered[host, "worker@0"]["env"]["TF_CONFIG"])
        check("task" not in tf, f"{host}: worker.env's TF_CONFIG names a task: {tf.get('task')}")
        for g, want in ((0, 0), (1, 1)) if host == "gpu0" else ((0, 2), (1, 3)):
            argv = rendered[host, f"worker@{g}"]["argv"]
            got = [int(argv[i + 1]) for i, a in enumerate(argv[:-1]) if a == "--index"]
            check(got[-1:] == [want], f"{host}: worker@{g} gets --index {got}, not {want}")
            check(rendered[host, f"worker@{g}"]["env"].get("CUDA_VISIBLE_DEVICES") == str(g),
                  f"{host}: worker@{g} does not see GPU {g} alone")
    for host, i in (("ps0", 0), ("ps1", 1)):
        r = rendered[host, f"psd@{i}"]
        check(json.loads(r["env"]["TF_CONFIG"])["task"] == {"type": "ps", "index": i},
              f"{host}: psd@{i}'s TF_CONFIG task is not ps {i}")
        check(r["argv"][-2:] == ["--shard", str(i)], f"{host}: psd@{i} does not end --shard {i}")
    for host, unit in (("gpu0", "worker@2.service"), ("ps1", "psd@0.service")):
        try:
            render(roots[host], unit)
            raise Fail(f"{host}: {unit} would start, though the recipe did not set it up")
        except NotStarted as e:
            print(f"ok: {host}: {unit} does not start ({e})")
    print("ok: rendered: gpu0 --index 0 and 1, gpu1 --index 2 and 3, psd@0 and psd@1 "
          "shards 0 and 1")

    # 5. run them: the shards, then the workers
    procs = Procs()
    try:
        shards = {}
        for host, i in (("ps0", 0), ("ps1", 1)):
            r = rendered[host, f"psd@{i}"]
            path = os.path.join(tmp, f"notify{i}")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            sock.bind(path)
            extra = {"NOTIFY_SOCKET": path, "LD_LIBRARY_PATH": roots[host] + libdir}
            if r["watchdog_usec"]:
                extra["WATCHDOG_USEC"] = str(r["watchdog_usec"])
            check(r["notify"], f"psd@{i} is not Type=notify")
            p = procs.start(r, os.path.join(tmp, f"psd{i}.log"), extra)
            shards[i] = (p, sock)
        for i, (p, sock) in shards.items():
            status = wait_ready(p, sock, f"psd@{i}")
            check(f"shard {i}/2 " in status, f"psd@{i} says '{status}', not shard {i}/2")
            print(f"ok: psd@{i} ready: {status}")
        t1 = time.monotonic()
        index = run_workers(procs, roots, libdir, [("gpu0", "worker@0.service"),
                                           ("gpu0", "worker@1.service")])
        check(index == {"worker@0.service": 0, "worker@1.service": 1},
              f"the workers' indexes are {index}, not worker@0 0 (chief) and worker@1 1")
        summaries = [os.path.exists(f"{roots['gpu0']}/var/lib/ps/worker-{g}/summary.json")
                     for g in (0, 1)]
        check(summaries == [True, False],
              f"summary.json written by worker@0, worker@1: {summaries} (want the chief's only)")
        for i, (p, _) in shards.items():
            log = open(p.log, errors="replace").read()
            for n in (0, 1):
                check(f"hello from worker {n}" in log and f"worker {n} finished" in log,
                      f"psd@{i} did not see worker {n} come and finish:\n{tail(p.log)}")
        print(f"ok: worker@0 is index 0 (chief, wrote the summary), worker@1 index 1; both "
              f"exit 0, both shards saw both ({time.monotonic() - t1:.1f} s)")
        for i, (p, _) in shards.items():  # systemctl stop
            p.send_signal(signal.SIGTERM)
        for i, (p, _) in shards.items():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                raise Fail(f"psd@{i} still running 30 s after SIGTERM:\n{tail(p.log)}")
            check(p.returncode == 0, f"psd@{i} exited {p.returncode} on SIGTERM:\n{tail(p.log)}")
        print(f"ok: the shards stopped on SIGTERM, exit 0; whole test "
              f"{time.monotonic() - t0:.1f} s")
    finally:
        procs.kill_all()


def on_signal(signum, _frame):
    """meson's timeout or ^C: clean up once (a second signal must not cut the cleanup short)."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    raise SystemExit(f"killed by signal {signum}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit("usage: systemd_recipe.py BUILD_DIR")
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    tmp = tempfile.mkdtemp(prefix="ps-sd-", dir=os.environ.get("TMPDIR", "/tmp"))
    try:
        main(os.path.abspath(sys.argv[1]), tmp)
    except Fail as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print("ok")
