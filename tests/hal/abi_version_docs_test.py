#!/usr/bin/python3
"""The HAL ABI version the documents state is the header's.

hal.h's HAL_ABI_MAJOR/HAL_ABI_MINOR against: hal.h's own first line
("ABI M.m"), README's "HAL ABI M.m" row, and docs/hal.md's "Shape of the ABI
(M.m)". A document that names the current ABI by an older number fails.

usage: abi_version_docs_test.py <source dir>
"""
import os
import re
import sys


def main():
    root = sys.argv[1]
    header = open(os.path.join(root, "hal/include/sigma/hal.h")).read()
    major = re.search(r"#define HAL_ABI_MAJOR (\d+)", header).group(1)
    minor = re.search(r"#define HAL_ABI_MINOR (\d+)", header).group(1)
    version = f"{major}.{minor}"
    print(f"hal.h: ABI {version}")
    claims = [
        ("hal/include/sigma/hal.h", r"hardware abstraction layer \(HAL\), ABI (\d+\.\d+)"),
        ("README.md", r"\| HAL ABI (\d+\.\d+) \|"),
        ("docs/hal.md", r"## Shape of the ABI \((\d+\.\d+)\)"),
    ]
    failures = []
    for path, pattern in claims:
        found = re.findall(pattern, open(os.path.join(root, path)).read())
        if not found:
            failures.append(f"{path}: no statement of the ABI version (/{pattern}/)")
        for v in found:
            print(f"{path}: ABI {v}")
            if v != version:
                failures.append(f"{path} says ABI {v}; hal.h is ABI {version}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
