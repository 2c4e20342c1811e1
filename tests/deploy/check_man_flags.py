#!/usr/bin/env python3
"""The man pages against --help, for psd, psworker and every psctl command.

    check_man_flags.py ROFF...   (psd.8, psworker.1, psctl.1 among them; $PSD, $PSWORKER,
                                  $PSCTL: the programs)

For each program (psctl: each command `psctl --help` lists), in the page's OPTIONS section
(psctl.1: the subsection whose heading names the command, "psctl status, checkpoint and
shutdown") and EXIT STATUS section (the same way):
  (a) every flag --help lists has one entry, and every entry is a flag of --help (of one
      of the commands the subsection names);
  (b) an entry ends with "Default: X." exactly when --help says [default: X];
  (c) the exit statuses are those --help lists after "exit status:".
Pages are rendered with `man -l` at a width no paragraph reaches, so that an entry's text
is one line. Prints "ok: ..." and "FAIL: ..." lines; exit 0, or 1 when a check failed."""
import os
import re
import subprocess
import sys

failed = False


def bad(msg):
    global failed
    failed = True
    print("FAIL: " + msg, file=sys.stderr)


def ok(msg):
    print("ok: " + msg)


def render(path):
    """The page as text, one paragraph a line."""
    env = dict(os.environ, MANWIDTH="10000")
    out = subprocess.run(["man", "--nh", "--nj", "-l", path], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, check=False)
    if out.returncode != 0:
        bad("%s: man -l exited %d" % (path, out.returncode))
    return out.stdout.decode(errors="replace").splitlines()


def sections(lines):
    """{SECTION: {subsection heading or "": [lines]}}: headings at column 0, subsections
    at 3 spaces (man's .SH and .SS)."""
    secs, sec, sub = {}, None, ""
    for line in lines:
        if re.match(r"^[A-Z][A-Z0-9 ,()/-]*$", line.rstrip()):
            sec, sub = line.strip(), ""
            secs.setdefault(sec, {"": []})
        elif sec and re.match(r"^   \S", line):
            sub = line.strip()
            secs[sec].setdefault(sub, [])
        elif sec:
            secs[sec][sub].append(line)
    return secs


def entries(lines):
    """[(header, paragraph)]: a line at 7 spaces followed by its paragraph at 11."""
    out = []
    for i, line in enumerate(lines[:-1]):
        nxt = lines[i + 1]
        if re.match(r"^ {7}\S", line) and re.match(r"^ {11}\S", nxt):
            out.append((line.strip(), " ".join(nxt.split())))
    return out


def run_help(argv):
    out = subprocess.run(argv + ["--help"], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         check=False)
    if out.returncode != 0:
        bad("%s --help exited %d" % (" ".join(argv), out.returncode))
    return out.stdout.decode(errors="replace").splitlines()


def parse_help(lines):
    """({--flag: default or None}, [exit codes]) from --help: an option is a line at 2
    spaces (its text goes on at deeper indents); the codes follow "exit status:"."""
    flags, codes, cur, texts, in_exit = {}, [], None, {}, False
    for line in lines:
        if line.startswith("exit status:"):
            in_exit, cur = True, None
            continue
        if in_exit:
            m = re.match(r"^  (\S+)\s", line)
            if m:
                codes.append(m.group(1))
            elif not line.strip():
                in_exit = False
            continue
        m = re.match(r"^  (?:-h, )?(--[a-z0-9-]+)(.*)$", line)
        if m:
            cur = m.group(1)
            texts[cur] = m.group(2)
        elif cur and re.match(r"^ {3,}\S", line):
            texts[cur] += " " + line
        else:
            cur = None
    for flag, text in texts.items():
        m = re.search(r"\[default: ([^\]]*)\]", " ".join(text.split()))
        flags[flag] = m.group(1) if m else None
    return flags, codes


def page_parts(secs, page, section, names):
    """The lines of page's section (names None), or [(the names a subsection's heading
    gives, its lines)] for the subsections naming one of names. [] after a FAIL when
    the page has no such section."""
    if section not in secs:
        bad("%s has no %s section" % (page, section))
        return []
    if names is None:
        return [l for sub in secs[section].values() for l in sub]
    out = []
    for head, lines in secs[section].items():
        named = set(re.findall(r"[a-z][a-z-]*", head)) - {"psctl", "and"}
        if named & set(names):
            out.append((named, lines))
    return out


