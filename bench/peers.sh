#!/usr/bin/env bash
# bench/peers.sh: peer projects' own server tests, run against bootpool. See --help.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"

usage() {
    cat <<EOF
usage: $0 [--bin PATH] [--json FILE] [--only SUITE,...] [--timeout SECONDS] [--keep]

Runs other projects' own tests of a server against one bootpool daemon, each from a client
network namespace of its own, and prints one table (suite, test, passed / failed / not
applicable, the reason for each not applicable) with the totals. Exits non-zero if any test
that applied failed, or a suite did not finish within --timeout (default 900 s).

  libnbd     libnbd's Python binding (nbdsh's, Debian's python3-libnbd), nbdinfo and nbdcopy:
             bench/peers/libnbd.py. libnbd's own interop tests are built around the server
             they start (its command line compiled in).
  qemu       qemu-img and qemu-io (Debian's qemu-utils) on nbd:// URLs
  nbd        nbd's nbd-tester-client (nbd 3.26.1, built here) with the calls of nbd's own
             tests/run/simple_test, and nbd-client -l
  libnfs     libnfs's own tests/ (libnfs 5.0.2, built here), NFSv3, with its functions.sh
             replaced by bench/peers/libnfs-functions.sh (the export is bootpool's, not exportfs's)
  atftp      atftp's test/test.sh (atftp 0.8.0, Debian's atftp client): its own test functions,
             with the local atftpd left out (bench/peers/atftp-main.sh)
  dhcp       RFC 2131 exchanges by busybox udhcpc, ISC dhclient and Kea's perfdhcp

The sources are the Debian archive's upstream tarballs, pinned by version and SHA-256, fetched
once into $CACHE (BOOTPOOL_PEERS_CACHE) and built there once (nice). Build tools it
installs with apt-get if missing: bison, flex, cmake, libglib2.0-dev, pkg-config, python3-libnbd (the
rest comes with scripts/setup).

The daemon is --bin, or target/release/bootpool (\$CARGO_TARGET_DIR/release/bootpool if set),
built with cargo if missing. It runs in a network namespace made here, on a bridge at
10.81.0.1 that the clients' namespaces join, serving images/demo (scripts/setup builds it)
over NFS and NBD (read-only, and as demo-cow with a copy-on-write overlay), its loaders over
TFTP and HTTP, and a scratch image for libnfs's tests, whose scripts write their files on
the server's side. Each client namespace takes its lease with udhcpc first: bootpool serves
roots only to lease holders. Everything started is stopped on exit, the namespaces deleted.

  --bin      serve with this bootpool binary
  --json     write the results there too (default: bench/out/peers.json)
  --only     run these suites only (comma-separated names from above)
  --timeout  seconds each suite may take before it is stopped (default 900)
  --keep     keep the work folder (logs of every client and of the daemon)
EOF
}

CACHE="${BOOTPOOL_PEERS_CACHE:-/var/cache/bootpool-peers}"
MIRROR="${BOOTPOOL_PEERS_MIRROR:-http://deb.debian.org/debian}"
SUITES=(libnbd qemu nbd libnfs atftp dhcp)
BIN="" JSON="$REPO/bench/out/peers.json" ONLY="" TIMEOUT=900 KEEP=""

# Addresses and the clients' MACs (the pools in write_config list them).
NET=10.81.0
SERVER=$NET.1
NOBODY=65534
declare -A MAC=([nfs]=52:54:00:81:00:01 [nbd]=52:54:00:81:00:02 [cow]=52:54:00:81:00:03
                [dhcp]=52:54:00:81:00:04 [int]=52:54:00:81:00:05 [huge]=52:54:00:81:00:06)
ROLES=(nfs nbd cow int huge dhcp)

log() { echo "peers.sh: $*" >&2; }
die() { log "$*"; exit 1; }

# ---------------------------------------------------------------------------------------------
# Sources and builds, cached

# name version file sha256: the Debian archive's upstream tarballs (Debian 13's versions).
SOURCES=(
    "nbd 3.26.1 n/nbd/nbd_3.26.1.orig.tar.xz f0cf509fa5b20b1a07f7904eb637e9b47d3e30b6ed6f00075af5d8b701c78fef"
    "libnfs 5.0.2 libn/libnfs/libnfs_5.0.2.orig.tar.gz 637e56643b19da9fba98f06847788c4dad308b723156a64748041035dcdf9bd3"
    "atftp 0.8.0 a/atftp/atftp_0.8.0.orig.tar.gz 6d41348ae9d069545b6bc69ab4b38d6823b65e142f67bdb57b3accd582e98468"
)

