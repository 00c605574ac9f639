#!/usr/bin/env bash
# sigma-sim as a user runs it: a scenario file in, a table and JSON out;
# a bad scenario is refused with its file, line and key and exit status 2.
#   sim_cli_test.sh SIGMA_SIM
set -euo pipefail
sim=$1
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
cat >"$dir/ok.yaml" <<'YAML'
seed: 5
accelerators: 256
days: 3
policies:
  - name: reactive
  - name: libsigma
YAML
"$sim" --scenario "$dir/ok.yaml" --json "$dir/out.json" >"$dir/table.txt"
grep -q "^reactive " "$dir/table.txt"
grep -q "^libsigma " "$dir/table.txt"
python3 - "$dir/out.json" <<'PY'
import json, sys
runs = json.load(open(sys.argv[1]))["runs"]
assert len(runs) == 1 and [p["policy"] for p in runs[0]["policies"]] == ["reactive", "libsigma"]
for p in runs[0]["policies"]:
    total = p["accelerator_seconds"]["total"]
    assert abs(total - 256 * 3 * 86400) < 1e-3 * total, total
PY
# The chart: an SVG that PLplot drew, naming every policy.
"$sim" --scenario "$dir/ok.yaml" --svg "$dir/chart.svg" >/dev/null
python3 - "$dir/chart.svg" <<'PY'
import sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
assert root.tag.endswith("svg"), root.tag
text = " ".join("".join(t.itertext()) for t in root.iter() if t.tag.endswith("text"))
for want in ("reactive: ", "libsigma: ", "productive", "in repair"):
    assert want in text, (want, text)
shapes = sum(1 for t in root.iter() if t.tag.split("}")[-1] in ("polygon", "polyline", "path"))
assert shapes > 20, shapes
PY
# The same seed twice: the same bytes.
"$sim" --scenario "$dir/ok.yaml" --json "$dir/again.json" >/dev/null
cmp "$dir/out.json" "$dir/again.json"
printf 'accelerators: 256\ndays: 3\nfailures:\n  repair_hours: -4\n' >"$dir/bad.yaml"
set +e
"$sim" --scenario "$dir/bad.yaml" 2>"$dir/err.txt"
rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "exit $rc, expected 2"; exit 1; }
grep -q "bad.yaml:4: failures.repair_hours" "$dir/err.txt" || { cat "$dir/err.txt"; exit 1; }
# --sensitivity draws no chart: asked for one, it says so.
set +e
"$sim" --scenario "$dir/ok.yaml" --sensitivity --svg "$dir/s.svg" 2>"$dir/err.txt"
rc=$?
set -e
[ "$rc" -eq 2 ] || { echo "exit $rc, expected 2"; exit 1; }
grep -q -- "--sensitivity writes tables" "$dir/err.txt" || { cat "$dir/err.txt"; exit 1; }
[ ! -e "$dir/s.svg" ]
echo "sim_cli_test: ok"
