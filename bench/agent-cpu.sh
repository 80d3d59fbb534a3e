#!/usr/bin/env bash
# bench/agent-cpu.sh: the swarm agent's own CPU on one shaped link, beside a plain HTTP client
# reading the same bytes (issue 48: "<= 10% of one core at 1 Gbit/s"). See --help.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"

usage() {
    cat <<EOF
usage: $0 [--size MIB] [--rate RATE] [--runs N] [--agent [LABEL=]PATH]... [--bin PATH]
          [--out DIR] [--record NAME] [--limit SECONDS] [--unix-too]

Two network namespaces joined by one veth pair, each end's egress shaped by tc tbf to RATE
(default 1gbit; bucket 10 ms of the rate, queue 20 ms, as the storm shapes its links). In the
first a bootpool server (release build) serves an image whose root is SIZE MiB of random bytes
(default 1024) and its block manifest; the client's address is in server.admin_networks, so
the chunk routes answer it. In the second, one after the other, N rounds (default 3) of:

  agent    bootpool-agent --source MANIFEST_URL --listen 127.0.0.1:10809 (no peers), and
           nbdcopy nbd://127.0.0.1:10809/root to /dev/null through it: every chunk fetched
           from the server, checked against the manifest, served over NBD on loopback
  curl     the baseline any client pays: curl GETting every chunk of the same routes on one
           kept-alive connection into /dev/null: the same bytes over the same link, no check

With several --agent (e.g. --agent before=A --agent after=B) each round runs every agent in
turn, then curl: interleaved runs for a before/after comparison. With --unix-too each agent
runs twice a round, the second time serving nbdcopy on a Unix socket (--unix; rows LABEL-unix)
instead of TCP on 127.0.0.1.

For each run: user and system CPU seconds of the agent process (/proc/PID/stat, read
once the copy ended, the manifest fetch included), of nbdcopy and of curl (wait4's rusage),
the copy's seconds and bytes, CPU s per GB (1e9 bytes) and the share of one core the agent's
CPU per GB is at 1 Gbit/s (8 s per GB). summary.md has each row's median and the agent's cost
beyond curl's.

Caveat, as in the storm: this kernel may not account IRQ time, so softirq work (the veth's
receive path, tbf, the other side's TCP) is charged to whatever process runs on that CPU. Both
rows run on the same link, so the comparison is like for like; the absolute figures carry it.

Each run is bounded (--limit, default 60 s); the namespaces and the server go on exit (trap).
Evidence in --out (default bench/out/agent-cpu-DATE/): meta.txt (command, commit, date,
machine, load), runs.tsv, summary.md, server and agent logs; --record NAME copies meta.txt,
runs.tsv and summary.md to bench/records/NAME/.
  --bin    this bootpool binary (default: cargo build --release)
  --agent  this bootpool-agent (default: the release musl build); LABEL names its rows
Needs root, ip, tc, curl, nbdcopy (libnbd-bin), python3.
EOF
}

ARGS="$(printf "%q " "$@")"
SIZE=1024 RATE=1gbit RUNS=3 BIN="" OUT="" RECORD="" LIMIT=60 VIAS=tcp
AGENTS=()
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --size) SIZE="$2"; shift ;;
        --rate) RATE="$2"; shift ;;
        --runs) RUNS="$2"; shift ;;
        --agent) AGENTS+=("$2"); shift ;;
        --bin) BIN="$2"; shift ;;
        --out) OUT="$2"; shift ;;
        --record) RECORD="$2"; shift ;;
        --limit) LIMIT="$2"; shift ;;
        --unix-too) VIAS="tcp unix" ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[ "$(id -u)" = 0 ] || { echo "agent-cpu.sh: must run as root" >&2; exit 1; }
for c in ip tc curl nbdcopy python3; do
    command -v "$c" >/dev/null || { echo "agent-cpu.sh: $c missing" >&2; exit 1; }
done
OUT="${OUT:-$REPO/bench/out/agent-cpu-$(date -u +%Y%m%d-%H%M%S)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
TARGET="${CARGO_TARGET_DIR:-$REPO/target}"
if [ -z "$BIN" ]; then
    (cd "$REPO" && cargo build --release --quiet -p bootpool)
    BIN="$TARGET/release/bootpool"
