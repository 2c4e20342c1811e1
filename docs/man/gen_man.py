#!/usr/bin/env python3
# Fills a man page template (docs/man/*.scd.in) with what the built programs say of
# themselves, so that a page's options and exit statuses are their option tables':
#
#   gen_man.py TEMPLATE OUTPUT NAME EXE [NAME EXE ...]
#
# A line that is only "@OPTIONS PROGRAM [COMMAND]@" becomes that program's (or psctl
# command's) options, a line "@EXIT PROGRAM [COMMAND]@" its exit statuses, and
# "@SYNOPSIS PROGRAM [COMMAND]@" anywhere in a line its flags as "[--flag VALUE] ...".
# PROGRAM is one of the NAMEs; its EXE is run as `EXE [COMMAND] --help-man`, which prints
# the three parts as scdoc after the lines "%%options", "%%exit-status" and "%%synopsis"
# (common/options_doc.c). Exit 0, or 1 with a message (an unknown program or marker, a
# program that fails).
import os
import re
import subprocess
import sys

MARKER = re.compile(r"@(OPTIONS|EXIT|SYNOPSIS) ([a-z][a-z0-9-]*(?: [a-z][a-z0-9-]*)?)@")
PARTS = {"OPTIONS": "options", "EXIT": "exit-status", "SYNOPSIS": "synopsis"}


def fail(msg):
    sys.stderr.write("gen_man.py: %s\n" % msg)
    sys.exit(1)


def help_man(exe, command):
    """The parts of `exe [command] --help-man`: {"options": text, ...}."""
    argv = [exe] + ([command] if command else []) + ["--help-man"]
    env = dict(os.environ)
    env.pop("TF_CONFIG", None)  # the pages are the programs', not a job's
    # a sanitizer build (ASan) runs here too: a leak report must not fail the build
    env["ASAN_OPTIONS"] = ":".join(filter(None, [env.get("ASAN_OPTIONS"), "detect_leaks=0"]))
    try:
        out = subprocess.run(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, timeout=60, check=False)
    except (OSError, subprocess.TimeoutExpired) as e:
        fail("%s: %s" % (" ".join(argv), e))
    if out.returncode != 0:
        fail("%s exited %d: %s" % (" ".join(argv), out.returncode,
                                   out.stderr.decode(errors="replace").strip()))
    parts, name = {}, None
    for line in out.stdout.decode().splitlines():
        if line.startswith("%%"):
            name = line[2:]
            parts[name] = []
        elif name is None:
            fail("%s: output does not start with a %%%%part line" % " ".join(argv))
        else:
            parts[name].append(line)
    for want in PARTS.values():
        if want not in parts:
            fail("%s: no %%%%%s part" % (" ".join(argv), want))
    return {k: "\n".join(v).strip("\n") for k, v in parts.items()}


def main(argv):
    if len(argv) < 5 or len(argv) % 2 == 0:
        fail("usage: gen_man.py TEMPLATE OUTPUT NAME EXE [NAME EXE ...]")
    template, output = argv[1], argv[2]
    exes = dict(zip(argv[3::2], argv[4::2]))
    cache = {}

    def part(kind, target):
        prog, _, command = target.partition(" ")
        if prog not in exes:
            fail("%s: unknown program '%s' (given: %s)" % (template, prog, ", ".join(exes)))
        if target not in cache:
            cache[target] = help_man(exes[prog], command)
        return cache[target][PARTS[kind]]

    out = []
    with open(template, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            line = line.rstrip("\n")
            m = MARKER.fullmatch(line.strip())
            if m and m.group(1) in ("OPTIONS", "EXIT"):
                out.append(part(m.group(1), m.group(2)))
                continue
            for m in MARKER.finditer(line):
                if m.group(1) != "SYNOPSIS":
                    fail("%s:%d: @%s ...@ stands on a line of its own" % (template, n, m.group(1)))
            line = MARKER.sub(lambda m: part(m.group(1), m.group(2)), line)
            if re.search(r"@[A-Z]+ [a-z]", line):
                fail("%s:%d: unknown marker in '%s'" % (template, n, line))
            out.append(line)
    tmp = output + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(out) + "\n")
    os.replace(tmp, output)


if __name__ == "__main__":
    main(sys.argv)
