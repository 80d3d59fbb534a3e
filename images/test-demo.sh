#!/usr/bin/env bash
# test-demo.sh: boot the demo image in qemu (direct kernel boot) against reference servers:
# NBD from qemu-nbd and NFSv3 from nfs-ganesha, DHCP from busybox udhcpd and a stand-in for
# bootpool's callback, all inside a private network namespace. Checks the initrd attached the
# root and the root reported back. Exits non-zero if any boot failed.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

usage() {
    cat <<EOF
usage: $0 [--accel auto|kvm|tcg] [--nic virtio-net-pci|e1000] [--timeout SEC] [--append ARGS]
          [--keep] [MODE...]

MODE is nbd, nfs (explicit ports) or nfspm (root=nfs:/demo: server from DHCP, ports from
the portmapper) or fail (a missing NBD export: the initrd must print
"bootpool-initrd: FAILED: ..." and power off); default: all four. The image is read from \$BOOTPOOL_IMAGE_OUT or
$HERE/demo (build it with images/build-demo.sh).

Every boot runs in a fresh network namespace (bpimg-<pid>): bridge br0 10.77.0.1/24, tap0 for
qemu, busybox udhcpd, qemu-nbd on 10.77.0.1:10809 (export "demo"), ganesha.nfsd on
10.77.0.1:2049 (MOUNT on 20048, export /demo, NFSv3/TCP, read-only) with rpcbind on 111 in a
private mount namespace, and the callback listener
on 10.77.0.1:8080. Everything started is stopped and the namespace deleted on exit.
Logs (serial console, servers) go to $HERE/.test/<mode>/ (kept).

  --accel    auto (default): probe KVM with a short boot, fall back to TCG
  --nic      qemu NIC model (default virtio-net-pci)
  --timeout  seconds per boot (default 240)
  --append   extra kernel arguments, after the test's own (the initrd takes the last root=)
  --keep     keep the namespace and servers after the boots, until Enter is pressed
Needs root and: qemu-system-x86, qemu-utils (qemu-nbd), busybox-static, python3,
nfs-ganesha nfs-ganesha-vfs (for nfs; rpcbind is unpacked from its package if absent).
EOF
}

