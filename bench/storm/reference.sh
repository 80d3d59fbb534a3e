#!/usr/bin/env bash
# The reference stack for the storm, started by `bootpool storm --server-cmd` inside the storm's
# room (its network namespace): what an admin glues together by hand to boot the same room.
#   dnsmasq        DHCP (with the iPXE script's URL for iPXE) and TFTP (iPXE loaders)
#   nginx          the iPXE script, kernel and initrd over HTTP
#   nfs-ganesha    the root tree over NFSv3 (VFS FSAL, read-only), with rpcbind   (ROOT=nfs)
#   nbd-server     the root image over NBD, read-only                             (ROOT=nbd)
# serving images/demo at bench/storm/pools.yaml's addresses (server 10.78.0.1 on link s0, the
# range 10.78.1.0-10.78.2.250 of 10.78.0.0/22). nginx starts last: its port (8080) answering
# means the stack is ready. Everything runs in the foreground of this script's process group,
# but nbd-server, which forks away; the storm kills every process left in its room.
#
# usage: bench/storm/reference.sh nfs|nbd WORKDIR
#
# The one-line equivalents of bootpool's opt-ins (bench/storm.sh sets them for its opt-in rows;
# docs/storm.md, "Like for like"), from the environment:
#   REFERENCE_NFS_OPTIONS  mount options added to the root= line's (e.g. nocto)
#   REFERENCE_INITRD       this file is served as the initrd (e.g. one recompressed with zstd)
#   REFERENCE_NBD_IMAGE    this file is the NBD export (e.g. a squashfs made with -comp zstd)...
#   REFERENCE_NBD_EXPORT   ...under this name (default demo)
#
# As one of a site's servers (`bootpool storm --servers 2 --server-cmd`, storm/reference.rs
# and docs/failover.md; the storm sets these), each on a host of its own:
#   REFERENCE_MEMBER       its name (sN): its files go to WORKDIR/sN
#   REFERENCE_ADDR         the address its clients are handed (default 10.78.0.1), which
#                          keepalived may move to the other server, so every daemon here
#                          listens on all of the host's addresses
#   REFERENCE_IFACE        its link (default s0)
#   REFERENCE_KEA_CONF     DHCP is this kea-dhcp4 config's (one half of a Kea HA pair), not
#                          dnsmasq's, which serves TFTP alone...
#   REFERENCE_KEA_URL      ...and the stack is ready once that Kea's HA listener here says
#                          the pair balances the load (nginx starts after it)
set -euo pipefail
ROOT=${1:?usage: reference.sh nfs|nbd WORKDIR}
WORK=${2:?usage: reference.sh nfs|nbd WORKDIR}
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# Resolved: ganesha refuses a mount whose export Path runs through a symlink.
IMAGE="$(realpath "$REPO/images/demo")"
ADDR=${REFERENCE_ADDR:-10.78.0.1}
IFACE=${REFERENCE_IFACE:-s0}
KEA=${REFERENCE_KEA_CONF:-}
[ -n "${REFERENCE_MEMBER:-}" ] && WORK="$WORK/$REFERENCE_MEMBER"
# On one address, or (a site's server) on every address the host has or takes over.
BIND_NFS="Bind_addr = $ADDR;" BIND_NBD="listenaddr = $ADDR" LISTEN="$ADDR:8080"
[ -n "$KEA" ] && BIND_NFS="" BIND_NBD="" LISTEN=8080
mkdir -p "$WORK"
WORK="$(cd "$WORK" && pwd)"

# rpcbind and ganesha talk through /run: give this stack a /run of its own.
if [ -z "${REFERENCE_PRIVATE_RUN:-}" ]; then
    export REFERENCE_PRIVATE_RUN=1
    exec unshare -m --propagation private "$0" "$@"
fi
mount -t tmpfs tmpfs /run
mkdir -p /run/rpcbind

trap 'kill $(jobs -p) 2>/dev/null; [ -f "$WORK/nbd-server.pid" ] && kill "$(cat "$WORK/nbd-server.pid")" 2>/dev/null; exit 0' TERM INT

case "$ROOT" in
    nfs)
        mkdir -p "$WORK/ganesha-recovery"
        cat > "$WORK/ganesha.conf" <<EOF
NFS_CORE_PARAM {
    Protocols = 3;
    NFS_Port = 2049;
    MNT_Port = 20048;
    $BIND_NFS
    Enable_NLM = false;
    Enable_RQUOTA = false;
    Mount_Path_Pseudo = true;
}
NFSv4 { Graceless = true; RecoveryBackend = fs; RecoveryRoot = "$WORK/ganesha-recovery"; }
EXPORT {
    Export_Id = 77;
    Path = "$IMAGE/rootfs";
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
        rpcbind -f > "$WORK/rpcbind.log" 2>&1 &
        sleep 0.5
        ganesha.nfsd -F -f "$WORK/ganesha.conf" -L "$WORK/ganesha.log" -p "$WORK/ganesha.pid" &
        cmdline="root=nfs:$ADDR:/demo:vers=3,tcp,nolock${REFERENCE_NFS_OPTIONS:+,$REFERENCE_NFS_OPTIONS} ro"
        # ganesha refuses I/O during its start-up grace period on some builds.
        for _ in $(seq 100); do ss -Hltn "sport = :2049" | grep -q . && break; sleep 0.1; done
        sleep 2
        ;;
    nbd)
        cat > "$WORK/nbd-server.conf" <<EOF
