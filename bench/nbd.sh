#!/usr/bin/env bash
# bench/nbd.sh: bootpool's NBD server beside nbdkit, qemu-nbd and nbd-server, one run.
#
# Every server exports the same image file read-only on 127.0.0.1; the same clients measure
# them with rounds interleaved (round 1: all servers, round 2: all servers, ...) and the
# medians are compared. Writes the `## NBD` section of BENCHMARKS.md (its current table).
set -euo pipefail

usage() {
    cat <<'EOF'
usage: bench/nbd.sh [--rounds N] [--size MIB] [--seq-secs S] [--rand-secs S] [--idle N] [--no-build]
                    [--out FILE] [--before BIN] [--cow] [--raw FILE]

Starts bootpool (release build, CARGO_TARGET_DIR=/work/target-bench), nbdkit (file plugin,
-r), qemu-nbd (-r) and nbd-server (readonly) on loopback, all serving one image file, and
measures with the same clients, rounds interleaved:
  nbdcopy   sequential read of the whole image to null:        (MiB/s, higher is better)
  nbdcopy 1x1  the same on one connection with one 256 KiB request in flight: each
            request's round trip, not the pipeline                     (MiB/s)
  fio seq   ioengine=nbd, 1 MiB sequential read, iodepth 32, looping over the image
            for --seq-secs (one pass of 1 GiB is half a second: too short to
            measure on a shared machine)                               (MiB/s)
  fio rand  ioengine=nbd, 4 KiB random read, iodepth 32         (kIOPS)
  memory    PSS growth of the server's processes per idle client, after N connections
            finished their handshake (KiB, lower is better)
Prints a table of medians with each server's ratio to the best peer, and replaces the
`## NBD` section of BENCHMARKS.md in its place (or --out FILE); the run it replaces
belongs in docs/bench-history.md.

  --rounds N     rounds per measurement (default 5)
  --size MIB     image size (default 1024)
  --seq-secs S   duration of each fio sequential run (default 4)
  --rand-secs S  duration of each random-read run (default 5)
  --idle N       idle connections for the memory row (default 100)
  --no-build     use the existing release binary
  --before BIN   also measure this older bootpool binary, as `bootpool-before`, in the same
                 interleaved rounds (before/after comparisons on a busy machine)
  --cow          also measure bootpool serving the image through per-client copy-on-write
                 overlays (`cow: ram`), as `bootpool-cow`: reads no write has touched
  --out FILE     results file (default: BENCHMARKS.md at the repo root)
  --raw FILE     also keep every round's figure (measurement, server, value; tab-separated)
Environment: BENCH_TARGET_DIR (default /work/target-bench) is the release build's target dir.
Needs root for nothing; installs nothing: apt-get install nbdkit nbd-server fio libnbd-bin.
EOF
}

ROUNDS=5 SIZE_MIB=1024 SEQ_SECS=4 RAND_SECS=5 IDLE=100 BUILD=1 BEFORE= COW= RAW=
REPO=$(cd "$(dirname "$0")/.." && pwd)
OUT=$REPO/BENCHMARKS.md
while [ $# -gt 0 ]; do
    case $1 in
    -h | --help) usage; exit 0 ;;
    --rounds) ROUNDS=$2; shift ;;
    --size) SIZE_MIB=$2; shift ;;
    --seq-secs) SEQ_SECS=$2; shift ;;
    --rand-secs) RAND_SECS=$2; shift ;;
    --idle) IDLE=$2; shift ;;
    --no-build) BUILD=0 ;;
    --before) BEFORE=$(realpath "$2"); shift ;;
    --cow) COW=1 ;;
    --out) OUT=$2; shift ;;
    --raw) RAW=$(realpath "$2"); shift ;;
    *) echo "unknown argument $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
COMMAND="bench/nbd.sh --rounds $ROUNDS --size $SIZE_MIB --seq-secs $SEQ_SECS --rand-secs $RAND_SECS --idle $IDLE${BEFORE:+ --before OLD}${COW:+ --cow}"

for tool in nbdkit qemu-nbd nbd-server nbdcopy fio python3; do
    command -v "$tool" >/dev/null || { echo "missing $tool (apt-get install nbdkit nbd-server fio libnbd-bin qemu-utils)" >&2; exit 1; }
done

# Its own target dir, so the engineers' debug builds are not clobbered; BENCH_TARGET_DIR
# overrides it when another worktree builds there too.
export CARGO_TARGET_DIR=${BENCH_TARGET_DIR:-/work/target-bench}
if [ "$BUILD" = 1 ]; then
    (cd "$REPO" && cargo build --release --quiet)
fi

