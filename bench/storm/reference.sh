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
set -euo pipefail
ROOT=${1:?usage: reference.sh nfs|nbd WORKDIR}
WORK=${2:?usage: reference.sh nfs|nbd WORKDIR}
REPO="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
# Resolved: ganesha refuses a mount whose export Path runs through a symlink.
IMAGE="$(realpath "$REPO/images/demo")"
ADDR=10.78.0.1
IFACE=s0
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
    Bind_addr = $ADDR;
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
    listenaddr = $ADDR
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

dnsmasq --no-daemon --conf-file=/dev/null --port=0 --user=root \
    --bind-interfaces --interface="$IFACE" --no-ping --log-facility="$WORK/dnsmasq.log" \
    --dhcp-range=10.78.1.0,10.78.2.250,255.255.252.0,12h --dhcp-lease-max=1000 \
    --dhcp-leasefile="$WORK/dnsmasq.leases" --dhcp-option=option:router,$ADDR \
    --enable-tftp --tftp-root=/usr/lib/ipxe \
    --dhcp-userclass=set:ipxe,iPXE \
    --dhcp-boot=tag:ipxe,http://$ADDR:8080/boot/script/room.ipxe \
    --dhcp-boot=tag:!ipxe,undionly.kpxe \
    --pid-file="$WORK/dnsmasq.pid" &

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
        listen $ADDR:8080;
        root $WORK/www;
        location /boot/script/ { default_type text/plain; try_files /script.ipxe =404; }
    }
}
EOF
nginx -c "$WORK/nginx.conf" -p "$WORK/nginx" &
wait