def check(page, secs, label, helps, names=None):
    """Checks (a), (b), (c) for one program or the psctl commands in names. helps:
    {command or label: (flags, codes)}."""
    if names is None:
        opt_parts = [({label}, page_parts(secs, page, "OPTIONS", None))]
        exit_parts = [({label}, page_parts(secs, page, "EXIT STATUS", None))]
    else:
        opt_parts = page_parts(secs, page, "OPTIONS", names)
        exit_parts = page_parts(secs, page, "EXIT STATUS", names)
    for cmd in names or [label]:
        who = label if names is None else "psctl " + cmd
        flags, codes = helps[cmd]
        mine = [p for p in opt_parts if cmd in p[0]]
        if len(mine) != 1:
            bad("%s: %d OPTIONS subsections name %s (want 1)" % (page, len(mine), who))
            continue
        named, lines = mine[0]
        documented = {}
        for head, para in entries(lines):
            m = re.match(r"^(?:-h, )?(--[a-z0-9-]+)", head)
            if m and m.group(1) in documented:
                bad("%s documents %s %s twice" % (page, who, m.group(1)))
            elif m:
                documented[m.group(1)] = para
        # (a) both ways; a shared subsection may document any of its commands' flags
        others = set().union(*(helps[c][0] for c in named if c in helps))
        missing = [f for f in flags if f not in documented]
        extra = [f for f in documented if f not in others]
        if missing:
            bad("%s lacks %s flags: %s" % (page, who, " ".join(missing)))
        if extra:
            bad("%s documents flags %s --help lacks: %s" % (page, who, " ".join(extra)))
        if not missing and not extra:
            ok("%s documents %s's %d flags, and no other" % (page, who, len(flags)))
        # (b) the defaults
        wrong, n = 0, sum(d is not None for d in flags.values())
        for flag, default in flags.items():
            para = documented.get(flag)
            if para is None:
                continue
            at = para.rfind("Default: ")
            shown = para[at + 9:-1] if at >= 0 and para.endswith(".") else None
            if shown != default:
                wrong += 1
                bad("%s: %s %s: --help says [default: %s], the page %s" %
                    (page, who, flag, default,
                     "'Default: %s.'" % shown if shown is not None else "no Default"))
        if not wrong:
            ok("%s gives %s's %d defaults as --help does, and no other" % (page, who, n))
        # (c) the exit statuses
        mine = [p for p in exit_parts if cmd in p[0]]
        if len(mine) != 1:
            bad("%s: %d EXIT STATUS subsections name %s (want 1)" % (page, len(mine), who))
            continue
        listed = [h for h, _ in entries(mine[0][1]) if re.fullmatch(r"\d+|other", h)]
        if not codes:
            bad("%s --help lists no exit status" % who)
        elif sorted(listed) != sorted(codes):
            bad("%s: EXIT STATUS of %s lists %s, --help %s" %
                (page, who, " ".join(listed) or "nothing", " ".join(codes)))
        else:
            ok("%s gives %s's exit statuses %s" % (page, who, " ".join(codes)))


def main(pages):
    by_name = {os.path.basename(p): p for p in pages}
    progs = {"psd.8": ("psd", os.environ.get("PSD")),
             "psworker.1": ("psworker", os.environ.get("PSWORKER"))}
    for page, (label, exe) in progs.items():
        if page not in by_name or not exe:
            bad("%s or its program ($%s) not given" % (page, label.upper()))
            continue
        check(page, sections(render(by_name[page])), label, {label: parse_help(run_help([exe]))})
    psctl = os.environ.get("PSCTL")
    if "psctl.1" not in by_name or not psctl:
        bad("psctl.1 or $PSCTL not given")
    else:
        top = run_help([psctl])
        at = top.index("commands:") + 1 if "commands:" in top else len(top)
        cmds = [l.split()[0] for l in top[at:] if re.match(r"^  [a-z]", l)]
        if not cmds:
            bad("psctl --help lists no commands")
        helps = {c: parse_help(run_help([psctl, c])) for c in cmds}
        check("psctl.1", sections(render(by_name["psctl.1"])), "psctl", helps, cmds)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