# Unpacks source NAME into $CACHE/src/NAME-VERSION (downloaded and checked once); prints the dir.
source_dir() {
    local entry name version file sum tarball dir
    for entry in "${SOURCES[@]}"; do
        read -r name version file sum <<<"$entry"
        [ "$name" = "$1" ] && break
    done
    [ "$name" = "$1" ] || die "no source named $1"
    dir="$CACHE/src/$name-$version"
    if [ ! -e "$dir/.unpacked" ]; then
        mkdir -p "$CACHE/src"
        tarball="$CACHE/src/$(basename "$file")"
        if ! echo "$sum  $tarball" | sha256sum -c --status 2>/dev/null; then
            log "fetching $name $version"
            curl -fsS -o "$tarball.part" "$MIRROR/pool/main/$file" || die "could not fetch $MIRROR/pool/main/$file"
            mv "$tarball.part" "$tarball"
            echo "$sum  $tarball" | sha256sum -c --status || die "$tarball: SHA-256 is not $sum"
        fi
        rm -rf "$dir" "$dir.tmp"
        mkdir -p "$dir.tmp"
        tar -xf "$tarball" -C "$dir.tmp" --strip-components=1
        mv "$dir.tmp" "$dir"
        touch "$dir/.unpacked"
    fi
    echo "$dir"
}

