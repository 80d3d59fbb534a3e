#!/usr/bin/env bash
# bench/storm-matrix.sh: the storm's plain rows over room sizes and numbers of server links,
# one table of ratios at the end. See --help.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"

usage() {
    cat <<EOF
usage: $0 [--sizes "20 40 120 200"] [--links "2 3 4"] [--capacity RATE] [--roots "nbd nfs"]
          [--client-link RATE] [--think-scale F] [--repeat R] [--bin PATH] [--out DIR]
          [--record NAME]

Runs bench/storm.sh once per cell (a room size N and a number of server links K), with three
plain rows each, like for like (the same files, client options and trace on both sides):
  bootpool-links     bootpool on K links of CAPACITY/K
  reference-bond     dnsmasq + nginx + nfs-ganesha or nbd-server on one link of CAPACITY
                     (an ideal bond)
  reference-hashed   the same stack on K links of CAPACITY/K under one address, each client's
                     frames on the link its MAC hashes onto (a layer-2 bond's transmit hash)
then prints, per root and cell: the times, bootpool's time over each reference's, the share
of capacity each side's links carried while clients waited, the lower bound, the firmware's
retries (DHCP / TFTP), the servers' private memory per client (issue 42 part 4), and how long the machine's CPUs, not the links, set the pace (a cell
with CPU-bound seconds is marked: its figures say more about the machine than the servers).
The total capacity stays CAPACITY (default 1gbit) whatever K, so that two cores can push it;
clients at --client-link (default 100mbit). Each cell's rows, JSON and commands are kept in
--out/ROOT-KxN/ (default bench/out/storm-matrix-DATE/); --record NAME copies them and the
matrix to bench/records/storm-matrix-NAME/ (JSON over 256 KiB gzipped).
--repeat R (default 1) runs each cell R times, the three rows one after the other each time
(so the sides interleave and share the machine's drift), into --out/ROOT-KxN/run-I/; the
matrix then gives each figure as the mean over the runs with its range (lowest-highest), and
a cell meets the goal when the means do and every run booted all with no firmware retry. One
storm a cell varies by 2-3% from the next: a verdict on 95% or 1.00x wants R >= 3.
The goal of issue 42 part 3, checked per cell: bootpool's links >= 95% of capacity while
clients wait, its time <= 1.00x the ideal bond's and <= 0.85x the hashed bond's, and no
firmware retry.
  --bin   the bootpool binary (default: a release build of this checkout)
EOF
}

ARGS="$(printf "%q " "$@")"
SIZES="20 40 120 200" LINKS="2 3 4" CAPACITY=1gbit ROOTS="nbd nfs" CLIENT=100mbit THINK=0.2
REPEAT=1 BIN="" OUT="" RECORD=""
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --sizes) SIZES="$2"; shift ;;
        --links) LINKS="$2"; shift ;;
        --capacity) CAPACITY="$2"; shift ;;
        --roots) ROOTS="$2"; shift ;;
        --client-link) CLIENT="$2"; shift ;;
        --think-scale) THINK="$2"; shift ;;
        --repeat) REPEAT="$2"; shift ;;
        --bin) BIN="$2"; shift ;;
        --out) OUT="$2"; shift ;;
        --record) RECORD="$2"; shift ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
case "$REPEAT" in
    ''|*[!0-9]*|0) echo "--repeat wants a whole number of runs, 1 or more: $REPEAT" >&2; exit 2 ;;
esac
if [ -z "$BIN" ]; then
    (cd "$REPO" && cargo build --release --quiet)
    BIN="$REPO/target/release/bootpool"
fi
OUT="${OUT:-$REPO/bench/out/storm-matrix-$(date -u +%Y%m%d-%H%M)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
echo "command: $0 $ARGS" > "$OUT/meta.txt"

# CAPACITY / K as a rate storm.sh and server.link_speeds read, in whole Mbit/s (3 links of a
# gigabit are 3 x 333).
per_link() {
    python3 -c "
import re,sys; m=re.fullmatch(r'([0-9.]+)([kmg]?)(bit)?', sys.argv[1].lower())
mbit={'':1e-6,'k':1e-3,'m':1,'g':1e3}[m.group(2)]
print(f'{int(float(m.group(1))*mbit/int(sys.argv[2]))}mbit')" "$CAPACITY" "$1"
}

for root in $ROOTS; do
    for k in $LINKS; do
        for n in $SIZES; do
            for i in $(seq 1 "$REPEAT"); do
                cell="$OUT/$root-${k}x$n"
                [ "$REPEAT" -gt 1 ] && cell="$cell/run-$i"
                echo "storm-matrix: $root, $n clients, $k links of $(per_link "$k"), run $i of $REPEAT" >&2
                bash "$HERE/storm.sh" --clients "$n" --big 0 --roots "$root" --links "$k" \
                    --link-rate "$(per_link "$k")" --client-link "$CLIENT" --think-scale "$THINK" \
                    --optins "" --rows "bootpool-links reference-bond reference-hashed" \
                    --bin "$BIN" --out "$cell" > /dev/null
            done
        done
    done
done

python3 - "$OUT" <<'EOF' | tee "$OUT/matrix.md"
import json, os, re, sys
out = sys.argv[1]
def load(d, row):
    for f in os.listdir(d):
        if f.startswith(row + "-") and f.endswith(".json"):
            return json.load(open(os.path.join(d, f)))
    return None