WORK=$(mktemp -d /tmp/bench-nbd.XXXXXX)
# A private copy: the shared target dir may be rebuilt under us.
BIN=$WORK/bootpool
cp "$CARGO_TARGET_DIR/release/bootpool" "$BIN"
PIDS=()
cleanup() {
    # Only what this script started: the recorded PIDs and nbd-server's PID file.
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    if [ -f "$WORK/nbd-server.pid" ]; then kill "$(cat "$WORK/nbd-server.pid")" 2>/dev/null || true; fi
    sleep 0.5
    rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_port() {
    for _ in $(seq 100); do
        python3 -c "import socket,sys; socket.create_connection(('127.0.0.1',$1),1)" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "nothing listens on $1" >&2; exit 1
}

echo "image: $SIZE_MIB MiB of random bytes in $WORK" >&2
mkdir -p "$WORK/img"
IMG=$WORK/img/rootfs.img
head -c "$((SIZE_MIB << 20))" /dev/urandom >"$IMG"
# Everyone reads from the page cache: warm it once.
cat "$IMG" >/dev/null

P_BOOTPOOL=$(free_port) P_NBDKIT=$(free_port) P_QEMU=$(free_port) P_NBDSERVER=$(free_port)
P_BEFORE=$(free_port) P_COW=$(free_port)
cat >"$WORK/pools.yaml" <<EOF
server:
  address: 127.0.0.1
  http: 127.0.0.1:0
  state_dir: state/
  loaders: img/
  ports: { dhcp: 0, tftp: 0, nfs: 0, nbd: $P_BOOTPOOL, portmap: 0 }
dhcp:
  mode: authoritative
  subnet: 127.0.0.0/8
  range: 127.0.0.100-127.0.0.199
  lease: 1h
images:
  bench: { dir: img, store: disk }
EOF
RUST_LOG=warn "$BIN" serve --config "$WORK/pools.yaml" >"$WORK/bootpool.log" 2>&1 &
PIDS+=($!); PID_BOOTPOOL=$!
PID_BEFORE=
if [ -n "$BEFORE" ]; then
    cp "$BEFORE" "$WORK/bootpool-before"
    sed -e "s/nbd: $P_BOOTPOOL/nbd: $P_BEFORE/" -e "s|state_dir: state/|state_dir: state-before/|" \
        "$WORK/pools.yaml" >"$WORK/pools-before.yaml"
    RUST_LOG=warn "$WORK/bootpool-before" serve --config "$WORK/pools-before.yaml" \
        >"$WORK/bootpool-before.log" 2>&1 &
    PIDS+=($!); PID_BEFORE=$!
fi
PID_COW=
if [ -n "$COW" ]; then
    sed -e "s/nbd: $P_BOOTPOOL/nbd: $P_COW/" -e "s|state_dir: state/|state_dir: state-cow/|" \
        -e "s/store: disk }/store: disk, cow: ram }/" "$WORK/pools.yaml" >"$WORK/pools-cow.yaml"
    RUST_LOG=warn "$BIN" serve --config "$WORK/pools-cow.yaml" >"$WORK/bootpool-cow.log" 2>&1 &
    PIDS+=($!); PID_COW=$!
fi
nbdkit -f -r -i 127.0.0.1 -p "$P_NBDKIT" file "$IMG" >"$WORK/nbdkit.log" 2>&1 &
PIDS+=($!); PID_NBDKIT=$!
qemu-nbd -r -t -e 1000 -b 127.0.0.1 -p "$P_QEMU" -x bench -f raw "$IMG" >"$WORK/qemu-nbd.log" 2>&1 &
PIDS+=($!); PID_QEMU=$!
cat >"$WORK/nbd-server.conf" <<EOF
[generic]
    listenaddr = 127.0.0.1
    port = $P_NBDSERVER
    allowlist = true
[bench]
    exportname = $IMG
    readonly = true
EOF
# -p: the config file's pidfile key is ignored by Debian's build.
nbd-server -C "$WORK/nbd-server.conf" -p "$WORK/nbd-server.pid" >"$WORK/nbd-server.log" 2>&1
for p in "$P_BOOTPOOL" "$P_NBDKIT" "$P_QEMU" "$P_NBDSERVER" ${BEFORE:+"$P_BEFORE"} ${COW:+"$P_COW"}; do wait_port "$p"; done
for _ in $(seq 50); do [ -s "$WORK/nbd-server.pid" ] && break; sleep 0.1; done
PID_NBDSERVER=$(cat "$WORK/nbd-server.pid")

SERVERS=(bootpool nbdkit qemu-nbd nbd-server)
[ -n "$BEFORE" ] && SERVERS+=(bootpool-before)
[ -n "$COW" ] && SERVERS+=(bootpool-cow)
port_of() { case $1 in bootpool) echo "$P_BOOTPOOL" ;; nbdkit) echo "$P_NBDKIT" ;; qemu-nbd) echo "$P_QEMU" ;; nbd-server) echo "$P_NBDSERVER" ;; bootpool-before) echo "$P_BEFORE" ;; bootpool-cow) echo "$P_COW" ;; esac; }
pid_of() { case $1 in bootpool) echo "$PID_BOOTPOOL" ;; nbdkit) echo "$PID_NBDKIT" ;; qemu-nbd) echo "$PID_QEMU" ;; nbd-server) echo "$PID_NBDSERVER" ;; bootpool-before) echo "$PID_BEFORE" ;; bootpool-cow) echo "$PID_COW" ;; esac; }
uri_of() { echo "nbd://127.0.0.1:$(port_of "$1")/bench"; }

