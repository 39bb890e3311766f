#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""check-pages.py [ROOT]: the user's pages (README.md, CHANGELOG.md, docs/*.md, man/*.md) hold to the house rules.

- README.md is a front page: at most 200 lines.
- No page names a path outside the repository ("../shared", "/work/"), the
  project's internal work history ("work period", "session N", "issue N",
  notes) or
  a commit hash (7 to 40 hex digits with a digit and a letter, in prose:
  code spans and blocks are left out, where digests and addresses live).
- Every relative link of README.md, CHANGELOG.md and docs/*.md points at a
  file or folder that exists, and a link's #anchor at a heading of the page
  it names (GitHub's slugs).
Before the pages, the rules are tried on bad samples of each kind, so that a
rule that can no longer fail fails here.
"""
import glob
import os
import re
import sys

MAX_README = 200
OUTSIDE = re.compile(r"\.\./shared\b|/work/")
HISTORY = re.compile(r"\bwork periods?\b|\bsessions? \d+|\bissues? #?\d+|\bissue notes\b|\bnotes/", re.I)
HASH = re.compile(r"(?<![\w.-])(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}(?![\w-])")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"(`+)(.+?)\1")


def prose_lines(text):
    """(line number, line without code spans) for every line outside fenced code."""
    fenced = False
    for n, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            yield n, CODE_SPAN.sub("", line)


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(text):
    out, seen = set(), {}
    fenced = False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        m = re.match(r"^(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if fenced or not m:
            continue
        s = slug(m.group(2))
        k = seen.get(s, 0)
        seen[s] = k + 1
        out.add(s if k == 0 else f"{s}-{k}")
    return out


def check_text(name, text, problems):
    """Paths and history anywhere (code included: a path in backticks is still
    a path); hashes in prose only."""
    for n, line in enumerate(text.splitlines(), 1):
        for rx, what in ((OUTSIDE, "a path outside the repository"),
                         (HISTORY, "the project's internal work history")):
            m = rx.search(line)
            if m:
                problems.append(f"{name}:{n}: {what}: {m.group(0)!r}")
    for n, line in prose_lines(text):
        m = HASH.search(line)
        if m:
            problems.append(f"{name}:{n}: a commit hash: {m.group(0)!r}")


def check_links(path, text, problems, read=None):
    read = read or (lambda p: open(p, encoding="utf-8").read())
    base = os.path.dirname(path)
    for n, line in prose_lines(text):  # a link in a code span or block is text
        for target in LINK.findall(line):
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                continue
            file, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(base, file)) if file else path
            if not os.path.exists(dest):
                problems.append(f"{path}:{n}: link to a missing file: {target}")
                continue
            if anchor and dest.endswith(".md") and anchor not in anchors(read(dest)):
                problems.append(f"{path}:{n}: link to a missing heading: {target}")


def self_test(tmp):
    """Each rule must fire on a sample made to break it."""
    bad = {
        "outside": "See `../shared/DESIGN.md` for more.\n",
        "work": "Found in /work/notes/x.md.\n",
        "period": "Fixed in work period 12.\n",
        "session": "Measured in Session 14.\n",
        "issue": "As issue 42 asks.\n",
        "notes": "What it could not do is in the issue notes.\n",
        "hash": "Measured at 7236b32 on this machine.\n",
    }
    for key, text in bad.items():
        p = []
        check_text(key, text, p)
        if not p:
            return f"self-test: the rule for {key} did not fire on {text.strip()!r}"
    good = "Digest `18291aaa23c97eb6`, sizes 1000000 and deadbeef.\n```\nab12cd34ef\n```\n"
    p = []
    check_text("good", good, p)
    if p:
        return f"self-test: a false alarm: {p}"
    page = os.path.join(tmp, "page.md")
    with open(page, "w", encoding="utf-8") as f:
        f.write("# Top\n\n## A heading\n\n[ok](page.md#a-heading) [here](#top)\n"
                "[gone](missing.md) [nohead](page.md#nowhere)\n")
    p = []
    check_links(page, open(page, encoding="utf-8").read(), p)
    if len(p) != 2 or "missing.md" not in p[0] or "nowhere" not in p[1]:
        return f"self-test: the link rules gave {p}"
    return None


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(__file__), ".."))
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        err = self_test(tmp)
    if err:
        print(err)
        return 1
    problems = []
    readme = os.path.join(root, "README.md")
    text = open(readme, encoding="utf-8").read()
    lines = text.count("\n")
    if lines > MAX_README:
        problems.append(f"README.md: {lines} lines, more than {MAX_README}: "
                        "move the detail into docs/")
    linked = [readme, os.path.join(root, "CHANGELOG.md")] + \
        sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    pages = linked + sorted(glob.glob(os.path.join(root, "man", "*.md")))
    for p in pages:
        if not os.path.exists(p):
            problems.append(f"{os.path.relpath(p, root)}: missing")
            continue
        t = open(p, encoding="utf-8").read()
        check_text(os.path.relpath(p, root), t, problems)
        if p in linked:
            check_links(p, t, problems)
    for p in problems:
        print(p.replace(root + os.sep, ""))
    print(f"check-pages: {len(pages)} pages, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
