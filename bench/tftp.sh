#!/usr/bin/env bash
# TFTP side by side: bootpool against tftpd-hpa, atftpd and dnsmasq, each in its own network
# namespace on 127.0.0.1:69 (dnsmasq cannot move its TFTP port), clients in the same namespace.
# Rounds are interleaved (every server once per round) and the medians reported.
set -euo pipefail

usage() {
  cat <<'USAGE'
usage: bench/tftp.sh [--rounds N] [--size-mib N] [--clients N] [--client-mib N] [--out FILE]
                     [--servers "S1 S2.."] [--rows "R1 R2.."] [--bin PATH] [--before PATH]

Rows (blksize 1468 everywhere):
  atftp 1 client   one 64 MiB file with the atftp client
  curl 1 client    the same with curl (blksize only)
  atftp ws16       atftp with windowsize 16 (servers without RFC 7440 ignore it)
  20 clients       N atftp clients at once, each its own 32 MiB copy: aggregate MB/s and
                   the slowest client's seconds (and slowest/fastest)
Needs root, tftpd-hpa (in.tftpd), atftp, curl, dnsmasq; atftpd is unpacked from its .deb
(it conflicts with tftpd-hpa). Builds bootpool --release into /work/target-bench.
Prints a markdown table; raw times go to --out (default bench/out/tftp.csv).
  --servers  which servers to run (default: bootpool tftpd-hpa atftpd dnsmasq)
  --rows     which rows to run (atftp curl ws16 many; default all)
  --bin      serve with this bootpool binary instead of building one
  --before   also run this (older) bootpool binary as server "before", in the same rounds
USAGE
}

ROUNDS=7 SIZE=64 CLIENTS=20 CSIZE=32 OUT="" SERVER_LIST="" ROWS="atftp curl ws16 many" BIN="" BEFORE=""
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) ROUNDS=$2; shift 2 ;;
    --size-mib) SIZE=$2; shift 2 ;;
    --clients) CLIENTS=$2; shift 2 ;;
    --client-mib) CSIZE=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    --servers) SERVER_LIST=$2; shift 2 ;;
    --rows) ROWS=$2; shift 2 ;;
    --bin) BIN=$2; shift 2 ;;
    --before) BEFORE=$2; shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
done

REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=${OUT:-$REPO/bench/out/tftp.csv}
mkdir -p "$(dirname "$OUT")"
W=$(mktemp -d /tmp/bp-bench-tftp.XXXXXX)
read -r -a SERVERS <<< "${SERVER_LIST:-bootpool tftpd-hpa atftpd dnsmasq}"
[ -n "$BEFORE" ] && SERVERS=(before "${SERVERS[@]}")
PIDS=()

cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  for s in "${SERVERS[@]}"; do ip netns del "bpb-$s" 2>/dev/null || true; done
  rm -rf "$W"
}
trap cleanup EXIT

. "$REPO/bench/common.sh"
bootpool_binary "$W/bootpool" "$BIN"
[ -z "$BEFORE" ] || cp "$BEFORE" "$W/before"

if [ ! -x "$W/atftpd/usr/sbin/atftpd" ]; then
  (cd "$W" && apt-get download -q atftpd >/dev/null 2>&1 && dpkg -x atftpd_*.deb atftpd)
fi

ROOT=$W/root
chmod 755 "$W"  # tftpd-hpa drops to an unprivileged user
mkdir -p "$ROOT" "$W/img"
head -c $((SIZE << 20)) /dev/urandom > "$ROOT/big"
for i in $(seq 1 "$CLIENTS"); do head -c $((CSIZE << 20)) /dev/urandom > "$ROOT/c$i"; done
: > "$W/img/vmlinuz"; : > "$W/img/initrd.img"; : > "$W/img/rootfs.img"
cat > "$W/pools.yaml" <<YAML
server:
  interfaces: []
  address: 127.0.0.1
  http: 127.0.0.1:0
  state_dir: $W/var
  loaders: $ROOT
  ports: { dhcp: 0, tftp: 69, nfs: 0, nbd: 0, portmap: 0 }
dhcp: { subnet: 127.0.0.0/8, range: 127.0.0.100-127.0.0.199 }
images:
  demo: { dir: $W/img }
pools:
  bench:
    image: demo
    root: nbd
    clients:
      - { mac: "52:54:00:99:00:01" }
YAML

start() { # name: starts the server in its namespace
  local ns="bpb-$1"
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  # tftpd-hpa resolves its address with AI_ADDRCONFIG, which ignores loopback: give the
  # namespace one other address (no dummy driver here, so a veth pair inside it).
  ip -n "$ns" link add bpv0 type veth peer name bpv1
  ip -n "$ns" addr add 10.99.0.1/24 dev bpv0
  ip -n "$ns" link set bpv0 up
  ip -n "$ns" link set bpv1 up
  case "$1" in
    bootpool|before) # each daemon its own state folder
      sed "s|state_dir: .*|state_dir: $W/var-$1|" "$W/pools.yaml" > "$W/pools-$1.yaml"
      RUST_LOG=warn ip netns exec "$ns" "$W/$1" serve --config "$W/pools-$1.yaml" \
                >"$W/$1.log" 2>&1 & ;;
    tftpd-hpa) ip netns exec "$ns" /usr/sbin/in.tftpd -L -s "$ROOT" -a 127.0.0.1:69 \
                >"$W/$1.log" 2>&1 & ;;
    atftpd) ip netns exec "$ns" "$W/atftpd/usr/sbin/atftpd" --daemon --no-fork --user root.root \
              --bind-address 127.0.0.1 --port 69 --logfile /dev/null --maxthread 200 "$ROOT" \
                >"$W/$1.log" 2>&1 & ;;
    dnsmasq) ip netns exec "$ns" dnsmasq --no-daemon --conf-file=/dev/null --port=0 --user=root \
               --enable-tftp --tftp-root="$ROOT" --tftp-max=200 --listen-address=127.0.0.1 \
               --bind-interfaces --pid-file= >"$W/$1.log" 2>&1 & ;;
  esac
  PIDS+=($!)
}