RESULTS=$WORK/results.tsv
: >"$RESULTS"
# fio's nbd engine prints a line before the JSON.
fio_json() { python3 -c 'import json,sys; t=sys.stdin.read(); j=json.loads(t[t.index("{"):])["jobs"][0]["read"]; print(j[sys.argv[1]])' "$1"; }

# One unmeasured pass per server first: a server's first connection can be slow (nbdkit's
# first fio run here was half its later ones), and that is start-up, not serving.
for s in "${SERVERS[@]}"; do
    fio --name=warm --ioengine=nbd --uri="$(uri_of "$s")" --rw=read --bs=1M --iodepth=32 \
        --size="${SIZE_MIB}M" --output-format=json >/dev/null
done

for round in $(seq "$ROUNDS"); do
    for s in "${SERVERS[@]}"; do
        uri=$(uri_of "$s")
        t0=$(date +%s.%N)
        nbdcopy "$uri" null:
        t1=$(date +%s.%N)
        echo -e "nbdcopy\t$s\t$(python3 -c "print($SIZE_MIB/($t1-$t0))")" >>"$RESULTS"
        t0=$(date +%s.%N)
        nbdcopy --connections=1 --requests=1 --request-size=262144 "$uri" null:
        t1=$(date +%s.%N)
        echo -e "nbdcopy-1x1\t$s\t$(python3 -c "print($SIZE_MIB/($t1-$t0))")" >>"$RESULTS"
        bw=$(fio --name=seq --ioengine=nbd --uri="$uri" --rw=read --bs=1M --iodepth=32 \
            --size="${SIZE_MIB}M" --time_based --runtime="$SEQ_SECS" --output-format=json |
            fio_json bw_bytes)
        echo -e "fio-seq\t$s\t$(python3 -c "print($bw/1048576)")" >>"$RESULTS"
        iops=$(fio --name=rand --ioengine=nbd --uri="$uri" --rw=randread --bs=4k --iodepth=32 \
            --size="${SIZE_MIB}M" --time_based --runtime="$RAND_SECS" --output-format=json | fio_json iops)
        echo -e "fio-rand\t$s\t$(python3 -c "print($iops/1000)")" >>"$RESULTS"
        echo "round $round $s done" >&2
    done
done

# Memory: PSS of the server and its children (nbd-server forks per client) before and after
# N connections that finished the handshake (NBD_OPT_GO) and then sit idle.
pss_kib() {
    python3 - "$1" <<'EOF'
import os, sys
def kids(pid):
    out = []
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            out += open(f"/proc/{pid}/task/{t}/children").read().split()
        except OSError:
            pass
    return out
todo, total = [sys.argv[1]], 0
while todo:
    p = todo.pop()
    try:
        for line in open(f"/proc/{p}/smaps_rollup"):
            if line.startswith("Pss:"):
                total += int(line.split()[1])
        todo += kids(p)
    except OSError:
        pass
print(total)
EOF
}
cat >"$WORK/idle.py" <<'EOF'
import socket, struct, sys, time
port, n, ready = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
def recv(s, k):
    b = b""
    while len(b) < k:
        c = s.recv(k - len(b))
        if not c: raise SystemExit("closed during handshake")
        b += c
    return b
conns = []
for i in range(n):
    # Four connections per loopback address: under bootpool's per-address cap (16), as a
    # room's clients each come from their own address.
    src = f"127.1.{i // 1000}.{i // 4 % 250 + 1}"
    s = socket.create_connection(("127.0.0.1", port), source_address=(src, 0))
    recv(s, 18)
    s.sendall(struct.pack(">I", 3))
    name = b"bench"
    data = struct.pack(">I", len(name)) + name + struct.pack(">H", 0)
    s.sendall(b"IHAVEOPT" + struct.pack(">II", 7, len(data)) + data)
    while True:
        _, _, kind, length = struct.unpack(">QIII", recv(s, 20))
        recv(s, length)
        if kind == 1: break
        if kind != 3: raise SystemExit(f"GO refused: {kind:#x}")
    conns.append(s)
