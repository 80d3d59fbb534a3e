#!/usr/bin/env bash
# bench/storm.sh: the 08:00 storm, bootpool against the reference stack in one run. See --help.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"

usage() {
    cat <<EOF
usage: $0 [--clients N] [--big N] [--roots "nfs nbd"] [--links K] [--link-rate RATE]
          [--client-link RATE] [--think-scale F] [--out DIR] [--bin PATH]
          [--servers "bootpool reference"]

Boots a simulated room (\`bootpool storm\`, bench/storm/pools.yaml, the shipped traces in
bench/traces/) once per server, all in this one run:

  bootpool            bootpool serve on K links of RATE
  reference, bond     dnsmasq + nginx + nfs-ganesha (NFS) or nbd-server (NBD) on one link of
                      K x RATE: an ideal bond (this machine has no bonding driver)
  reference, 1 link   the same stack on K links of RATE; it tells every client one address,
                      so it uses one of them (a server with several NICs and no bond)

for each root in --roots with --clients (default 40) clients, then --big (default 200; 0 skips)
clients over NFS against bootpool and the reference on the ideal bond. The scale: clients at
--client-link (default 100mbit) and the server on --links (default 4) x --link-rate (default
250mbit): a tenth of a room of PCs on 1GbE, and a quarter of a server on 4 x 1GbE, so that two
cores can push it. --think-scale (default 0.2) stands the TCG-recorded traces' think times for
a real PC's (docs/storm.md). Each run's JSON goes to --out (default bench/out/storm-DATE/);
the summary, with ratios, is printed as a Markdown table at the end, and every run's links
and the machine's CPUs per second are drawn in --out/links-and-cpus.svg (bench/storm-plot.py).
Needs root and what scripts/setup installs, plus nfs-ganesha nfs-ganesha-vfs nbd-server nginx-light
(apt-get install them; their services are not started).
  --bin      run this bootpool binary instead of building one
  --servers  which of the two to run (default both; the summary covers every JSON in --out)
EOF
}

CLIENTS=40 BIG=200 ROOTS="nfs nbd" LINKS=4 RATE=250mbit CLIENT=100mbit THINK=0.2 OUT="" BIN=""
SERVERS="bootpool reference"
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --clients) CLIENTS="$2"; shift ;;
        --big) BIG="$2"; shift ;;
        --roots) ROOTS="$2"; shift ;;
        --links) LINKS="$2"; shift ;;
        --link-rate) RATE="$2"; shift ;;
        --client-link) CLIENT="$2"; shift ;;
        --think-scale) THINK="$2"; shift ;;
        --out) OUT="$2"; shift ;;
        --bin) BIN="$2"; shift ;;
        --servers) SERVERS="$2"; shift ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[ "$(id -u)" = 0 ] || { echo "storm.sh: must run as root" >&2; exit 1; }
for c in ganesha.nfsd rpcbind nbd-server nginx dnsmasq tc; do
    command -v "$c" >/dev/null || { echo "storm.sh: $c missing (see --help)" >&2; exit 1; }
done
if [ -z "$BIN" ]; then
    (cd "$REPO" && cargo build --release --quiet)
    BIN="$REPO/target/release/bootpool"
fi
OUT="${OUT:-$REPO/bench/out/storm-$(date -u +%Y%m%d-%H%M)}"
mkdir -p "$OUT"
WORK="$(mktemp -d /tmp/bootpool-storm.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
# The ideal bond: one link of K x RATE.
BOND="1x$(python3 -c "
import re,sys; m=re.fullmatch(r'([0-9.]+)([kmg]?)(bit)?', sys.argv[1].lower())
print(f'{float(m.group(1))*int(sys.argv[2]):g}{m.group(2)}bit')" "$RATE" "$LINKS")"

run() { # name root clients links [server-cmd]
    local name=$1 root=$2 n=$3 links=$4 cmd=${5:-}
    case " $SERVERS " in
        *" ${name%%-*} "*) ;;
        *) return 0 ;;
    esac
    local args=(storm --config "$REPO/bench/storm/pools.yaml" --root "$root" --clients "$n"
        --client-link "$CLIENT" --server-links "$links" --think-scale "$THINK"
        --json "$OUT/$name.json" --label "$name")
    if [ -n "$cmd" ]; then
        rm -rf "$WORK/ref"
        args+=(--server-cmd "$cmd" --ready-port 8080 --no-callback)
    fi
    echo "storm.sh: $name ($n clients, $root, links $links)" >&2
    (cd "$REPO" && "$BIN" "${args[@]}") > "$OUT/$name.txt" 2> "$OUT/$name.log" ||
        echo "storm.sh: $name: some clients did not boot (see $OUT/$name.txt)" >&2
    tail -n 12 "$OUT/$name.txt" >&2
}

for root in $ROOTS; do
    run "bootpool-$root-$CLIENTS" "$root" "$CLIENTS" "${LINKS}x$RATE"
    run "reference-bond-$root-$CLIENTS" "$root" "$CLIENTS" "$BOND" "$HERE/storm/reference.sh $root $WORK/ref"
    run "reference-1link-$root-$CLIENTS" "$root" "$CLIENTS" "${LINKS}x$RATE" "$HERE/storm/reference.sh $root $WORK/ref"
done
if [ "$BIG" -gt 0 ]; then
    run "bootpool-nfs-$BIG" nfs "$BIG" "${LINKS}x$RATE"
    run "reference-bond-nfs-$BIG" nfs "$BIG" "$BOND" "$HERE/storm/reference.sh nfs $WORK/ref"
fi

python3 - "$OUT" <<'EOF'
import json, os, sys
out = sys.argv[1]
runs = {}
for f in sorted(os.listdir(out)):
    if f.endswith(".json"):
        runs[f[:-5]] = json.load(open(os.path.join(out, f)))
def fmt(v, d=1):
    return "-" if v is None else f"{v:.{d}f}"
def waited(s):
    # Older runs' JSON has no such figure.
    u = s.get("waited_util")
    return "-" if u is None else f"{u*100:.0f}% of {s['waited_s']:.0f} link-s"
def host(r):
    # Older runs' JSON has no such figure.
    h = r.get("host")
    return "-" if h is None else f"{h['mean_busy']*100:.0f}% / {h['cpu_bound_s']:.0f} s"
print("\n| run | clients | booted / failed / retried | all booted s | limit s | x limit | median s | p95 s | slowest/fastest | slowest/median | links used while wanted (mean / peak) | links used while waited for | MB per client (payload / wire) | server CPU s | KiB per client | machine's CPUs busy / CPU-bound s |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for name, r in runs.items():
    s, l, sv = r["summary"], r["limit"], r["server"]
    print(f"| {name} | {s['clients']} | {s['booted']} / {s['failed']} / {s['retried']} | {fmt(s['all_booted_s'])} | {fmt(l['limit_s'])} | {fmt(l['over_limit'], 2)} | {fmt(s['median_s'])} | {fmt(s['p95_s'])} | {fmt(s['slowest_over_fastest'], 2)} | {fmt(s['slowest_over_median'], 2)} | {s['mean_util']*100:.0f}% / {s['peak_util']*100:.0f}% | {waited(s)} | {s.get('payload_bytes_per_client', 0)/1e6:.1f} / {s.get('wire_bytes_per_client', 0)/1e6:.1f} | {sv['cpu_s']:.1f} | {sv['rss_per_client_kib']:.0f} | {host(r)} |")
print("\n| comparison | bootpool all booted s | reference s | bootpool / reference |")
print("|---|---|---|---|")
for name, r in runs.items():
    if not name.startswith("bootpool-"):
        continue
    rest = name[len("bootpool-"):]
    for kind in ("bond", "1link"):
        ref = runs.get(f"reference-{kind}-{rest}")
        if ref and r["summary"]["all_booted_s"] and ref["summary"]["all_booted_s"]:
            a, b = r["summary"]["all_booted_s"], ref["summary"]["all_booted_s"]
            print(f"| {rest}: bootpool vs reference ({kind}) | {a:.1f} | {b:.1f} | {a/b:.2f} |")
EOF
python3 "$HERE/storm-plot.py" "$OUT/links-and-cpus.svg" "$OUT"/*.json &&
    echo "storm.sh: the links and the machine's CPUs per second: $OUT/links-and-cpus.svg" >&2