for s in "${SERVERS[@]}"; do start "$s"; done
sleep 1
for s in "${SERVERS[@]}"; do
  ip netns exec "bpb-$s" curl -s --max-time 20 -o /dev/null "tftp://127.0.0.1/c1" \
    || { echo "$s does not serve TFTP; log:" >&2; cat "$W/$s.log" >&2; exit 1; }
done

now() { echo "$EPOCHREALTIME"; }
want() { [[ " $ROWS " == *" $1 "* ]]; }
# One timed transfer in namespace $1: prints seconds. $2.. is the client command.
timed() {
  local ns=$1; shift
  local t0 t1
  t0=$(now)
  ip netns exec "$ns" timeout 300 "$@" >/dev/null 2>&1 || { echo "fail"; return; }
  t1=$(now)
  awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", b - a }'
}

echo "round,server,row,seconds,extra" > "$OUT"
for r in $(seq 1 "$ROUNDS"); do
  for s in "${SERVERS[@]}"; do
    ns="bpb-$s"
    if want atftp; then
      t=$(timed "$ns" atftp --get -r big -l /dev/null --option "blksize 1468" 127.0.0.1 69)
      echo "$r,$s,atftp,$t," >> "$OUT"
    fi
    if want curl; then
      t=$(timed "$ns" curl -s --tftp-blksize 1468 -o /dev/null tftp://127.0.0.1/big)
      echo "$r,$s,curl,$t," >> "$OUT"
    fi
    if want ws16; then
      t=$(timed "$ns" atftp --get -r big -l /dev/null --option "blksize 1468" \
            --option "windowsize 16" 127.0.0.1 69)
      echo "$r,$s,ws16,$t," >> "$OUT"
    fi
    want many || { echo "round $r $s done" >&2; continue; }
    # N clients at once, each timed on its own. They wait at a barrier (a file appearing) so
    # that all start together: started one after another, the first ones would run with
    # fewer competitors for a while and the spread would measure the script, not the server.
    rm -f "$W/go"
    many=()
    for i in $(seq 1 "$CLIENTS"); do
      ( while [ ! -e "$W/go" ]; do sleep 0.01; done
        timed "$ns" atftp --get -r "c$i" -l /dev/null --option "blksize 1468" 127.0.0.1 69 \
          > "$W/t$i" ) &
      many+=($!)
    done
    sleep 0.5
    t0=$(now)
    touch "$W/go"
    wait "${many[@]}"
    t1=$(now)
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f\n", b - a }')
    times=$(cat "$W"/t* | tr '\n' ' ')
    slow=$(printf '%s\n' $times | sort -g | tail -1)
    fast=$(printf '%s\n' $times | sort -g | head -1)
    rm -f "$W"/t*
    echo "$r,$s,many,$wall,$slow $fast" >> "$OUT"
    echo "round $r $s done" >&2
  done
done

median() { sort -g | awk '{ a[NR] = $1 } END { if (NR == 0) print "nan"; else if (NR % 2) print a[(NR + 1) / 2]; else print (a[NR / 2] + a[NR / 2 + 1]) / 2 }'; }
col() { awk -F, -v s="$1" -v r="$2" -v c="$3" '$2 == s && $3 == r && $4 != "fail" { split($5, e, " "); v[1] = $4; v[2] = e[1]; v[3] = e[2]; print v[c] }' "$OUT"; }
fails() { awk -F, -v s="$1" '$2 == s && $4 == "fail"' "$OUT" | wc -l; }

mbs() { awk -v mib="$1" -v t="$2" 'BEGIN { if (t + 0 > 0) printf "%.0f", mib * 1.048576 / t; else print "-" }'; }
echo
echo "TFTP on loopback, $ROUNDS interleaved rounds, medians (MB/s = 10^6 bytes/s)"
echo
echo "| server | atftp 1 client MB/s | curl 1 client MB/s | atftp ws16 MB/s | $CLIENTS x $CSIZE MiB aggregate MB/s | slowest client s | slowest/fastest | failed transfers |"
echo "|---|---|---|---|---|---|---|---|"
for s in "${SERVERS[@]}"; do
  a=$(col "$s" atftp 1 | median); c=$(col "$s" curl 1 | median); w=$(col "$s" ws16 1 | median)
  m=$(col "$s" many 1 | median); slow=$(col "$s" many 2 | median); fast=$(col "$s" many 3 | median)
  ratio=$(awk -v a="$slow" -v b="$fast" 'BEGIN { if (b + 0 > 0) printf "%.2f", a / b; else print "-" }')
  echo "| $s | $(mbs "$SIZE" "$a") | $(mbs "$SIZE" "$c") | $(mbs "$SIZE" "$w") | $(mbs $((CLIENTS * CSIZE)) "$m") | $slow | $ratio | $(fails "$s") |"
done