install_build_tools() {
    local missing=() p
    for p in bison flex cmake libglib2.0-dev pkg-config python3-libnbd; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
    done
    [ ${#missing[@]} -eq 0 ] && return
    log "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >&2
}

# nbd-tester-client, built once from nbd's source (no TLS: bootpool's NBD has none).
build_nbd() {
    local dir
    dir="$(source_dir nbd)"
    [ -x "$dir/tests/run/nbd-tester-client" ] && return
    log "building nbd-tester-client"
    # nbd 3.26.1's configure stops without docbook2man even given --disable-manpages; DB2M
    # set passes it, and no man page is made (only tests/run is).
    (cd "$dir" && DB2M=true nice ./configure -q --without-gnutls --without-libnl >build.log 2>&1 &&
        nice make -C tests/run nbd-tester-client >>build.log 2>&1) || die "building nbd failed: $dir/build.log"
}

# libnfs with its tests and utilities, built once with cmake.
build_libnfs() {
    local dir
    dir="$(source_dir libnfs)"
    [ -x "$dir/build/tests/prog_stat" ] && return
    log "building libnfs and its tests"
    (cd "$dir" && nice cmake -S . -B build -DENABLE_TESTS=ON -DENABLE_UTILS=ON >build.log 2>&1 &&
        nice make -C build -j2 >>build.log 2>&1) || die "building libnfs failed: $dir/build.log"
}

# ---------------------------------------------------------------------------------------------
# Results: one line per test in $RESULTS, suite TAB test TAB passed|failed|n/a TAB reason

result() {
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "${4:-}" >>"$RESULTS"
}

# The namespace of client ROLE.
ns_of() { echo "bpp-$1-$RUN_ID"; }

# Runs a command in client ROLE's namespace, bounded to SECONDS, its output appended to LOG
# (LOG "-": left as it is).
in_ns() {
    local role=$1 secs=$2 logfile=$3
    shift 3
    if [ "$logfile" = - ]; then
        timeout --kill-after=5 "$secs" ip netns exec "$(ns_of "$role")" "$@"
    else
        echo "\$ $*" >>"$logfile"
        timeout --kill-after=5 "$secs" ip netns exec "$(ns_of "$role")" "$@" >>"$logfile" 2>&1
    fi
}

# Records TEST of SUITE as passed when the command (run as in_ns ROLE) succeeds, else failed.
check() {
    local suite=$1 test=$2 role=$3
    shift 3
    if in_ns "$role" 120 "$WORK/$suite.log" "$@"; then
        result "$suite" "$test" passed
    else
        result "$suite" "$test" failed "exit $? (its output: $suite.log, kept with --keep)"
    fi
}

# ---------------------------------------------------------------------------------------------
# The suites. Each runs with $WORK, $RESULTS, $RUN_ID, $SERVER and $DEMO set.

NBD_URL="nbd://$SERVER:10809"

suite_nbd() {
    local t tester="$CACHE/src/nbd-3.26.1/tests/run/nbd-tester-client"
    local tr="$CACHE/src/nbd-3.26.1/tests/run"
    # simple_test's cases in its order, each with the call it makes; demo is read-only,
    # demo-cow writable through a per-client overlay.
    check nbd "cfg1: read throughput" nbd "$tester" -N demo "$SERVER"
    check nbd "cfgsize: oversized requests" nbd "$tester" -o -N demo "$SERVER"
    check nbd "write: write throughput" cow "$tester" -N demo-cow -w "$SERVER"
    check nbd "flush: writes with flush" cow "$tester" -N demo-cow -w -f "$SERVER"
    # The integrity tests expect a fresh export of zeros (nbd-server's `temporary` file of 50 MiB):
    # the blank image, through an overlay of each client's own.
    check nbd "integrity: integrity-test.tr" int "$tester" -N blank -i -t "$tr/integrity-test.tr" "$SERVER"
    check nbd "integrityhuge: integrityhuge-test.tr" huge "$tester" -N blank -i -t "$tr/integrityhuge-test.tr" "$SERVER"
    check nbd "rowrite: writes to a read-only export fail" nbd "$tester" -N demo -w -F "$SERVER"
    check nbd "handshake: handshake variants" nbd "$tester" -h -N demo "$SERVER"
    check nbd "list: nbd-client -l" nbd nbd-client -l "$SERVER"
    for t in cfgmulti cfgnew dirconfig; do
        result nbd "$t" n/a "tests nbd-server's config file (the client call is cfg1's)"
    done
    result nbd tree n/a "nbd-server's per-client file tree exports (-w on a tree of files)"
    result nbd rotree n/a "nbd-server's per-client file tree exports, read-only"
    result nbd unix n/a "NBD over a UNIX socket: bootpool serves NBD over TCP to the room"
    result nbd inetd n/a "nbd-server started by inetd"
    for t in tls tlshuge tlswrongcert; do
        result nbd "$t" n/a "NBD over TLS: bootpool's NBD has no TLS"
    done
}

suite_libnbd() {
    check libnbd "nbdinfo: size and read-only flag" nbd sh -c \
        "nbdinfo --json '$NBD_URL/demo' | python3 -c 'import json,sys; e=json.load(sys.stdin)[\"exports\"][0]; assert e[\"export-size\"]==$(stat -c %s "$DEMO/rootfs.img"), e; assert e[\"is_read_only\"], e'"
    check libnbd "nbdinfo --list: the export is listed" nbd sh -c \
        "nbdinfo --list --json '$NBD_URL' | python3 -c 'import json,sys; n=[e[\"export-name\"] for e in json.load(sys.stdin)[\"exports\"]]; assert n==[\"demo\"], n'"
    check libnbd "nbdcopy: the whole export equals rootfs.img" nbd sh -c \
        "nbdcopy '$NBD_URL/demo' - | cmp - '$DEMO/rootfs.img'"
    local line
    for role in nbd cow; do
        in_ns "$role" 300 - /usr/bin/python3 "$HERE/peers/libnbd.py" "$role" "$SERVER" \
            "$DEMO/rootfs.img" >"$WORK/libnbd-$role.tsv" 2>>"$WORK/libnbd.log" || true
        while IFS= read -r line; do printf 'libnbd\t%s\n' "$line" >>"$RESULTS"; done <"$WORK/libnbd-$role.tsv"
    done
}

# qemu-io ROLE TEST ARGS...: qemu-io exits 0 when a command fails, so a check passes when
# qemu-io ran and said nothing failed (read -P says "Pattern verification failed").
qemu_io() {
    local role=$1 test=$2 out="$WORK/qemu-io.out"
    shift 2
    if in_ns "$role" 120 "$out" qemu-io -f raw "$@" && ! grep -qiE 'failed|error' "$out" &&
        grep -qE '^(read|wrote) ' "$out"; then
        result qemu "$test" passed
    else
        result qemu "$test" failed "$(grep -iE 'failed|error' "$out" | head -1)"
    fi
    cat "$out" >>"$WORK/qemu.log"
    rm -f "$out"
}

suite_qemu() {
    local ro="$NBD_URL/demo" rw="$NBD_URL/demo-cow" size aio=() i
    size=$(stat -c %s "$DEMO/rootfs.img")
    check qemu "qemu-img info: virtual size" nbd sh -c \
        "qemu-img info --output=json '$ro' | grep -q '\"virtual-size\": $size'"
    check qemu "qemu-img compare: the export equals rootfs.img" nbd \
        qemu-img compare -f raw -F raw "$ro" "$DEMO/rootfs.img"
    check qemu "qemu-img map: the whole export mapped" nbd sh -c \
        "qemu-img map -f raw --output=json '$ro' | python3 -c 'import json,sys; m=json.load(sys.stdin); assert m[-1][\"start\"]+m[-1][\"length\"]==$size, m'"
    check qemu "qemu-img convert: the export to a file equals rootfs.img" nbd sh -c \
        "qemu-img convert -f raw -O raw '$ro' '$WORK/qemu-copy.img' && cmp '$WORK/qemu-copy.img' '$DEMO/rootfs.img'; r=\$?; rm -f '$WORK/qemu-copy.img'; exit \$r"
    qemu_io nbd "qemu-io: read at the start, middle and end" -r \
        -c "read 0 64k" -c "read $((size / 2)) 1M" -c "read $((size - 4096)) 4k" "$ro"
    qemu_io nbd "qemu-io: readv" -r -c "readv 0 4k 8k 512" "$ro"
    for i in 0 1 2 3 4 5 6 7; do aio+=(-c "aio_read $((i * 131072)) 128k"); done
    qemu_io nbd "qemu-io: 8 aio_read, aio_flush" -r "${aio[@]}" -c aio_flush "$ro"
    check qemu "qemu-io: the read-only export refuses a read-write open" nbd sh -c \
        "out=\$(qemu-io -f raw -c 'write 0 4k' '$ro' 2>&1); echo \"\$out\"; echo \"\$out\" | grep -qi 'read-only\\|read only\\|permission denied'"
    qemu_io cow "qemu-io: write -P, read -P (overlay)" -c "write -P 0xab 1M 64k" -c "read -P 0xab 1M 64k" "$rw"
    qemu_io cow "qemu-io: write -z, read -P 0 (overlay)" \
        -c "write -P 0xcd 2M 64k" -c "write -z 2M 64k" -c "read -P 0 2M 64k" "$rw"
    qemu_io cow "qemu-io: aio_write, aio_flush, read -P (overlay)" \
        -c "aio_write -P 0x5a 3M 128k" -c aio_flush -c "read -P 0x5a 3M 128k" "$rw"
    qemu_io cow "qemu-io: write, flush (overlay)" -c "write 4M 4k" -c flush "$rw"
    qemu_io cow "qemu-io: discard, then the rest reads as before (overlay)" \
        -c "write -P 0x77 5M 128k" -c "discard 5M 64k" -c "read -P 0x77 5184k 64k" "$rw"
}

suite_libnfs() {
    local src build dir t name
    src="$CACHE/src/libnfs-5.0.2"
    build="$src/build"
    dir="$WORK/libnfs/tests"
    mkdir -p "$dir" "$WORK/libnfs/utils"
    cp "$build"/utils/nfs-* "$WORK/libnfs/utils/"
    cp "$build"/tests/prog_* "$build"/tests/ld_timeout.so "$dir/"
    cp "$src"/tests/test_*.sh "$dir/"
    cp "$HERE/peers/libnfs-functions.sh" "$dir/functions.sh"
    # The scripts' one address of their own server.
    sed -i "s#nfs://127.0.0.1#nfs://$SERVER#g" "$dir"/test_*.sh
    ln -s "$LIBNFS_ROOT" "$dir/testdata"
    # Programs that change the export stand aside: in their place a stub says what was asked.
    mkdir -p "$dir/writes"
    for name in chmod chown create fchmod fchown ftruncate lchmod lchown link mkdir mknod \
        open_write rename rmdir symlink truncate unlink utimes; do
        mv "$dir/prog_$name" "$dir/writes/"
        printf '#!/bin/sh\necho prog_%s >>"$PEERS_WROTE"\nexit 1\n' "$name" >"$dir/prog_$name"
        chmod +x "$dir/prog_$name"
    done
    for name in access access2; do
        mv "$dir/prog_$name" "$dir/writes/"
        printf '#!/bin/sh\ncase "$4" in *W_OK*) echo 1 >"$PEERS_WOK"; exit 1;; esac\nexec "$(dirname "$0")/writes/prog_%s" "$@"\n' "$name" >"$dir/prog_$name"
        chmod +x "$dir/prog_$name"
    done
    # libnfs's scripts run as a user (sudo only for exportfs), who owns the files they make:
    # here nobody, from a port above 1023 (the image has secure_ports: false, exportfs's
    # `insecure` in libnfs's own functions.sh).
    local state="$WORK/libnfs/state"
    mkdir -p "$state"
    chown "$NOBODY:$NOBODY" "$state" "$LIBNFS_ROOT"
    result libnfs "NFSv4 run (VERSION=4, every script)" n/a "NFSv4: bootpool serves NFSv3"
    for t in "$dir"/test_*.sh; do
        name=$(basename "$t" .sh)
        case "$name" in
            *valgrind*) result libnfs "$name" n/a "a valgrind leak check of libnfs's own client code"; continue ;;
            test_9990_build_rpm) result libnfs "$name" n/a "builds libnfs's RPM, no server" ; continue ;;
        esac
        rm -f "$state/checks.tsv"
        (cd "$dir" && PEERS_CHECKS="$state/checks.tsv" PEERS_TESTDIR="$LIBNFS_ROOT" \
            PEERS_URL="nfs://$SERVER/libnfs" PEERS_WROTE="$state/wrote" PEERS_WOK="$state/wok" \
            in_ns nfs 120 "$WORK/libnfs.log" setpriv --reuid="$NOBODY" --regid="$NOBODY" --clear-groups \
            sh "./$name.sh") || true
        if [ ! -s "$state/checks.tsv" ]; then
            result libnfs "$name" failed "no check reported (libnfs.log, kept with --keep)"
        fi
        while IFS=$'\t' read -r label status reason; do
            result libnfs "$name: $label" "$status" "$reason"
        done <"$state/checks.tsv"
    done
}