def runs(cell):
    """A cell's run folders: the cell itself (one run), else its run-I folders in order."""
    d = os.path.join(out, cell)
    subs = [s for s in os.listdir(d) if re.fullmatch(r"run-[0-9]+", s)]
    if not subs:
        return [d]
    return [os.path.join(d, s) for s in sorted(subs, key=lambda s: int(s[4:]))]
def summary(vals, d=1, scale=1.0, unit=""):
    """The mean of the runs' figures, with their range when there are several."""
    v = [x * scale for x in vals if x is not None]
    if not v:
        return "-"
    m = sum(v) / len(v)
    if len(v) == 1:
        return f"{m:.{d}f}{unit}"
    return f"{m:.{d}f}{unit} ({min(v):.{d}f}-{max(v):.{d}f})"
def mean(vals):
    v = [x for x in vals if x is not None]
    return None if not v else sum(v) / len(v)
def secs(r):
    return None if r is None else r["summary"]["all_booted_s"]
def util(r):
    return None if r is None else r["summary"].get("waited_util")
def ratio(a, b):
    return None if not (a and b) else a / b
def cpu(r):
    return None if r is None or r.get("host") is None else r["host"]["cpu_bound_s"]
def private(r):
    return None if r is None else r["server"].get("private_per_client_kib")
print("| root | links | clients | runs | booted | bootpool s | ref. bond s | ref. hashed s | bound s | x bond | x hashed | bootpool links while waited | ref. bond's | firmware retries DHCP / TFTP | hashed bond's clients per link | private KiB per client (bootpool / ref. bond) | CPU-bound s (bootpool / ref.) | goal met |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
cells = [c for c in os.listdir(out)
         if os.path.isdir(os.path.join(out, c)) and re.fullmatch(r"[a-z]+-[0-9]+x[0-9]+", c)]
cells.sort(key=lambda c: (c.split("-")[0], *map(int, c.split("-")[1].split("x"))))
for cell in cells:
    root, kn = cell.split("-")
    k, n = kn.split("x")
    rows = [tuple(load(d, r) for r in ("bootpool-links", "reference-bond", "reference-hashed"))
            for d in runs(cell)]
    rows = [r for r in rows if r[0] is not None]
    if not rows:
        continue
    bps = [r[0] for r in rows]
    a = [secs(r[0]) for r in rows]
    b = [secs(r[1]) for r in rows]
    h = [secs(r[2]) for r in rows]
    xb = [ratio(secs(r[0]), secs(r[1])) for r in rows]
    xh = [ratio(secs(r[0]), secs(r[2])) for r in rows]
    u = [util(r[0]) for r in rows]
    ub = [util(r[1]) for r in rows]
    booted = sum(bp["summary"]["booted"] for bp in bps)
    clients = sum(bp["summary"]["clients"] for bp in bps)
    failed = sum(bp["summary"]["failed"] for bp in bps)
    fw = (sum(bp["summary"]["dhcp_retransmits"] for bp in bps),
          sum(bp["summary"]["tftp_retries"] for bp in bps))
    bound = summary([(bp.get("bound") or {}).get("bound_s") for bp in bps])
    spread = "; ".join(" / ".join(str(l.get("clients", "?")) for l in r[2].get("links", []))
                       for r in rows if r[2] is not None) or "-"
    mu, mxb, mxh = mean(u), mean(xb), mean(xh)
    met = (mu is not None and mu >= 0.95 and mxb is not None and mxb <= 1.0
           and mxh is not None and mxh <= 0.85 and fw == (0, 0) and failed == 0)
    print(f"| {root} | {k} | {n} | {len(rows)} | {booted}/{clients} | {summary(a)} | {summary(b)} "
          f"| {summary(h)} | {bound} | {summary(xb, 2)} | {summary(xh, 2)} "
          f"| {summary(u, 1, 100, '%')} | {summary(ub, 1, 100, '%')} | {fw[0]} / {fw[1]} | {spread} "
          f"| {summary([private(r[0]) for r in rows], 0)} / {summary([private(r[1]) for r in rows], 0)} "
          f"| {summary([cpu(r[0]) for r in rows], 0)} / {summary([cpu(r[1]) for r in rows], 0)} "
          f"| {'yes' if met else 'no'} |")
EOF

if [ -n "$RECORD" ]; then
    KEEP="$REPO/bench/records/storm-matrix-$RECORD"
    mkdir -p "$KEEP"
    cp "$OUT/meta.txt" "$OUT/matrix.md" "$KEEP/"
    # A cell's rows, or with --repeat each of its run-I folders' rows.
    for run in "$OUT"/*/ "$OUT"/*/run-*/; do
        [ -d "$run" ] || continue
        c="${run#"$OUT"/}"
        c="${c%/}"
        mkdir -p "$KEEP/$c"
        cp "$run"/meta.txt "$run"/summary.md "$run"/*.cmd "$run"/*.txt "$KEEP/$c/" 2>/dev/null || true
        for f in "$run"/*.json; do
            [ -f "$f" ] || continue
            if [ "$(stat -c %s "$f")" -gt 262144 ]; then
                gzip -9 -c "$f" > "$KEEP/$c/$(basename "$f").gz"
            else
                cp "$f" "$KEEP/$c/"
            fi
        done
    done
    echo "storm-matrix: kept in $KEEP (git add it)" >&2
fi