ACCEL=auto NIC=virtio-net-pci BOOT_TIMEOUT=240 KEEP=0 MODES=() EXTRA=""
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --accel) ACCEL="$2"; shift ;;
        --nic) NIC="$2"; shift ;;
        --timeout) BOOT_TIMEOUT="$2"; shift ;;
        --keep) KEEP=1 ;;
        --append) EXTRA="$2"; shift ;;
        nbd|nfs|nfspm|fail) MODES+=("$1") ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[ ${#MODES[@]} -gt 0 ] || MODES=(nbd nfs nfspm fail)

IMG="${BOOTPOOL_IMAGE_OUT:-$HERE/demo}"
IMG="$(cd "$IMG" && pwd)"
for f in vmlinuz initrd.img rootfs.img rootfs/sbin/init; do
    [ -e "$IMG/$f" ] || { echo "test-demo: missing $IMG/$f (run images/build-demo.sh)" >&2; exit 1; }
done
[ "$(id -u)" = 0 ] || { echo "test-demo: must run as root" >&2; exit 1; }

NS="bpimg-$$"
SRV=10.77.0.1
MAC=52:54:00:77:00:01
OUTROOT="$HERE/.test"
PIDS=()
log() { echo "test-demo: $*"; }

cleanup() {
    local pid
    for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${PIDS[@]}"; do
        for _ in 1 2 3 4 5 6 7 8 9 10; do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
        kill -9 "$pid" 2>/dev/null || true
    done
    PIDS=()
    # Anything else still in the namespace was started by this test too.
    for pid in $(ip netns pids "$NS" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$NS" 2>/dev/null || true
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# Foreground commands in the namespace. Daemons are started with a plain
# `ip netns exec "$NS" daemon ... &` (no function, no subshell) so that $! is the daemon.
nsexec() { ip netns exec "$NS" "$@"; }

setup_net() {
    ip netns add "$NS"
    nsexec ip link set lo up
    nsexec ip link add br0 type bridge
    nsexec ip addr add "$SRV/24" dev br0
    nsexec ip link set br0 up
    nsexec ip tuntap add dev tap0 mode tap
    nsexec ip link set tap0 master br0
    nsexec ip link set tap0 up
}

# wait_port PORT: until something listens on TCP PORT in the namespace (10 s)
wait_port() {
    for _ in $(seq 1 100); do
        nsexec ss -Hltn "sport = :$1" 2>/dev/null | grep -q LISTEN && return 0
        sleep 0.1
    done
    return 1
}

start_common() {  # $1: log dir
    local d="$1"
    cat > "$d/udhcpd.conf" <<EOF
interface br0
start 10.77.0.100
end 10.77.0.199
lease_file $d/udhcpd.leases
pidfile $d/udhcpd.pid
siaddr $SRV
option subnet 255.255.255.0
option router $SRV
option lease 3600
EOF
    : > "$d/udhcpd.leases"
    ip netns exec "$NS" busybox udhcpd -f "$d/udhcpd.conf" > "$d/udhcpd.log" 2>&1 &
    PIDS+=($!)
    : > "$d/callback.log"
    ip netns exec "$NS" python3 "$HERE/test-support/callback.py" "$SRV" 8080 "$d/callback.log" \
        > "$d/callback.err" 2>&1 &
    PIDS+=($!)
    wait_port 8080 || { log "callback listener did not start"; return 1; }
}

start_nbd() {
    local d="$1"
    ip netns exec "$NS" qemu-nbd --read-only --persistent --shared=8 --export-name=demo --bind="$SRV" \
        --port=10809 --format=raw "$IMG/rootfs.img" > "$d/qemu-nbd.log" 2>&1 &
    PIDS+=($!)
    wait_port 10809 || { log "qemu-nbd did not start"; cat "$d/qemu-nbd.log"; return 1; }
}

start_nfs() {
    local d="$1"
    command -v ganesha.nfsd >/dev/null || { log "ganesha.nfsd missing (apt-get install nfs-ganesha nfs-ganesha-vfs)"; return 1; }
    mkdir -p "$d/ganesha-recovery"
    cat > "$d/ganesha.conf" <<EOF
NFS_CORE_PARAM {
    Protocols = 3;
    NFS_Port = 2049;
    MNT_Port = 20048;
    Bind_addr = $SRV;
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Mount_Path_Pseudo = true;
}
NFSv4 {
    Graceless = true;
    RecoveryBackend = fs;
    RecoveryRoot = "$d/ganesha-recovery";
}
EXPORT {
    Export_Id = 77;
    Path = "$IMG/rootfs";
    Pseudo = "/demo";
    Protocols = 3;
    Transports = TCP;
    Access_Type = RO;
    Squash = No_Root_Squash;
    SecType = sys;
    FSAL { Name = VFS; }
}
LOG { Default_Log_Level = EVENT; }
EOF
    # ganesha 4.3 cannot run without registering with a portmapper, and its registration goes
    # through rpcbind's unix socket in /run: so run rpcbind and ganesha in a private mount
    # namespace with their own /run (the namespace's rpcbind then also answers on port 111).
    local rpcbind; rpcbind="$(find_rpcbind)" || return 1
    ip netns exec "$NS" unshare -m --propagation private sh -c '
        mount -t tmpfs tmpfs /run && mkdir -p /run/rpcbind || exit 1
        "$1" -f > "$2/rpcbind.log" 2>&1 &
        echo $! > "$2/rpcbind.pid"
        sleep 0.5
        exec ganesha.nfsd -F -f "$2/ganesha.conf" -L "$2/ganesha.log" -p "$2/ganesha.pid"
    ' sh "$rpcbind" "$d" > "$d/ganesha.out" 2>&1 &
    PIDS+=($!)
    wait_port 111 || { log "rpcbind did not start"; cat "$d/rpcbind.log"; return 1; }
    PIDS+=("$(cat "$d/rpcbind.pid")")
    wait_port 2049 && wait_port 20048 \
        || { log "ganesha did not listen on 2049 and 20048"; tail -20 "$d/ganesha.log"; return 1; }
}

# find_rpcbind: the host's rpcbind, else one unpacked from Debian's package (not installed, so
# that no rpcbind service starts on the host)
find_rpcbind() {
    local p
    for p in "$(command -v rpcbind 2>/dev/null)" /sbin/rpcbind /usr/sbin/rpcbind \
             "$OUTROOT/rpcbind/sbin/rpcbind"; do
        [ -n "$p" ] && [ -x "$p" ] && { echo "$p"; return 0; }
    done
    mkdir -p "$OUTROOT/rpcbind.deb"
    (cd "$OUTROOT/rpcbind.deb" && apt-get download -q rpcbind >/dev/null 2>&1) \
        || { log "cannot apt-get download rpcbind" >&2; return 1; }
    dpkg -x "$OUTROOT"/rpcbind.deb/rpcbind_*.deb "$OUTROOT/rpcbind"
    echo "$OUTROOT/rpcbind/sbin/rpcbind"
}

# probe_kvm: does a KVM guest get as far as running the initrd? (nested KVM may not)
probe_kvm() {
    [ -w /dev/kvm ] || return 1
    local out; out="$(mktemp)"
    timeout 15 qemu-system-x86_64 -accel kvm -m 320 -display none -monitor none -no-reboot \
        -serial "file:$out" -kernel "$IMG/vmlinuz" -initrd "$IMG/initrd.img" \
        -append "console=ttyS0 rdinit=/bin/true panic=-1" >/dev/null 2>&1 || true
    if grep -q 'Run /bin/true as init process' "$out"; then rm -f "$out"; return 0; fi
    rm -f "$out"; return 1
}

boot() {  # $1: mode; prints the result line, returns non-zero on failure
    local mode="$1" d="$OUTROOT/$1" root t0 t1 rc=0
    rm -rf "$d"; mkdir -p "$d"
    setup_net
    start_common "$d"
    case "$mode" in
        nbd) start_nbd "$d"; root="nbd:$SRV:10809/demo" ;;
        nfs) start_nfs "$d"; root="nfs:$SRV:/demo:port=2049,mountport=20048" ;;
        # no server (take DHCP's), no ports (ask the portmapper on 111)
        nfspm) start_nfs "$d"; root="nfs:/demo" ;;
        # a missing export: the initrd must say FAILED and power off, not hang
        fail) start_nbd "$d"; root="nbd:$SRV:10809/no-such-export" ;;
    esac
    # bootpool.lab=poweroff: the demo powers off when done (or failed), so qemu exits.
    local cmdline="console=ttyS0 root=$root bootpool.url=http://$SRV:8080 bootpool.lab=poweroff initrd=initrd.img${EXTRA:+ $EXTRA}"
    log "$mode: booting ($ACCEL, $NIC): $cmdline"
    t0=$(date +%s.%N)
    timeout "$BOOT_TIMEOUT" ip netns exec "$NS" qemu-system-x86_64 -accel "$ACCEL" -m 320 \
        -display none -monitor none -no-reboot -serial "file:$d/console.log" \
        -kernel "$IMG/vmlinuz" -initrd "$IMG/initrd.img" -append "$cmdline" \
        -netdev tap,id=n0,ifname=tap0,script=no,downscript=no \
        -device "$NIC,netdev=n0,mac=$MAC" > "$d/qemu.log" 2>&1 || rc=$?
    t1=$(date +%s.%N)
    local secs; secs=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
    sleep 0.3
    local ok=1
    if [ "$mode" = fail ]; then
        grep -q '^bootpool-initrd: FAILED: ' "$d/console.log" || { ok=0; log "fail: no 'bootpool-initrd: FAILED:' line"; }
        grep -q 'bootpool-demo: booted' "$d/console.log" && { ok=0; log "fail: booted anyway"; }
    else
        local kind="${mode%pm}"
        grep -q "bootpool-initrd: root attached ($kind)" "$d/console.log" || { ok=0; log "$mode: no 'root attached ($kind)'"; }
        grep -q '^bootpool-demo: booted' "$d/console.log" || { ok=0; log "$mode: no 'bootpool-demo: booted'"; }
        grep -q '^/api/v1/booted application/json {"uptime_s": [0-9.]*}$' "$d/callback.log" \
            || { ok=0; log "$mode: no callback POST /api/v1/booted with uptime_s"; }
    fi
    [ "$rc" = 0 ] || { ok=0; log "$mode: qemu exit status $rc (124 = timeout)"; }
    grep 'bootpool-' "$d/console.log" | sed "s/^/  [$mode] /" || true
    if [ "$KEEP" = 1 ]; then read -r -p "namespace $NS kept; Enter to clean up " _ || true; fi
    cleanup
    if [ "$ok" = 1 ]; then
        local cb=""
        [ "$mode" = fail ] || cb=", callback: $(cat "$d/callback.log")"
        log "$mode: PASS in ${secs} s wall ($ACCEL)$cb"
        return 0
    fi
    log "$mode: FAIL after ${secs} s (logs in $d)"
    tail -n 30 "$d/console.log" | sed "s/^/  [$mode console] /"
    return 1
}

if [ "$ACCEL" = auto ]; then
    if probe_kvm; then ACCEL=kvm; else ACCEL=tcg; fi
    log "accelerator: $ACCEL"
fi
FAILED=()
for mode in "${MODES[@]}"; do
    boot "$mode" || FAILED+=("$mode")
done
if [ ${#FAILED[@]} -gt 0 ]; then
    log "FAILED: ${FAILED[*]}"
    exit 1
fi
log "all passed: ${MODES[*]}"