suite_atftp() {
    local src dir
    src="$(source_dir atftp)"
    dir="$WORK/atftp-test"  # test.sh takes ../atftp for a built client: none here
    mkdir -p "$dir"
    cp "$src/test/test.sh" "$dir/test.sh"
    (cd "$dir" && PEERS_TFTP_ROOT="$TFTP_ROOT" PEERS_CHECKS="$WORK/atftp-checks.tsv" HOST="$SERVER" PORT=69 \
        in_ns nfs 600 "$WORK/atftp.log" bash "$HERE/peers/atftp-main.sh" ./test.sh) || true
    [ -s "$WORK/atftp-checks.tsv" ] || result atftp "test.sh" failed "no check reported (atftp.log, kept with --keep)"
    while IFS=$'\t' read -r label status reason; do
        result atftp "$label" "$status" "$reason"
    done <"$WORK/atftp-checks.tsv" 2>/dev/null || true
}

# dhclient in the dhcp namespace with a script that writes "REASON IP" lines to $1.out;
# the rest of the arguments go to dhclient. Stops once the script saw BOUND, REBOOT or FAIL.
dhclient_run() {
    local name=$1
    shift
    local d="$WORK/dhclient-$name"
    mkdir -p "$d"
    printf '#!/bin/sh\necho "$reason $new_ip_address" >>%s\n' "$d/out" >"$d/script"
    chmod +x "$d/script"
    : >"$d/out"
    # (timeout reports the dhclient stopped below as Terminated: not news.)
    { in_ns dhcp 30 "$d/log" dhclient -d -1 -v -sf "$d/script" -pf "$d/pid" -lf "$WORK/dhclient.leases" \
        -cf /dev/null "$@" eth0; } 2>/dev/null &
    local pid=$! i p
    for i in $(seq 200); do
        grep -qE '^(BOUND|REBOOT|FAIL|RENEW)' "$d/out" 2>/dev/null && break
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    for p in $(ip netns pids "$(ns_of dhcp)"); do
        [ "$(cat "/proc/$p/comm" 2>/dev/null)" = dhclient ] && kill "$p" 2>/dev/null
    done
    wait "$pid" 2>/dev/null || true
    cat "$d/out"
}

