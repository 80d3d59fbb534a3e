#!/usr/bin/env bash
# DHCP side by side: perfdhcp DORA exchanges per second against dnsmasq, kea-dhcp4 and
# bootpool. Each server runs in its own pair of network namespaces joined by a veth (perfdhcp
# relays: it needs a broadcast link and its own address for giaddr). Same subnet and range
# size for all; rounds interleaved; medians reported.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: bench/dhcp.sh [--rounds N] [--seconds S] [--clients N] [--rate R] [--out FILE]
                     [--servers "S1 S2.."] [--bin PATH] [--before PATH]

Each round runs perfdhcp for S seconds (default 10) at up to R exchanges/s (default 20000,
above what any server answers here) with N simulated clients (default 10000) against each
server in turn, in a fresh state (empty lease file). Reports completed 4-way exchanges/s
and the drop ratios. Needs root, perfdhcp (Debian kea-admin), kea-dhcp4 (kea-dhcp4-server),
dnsmasq. Builds bootpool --release into /work/target-bench.
Prints a markdown table; raw numbers go to --out (default bench/out/dhcp.csv).
  --servers  which servers to run (default: bootpool dnsmasq kea)
  --bin      serve with this bootpool binary instead of building one
  --before   also run this (older) bootpool binary as server "before", in the same rounds
USAGE
}

ROUNDS=7 SECS=10 CLIENTS=10000 RATE=20000 OUT="" BIN="" BEFORE="" LIST="bootpool dnsmasq kea"
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --seconds) SECS=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --servers) LIST=$2; shift 2 ;;
    --bin) BIN=$(realpath "$2"); shift 2 ;;
    --before) BEFORE=$(realpath "$2"); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done

REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$REPO/bench/out/dhcp.csv}
mkdir -p "$(dirname "$OUT")"
W=$(mktemp -d /tmp/bp-bench-dhcp.XXXXXX)
read -ra SERVERS <<<"$LIST"
[ -n "$BEFORE" ] && SERVERS+=(before)
PID=""

stop_server() {
  if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; PID=""; fi
}
cleanup() {
  stop_server
  for s in "${SERVERS[@]}"; do
    ip netns del "bpd-$s-s" 2>/dev/null || true
    ip netns del "bpd-$s-c" 2>/dev/null || true
  done
  rm -rf "$W"
}
trap cleanup EXIT

. "$REPO/bench/common.sh"
bootpool_binary "$W/bootpool" "$BIN"
[ -n "$BEFORE" ] && cp "$BEFORE" "$W/before"

# Subnet 10.79.0.0/16 everywhere; the range holds 65,023 addresses.
FIRST=10.79.2.1 LAST=10.79.255.254
for s in "${SERVERS[@]}"; do
  ip netns add "bpd-$s-s"; ip netns add "bpd-$s-c"
  ip link add "bpd$s" netns "bpd-$s-s" type veth peer name "bpc$s" netns "bpd-$s-c"
  ip -n "bpd-$s-s" addr add 10.79.0.1/16 dev "bpd$s"
  ip -n "bpd-$s-c" addr add 10.79.0.2/16 dev "bpc$s"
  for ns in "bpd-$s-s" "bpd-$s-c"; do ip -n "$ns" link set lo up; done
  ip -n "bpd-$s-s" link set "bpd$s" up; ip -n "bpd-$s-c" link set "bpc$s" up
done

start_server() { # name: a fresh server with an empty lease database
  local s=$1 ns="bpd-$1-s" if="bpd$1" st="$W/state-$1"
  rm -rf "$st"; mkdir -p "$st/img"
  case "$s" in
    bootpool|before)
      : > "$st/img/vmlinuz"; : > "$st/img/initrd.img"; : > "$st/img/rootfs.img"
      cat > "$st/pools.yaml" <<YAML
server:
  interfaces: [$if]
  address: 10.79.0.1
  http: 10.79.0.1:0
  state_dir: $st/var
  loaders: $st/img
  ports: { dhcp: 67, tftp: 0, nfs: 0, nbd: 0, portmap: 0 }
dhcp: { subnet: 10.79.0.0/16, range: $FIRST-$LAST, lease: 1h }
images:
  demo: { dir: $st/img }
pools:
  hall:
    image: demo
    root: nbd
    clients:
      - { macs: "52:54:00:79:00:00-52:54:00:79:ff:ff" }
YAML
      RUST_LOG=warn ip netns exec "$ns" "$W/$s" serve --config "$st/pools.yaml" \
        >"$st/log" 2>&1 &
      ;;
    dnsmasq)
      ip netns exec "$ns" dnsmasq --no-daemon --conf-file=/dev/null --port=0 --user=root \
        --interface="$if" --bind-interfaces --no-ping --dhcp-authoritative \
        --dhcp-range="$FIRST,$LAST,255.255.0.0,1h" --dhcp-lease-max=70000 \
        --dhcp-leasefile="$st/leases" --pid-file= >"$st/log" 2>&1 &
      ;;
    kea)
      cat > "$st/kea.json" <<JSON
{ "Dhcp4": {
    "interfaces-config": { "interfaces": [ "$if" ] },
    "lease-database": { "type": "memfile", "persist": true, "name": "$st/leases.csv",
                        "lfc-interval": 0 },
    "valid-lifetime": 3600,
    "subnet4": [ { "id": 1, "subnet": "10.79.0.0/16",
                   "pools": [ { "pool": "$FIRST - $LAST" } ] } ],
    "loggers": [ { "name": "kea-dhcp4", "severity": "WARN",
                   "output_options": [ { "output": "$st/log" } ] } ] } }
JSON
      KEA_PIDFILE_DIR=$st KEA_LOCKFILE_DIR=$st ip netns exec "$ns" kea-dhcp4 -c "$st/kea.json" \
        >"$st/out" 2>&1 &
      ;;
  esac
  PID=$!
  sleep 1.5
  kill -0 "$PID" 2>/dev/null || { echo "$s did not start:" >&2; cat "$st"/log "$st"/out 2>/dev/null >&2; exit 1; }
}

echo "round,server,exchanges_per_s,do_drop_pct,ra_drop_pct" > "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  for s in "${SERVERS[@]}"; do
    start_server "$s"
    res=$(ip netns exec "bpd-$s-c" timeout $((SECS + 30)) perfdhcp -4 -l "bpc$s" \
            -b mac=52:54:00:79:00:00 -R "$CLIENTS" -r "$RATE" -p "$SECS" 10.79.0.1 2>&1 || true)
    stop_server
    rate=$(grep -oP 'Rate: \K[0-9.]+' <<<"$res" | head -1)
    drops=($(grep -oP 'drops ratio: \K[0-9.]+' <<<"$res"))
    echo "$r,$s,${rate:-0},${drops[0]:-100},${drops[1]:-100}" >> "$OUT"
    echo "round $r $s: ${rate:-0}/s" >&2
  done
done

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
col() { awk -F, -v s="$1" -v c="$2" 'NR > 1 && $2 == s { print $c }' "$OUT"; }
echo
echo "DHCP DORA, perfdhcp -R $CLIENTS at up to $RATE/s for ${SECS}s, $ROUNDS interleaved rounds, medians"
echo
echo "| server | 4-way exchanges/s | DISCOVER drop % | REQUEST drop % |"
echo "|---|---|---|---|"
for s in "${SERVERS[@]}"; do
  printf '| %s | %.0f | %s | %s |\n' "$s" "$(col "$s" 3 | median)" "$(col "$s" 4 | median)" "$(col "$s" 5 | median)"
done