fi
if [ "${#AGENTS[@]}" = 0 ]; then
    (cd "$REPO" && cargo build --release --quiet -p bootpool-agent --target x86_64-unknown-linux-musl)
    mkdir -p "$OUT/bin"
    cp "$TARGET/x86_64-unknown-linux-musl/release/bootpool-agent" "$OUT/bin/"
    AGENTS=("agent=$OUT/bin/bootpool-agent")
fi

TAG="apc$$"
SNS="$TAG-srv" CNS="$TAG-cli"
# The server holds an address of its pool's subnet (10.79.40.0/24) and one of an admin network
# (10.79.41.0/24), from which the client reads: the chunk routes answer server.admin_networks,
# which may not be a client subnet (the NBD pool's subnet, this room's, stays unused).
SERVER=10.79.40.1 ADMIN=10.79.41.1 CLIENT=10.79.41.2
SERVER_PID=""
cleanup() {
    [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null || true
    [ -n "${AGENT_PID:-}" ] && kill "$AGENT_PID" 2>/dev/null || true
    ip netns delete "$SNS" 2>/dev/null || true
    ip netns delete "$CNS" 2>/dev/null || true
    rm -rf "$OUT/srv/images/demo/rootfs.img"
}
trap cleanup EXIT INT TERM

{
    echo "command: $0 $ARGS"
    echo "commit: $(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$REPO" diff --quiet 2>/dev/null || echo ' (with changes)')"
    echo "server: $BIN ($("$BIN" --version 2>/dev/null || echo '?'))"
    for a in "${AGENTS[@]}"; do
        p="${a#*=}"
        echo "agent ${a%%=*}: $p ($(stat -c %s "$p") bytes, sha256 $(sha256sum "$p" | cut -c1-16))"
    done
    echo "date: $(date -u +%FT%TZ)"
    echo "machine: $(uname -srm), $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "shared: yes, this machine's CPUs were shared with other work during the runs"
    echo "link: one veth pair, each end's egress tbf $RATE; root $SIZE MiB of random bytes; $RUNS rounds"
    echo "IRQ time accounting: $(grep -q 'CONFIG_IRQ_TIME_ACCOUNTING=y' "/boot/config-$(uname -r)" 2>/dev/null && echo yes || echo 'no or unknown')"
} > "$OUT/meta.txt"
cat "$OUT/meta.txt" >&2

# The server's folder: an image whose root is random bytes (the other files are placeholders).
SRV="$OUT/srv"
mkdir -p "$SRV/images/demo" "$SRV/loaders" "$SRV/var"
head -c 3M /dev/urandom > "$SRV/images/demo/vmlinuz"
head -c 2M /dev/urandom > "$SRV/images/demo/initrd.img"
head -c "${SIZE}M" /dev/urandom > "$SRV/images/demo/rootfs.img"
head -c 70000 /dev/urandom > "$SRV/loaders/undionly.kpxe"
head -c 100000 /dev/urandom > "$SRV/loaders/ipxe.efi"
cat > "$SRV/pools.yaml" <<EOF
server:
  address: $SERVER
  http: 0.0.0.0:8080
  state_dir: var/
  loaders: loaders/
  admin_networks: [10.79.41.0/24]
  ports: { dhcp: 0, tftp: 0, nfs: 0, nbd: 0, portmap: 0 }
dhcp:
  mode: authoritative
  subnet: 10.79.40.0/24
  range: 10.79.40.100-10.79.40.199
  lease: 1h
images:
  demo: { dir: images/demo, store: disk }
pools:
  nbd-room:
    image: demo
    root: nbd
    cmdline: console=ttyS0
    clients:
      - { macs: "52:54:00:79:40:00-52:54:00:79:40:0f" }
EOF