suite_dhcp() {
    local mac=52:54:00:81:01:01 out ip first
    ip -n "$(ns_of dhcp)" link set eth0 down
    ip -n "$(ns_of dhcp)" link set eth0 address "$mac"
    ip -n "$(ns_of dhcp)" link set eth0 up
    out=$(lease_of dhcp) || true
    first=${out%% *}
    if [[ "$out" =~ ^$NET\.[0-9]+\ 255\.255\.255\.0\ $SERVER\ $SERVER\ [0-9]+$ ]]; then
        result dhcp "udhcpc: DISCOVER, OFFER, REQUEST, ACK (address, mask, router, server id, lease)" passed
    else
        result dhcp "udhcpc: DISCOVER, OFFER, REQUEST, ACK (address, mask, router, server id, lease)" failed "got: '$out'"
    fi
    out=$(lease_of dhcp) || true
    if [ -n "$first" ] && [ "${out%% *}" = "$first" ]; then
        result dhcp "udhcpc: the same client gets the same address again (RFC 2131 4.3.1)" passed
    else
        result dhcp "udhcpc: the same client gets the same address again (RFC 2131 4.3.1)" failed "first $first, then '${out%% *}'"
    fi
    ip -n "$(ns_of dhcp)" addr flush dev eth0
    rm -f "$WORK/dhclient.leases"
    out=$(dhclient_run dora)
    ip=$(sed -n 's/^BOUND //p' <<<"$out")
    if [ -n "$ip" ]; then
        result dhcp "dhclient: DISCOVER, OFFER, REQUEST, ACK" passed
    else
        result dhcp "dhclient: DISCOVER, OFFER, REQUEST, ACK" failed "script saw: $out"
    fi
    ip -n "$(ns_of dhcp)" addr flush dev eth0
    out=$(dhclient_run reboot)
    if grep -q "^REBOOT $ip$" <<<"$out"; then
        result dhcp "dhclient: INIT-REBOOT, the REQUEST for its address is ACKed" passed
    else
        result dhcp "dhclient: INIT-REBOOT, the REQUEST for its address is ACKed" failed "script saw: $out"
    fi
    # A lease from another network: an authoritative server answers the REQUEST with a NAK.
    ip -n "$(ns_of dhcp)" addr flush dev eth0
    sed -i "s/\\b$ip\\b/10.99.0.5/g; s/\\b$SERVER\\b/10.99.0.1/g" "$WORK/dhclient.leases"
    out=$(dhclient_run nak)
    if grep -q DHCPNAK "$WORK/dhclient-nak/log" && grep -q "^BOUND $NET\." <<<"$out"; then
        result dhcp "dhclient: INIT-REBOOT from another network is NAKed, then DISCOVER binds" passed
    else
        result dhcp "dhclient: INIT-REBOOT from another network is NAKed, then DISCOVER binds" failed "script saw: $out"
    fi
    # RELEASE is sent from the bound address (dhclient's own script would have put it there).
    ip=$(sed -n 's/^BOUND //p' <<<"$out")
    ip -n "$(ns_of dhcp)" addr flush dev eth0
    [ -n "$ip" ] && ip -n "$(ns_of dhcp)" addr add "$ip/24" dev eth0
    in_ns dhcp 30 "$WORK/dhcp.log" dhclient -r -v -sf /bin/true -pf "$WORK/dhclient-r.pid" \
        -lf "$WORK/dhclient.leases" -cf /dev/null eth0
    sleep 0.5
    if [ -n "$ip" ] && grep -q "dhcp release mac=$mac ip=$ip" "$WORK/daemon.log"; then
        result dhcp "dhclient -r: RELEASE of the bound address, heard by the server" passed
    else
        result dhcp "dhclient -r: RELEASE of the bound address, heard by the server" failed "no release of '$ip' in daemon.log"
    fi
    ip -n "$(ns_of dhcp)" addr flush dev eth0
    # perfdhcp relays (giaddr): the namespace needs an address on the subnet.
    ip -n "$(ns_of dhcp)" addr add "$NET.2/24" dev eth0
    out=$(in_ns dhcp 120 "$WORK/dhcp.log" perfdhcp -4 -l eth0 -b mac=52:54:00:81:02:00 -R 100 -n 100 \
        -r 50 -d 10 -W 2000000 "$SERVER"; tail -40 "$WORK/dhcp.log")
    if grep -qE 'sent packets: 100' <<<"$out" && [ "$(grep -cE '^drops: 0$' <<<"$out")" = 2 ]; then
        result dhcp "perfdhcp: 100 clients' relayed DORA exchanges, none dropped" passed
    else
        result dhcp "perfdhcp: 100 clients' relayed DORA exchanges, none dropped" failed "its output: dhcp.log, kept with --keep"
    fi
}

