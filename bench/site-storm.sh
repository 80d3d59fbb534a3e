#!/usr/bin/env bash
# bench/site-storm.sh: more servers, faster site (issue 46 part 4). See --help.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"

usage() {
    cat <<EOF
usage: $0 [--sites "1 2 4"] [--per-server N] [--roots "nfs nbd"] [--out DIR] [--bin PATH]
          [STORM.SH OPTIONS...]

Runs bench/storm.sh --servers K for each K of --sites (default 1 2 4) with N x K clients
(--per-server, default 40): K bootpool servers in the simulated room, members of one site on
a PostgreSQL the storm starts, each on storm.sh's --links x --link-rate (default 4 x 250mbit),
each client answered by the member the site's RFC 3074 hash gives it, which places its boot
on its own links (--placement owner) or spreads its boots over every member's links
(--placement site; without the option, bootpool's default). Then prints one table: per
run, the room's time beside its floor (all the clients' bytes over all servers' capacity;
the goal is 1.15x or less), each server's egress as a share of the servers' mean (the goal:
each within 10%), each server's clients and the boots placed on it, and the clients given
an address by two servers
(none, or the site is broken).

Other options go to bench/storm.sh as they are (--placement, --think-scale, --client-link,
--sequential-macs, --links, --link-rate...). The rows' JSON, tables and logs go to --out
(default bench/out/site-storm-DATE/), the table to --out/site.md.
Needs root, Debian's postgresql and what scripts/setup installs.
EOF
}

SITES="1 2 4" PER=40 ROOTS="nfs nbd" OUT="" PASS=()
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --sites) SITES="$2"; shift ;;
        --per-server) PER="$2"; shift ;;
        --roots) ROOTS="$2"; shift ;;
        --out) OUT="$2"; shift ;;
        *) PASS+=("$1") ;;
    esac
    shift
done
OUT="${OUT:-$REPO/bench/out/site-storm-$(date -u +%Y%m%d-%H%M)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
for k in $SITES; do
    "$HERE/storm.sh" --servers "$k" --clients "$((PER * k))" --roots "$ROOTS" --out "$OUT" \
        "${PASS[@]}" > /dev/null
done

python3 - "$OUT" <<'EOF' | tee "$OUT/site.md"
import json, os, sys
out = sys.argv[1]
rows = []
for f in sorted(os.listdir(out)):
    if f.startswith("bootpool-site") and f.endswith(".json"):
        r = json.load(open(os.path.join(out, f)))
        rows.append((len(r["servers"]["rows"]), r["root"], r["summary"]["clients"], f[:-5], r))
def fmt(v, d=1):
    return "-" if v is None else f"{v:.{d}f}"
print("\n| servers | root | clients | booted / failed | all booted s | floor s | x floor (goal <= 1.15) | egress per server, share of the mean | worst off the mean (goal <= 10%) | clients per server (boots placed on it) | given an address by two |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for k, root, n, name, r in sorted(rows):
    s, sv = r["summary"], r["servers"]
    shares = " / ".join(f"{x['bytes']/1e6:.0f} MB {x['share_of_mean']:.2f}" for x in sv["rows"])
    clients = " / ".join(f"{x['clients']} ({x.get('placed', '-')} placed)" for x in sv["rows"])
    two = sv.get("answered_by_two")
    print(f"| {k} | {root} | {n} | {s['booted']} / {s['failed']} | {fmt(s['all_booted_s'])} | {fmt(sv['floor_s'])} | {fmt(sv['over_floor'], 2)} | {shares} | {sv['max_share_off']*100:.1f}% | {clients} | {'-' if two is None else len(two)} |")
EOF
echo "site-storm.sh: runs and table in $OUT" >&2