[generic]
    $BIND_NBD
    port = 10809
    allowlist = true
[${REFERENCE_NBD_EXPORT:-demo}]
    exportname = ${REFERENCE_NBD_IMAGE:-$IMAGE/rootfs.img}
    readonly = true
EOF
        nbd-server -C "$WORK/nbd-server.conf" -p "$WORK/nbd-server.pid" > "$WORK/nbd-server.log" 2>&1
        cmdline="root=nbd:$ADDR:10809/${REFERENCE_NBD_EXPORT:-demo} ro"
        ;;
    *) echo "reference.sh: ROOT is nfs or nbd" >&2; exit 2 ;;
esac

if [ -z "$KEA" ]; then
    dnsmasq --no-daemon --conf-file=/dev/null --port=0 --user=root \
        --bind-interfaces --interface="$IFACE" --no-ping --log-facility="$WORK/dnsmasq.log" \
        --dhcp-range=10.78.1.0,10.78.2.250,255.255.252.0,12h --dhcp-lease-max=1000 \
        --dhcp-leasefile="$WORK/dnsmasq.leases" --dhcp-option=option:router,$ADDR \
        --enable-tftp --tftp-root=/usr/lib/ipxe \
        --dhcp-userclass=set:ipxe,iPXE \
        --dhcp-boot=tag:ipxe,http://$ADDR:8080/boot/script/room.ipxe \
        --dhcp-boot=tag:!ipxe,undionly.kpxe \
        --pid-file="$WORK/dnsmasq.pid" &
else
    # TFTP alone, on the link's addresses as they come and go; DHCP is Kea's.
    dnsmasq --no-daemon --conf-file=/dev/null --port=0 --user=root \
        --bind-dynamic --interface="$IFACE" --log-facility="$WORK/dnsmasq.log" \
        --enable-tftp --tftp-root=/usr/lib/ipxe --pid-file="$WORK/dnsmasq.pid" &
    KEA_PIDFILE_DIR="$WORK" KEA_LOCKFILE_DIR="$WORK" kea-dhcp4 -c "$KEA" \
        > "$WORK/kea-dhcp4.out" 2>&1 &
    # Both halves start at once; each waits (syncing the other's leases) until both are up.
    state=""
    for _ in $(seq 600); do
        state="$(curl -s -m 1 -X POST -H 'Content-Type: application/json' \
            -d '{"command": "ha-heartbeat"}' "$REFERENCE_KEA_URL" |
            sed -n 's/.*"state": *"\([a-z-]*\)".*/\1/p')" || true
        [ "$state" = load-balancing ] && break
        sleep 0.1
    done
    [ "$state" = load-balancing ] ||
        { echo "reference.sh: Kea at $REFERENCE_KEA_URL is ${state:-silent}, not load-balancing, after 60 s" >&2; exit 1; }
fi

mkdir -p "$WORK/www/boot/demo" "$WORK/nginx"
ln -sfn "$IMAGE/vmlinuz" "$WORK/www/boot/demo/vmlinuz"
ln -sfn "${REFERENCE_INITRD:-$IMAGE/initrd.img}" "$WORK/www/boot/demo/initrd.img"
cat > "$WORK/www/script.ipxe" <<EOF
#!ipxe
kernel http://$ADDR:8080/boot/demo/vmlinuz $cmdline console=ttyS0
initrd http://$ADDR:8080/boot/demo/initrd.img
boot
EOF
cat > "$WORK/nginx.conf" <<EOF
daemon off;
user root;
worker_processes 2;
pid $WORK/nginx.pid;
error_log $WORK/nginx-error.log;
events { worker_connections 4096; }
http {
    access_log off;
    sendfile on;
    tcp_nopush on;
    client_body_temp_path $WORK/nginx/body;
    proxy_temp_path $WORK/nginx/proxy;
    fastcgi_temp_path $WORK/nginx/fastcgi;
    uwsgi_temp_path $WORK/nginx/uwsgi;
    scgi_temp_path $WORK/nginx/scgi;
    server {
        listen $LISTEN;
        root $WORK/www;
        location /boot/script/ { default_type text/plain; try_files /script.ipxe =404; }
    }
}
EOF
nginx -c "$WORK/nginx.conf" -p "$WORK/nginx" &
wait
