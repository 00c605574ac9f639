#!/usr/bin/python3
"""The vendor floor (docs/hal.md): a plugin depends on the HAL alone.

1. No plugin in the build's plugin folder lists libsigma among its dynamic
   dependencies (readelf -d, NEEDED).
2. No source file of a vendor (vendors/<name>/, samples/vendor_skeleton/)
   includes a header of this repository other than its own folder's,
   hal/include's (sigma/hal.h, sigma/hal_support.h, the frozen
   sigma/abi/hal_1_<minor>.h) and sigma/cpu_kernels.h. What each file
   includes is asked of the compiler that builds it (its command in
   compile_commands.json, run with -M), so an include path cannot hide one.
   Third-party headers (Gloo, NCCL, yaml-cpp) are the vendor's business.

A checker that finds nothing proves nothing: it is first run on a test of
libsigma's kernels as if it were a vendor's file, and must find the libsigma
headers that file includes.

usage: vendor_floor_test.py <source dir> <build dir> <plugin dir>
"""
import json
import os
import shlex
import subprocess
import sys

ALLOWED_FOLDER = "hal/include/"
ALLOWED = ("kernels/include/sigma/cpu_kernels.h",)


def needed(library):
    out = subprocess.run(["readelf", "-d", library], capture_output=True, text=True, check=True).stdout
    return [line.split("[", 1)[1].rstrip("]") for line in out.splitlines() if "(NEEDED)" in line]


def vendor_folder(source_dir, path):
    """The vendor folder a source file belongs to, or None."""
    rel = os.path.relpath(path, source_dir)
    parts = rel.split(os.sep)
    if parts[0] == "vendors" and len(parts) > 2:
        return os.path.join(source_dir, "vendors", parts[1])
    if rel.startswith(os.path.join("samples", "vendor_skeleton") + os.sep):
        return os.path.join(source_dir, "samples", "vendor_skeleton")
    return None


def headers_of(entry):
    """Every file the compiler reads for this entry (its -M output)."""
    args = entry["arguments"] if "arguments" in entry else shlex.split(entry["command"])
    keep, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == "-o":
            skip = True
        elif a not in ("-c",) and not a.startswith(("-MD", "-MF", "-MT", "-MMD")):
            keep.append(a)
    out = subprocess.run(keep + ["-M"], cwd=entry["directory"], capture_output=True, text=True)
    if out.returncode != 0:
        raise RuntimeError(f"{entry['file']}: the compiler's -M failed:\n{out.stderr[-2000:]}")
    words = out.stdout.replace("\\\n", " ").split(":", 1)[1].split()
    return [os.path.realpath(os.path.join(entry["directory"], w)) for w in words]


def violations(source_dir, entry, own_folder):
    bad = []
    for h in headers_of(entry):
        if not h.startswith(source_dir + os.sep) or h == os.path.realpath(entry["file"]):
            continue
        if h.startswith(own_folder + os.sep):
            continue
        rel = os.path.relpath(h, source_dir)
        if rel.startswith(ALLOWED_FOLDER) or rel in ALLOWED:
            continue
        bad.append(os.path.relpath(h, source_dir))
    return bad


def main():
    source_dir, build_dir, plugin_dir = (os.path.realpath(a) for a in sys.argv[1:4])
    failures = []

    plugins = sorted(f for f in os.listdir(plugin_dir) if f.startswith("libsigma_hal_") and f.endswith(".so"))
    if len(plugins) < 3:
        failures.append(f"expected the cpu, sim and skeleton plugins in {plugin_dir}, found {plugins}")
    for p in plugins:
        deps = needed(os.path.join(plugin_dir, p))
        print(f"{p}: NEEDED {' '.join(deps)}")
        failures += [f"{p} links {d}: a plugin may not link libsigma" for d in deps if d.startswith("libsigma")]

    with open(os.path.join(build_dir, "compile_commands.json")) as f:
        entries = json.load(f)
    probe = [e for e in entries if os.path.realpath(e["file"]).endswith("/tests/unit/kernels_test.cpp")]
    if not probe:
        failures.append("tests/unit/kernels_test.cpp is not in compile_commands.json: the checker is unproved")
    elif "include/sigma/kernels.hpp" not in violations(source_dir, probe[0], os.path.join(source_dir, "tests")):
        failures.append("the checker missed sigma/kernels.hpp in tests/unit/kernels_test.cpp")

    checked = 0
    for e in entries:
        path = os.path.realpath(e["file"])
        folder = vendor_folder(source_dir, path)
        if folder is None:
            continue
        checked += 1
        for h in violations(source_dir, e, folder):
            failures.append(f"{os.path.relpath(path, source_dir)} includes {h}: a plugin includes only its own "
                            f"headers, hal/include's and sigma/cpu_kernels.h")
    print(f"{checked} vendor source files checked")
    if checked < 10:
        failures.append(f"only {checked} vendor source files in compile_commands.json")

    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
