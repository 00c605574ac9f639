#!/usr/bin/env python3
"""Prints, NUL-separated, the translation units clang-tidy checks: every
compile command of a build folder whose source is one of the library's
files (src/ but src/cli/, and kernels/cpu/), or a unity batch of the
library's (it #includes library files; .clang-tidy's HeaderFilterRegex
reports findings in them). Fails when a library source is in no unit:
a file nobody compiles is a file nobody checks.

    tidy_sources.py BUILD_DIR
"""
import json
import pathlib
import re
import subprocess
import sys


def library_sources(root):
    out = subprocess.run(["git", "ls-files", "src/*.cpp", "kernels/cpu/*.cpp"], cwd=root,
                         check=True, capture_output=True, text=True).stdout.split()
    return {str((root / f).resolve()) for f in out if not f.startswith("src/cli/")}


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: tidy_sources.py BUILD_DIR")
    root = pathlib.Path(__file__).resolve().parent.parent
    build = pathlib.Path(sys.argv[1]).resolve()
    wanted = library_sources(root)
    include = re.compile(r'^#include "([^"]+)"', re.M)
    units, covered = [], set()
    database = build / "compile_commands.json"
    if not database.is_file():
        sys.exit(f"tidy_sources.py: {database} is missing: configure and build {build} first")
    for entry in json.loads(database.read_text()):
        source = pathlib.Path(entry["directory"], entry["file"]).resolve()
        if str(source) in wanted:
            units.append(str(source))
            covered.add(str(source))
        elif "/Unity/" in str(source):
            batch = {str(pathlib.Path(f).resolve()) for f in include.findall(source.read_text())}
            if batch & wanted:
                units.append(str(source))
                covered |= batch & wanted
    missing = sorted(wanted - covered)
    if missing:
        sys.exit("tidy_sources.py: no compile command for:\n  " + "\n  ".join(missing))
    sys.stdout.write("\0".join(sorted(set(units))) + "\0")


if __name__ == "__main__":
    main()
