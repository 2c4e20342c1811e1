#!/usr/bin/env python3
"""Checks that every repository path the documents cite exists, so a renamed or split file
fails the suite instead of leaving a dead reference (issue: docs that drift from the code).

Documents: README.md, docs/*.md, every README*.md under deploy/, examples/, tests/ and
bench/, and the man page sources docs/man/*.scd*. Two kinds of citation are checked:
- a Markdown link [text](target): resolved from the citing file's folder; a #anchor in it
  must name a heading of the target page (GitHub's slugs);
- a path in the text that starts with one of the project's top-level folders
  (`tests/integration/test_faults.c`, `deploy/systemd/README.md`): resolved from the
  repository root. `*` is a glob that must match something; a path with a placeholder
  (<name>, {a,b}, $VAR, ...) is not checked. A bare file name in the text
  (`test_checkpoints.c`) is checked when it is the name of a file in tests/ or bench/
  (the folder the citation means is the one that holds such a file).
Usage: check_doc_paths.py [ROOT]. Exit 0 when every citation resolves, 1 otherwise.
"""
import glob
import os
import re
import sys

TOP = ("common", "wire", "client", "collective", "kernels", "ps-server", "worker", "psctl",
       "python", "proto", "tests", "deploy", "bench", "docs", "examples", ".ci")
# A repository path in running text: a top-level folder, then path characters. Not when it
# follows a character that would make it part of a longer path or word (/etc/ps/..., x/tests/).
TEXT_PATH = re.compile(r"(?<![\w./$~-])((?:%s)/[\w.@*/+-]*(?:\[\w+\])?)" % "|".join(re.escape(t) for t in TOP))
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def documents(root):
    docs = ["README.md"]
    docs += sorted(glob.glob("docs/*.md", root_dir=root))
    for top in ("deploy", "examples", "tests", "bench", "python"):
        docs += sorted(glob.glob(f"{top}/**/README*.md", root_dir=root, recursive=True))
        docs += sorted(glob.glob(f"{top}/**/*.README.md", root_dir=root, recursive=True))
    docs += sorted(glob.glob("docs/man/*.scd*", root_dir=root))
    seen, out = set(), []
    for d in docs:
        if d not in seen and os.path.isfile(os.path.join(root, d)):
            seen.add(d)
            out.append(d)
    return out


def slug(heading):
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.lower().replace("`", "")
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        found, counts, fenced = set(), {}, False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if FENCE.match(line):
                    fenced = not fenced
                    continue
                m = None if fenced else HEADING.match(line)
                if m:
                    s = slug(m.group(2))
                    n = counts.get(s, 0)
                    counts[s] = n + 1
                    found.add(s if n == 0 else f"{s}-{n}")
        cache[path] = found
    return cache[path]


def exists(root, rel):
    """Whether rel (a path from root, maybe with * and [ch] globs) names something in the
    tree, or a program its folder's meson.build builds (bench/kernels, ps-server/psd: the
    build tree's path)."""
    rel = rel.rstrip("/")
    if "*" in rel or "[" in rel:
        return bool(glob.glob(rel, root_dir=root))
    if any(os.path.exists(os.path.join(root, rel + ext)) for ext in ("", ".c", ".h")):
        return True  # a file, a folder, or a module (common/placement: placement.[ch])
    folder, name = os.path.split(rel)
    build = os.path.join(root, folder, "meson.build")
    if folder and os.path.isfile(build):
        with open(build, encoding="utf-8") as f:
            return re.search(r"executable\(\s*'%s'" % re.escape(name), f.read()) is not None
    return False


def bare_names(root):
    """File name -> whether it is the name of a test or benchmark file (tests/, bench/)."""
    names = set()
    for top in ("tests", "bench"):
        for _, _, files in os.walk(os.path.join(root, top)):
            names.update(files)
    return names


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), "..", ".."))
    known = bare_names(root)
    bad = []
    docs = documents(root)
    for doc in docs:
        here = os.path.dirname(doc)
        with open(os.path.join(root, doc), encoding="utf-8") as f:
            lines = f.read().splitlines()
        for no, line in enumerate(lines, 1):
            where = f"{doc}:{no}"
            for m in LINK.finditer(line):
                target = m.group(1)
                if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, mailto:, ...
                    continue
                path, _, anchor = target.partition("#")
                full = os.path.normpath(os.path.join(root, here, path)) if path else \
                    os.path.join(root, doc)
                if not os.path.exists(full):
                    bad.append(f"{where}: link to {target}: {os.path.relpath(full, root)} "
                               "does not exist")
                elif anchor and full.endswith(".md") and anchor not in anchors(full):
                    bad.append(f"{where}: link to {target}: no heading with anchor "
                               f"#{anchor} in {os.path.relpath(full, root)}")
            text = LINK.sub("]", line)  # links are checked above, with their own base
            for m in TEXT_PATH.finditer(text):
                rel = m.group(1).rstrip(".,;:")
                after = text[m.end(1):m.end(1) + 1] if m.end(1) < len(text) else ""
                if after in "<{$" and after:  # DIR/<name>, {a,b}, $VAR: a placeholder
                    continue
                if not exists(root, rel):
                    bad.append(f"{where}: cites {rel}, which does not exist")
            for m in re.finditer(r"(?<![\w./-])((?:test_|bench_)[\w]+\.(?:c|py|sh))\b", text):
                if m.group(1) not in known:
                    bad.append(f"{where}: cites {m.group(1)}, which no file in tests/ or "
                               "bench/ is named")
    for b in bad:
        print("FAIL:", b, file=sys.stderr)
    print(f"{'ok' if not bad else 'FAIL'}: {len(docs)} documents, "
          f"{len(bad)} dead citation{'s' if len(bad) != 1 else ''}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