# ---------------------------------------------------------------------------------------------
# The room: a server namespace with a bridge, one namespace per client role, the daemon

# Takes a lease in ROLE's namespace with busybox udhcpc and puts the address on eth0;
# prints "IP MASK ROUTER SERVERID LEASE".
lease_of() {
    local role=$1 f="$WORK/udhcpc-$1"
    rm -f "$f.out"
    printf '#!/bin/sh\n[ "$1" = bound ] || exit 0\nip addr flush dev "$interface"\nip addr add "$ip/$subnet" dev "$interface"\necho "$ip $subnet $router $serverid $lease" >%s\n' \
        "$f.out" >"$f.sh"
    chmod +x "$f.sh"
    in_ns "$role" 30 "$f.log" busybox udhcpc -i eth0 -f -q -n -t 5 -T 1 -s "$f.sh" || true
    [ -s "$f.out" ] && cat "$f.out"
}

write_config() {
    cat >"$WORK/pools.yaml" <<EOF
server:
  interfaces: [pbr0]
  address: $SERVER
  http: $SERVER:8080
  state_dir: $WORK/var/
  loaders: $TFTP_ROOT
dhcp:
  mode: authoritative
  subnet: $NET.0/24
  range: $NET.50-$NET.250
  router: $SERVER
  lease: 1h
limits:
  # atftp's test.sh starts 200 transfers from one address: a NAT'd room's setting.
  tftp_per_client: 200
images:
  demo: { dir: $DEMO, store: disk }
  demo-cow: { dir: $DEMO, cow: ram }
  libnfs: { dir: $WORK/libnfs-image, store: disk, secure_ports: false }
  blank: { dir: $WORK/blank-image, cow: ram }
pools:
  nfs:
    image: libnfs
    root: nfs
    clients: [ { mac: "${MAC[nfs]}" } ]
  nbd:
    image: demo
    root: nbd
    clients: [ { mac: "${MAC[nbd]}" } ]
  cow:
    image: demo-cow
    root: nbd
    clients: [ { mac: "${MAC[cow]}" } ]
  int:
    image: blank
    root: nbd
    clients: [ { mac: "${MAC[int]}" }, { mac: "${MAC[huge]}" } ]
  dhcp:
    image: demo
    root: nfs
    clients:
      - { mac: "${MAC[dhcp]}" }
      - { macs: "52:54:00:81:01:00-52:54:00:81:02:ff" }
EOF
}