open(ready, "w").write("ok")
time.sleep(3600)
EOF
for s in "${SERVERS[@]}"; do
    pid=$(pid_of "$s")
    before=$(pss_kib "$pid")
    rm -f "$WORK/ready"
    python3 "$WORK/idle.py" "$(port_of "$s")" "$IDLE" "$WORK/ready" &
    idle_pid=$!
    PIDS+=("$idle_pid")
    for _ in $(seq 300); do [ -f "$WORK/ready" ] && break; sleep 0.1; done
    [ -f "$WORK/ready" ] || { echo "$s: idle connections not ready" >&2; exit 1; }
    sleep 1
    after=$(pss_kib "$pid")
    kill "$idle_pid"; wait "$idle_pid" 2>/dev/null || true
    echo -e "memory\t$s\t$(python3 -c "print(($after-$before)/$IDLE)")" >>"$RESULTS"
    sleep 1
done

if [ -n "$RAW" ]; then cp "$RESULTS" "$RAW"; fi
python3 - "$RESULTS" "$OUT" "$COMMAND" "$SIZE_MIB" "$ROUNDS" "$IDLE" "$BEFORE" "$COW" <<'EOF'
import collections, datetime, os, platform, re, statistics, subprocess, sys
results, out, command, size, rounds, idle, before, cow = sys.argv[1:9]
rows = collections.defaultdict(lambda: collections.defaultdict(list))
for line in open(results):
    row, server, value = line.split("\t")
    rows[row][server].append(float(value))
servers = ["bootpool", "nbdkit", "qemu-nbd", "nbd-server"]
peers_of = servers[1:]
if before:
    servers.append("bootpool-before")
if cow:
    servers.append("bootpool-cow")
ours = [s for s in servers if s.startswith("bootpool")]
spec = [
    ("nbdcopy", f"nbdcopy seq read {size} MiB (MiB/s)", True),
    ("nbdcopy-1x1", f"nbdcopy seq read {size} MiB, 1 connection, 1 request in flight (MiB/s)", True),
    ("fio-seq", "fio 1 MiB seq read, QD32 (MiB/s)", True),
    ("fio-rand", "fio 4 KiB rand read, QD32 (kIOPS)", True),
    ("memory", f"PSS per idle client, {idle} clients (KiB)", False),
]
lines = ["| measurement | " + " | ".join(servers + [f"{s} / best peer" for s in ours]) + " |",
         "|---|" + "---:|" * (len(servers) + len(ours))]
for key, label, higher in spec:
    med = {s: statistics.median(rows[key][s]) for s in servers}
    peers = [med[s] for s in peers_of]
    best = max(peers) if higher else min(peers)
    note = ' (lower is better)' if not higher else ''
    cells = [f"{med[s]:.1f}" for s in servers]
    cells += [f"{med[s] / best if best else float('inf'):.2f}{note}" for s in ours]
    lines.append(f"| {label} | " + " | ".join(cells) + " |")
table = "\n".join(lines)
print(table)
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
mem = int(open("/proc/meminfo").readline().split()[1]) >> 20
def ver(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.splitlines()[0].strip()
    except Exception:
        return "?"
commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
section = f"""## NBD

Run {datetime.date.today()} on {os.cpu_count()} cores ({cpu}), {mem} GiB RAM, Linux
{platform.release()}; bootpool release build at {commit}; peers from Debian: {ver(["nbdkit", "--version"])},
{ver(["qemu-nbd", "--version"])}, nbd-server (Debian package {ver(["dpkg-query", "-W", "-f", "${Version}", "nbd-server"])}),
clients {ver(["nbdcopy", "--version"])}, {ver(["fio", "--version"])}.
Command: `{command}` (medians of {rounds} interleaved rounds).
All serve the same {size} MiB file of random bytes, read-only, over 127.0.0.1, from the
page cache (bootpool with `store: disk`){"; bootpool-cow through a copy-on-write overlay per client (`cow: ram`), which these reads never touch" if cow else ""}. The memory row is the growth of the proportional
set size (PSS) of the server's processes divided by the number of idle clients
(nbd-server forks one process per client).

{table}
"""
text = open(out).read() if os.path.exists(out) else "# Benchmarks\n\nEach section is written by its script in bench/.\n"
# The section in its place (BENCHMARKS.md opens with one current table per workload; the
# dated runs are in docs/bench-history.md), or at the end of a file that has none.
old = re.compile(r"\n## NBD\n.*?(?=\n## |\Z)", flags=re.S)
if old.search(text):
    text = old.sub(lambda _: "\n" + section, text, count=1)
else:
    text = text.rstrip("\n") + "\n\n" + section
open(out, "w").write(text)
print(f"wrote {out}", file=sys.stderr)
EOF