ip netns add "$SNS"
ip netns add "$CNS"
ip link add "${TAG}s" type veth peer name "${TAG}c"
ip link set "${TAG}s" netns "$SNS"
ip link set "${TAG}c" netns "$CNS"
BURST="$(python3 -c "
import re,sys; m=re.fullmatch(r'([0-9.]+)([kmg]?)(bit)?', sys.argv[1].lower())
bits={'':1,'k':1e3,'m':1e6,'g':1e9}[m.group(2)]*float(m.group(1))
print(max(int(bits/8/100), 65536))" "$RATE")"
for pair in "$SNS ${TAG}s $SERVER" "$CNS ${TAG}c $CLIENT"; do
    set -- $pair
    ip -n "$1" link set lo up
    ip -n "$1" addr add "$3/24" dev "$2"
    ip -n "$1" link set "$2" up
    ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$RATE" burst "$BURST" latency 20ms
done
ip -n "$SNS" addr add "$ADMIN/24" dev "${TAG}s"

URL="$(cd "$SRV" && "$BIN" image --config pools.yaml blocks demo 2>>"$OUT/server.log")"
URL="${URL/http:\/\/$SERVER:/http://$ADMIN:}"
echo "manifest: $URL" | tee -a "$OUT/meta.txt" >&2
CHUNKS="$(($(sed -n 's/^size //p' "$SRV/images/demo/rootfs.img.chunks") + 262143))"
CHUNKS="$((CHUNKS / $(sed -n 's/^chunk //p' "$SRV/images/demo/rootfs.img.chunks")))"
(cd "$SRV" && exec nsenter --net="/run/netns/$SNS" "$BIN" serve --config pools.yaml) \
    >>"$OUT/server.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 100); do
    grep -q "bootpool serving" "$OUT/server.log" && break
    kill -0 "$SERVER_PID" 2>/dev/null || { echo "the server exited:" >&2; tail "$OUT/server.log" >&2; exit 1; }
    sleep 0.1
done
ip netns exec "$CNS" curl -sf -o /dev/null --max-time 10 "$URL/0" \
    || { echo "agent-cpu.sh: the client cannot read chunk 0 of $URL" >&2; exit 1; }

# Runs a command, bounded by LIMIT, and prints "user sys seconds status" (wait4's rusage).
timed() {
    python3 - "$LIMIT" "$@" <<'EOF'
import os, subprocess, sys, time
limit, cmd = float(sys.argv[1]), sys.argv[2:]
t = time.monotonic()
p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL)
while True:
    pid, status, ru = os.wait4(p.pid, os.WNOHANG)
    if pid:
        break
    if time.monotonic() - t > limit:
        p.kill()
    time.sleep(0.01)
print(f"{ru.ru_utime:.3f} {ru.ru_stime:.3f} {time.monotonic() - t:.3f} {os.waitstatus_to_exitcode(status)}")
EOF
}

# The CPU seconds of process PID so far: "user sys".
cpu_of() {
    python3 - "$1" <<'EOF'
import os, sys
f = open(f"/proc/{sys.argv[1]}/stat").read().rsplit(")", 1)[1].split()
hz = os.sysconf("SC_CLK_TCK")
print(f"{int(f[11]) / hz:.3f} {int(f[12]) / hz:.3f}")
EOF
}

