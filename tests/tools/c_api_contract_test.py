#!/usr/bin/env python3
"""Every function sigma.h exports says which thread may call it and whether
it blocks: its comment (or the comment of the group of declarations it
closes) carries a "Thread-safety:" and a "Blocks:" line, as hal.h's do."""
import re
import sys

path = sys.argv[1]
text = open(path).read()
# Declarations in order, each with the comment just before it; a
# declaration right after another (nothing but blank lines between) shares
# that one's comment.
decl = re.compile(r"(/\*(?:(?!\*/).)*\*/)?(\s*)^SIGMA_EXPORT\s[^;(]*?(\w+)\s*\(", re.S | re.M)
missing, comment, last_end, count = [], None, None, 0
for m in decl.finditer(text):
    count += 1
    between = text[last_end:m.start()] if last_end is not None else None
    if m.group(1) is not None:
        comment = m.group(1)
    elif between is None or between.strip():
        comment = ""
    # ... else: a declaration right after the previous one keeps its comment.
    last_end = text.index(";", m.end()) + 1
    lacks = [k for k in ("Thread-safety:", "Blocks:") if k not in comment]
    if lacks:
        missing.append(f"{m.group(3)}: no {' and no '.join(lacks)} line")
if count == 0:
    print(f"FAIL: no SIGMA_EXPORT declaration found in {path}")
    sys.exit(1)
for line in missing:
    print("FAIL", line)
if missing:
    sys.exit(1)
print(f"ok: all {count} exported functions of {path} say their thread and whether they block")
