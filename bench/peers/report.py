#!/usr/bin/env python3
"""bench/peers/report.py: bench/peers.sh's table and JSON from its results.

  report.py RESULTS.tsv OUT.json COMMIT VERSION
RESULTS holds one line per test: suite TAB test TAB passed|failed|n/a TAB reason. Prints the
table (the reason beside every not applicable and every failure) and the totals, writes the
same as JSON, and exits 1 if a test that applied failed (or nothing was run).
"""

import datetime
import json
import sys

results_path, json_path, commit, version = sys.argv[1:5]
rows = []
with open(results_path, encoding="utf-8") as f:
    for line in f:
        line = line.rstrip("\n")
        if not line:
            continue
        suite, test, status, reason = (line.split("\t") + ["", "", "", ""])[:4]
        if status not in ("passed", "failed", "n/a"):
            reason = f"unknown status {status!r}: {reason}"
            status = "failed"
        rows.append({"suite": suite, "test": test, "status": status, "reason": reason})

WORD = {"passed": "passed", "failed": "FAILED", "n/a": "n/a"}
suite_w = max([len(r["suite"]) for r in rows] + [5])
test_w = min(max([len(r["test"]) for r in rows] + [4]), 78)
print(f"{'suite':<{suite_w}}  {'test':<{test_w}}  {'result':<6}  reason")
for r in rows:
    print(f"{r['suite']:<{suite_w}}  {r['test']:<{test_w}}  {WORD[r['status']]:<6}  {r['reason']}")

totals = {s: sum(1 for r in rows if r["status"] == s) for s in ("passed", "failed", "n/a")}
suites = {}
for r in rows:
    t = suites.setdefault(r["suite"], {"passed": 0, "failed": 0, "n/a": 0})
    t[r["status"]] += 1
print()
for name, t in suites.items():
    print(f"{name}: {t['passed']} passed, {t['failed']} failed, {t['n/a']} not applicable")
print(f"{totals['passed']} passed, {totals['failed']} failed, {totals['n/a']} not applicable")

record = {
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "commit": commit,
    "bootpool": version,
    "command": "bench/peers.sh",
    "totals": totals,
    "suites": suites,
    "tests": rows,
}
with open(json_path, "w", encoding="utf-8") as f:
    json.dump(record, f, indent=1)
    f.write("\n")
sys.exit(1 if totals["failed"] or not rows else 0)