BYTES="$((SIZE * 1024 * 1024))"
printf "round\trow\tprocess\tuser_s\tsys_s\tseconds\tbytes\tstatus\n" > "$OUT/runs.tsv"
for r in $(seq "$RUNS"); do
    for a in "${AGENTS[@]}"; do
      for via in $VIAS; do
        label="${a%%=*}" path="${a#*=}"
        [ "$label" = "$a" ] && label=agent
        if [ "$via" = unix ]; then
            label="$label-unix"
            listen=(--unix "$OUT/agent.sock") uri="nbd+unix:///root?socket=$OUT/agent.sock"
            rm -f "$OUT/agent.sock"
        else
            listen=(--listen 127.0.0.1:10809) uri="nbd://127.0.0.1:10809/root"
        fi
        log="$OUT/agent-$label-$r.log"
        ip netns exec "$CNS" "$path" --source "$URL" "${listen[@]}" 2>"$log" &
        AGENT_PID=$!
        for _ in $(seq 100); do
            if [ "$via" = unix ]; then
                [ -S "$OUT/agent.sock" ] && break
            else
                ip netns exec "$CNS" bash -c 'echo > /dev/tcp/127.0.0.1/10809' 2>/dev/null && break
            fi
            sleep 0.05
        done
        read -r u s t st < <(timed ip netns exec "$CNS" nbdcopy "$uri" null:)
        read -r au as < <(cpu_of "$AGENT_PID")
        kill "$AGENT_PID"; wait "$AGENT_PID" 2>/dev/null || true; AGENT_PID=""
        printf "%s\t%s\tagent\t%s\t%s\t%s\t%s\t%s\n" "$r" "$label" "$au" "$as" "$t" "$BYTES" "$st" >> "$OUT/runs.tsv"
        printf "%s\t%s\tnbdcopy\t%s\t%s\t%s\t%s\t%s\n" "$r" "$label" "$u" "$s" "$t" "$BYTES" "$st" >> "$OUT/runs.tsv"
        echo "round $r $label: agent ${au}u ${as}s, nbdcopy ${u}u ${s}s, $t s, exit $st" >&2
        sleep 1
      done
    done
    read -r u s t st < <(timed ip netns exec "$CNS" curl -sf --max-time "$LIMIT" \
        -o /dev/null "$URL/[0-$((CHUNKS - 1))]")
    printf "%s\tcurl\tcurl\t%s\t%s\t%s\t%s\t%s\n" "$r" "$u" "$s" "$t" "$BYTES" "$st" >> "$OUT/runs.tsv"
    echo "round $r curl: ${u}u ${s}s, $t s, exit $st" >&2
    sleep 1
done

python3 - "$OUT/runs.tsv" "$RATE" > "$OUT/summary.md" <<'EOF'
import csv, re, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1]), delimiter="\t"))
m = re.fullmatch(r"([0-9.]+)([kmg]?)(bit)?", sys.argv[2].lower())
rate = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)] * float(m.group(1))
by = {}
for r in rows:
    by.setdefault((r["row"], r["process"]), []).append(r)
def med(rs, f):
    return statistics.median(f(r) for r in rs)
print("| row | process | runs | failed | user s | sys s | CPU s | seconds | MB/s | CPU s per GB | % of a core at 1 Gbit/s |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
per_gb = {}
for (row, proc), rs in by.items():
    cpu = lambda r: float(r["user_s"]) + float(r["sys_s"])
    gb = lambda r: int(r["bytes"]) / 1e9
    pg = med(rs, lambda r: cpu(r) / gb(r))
    per_gb[(row, proc)] = pg
    failed = sum(r["status"] != "0" for r in rs)
    print(f"| {row} | {proc} | {len(rs)} | {failed} | {med(rs, lambda r: float(r['user_s'])):.2f} "
          f"| {med(rs, lambda r: float(r['sys_s'])):.2f} | {med(rs, cpu):.2f} | {med(rs, lambda r: float(r['seconds'])):.2f} "
          f"| {med(rs, lambda r: gb(r) * 1e3 / float(r['seconds'])):.0f} | {pg:.3f} | {pg / 8 * 100:.1f} |")
print()
print(f"Medians over the rounds. % of a core at 1 Gbit/s = CPU s per GB / 8 s per GB (the link here: {sys.argv[2]}).")
curl = per_gb.get(("curl", "curl"))
for (row, proc), pg in per_gb.items():
    if proc == "agent" and curl is not None:
        print(f"- {row}: the agent {pg:.3f} CPU s per GB ({pg / 8 * 100:.1f}% of a core at 1 Gbit/s); "
              f"curl, receiving the same bytes, {curl:.3f} ({curl / 8 * 100:.1f}%); the agent beyond it "
              f"{pg - curl:.3f} ({(pg - curl) / 8 * 100:.1f}%)")
EOF
cat "$OUT/summary.md"

if [ -n "$RECORD" ]; then
    DEST="$REPO/bench/records/$RECORD"
    mkdir -p "$DEST"
    cp "$OUT/meta.txt" "$OUT/runs.tsv" "$OUT/summary.md" "$DEST/"
    echo "recorded in $DEST" >&2
fi