DAEMON_PID=""
cleanup() {
    local role pid
    if [ -n "$DAEMON_PID" ]; then
        kill "$DAEMON_PID" 2>/dev/null || true
        wait "$DAEMON_PID" 2>/dev/null || true
    fi
    # Whatever else still runs in the namespaces was started by this script.
    for role in server "${ROLES[@]}"; do
        for pid in $(ip netns pids "$(ns_of "$role")" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
        ip netns del "$(ns_of "$role")" 2>/dev/null || true
    done
    if [ -n "$KEEP" ]; then log "work folder kept: $WORK"; else rm -rf "$WORK"; fi
}

make_room() {
    local s role
    s=$(ns_of server)
    ip netns add "$s"
    ip -n "$s" link set lo up
    ip -n "$s" link add pbr0 type bridge
    ip -n "$s" addr add "$SERVER/24" dev pbr0
    ip -n "$s" link set pbr0 up
    for role in "${ROLES[@]}"; do
        ip netns add "$(ns_of "$role")"
        ip -n "$(ns_of "$role")" link set lo up
        ip link add "pp-$role" netns "$s" type veth peer name eth0 netns "$(ns_of "$role")"
        ip -n "$s" link set "pp-$role" master pbr0
        ip -n "$s" link set "pp-$role" up
        ip -n "$(ns_of "$role")" link set eth0 address "${MAC[$role]}"
        ip -n "$(ns_of "$role")" link set eth0 up
    done
}

start_daemon() {
    ip netns exec "$(ns_of server)" env BOOTPOOL_LOG="${BOOTPOOL_LOG:-info}" "$BOOTPOOL" serve --config "$WORK/pools.yaml" \
        </dev/null >"$WORK/daemon.log" 2>&1 &
    DAEMON_PID=$!
    local i
    for i in $(seq 200); do
        grep -qs "bootpool serving" "$WORK/daemon.log" && return
        kill -0 "$DAEMON_PID" 2>/dev/null || break
        sleep 0.1
    done
    cat "$WORK/daemon.log" >&2
    die "bootpool did not start"
}

# ---------------------------------------------------------------------------------------------
# main

# `peers.sh --suite NAME` is one suite, run by the main script under `timeout`.
if [ "${1:-}" = --suite ]; then
    set +e  # each check records its own outcome; one that goes wrong does not end the suite
    "suite_$2"
    exit 0
fi

while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --bin) BIN="$2"; shift ;;
        --json) JSON="$2"; shift ;;
        --only) ONLY="$2"; shift ;;
        --timeout) TIMEOUT="$2"; shift ;;
        --keep) KEEP=1 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[ "$(id -u)" = 0 ] || die "must run as root (network namespaces)"
