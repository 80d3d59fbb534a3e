#!/usr/bin/env bash
# bench/storm-matrix.sh: the storm's plain rows over room sizes and numbers of server links,
# one table of ratios at the end. See --help.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"

usage() {
    cat <<EOF
usage: $0 [--sizes "20 40 120 200"] [--links "2 3 4"] [--capacity RATE] [--roots "nbd nfs"]
          [--client-link RATE] [--think-scale F] [--bin PATH] [--out DIR] [--record NAME]

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
The goal of issue 42 part 3, checked per cell: bootpool's links >= 95% of capacity while
clients wait, its time <= 1.00x the ideal bond's and <= 0.85x the hashed bond's, and no
firmware retry.
  --bin   the bootpool binary (default: a release build of this checkout)
EOF
}

ARGS="$*"
SIZES="20 40 120 200" LINKS="2 3 4" CAPACITY=1gbit ROOTS="nbd nfs" CLIENT=100mbit THINK=0.2
BIN="" OUT="" RECORD=""
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --sizes) SIZES="$2"; shift ;;
        --links) LINKS="$2"; shift ;;
        --capacity) CAPACITY="$2"; shift ;;
        --roots) ROOTS="$2"; shift ;;
        --client-link) CLIENT="$2"; shift ;;
        --think-scale) THINK="$2"; shift ;;
        --bin) BIN="$2"; shift ;;
        --out) OUT="$2"; shift ;;
        --record) RECORD="$2"; shift ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
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
            cell="$OUT/$root-${k}x$n"
            echo "storm-matrix: $root, $n clients, $k links of $(per_link "$k")" >&2
            bash "$HERE/storm.sh" --clients "$n" --big 0 --roots "$root" --links "$k" \
                --link-rate "$(per_link "$k")" --client-link "$CLIENT" --think-scale "$THINK" \
                --optins "" --rows "bootpool-links reference-bond reference-hashed" \
                --bin "$BIN" --out "$cell" > /dev/null
        done
    done
done

python3 - "$OUT" <<'EOF' | tee "$OUT/matrix.md"
import json, os, re, sys
out = sys.argv[1]
def load(cell, row):
    d = os.path.join(out, cell)
    for f in os.listdir(d):
        if f.startswith(row + "-") and f.endswith(".json"):
            return json.load(open(os.path.join(d, f)))
    return None
def fmt(v, d=1):
    return "-" if v is None else f"{v:.{d}f}"
def pct(r):
    u = None if r is None else r["summary"].get("waited_util")
    return "-" if u is None else f"{u*100:.0f}%"
def secs(r):
    return None if r is None else r["summary"]["all_booted_s"]
def ratio(a, b):
    return None if not (a and b) else a / b
print("| root | links | clients | booted | bootpool s | ref. bond s | ref. hashed s | bound s | x bond | x hashed | bootpool links while waited | ref. bond's | firmware retries DHCP / TFTP | hashed bond's clients per link | private KiB per client (bootpool / ref. bond) | CPU-bound s (bootpool / ref.) | goal met |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
cells = [c for c in os.listdir(out)
         if os.path.isdir(os.path.join(out, c)) and re.fullmatch(r"[a-z]+-[0-9]+x[0-9]+", c)]
cells.sort(key=lambda c: (c.split("-")[0], *map(int, c.split("-")[1].split("x"))))
for cell in cells:
    root, kn = cell.split("-")
    k, n = kn.split("x")
    bp, bond, hashed = (load(cell, r) for r in ("bootpool-links", "reference-bond", "reference-hashed"))
    if bp is None:
        continue
    s = bp["summary"]
    a, b, h = secs(bp), secs(bond), secs(hashed)
    xb, xh = ratio(a, b), ratio(a, h)
    util = s.get("waited_util")
    fw = (s["dhcp_retransmits"], s["tftp_retries"])
    cpu = lambda r: "-" if r is None or r.get("host") is None else f"{r['host']['cpu_bound_s']:.0f}"
    bound = (bp.get("bound") or {}).get("bound_s")
    spread = "-" if hashed is None else " / ".join(str(l.get("clients", "?")) for l in hashed.get("links", []))
    private = lambda r: "-" if r is None or r["server"].get("private_per_client_kib") is None else f"{r['server']['private_per_client_kib']:.0f}"
    met = (util is not None and util >= 0.95 and xb is not None and xb <= 1.0
           and xh is not None and xh <= 0.85 and fw == (0, 0) and s["failed"] == 0)
    print(f"| {root} | {k} | {n} | {s['booted']}/{s['clients']} | {fmt(a)} | {fmt(b)} | {fmt(h)} | {fmt(bound)} | {fmt(xb, 2)} | {fmt(xh, 2)} | {pct(bp)} | {pct(bond)} | {fw[0]} / {fw[1]} | {spread} | {private(bp)} / {private(bond)} | {cpu(bp)} / {cpu(bond)} | {'yes' if met else 'no'} |")
EOF

if [ -n "$RECORD" ]; then
    KEEP="$REPO/bench/records/storm-matrix-$RECORD"
    mkdir -p "$KEEP"
    cp "$OUT/meta.txt" "$OUT/matrix.md" "$KEEP/"
    for cell in "$OUT"/*/; do
        c="$(basename "$cell")"
        mkdir -p "$KEEP/$c"
        cp "$cell"/meta.txt "$cell"/summary.md "$cell"/*.cmd "$cell"/*.txt "$KEEP/$c/" 2>/dev/null || true
        for f in "$cell"/*.json; do
            if [ "$(stat -c %s "$f")" -gt 262144 ]; then
                gzip -9 -c "$f" > "$KEEP/$c/$(basename "$f").gz"
            else
                cp "$f" "$KEEP/$c/"
            fi
        done
    done
    echo "storm-matrix: kept in $KEEP (git add it)" >&2
fi
