#!/usr/bin/env bash
# bench/nfs.sh: bootpool's NFSv3 export against nfs-ganesha (VFS FSAL), same tree, same client,
# rounds interleaved, medians reported. See --help.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"

usage() {
    cat <<EOF
usage: $0 [--rounds N] [--files N] [--big MIB] [--data DIR] [--only bootpool|bootpool-ram|ganesha] [--bin PATH]
          [--ls-passes N]

Serves one tree from bootpool (release build, CARGO_TARGET_DIR=/work/target-bench) twice,
with \`store: disk\` and with \`store: ram\` (two daemons), and from
nfs-ganesha 4 (VFS FSAL, read-only export) inside a private network namespace, both on
one local address (10.78.0.1, over lo), and measures with a small libnfs client (bench/nfsbench.c, built here with gcc
-lnfs; one process per measurement, so process start-up and MOUNT are not in the numbers,
which they would dominate with nfs-cat per file). Calls are synchronous (one in flight):
round-trip bound, like a client walking its root.

  seq   one file of --big MiB (default 1024) read sequentially in rtmax chunks  -> MiB/s
  tree  --files (default 20000) small files (0.5-8 KiB, 100 per folder), each opened,
        read and closed                                                         -> files/s
  ls    recursive listing of that tree (READDIRPLUS), --ls-passes (default 10)
        walks in one measurement                                               -> entries/s

Rounds (default 5) alternate the servers; each figure is the median over the rounds. Both
servers read the same files from a warm page cache. Everything started is stopped on exit.
Needs root, gcc, libnfs-dev, nfs-ganesha, nfs-ganesha-vfs, rpcbind (the binary only: it runs
in the namespace with a private /run, no host service).
  --data   where the tree is built (default /tmp/bootpool-nfsbench; reused if complete)
  --only   run one server (for profiling)
  --bin    serve with this bootpool binary instead of building one (e.g. an older build)
EOF
}

LS_PASSES=10 ROUNDS=5 FILES=20000 BIG=1024 DATA=/tmp/bootpool-nfsbench ONLY="" BIN=""
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --rounds) ROUNDS="$2"; shift ;;
        --files) FILES="$2"; shift ;;
        --big) BIG="$2"; shift ;;
        --data) DATA="$2"; shift ;;
        --only) ONLY="$2"; shift ;;
        --ls-passes) LS_PASSES="$2"; shift ;;
        --bin) BIN="$2"; shift ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[ "$(id -u)" = 0 ] || { echo "nfs.sh: must run as root" >&2; exit 1; }
for c in gcc ganesha.nfsd rpcbind; do
    command -v "$c" >/dev/null || { echo "nfs.sh: $c missing (see --help)" >&2; exit 1; }
done
[ -e /usr/include/nfsc/libnfs.h ] || { echo "nfs.sh: libnfs-dev missing" >&2; exit 1; }

NS="bpnfsbench-$$"
WORK="$(mktemp -d /tmp/bootpool-nfsbench-run.XXXXXX)"
PIDS=()
log() { echo "nfs.sh: $*" >&2; }
cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
        for _ in $(seq 20); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    done
    # Anything else in the namespace was started by this script.
    for pid in $(ip netns pids "$NS" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$NS" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

if [ -n "$BIN" ]; then
    BOOTPOOL="$BIN"
else
    log "building bootpool (release) and the client"
    (cd "$REPO" && CARGO_TARGET_DIR=/work/target-bench cargo build --release -q)
    # Copied: others may rebuild the shared target while we measure.
    cp /work/target-bench/release/bootpool "$WORK/bootpool"
    BOOTPOOL="$WORK/bootpool"
fi
gcc -O2 -Wall -o "$WORK/nfsbench" "$HERE/nfsbench.c" -lnfs

# The tree: images/bench/rootfs/{big.bin,small/dNNN/fNNNNN}, deterministic sizes.
ROOTFS="$DATA/images/bench/rootfs"
STAMP="$DATA/.complete-$FILES-$BIG"
if [ ! -e "$STAMP" ]; then
    log "building the tree in $DATA ($FILES files, $BIG MiB file)"
    rm -rf "$DATA" && mkdir -p "$ROOTFS/small" "$DATA/loaders"
    head -c $((BIG << 20)) /dev/urandom > "$ROOTFS/big.bin"
    python3 - "$ROOTFS/small" "$FILES" <<'EOF'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rnd = random.Random(7)
blob = os.urandom(8192)
for i in range(n):
    d = os.path.join(root, "d%03d" % (i // 100))
    if i % 100 == 0:
        os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "f%05d" % i), "wb") as f:
        f.write(blob[: rnd.randint(512, 8192)])
EOF
    : > "$DATA/images/bench/vmlinuz"; : > "$DATA/images/bench/initrd.img"
    : > "$DATA/loaders/undionly.kpxe"; : > "$DATA/loaders/ipxe.efi"
    touch "$STAMP"
fi

ip netns add "$NS"
ip -n "$NS" link set lo up
# ganesha resolves its bind address with AI_ADDRCONFIG, which finds nothing in a namespace
# with loopback only: give it one address (traffic to it still goes over lo).
ip -n "$NS" link add bench0 type veth peer name bench1
ip -n "$NS" addr add 10.78.0.1/24 dev bench0
# bootpool's own address: it serves roots only on the server's addresses. The client (at
# 10.78.0.1) reaches it over lo, as it reaches ganesha at 10.78.0.1.
ip -n "$NS" addr add 10.78.0.2/24 dev bench0
ip -n "$NS" link set bench0 up
ip -n "$NS" link set bench1 up
SRV=10.78.0.1
BP_SRV=10.78.0.2
nsexec() { ip netns exec "$NS" "$@"; }
wait_port() { # port
    for _ in $(seq 100); do
        nsexec ss -Hltn "sport = :$1" | grep -q . && return 0
        sleep 0.1
    done
    return 1
}

BP_PORT=20490
# The benchmark client is $SRV, listed below with that fixed ip so the export lets it in; a
# client's ip may not be the server's own, so the server is at another address of the subnet,
# $BP_SRV (NFS answers only connections made to the server's addresses).
cat > "$WORK/pools.yaml" <<EOF
server:
  address: $BP_SRV
  http: 127.0.0.1:0
  state_dir: $WORK/var
  loaders: $DATA/loaders
  ports: { dhcp: 0, tftp: 0, nfs: $BP_PORT, nbd: 0, portmap: 1111 }
dhcp:
  mode: authoritative
  subnet: 10.78.0.0/24
  range: 10.78.0.100-10.78.0.199
  lease: 1h
images:
  bench: { dir: $DATA/images/bench, store: disk }
pools:
  room:
    image: bench
    root: nfs
    clients:
      # The benchmark client's address, so the export lets it in.
      - { mac: "52:54:00:77:00:01", ip: $SRV }
EOF
BP_RAM_PORT=20491
sed -e "s/nfs: $BP_PORT,/nfs: $BP_RAM_PORT,/" -e "s/portmap: 1111/portmap: 1112/" \
    -e "s/store: disk/store: ram/" -e "s|state_dir: $WORK/var|state_dir: $WORK/var-ram|" \
    "$WORK/pools.yaml" > "$WORK/pools-ram.yaml"
start_bootpool() { # name config port
    [ -z "$ONLY" ] || [ "$ONLY" = "$1" ] || return 0
    RUST_LOG=info ip netns exec "$NS" "$BOOTPOOL" serve --config "$2" > "$WORK/$1.log" 2>&1 &
    PIDS+=($!)
    # store: ram loads the tree before it answers.
    for _ in $(seq 600); do
        nsexec ss -Hltn "sport = :$3" | grep -q . && grep -q "nfs exports" "$WORK/$1.log" && return 0
        sleep 0.1
    done
    log "$1 did not start"; tail "$WORK/$1.log"; exit 1
}
start_bootpool bootpool "$WORK/pools.yaml" $BP_PORT
start_bootpool bootpool-ram "$WORK/pools-ram.yaml" $BP_RAM_PORT
grep -h "loaded into ram" "$WORK/bootpool-ram.log" 2>/dev/null | sed 's/^/nfs.sh: /' >&2 || true

if [ -z "$ONLY" ] || [ "$ONLY" = ganesha ]; then
    mkdir -p "$WORK/ganesha-recovery"
    cat > "$WORK/ganesha.conf" <<EOF
NFS_CORE_PARAM {
    Protocols = 3;
    NFS_Port = 2049;
    MNT_Port = 20048;
    Bind_addr = $SRV;
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Mount_Path_Pseudo = true;
}
NFSv4 { Graceless = true; RecoveryBackend = fs; RecoveryRoot = "$WORK/ganesha-recovery"; }
EXPORT {
    Export_Id = 77;
    Path = "$ROOTFS";
    Pseudo = "/bench";
    Protocols = 3;
    Transports = TCP;
    Access_Type = RO;
    Squash = No_Root_Squash;
    SecType = sys;
    FSAL { Name = VFS; }
}
LOG { Default_Log_Level = EVENT; }
EOF
    # ganesha registers with a portmapper through rpcbind's socket in /run: give both a
    # private /run in their own mount namespace.
    ip netns exec "$NS" unshare -m --propagation private sh -c '
        mount -t tmpfs tmpfs /run && mkdir -p /run/rpcbind || exit 1
        rpcbind -f > "$1/rpcbind.log" 2>&1 &
        echo $! > "$1/rpcbind.pid"
        sleep 0.5
        exec ganesha.nfsd -F -f "$1/ganesha.conf" -L "$1/ganesha.log" -p "$1/ganesha.pid"
    ' sh "$WORK" > "$WORK/ganesha.out" 2>&1 &
    PIDS+=($!)
    wait_port 111 || { log "rpcbind did not start"; exit 1; }
    PIDS+=("$(cat "$WORK/rpcbind.pid")")
    wait_port 2049 && wait_port 20048 || { log "ganesha did not start"; tail "$WORK/ganesha.log"; exit 1; }
    # ganesha refuses I/O during its start-up grace period even with Graceless on some builds.
    sleep 2
fi

url() { # server
    case "$1" in
        bootpool) echo "nfs://$BP_SRV/bench?nfsport=$BP_PORT&mountport=$BP_PORT&version=3" ;;
        bootpool-ram) echo "nfs://$BP_SRV/bench?nfsport=$BP_RAM_PORT&mountport=$BP_RAM_PORT&version=3" ;;
        ganesha) echo "nfs://$SRV/bench?nfsport=2049&mountport=20048&version=3" ;;
    esac
}

SERVERS=(bootpool bootpool-ram ganesha)
[ -z "$ONLY" ] || SERVERS=("$ONLY")
: > "$WORK/results"
for round in $(seq "$ROUNDS"); do
    for s in "${SERVERS[@]}"; do
        for op in seq tree ls; do
            case $op in
                seq) args=(read "$(url "$s")" /big.bin) ;;
                tree) args=(tree "$(url "$s")" /small) ;;
                ls) args=(ls "$(url "$s")" /small "$LS_PASSES") ;;
            esac
            out="$(timeout 600 ip netns exec "$NS" "$WORK/nfsbench" "${args[@]}")" \
                || { log "$s $op failed"; exit 1; }
            read -r _ items bytes secs <<< "$out"
            case $op in
                seq) rate="$(echo "$bytes $secs" | awk '{printf "%.1f", $1/1048576/$2}')" ;;
                *) rate="$(echo "$items $secs" | awk '{printf "%.0f", $1/$2}')" ;;
            esac
            echo "$s $op $rate" >> "$WORK/results"
            log "round $round $s $op: $rate ($items items, $bytes bytes, ${secs}s)"
        done
    done
done

median() { sort -g | awk '{a[NR]=$1} END {if (NR) print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
med() { awk -v s="$1" -v o="$2" '$1==s && $2==o {print $3}' "$WORK/results" | median; }
printf '\n| test (median of %s rounds) | unit | bootpool disk | bootpool ram | ganesha | disk/ganesha | ram/ganesha |\n' "$ROUNDS"
printf '|---|---|---:|---:|---:|---:|---:|\n'
ratio() { awk -v b="${1:-0}" -v g="${2:-0}" 'BEGIN {if (g > 0 && b > 0) printf "%.2f", b/g; else print "-"}'; }
for op in seq tree ls; do
    case $op in
        seq) name="sequential read, $BIG MiB"; unit="MiB/s" ;;
        tree) name="$FILES small files read"; unit="files/s" ;;
        ls) name="recursive listing"; unit="entries/s" ;;
    esac
    b="$(med bootpool $op)"; r="$(med bootpool-ram $op)"; g="$(med ganesha $op)"
    printf '| %s | %s | %s | %s | %s | %s | %s |\n' "$name" "$unit" "${b:--}" "${r:--}" "${g:--}" \
        "$(ratio "$b" "$g")" "$(ratio "$r" "$g")"
done