if [ -n "$ONLY" ]; then
    IFS=, read -r -a SUITES <<<"$ONLY"
    for s in "${SUITES[@]}"; do declare -F "suite_$s" >/dev/null || die "no suite named $s"; done
fi
DEMO="$REPO/images/demo"
if [ ! -s "$DEMO/rootfs.img" ] || [ ! -d "$DEMO/rootfs" ]; then
    die "$DEMO is not built: run scripts/setup"
fi
for c in busybox dhclient perfdhcp nbd-client nbdinfo nbdcopy qemu-io qemu-img atftp curl cc make; do
    command -v "$c" >/dev/null || die "$c missing: run scripts/setup"
done

if [ -n "$BIN" ]; then
    BOOTPOOL="$BIN"
else
    BOOTPOOL="${CARGO_TARGET_DIR:-$REPO/target}/release/bootpool"
    if [ ! -x "$BOOTPOOL" ]; then
        log "building bootpool --release"
        (cd "$REPO" && nice cargo build --release -q)
    fi
fi
[ -x "$BOOTPOOL" ] || die "no bootpool binary at $BOOTPOOL"

install_build_tools
mkdir -p "$CACHE"
build_nbd
build_libnfs
source_dir atftp >/dev/null

RUN_ID=$$
WORK="$(mktemp -d /tmp/bootpool-peers.XXXXXX)"
chmod 755 "$WORK"  # libnfs's scripts run as nobody
RESULTS="$WORK/results.tsv"
: >"$RESULTS"
trap cleanup EXIT
trap 'exit 130' INT TERM
export WORK RESULTS RUN_ID SERVER DEMO CACHE

# Two images beside the demo, with the demo's boot files: libnfs's scratch image, whose root is
# where libnfs's scripts put their files, and a blank NBD root of 50 MiB of zeros for nbd's
# integrity tests.
mkdir -p "$WORK/libnfs-image/rootfs" "$WORK/blank-image"
for d in libnfs-image blank-image; do
    for f in vmlinuz initrd.img; do
        ln "$DEMO/$f" "$WORK/$d/$f" 2>/dev/null || cp "$DEMO/$f" "$WORK/$d/$f"
    done
done
truncate -s 50M "$WORK/blank-image/rootfs.img"
LIBNFS_ROOT="$WORK/libnfs-image/rootfs"
# The TFTP root (server.loaders): iPXE's loaders, where atftp's test writes its files.
TFTP_ROOT="$WORK/tftp"
mkdir -p "$TFTP_ROOT"
cp /usr/lib/ipxe/undionly.kpxe /usr/lib/ipxe/ipxe.efi "$TFTP_ROOT/" 2>/dev/null || true
export LIBNFS_ROOT TFTP_ROOT

write_config
make_room
start_daemon
for role in nfs nbd cow int huge; do
    lease_of "$role" >/dev/null || die "no lease for the $role client (udhcpc-$role.log, kept with --keep)"
done

for s in "${SUITES[@]}"; do
    log "suite $s"
    set +e
    timeout --kill-after=10 "$TIMEOUT" "$0" --suite "$s"
    rc=$?
    set -e
    if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
        result "$s" "(the suite)" failed "stopped after $TIMEOUT s"
    elif [ "$rc" != 0 ]; then
        result "$s" "(the suite)" failed "the runner exited $rc"
    fi
done
kill -0 "$DAEMON_PID" 2>/dev/null || result bootpool "(the daemon)" failed "exited during the run (daemon.log, kept with --keep)"

mkdir -p "$(dirname "$JSON")"
python3 "$HERE/peers/report.py" "$RESULTS" "$JSON" \
    "$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo unknown)" "$("$BOOTPOOL" --version 2>/dev/null || true)"
