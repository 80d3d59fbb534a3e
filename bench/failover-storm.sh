#!/usr/bin/env bash
# bench/failover-storm.sh: a server dies mid-boot in the simulated room (issue 47 part 4).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"

usage() {
    cat <<EOF
usage: $0 [--servers K] [--clients N] [--roots "nfs nbd"] [--fail-at SECONDS]
          [--link-rate RATE] [--out DIR] [STORM.SH OPTIONS...]

Runs bench/storm.sh --servers K (default 2) --links 1 with N clients (default 40) three
times per root: with no failure, with member s1's bootpool and keepalived killed with -9
--fail-at seconds after power-on (default 20), and with its links taken down then. Each
member's address is moved by keepalived with the file \`bootpool site keepalived\` writes.
Then prints one table: booted of N, the clients that restarted their boot (the goal: none),
those that reconnected their root, the longest stall after the failure (the goal: <= 5 s
after kill -9, <= 15 s after link-down) and the time to all booted beside the row with no
failure. Other options go to bench/storm.sh (--think-scale, --client-link, --bin...).
The rows' JSON, tables and logs go to --out (default bench/out/failover-storm-DATE/), the
table to --out/failover.md. Needs root, Debian's postgresql and keepalived, and what
scripts/setup installs.
EOF
}

K=2 CLIENTS=40 ROOTS="nfs nbd" AT=20 RATE=500mbit OUT="" PASS=()
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --servers) K="$2"; shift ;;
        --clients) CLIENTS="$2"; shift ;;
        --roots) ROOTS="$2"; shift ;;
        --fail-at) AT="$2"; shift ;;
        --link-rate) RATE="$2"; shift ;;
        --out) OUT="$2"; shift ;;
        *) PASS+=("$1") ;;
    esac
    shift
done
command -v keepalived > /dev/null ||
    { echo "failover-storm.sh: needs keepalived (apt-get install keepalived)" >&2; exit 1; }
OUT="${OUT:-$REPO/bench/out/failover-storm-$(date -u +%Y%m%d-%H%M)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
for fail in "" kill linkdown; do
    "$HERE/storm.sh" --servers "$K" --links 1 --link-rate "$RATE" --clients "$CLIENTS" \
        --roots "$ROOTS" --out "$OUT" ${fail:+--fail "$fail" --fail-at "$AT"} \
        ${PASS[@]+"${PASS[@]}"} > /dev/null
done

python3 - "$OUT" <<'PY' | tee "$OUT/failover.md"
import json, os, sys
out = sys.argv[1]
runs = {}
for f in sorted(os.listdir(out)):
    if f.startswith("bootpool-site") and f.endswith(".json"):
        runs[f[:-5]] = json.load(open(os.path.join(out, f)))
def fmt(v, d=1):
    return "-" if v is None else f"{v:.{d}f}"
print("\n| row | root | failure | booted | restarted (goal 0) | reconnected | longest stall after it, s (goal) | all booted s | with no failure s |")
print("|---|---|---|---|---|---|---|---|---|")
for name, r in sorted(runs.items()):
    s, f = r["summary"], r.get("failure")
    base = next((b for b in runs.values() if not b.get("failure") and b["root"] == r["root"]), None)
    base_s = base["summary"]["all_booted_s"] if base else None
    if f is None:
        print(f"| {name} | {r['root']} | none | {s['booted']} / {s['clients']} | - | {s['clients_reconnected']} | - | {fmt(s['all_booted_s'])} | {fmt(base_s)} |")
        continue
    print(f"| {name} | {r['root']} | {f['kind']} of {f['member']} at {f['at_s']:.1f} s | {f['booted']} / {f['clients']} | {f['restarted']} | {f['reconnected']} | {fmt(f['longest_stall_s'])} ({f['goal_s']:.0f}) | {fmt(s['all_booted_s'])} | {fmt(base_s)} |")
PY
echo "failover-storm.sh: runs and table in $OUT" >&2
