#!/usr/bin/env bash
# bench/failover-storm.sh: a server dies mid-boot in the simulated room (issue 47 part 4).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"

usage() {
    cat <<EOF
usage: $0 [--servers K] [--clients N] [--roots "nfs nbd"] [--fail-at SECONDS]
          [--link-rate RATE] [--stacks "bootpool reference"] [--out DIR]
          [--record NAME] [STORM.SH OPTIONS...]

Runs bench/storm.sh --servers K (default 2) --links 1 with N clients (default 40) three
times per root, root after root in the order given: with no failure, with member s1 killed
with -9 --fail-at seconds after power-on (default 20), and with its links taken down then.
Each side of a row runs in the same invocation on the same room, trace and bytes:
  bootpool   K bootpool members of one site, each member's address moved by keepalived
             with the file \`bootpool site keepalived\` writes; s1's bootpool and keepalived die
  reference  (K = 2 only) bench/storm/reference.sh on each of two servers, nfs-ganesha or
             nbd-server serving the same tree or file, its address moved by keepalived with
             the same file and timers (no notify lines: nothing to tell), DHCP a Kea HA pair
             (load-balancing, heartbeat 1 s, partner down after 2 s, no unacked clients
             waited for); every process of s1's host dies (ganesha or nbd-server, its Kea,
             nginx, dnsmasq's TFTP, keepalived)
Then prints one table per side (booted of N, the clients that restarted their boot (the
goal: none), those that reconnected their root, the longest stall after the failure (the
goal: <= 5 s after kill -9, <= 15 s after link-down) and the time to all booted beside the
row with no failure), and one with the two sides side by side and their ratios (bootpool
over the reference). Other options go to bench/storm.sh (--think-scale, --client-link,
--bin...). The rows' JSON, tables and logs go to --out (default
bench/out/failover-storm-DATE/), the tables to --out/failover.md; --record NAME keeps the
run in bench/records/failover-storm-NAME/ for git (meta.txt, failover.md, the configs, each
row's .cmd, .txt and JSON, gzipped over 256 KiB). Needs root, Debian's
postgresql and keepalived, and what scripts/setup installs (kea-dhcp4-server, nbd-server,
nginx-light for the reference).
EOF
}

ARGS="$*"
K=2 CLIENTS=40 ROOTS="nfs nbd" AT=20 RATE=500mbit OUT="" PASS=() STACKS="bootpool reference"
RECORD=""
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --servers) K="$2"; shift ;;
        --clients) CLIENTS="$2"; shift ;;
        --roots) ROOTS="$2"; shift ;;
        --fail-at) AT="$2"; shift ;;
        --link-rate) RATE="$2"; shift ;;
        --stacks) STACKS="$2"; shift ;;
        --record) RECORD="$2"; shift ;;
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
echo "cd $REPO && $0 $ARGS  # $(date -u +%FT%TZ), commit $(git -C "$REPO" rev-parse --short HEAD)" \
    > "$OUT/command.txt"
[ "$K" = 2 ] || STACKS="${STACKS/reference/}"
for root in $ROOTS; do
    for fail in "" kill linkdown; do
        "$HERE/storm.sh" --servers "$K" --links 1 --link-rate "$RATE" --clients "$CLIENTS" \
            --roots "$root" --stacks "$STACKS" --out "$OUT" \
            ${fail:+--fail "$fail" --fail-at "$AT"} ${PASS[@]+"${PASS[@]}"} > /dev/null
    done
done

python3 - "$OUT" <<'PY' | tee "$OUT/failover.md"
import json, os, sys
out = sys.argv[1]
runs = {}
for f in sorted(os.listdir(out)):
    if f.endswith(".json") and "-site" in f:
        runs[f[:-5]] = json.load(open(os.path.join(out, f)))
def fmt(v, d=1):
    return "-" if v is None else f"{v:.{d}f}"
def side(name):
    return name.split("-")[0]
def base(r, stack):
    return next((b for n, b in runs.items() if side(n) == stack and not b.get("failure")
                 and b["root"] == r["root"]), None)
for stack in ("bootpool", "reference"):
    mine = {n: r for n, r in runs.items() if side(n) == stack}
    if not mine:
        continue
    print(f"\n{stack}:\n")
    print("| row | root | failure | booted | restarted (goal 0) | reconnected | longest stall after it, s (goal) | all booted s | with no failure s |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, r in mine.items():
        s, f = r["summary"], r.get("failure")
        b = base(r, stack)
        base_s = b["summary"]["all_booted_s"] if b else None
        if f is None:
            print(f"| {name} | {r['root']} | none | {s['booted']} / {s['clients']} | - | {s['clients_reconnected']} | - | {fmt(s['all_booted_s'])} | {fmt(base_s)} |")
            continue
        print(f"| {name} | {r['root']} | {f['kind']} of {f['member']} at {f['at_s']:.1f} s | {f['booted']} / {f['clients']} | {f['restarted']} | {f['reconnected']} | {fmt(f['longest_stall_s'])} ({f['goal_s']:.0f}) | {fmt(s['all_booted_s'])} | {fmt(base_s)} |")
# Side by side: the same root, failure and size, bootpool over the reference.
pairs = [(n, r, runs.get("reference" + n[len("bootpool"):])) for n, r in runs.items()
         if side(n) == "bootpool"]
pairs = [(n, r, ref) for n, r, ref in pairs if ref]
if pairs:
    def ratio(a, b):
        return "-" if a is None or not b else f"{a / b:.2f}"
    def cells(r):
        s, f = r["summary"], r.get("failure") or {}
        return (f"{s['booted']} of {s['clients']}", f.get("restarted", "-"),
                f.get("longest_stall_s"), s["all_booted_s"])
    print("\nside by side (bootpool / reference; ratios bootpool over the reference):\n")
    print("| root, failure | booted | restarted | longest stall after it, s | stall ratio | all booted s | all booted ratio | with no failure s |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r, ref in pairs:
        f = r.get("failure")
        what = f"{r['root']}-{r['summary']['clients']}, " + (f"{f['kind']} at {f['at_s']:.0f} s" if f else "none")
        (b1, r1, st1, a1), (b2, r2, st2, a2) = cells(r), cells(ref)
        nb, nr = base(r, "bootpool"), base(ref, "reference")
        n1 = nb["summary"]["all_booted_s"] if nb else None
        n2 = nr["summary"]["all_booted_s"] if nr else None
        print(f"| {what} | {b1} / {b2} | {r1} / {r2} | {fmt(st1)} / {fmt(st2)} | {ratio(st1, st2)} | {fmt(a1)} / {fmt(a2)} | {ratio(a1, a2)} | {fmt(n1)} / {fmt(n2)} |")
PY
echo "failover-storm.sh: runs and table in $OUT" >&2
if [ -n "$RECORD" ]; then
    KEEP="$REPO/bench/records/failover-storm-$RECORD"
    mkdir -p "$KEEP"
    cp "$OUT/command.txt" "$OUT/meta.txt" "$OUT/failover.md" "$OUT"/pools-*.yaml "$KEEP/"
    for f in "$OUT"/*-site*.json; do
        name="$(basename "$f" .json)"
        cp "$OUT/$name.cmd" "$OUT/$name.txt" "$KEEP/"
        if [ "$(stat -c %s "$f")" -gt 262144 ]; then
            gzip -9 -c "$f" > "$KEEP/$name.json.gz"
        else
            cp "$f" "$KEEP/"
        fi
    done
    echo "failover-storm.sh: kept in $KEEP (git add it)" >&2
fi
