#!/usr/bin/env bash
# bench/storm.sh: the 08:00 storm, bootpool against the reference stack, like for like. See --help.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"

usage() {
    cat <<EOF
usage: $0 [--clients N] [--big N] [--roots "nfs nbd"] [--links K] [--link-rate RATE]
          [--client-link RATE] [--think-scale F] [--out DIR] [--bin PATH]
          [--stacks "bootpool reference"] [--optins "nocto zstd"] [--rows "ROW..."]
          [--servers K [--fail kill|linkdown] [--fail-at SECONDS]]
          [--sequential-macs] [--placement owner|site]
          [--record NAME]

Boots a simulated room (\`bootpool storm\`, bench/storm/pools.yaml, the shipped traces in
bench/traces/) once per row, all in this one run. Every row of a kind serves the same files
with the same client options and replays the same trace (docs/storm.md, "Like for like"); the
clients start as a NIC's PXE ROM does (DHCP, the loader over TFTP, then iPXE's DHCP).

Plain rows (the images as built, the NFS root mounted with the kernel's close-to-open checks):
  bootpool-links      bootpool serve on K links of RATE (it spreads its clients over them)
  bootpool-bond       bootpool serve on one link of K x RATE: an ideal bond
  reference-bond      dnsmasq + nginx + nfs-ganesha (NFS) or nbd-server (NBD), ideal bond
  reference-hashed    the same stack on a bond simulated: K links of RATE under one address,
                      each client's frames on the link its MAC hashes onto (layer 2)
  reference-1link     the same stack on K links of RATE; it tells every client one address,
                      so it uses one of them (a server with several NICs and no bond: 1/K of
                      the capacity by construction, what spreading clients buys, not a speed)
Opt-in rows (--optins), bootpool with an option on beside the reference given its
one-line equivalent, both on the ideal bond:
  nocto   (NFS) bootpool's \`nfs_options: nocto\`; the reference's root= line with nocto
  zstd    \`initrd_wire: zstd\` (and for NBD \`root_wire: zstd\`); the reference serves the
          initrd recompressed by \`gzip -dc | zstd -19\` (and for NBD a squashfs made again
          by \`mksquashfs -comp zstd\`, as bootpool makes its copy)

for each root in --roots with --clients (default 40) clients, then --big (default 200; 0 skips)
clients over NFS, plain, bootpool on its links and the reference on the ideal bond. The scale:
clients at --client-link (default 100mbit) and the server on --links (default 4) x --link-rate
(default 250mbit): a tenth of a room of PCs on 1GbE, and a quarter of a server on 4 x 1GbE, so
that two cores can push it. --think-scale (default 0.2) stands the TCG-recorded traces' think
times for a real PC's (docs/storm.md).

Evidence: each row's JSON (its command line inside), the command that made it (ROW.cmd), its
table (ROW.txt) and log go to --out (default bench/out/storm-DATE/), with the rows' configs
(pools-VARIANT-KxRATE.yaml), meta.txt (commit, machine) and summary.md (the tables printed at
the end, with ratios); every run's links and the machine's CPUs per second are drawn in
--out/links-and-cpus.svg (bench/storm-plot.py). --record NAME keeps a run of record in
bench/records/storm-NAME/ (JSON over 256 KiB gzipped) for git.
Needs root and what scripts/setup installs (squashfs-tools and zstd, nfs-ganesha, nbd-server,
nginx-light and kea-dhcp4-server among it; their services are not started).
  --bin      run this bootpool binary instead of building one
  --stacks   which of the two to run (default both; the summary covers every JSON in --out);
             \`--servers "bootpool reference"\`, its older spelling, still works
  --servers K  instead of the rows above, one row per root of K bootpool servers, members
             of one site on a PostgreSQL the storm starts (\`bootpool storm --servers K\`;
             needs Debian's postgresql, not the reference stack), each on --links x
             --link-rate: bootpool-siteK-plain-ROOT-N. bench/site-storm.sh runs K = 1, 2, 4.
             With --servers 2 and --stacks naming reference, also the reference as a site:
             this stack on each of two servers, its DHCP a Kea HA pair in place of dnsmasq
             (reference-site2-plain-ROOT-N; needs kea-dhcp4-server, docs/failover.md)
  --fail KIND, --fail-at SECONDS  with --servers K and --links 1: member s1 dies SECONDS
             (default 20) after power-on, its bootpool and keepalived killed with -9 (kill)
             or its links taken down first (linkdown): bootpool-siteK-plain-ROOT-N-KIND
             (docs/failover.md; needs keepalived). bench/failover-storm.sh runs the rows
  --optins   which opt-in rows to run (default "nocto zstd"; "" for none)
  --rows     which plain rows to run, by the names above (default all five)
  --sequential-macs  the clients' MACs as bench/storm/pools.yaml lists them (two ranges);
             by default each pool's 256 MACs are drawn at random from a fixed seed, as a
             room's purchased PCs have them (a bond's layer-2 hash spreads a range evenly)
  --placement  with --servers K: bootpool's server.placement (docs/site.md): owner (each
             boot on its DHCP owner's links) or site (the owner spreads its boots over every
             member's links); default: the config's, bootpool's default
bench/storm-matrix.sh runs the plain rows over sizes and numbers of links.
EOF
}

ARGS="$*"
FAIL="" FAIL_AT=20
CLIENTS=40 BIG=200 ROOTS="nfs nbd" LINKS=4 RATE=250mbit CLIENT=100mbit THINK=0.2 OUT="" BIN=""
SERVERS="bootpool reference" OPTINS="nocto zstd" RECORD="" MACS=random SITE="" STACKS_SET="" PLACEMENT=""
ROWS="bootpool-links bootpool-bond reference-bond reference-hashed reference-1link"
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
        --stacks) SERVERS="$2" STACKS_SET=1; shift ;;
        --servers)
            case "$2" in
                ''|*[!0-9]*) SERVERS="$2" ;;
                *) SITE="$2" ;;
            esac
            shift ;;
        --optins) OPTINS="$2"; shift ;;
        --rows) ROWS="$2"; shift ;;
        --sequential-macs) MACS=sequential ;;
        --placement) PLACEMENT="$2"; shift ;;
        --fail) FAIL="$2"; shift ;;
        --fail-at) FAIL_AT="$2"; shift ;;
        --record) RECORD="$2"; shift ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[ "$(id -u)" = 0 ] || { echo "storm.sh: must run as root" >&2; exit 1; }
NEEDED="ganesha.nfsd rpcbind nbd-server nginx dnsmasq tc mksquashfs unsquashfs zstd"
if [ -n "$SITE" ]; then
    NEEDED="tc"
    if [ -n "$STACKS_SET" ]; then
        case " $SERVERS " in
            *" reference "*) NEEDED="$NEEDED ganesha.nfsd rpcbind nbd-server nginx dnsmasq kea-dhcp4 curl" ;;
        esac
    fi
    compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null ||
        { echo "storm.sh: --servers needs PostgreSQL (apt-get install postgresql)" >&2; exit 1; }
fi
for c in $NEEDED; do
    command -v "$c" >/dev/null || { echo "storm.sh: $c missing (see --help)" >&2; exit 1; }
done
if [ -z "$BIN" ]; then
    (cd "$REPO" && cargo build --release --quiet)
    BIN="$REPO/target/release/bootpool"
fi
OUT="${OUT:-$REPO/bench/out/storm-$(date -u +%Y%m%d-%H%M)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
WORK="$(mktemp -d /tmp/bootpool-storm.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
IMAGE="$REPO/images/demo"
# The ideal bond: one link of K x RATE.
BOND="$(python3 -c "
import re,sys; m=re.fullmatch(r'([0-9.]+)([kmg]?)(bit)?', sys.argv[1].lower())
print(f'{float(m.group(1))*int(sys.argv[2]):g}{m.group(2)}bit')" "$RATE" "$LINKS")"
{
    echo "command: $0 $ARGS"
    echo "commit: $(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$REPO" diff --quiet 2>/dev/null || echo ' (with changes)')"
    echo "binary: $BIN ($("$BIN" --version 2>/dev/null || echo '?'))"
    echo "date: $(date -u +%FT%TZ)"
    echo "machine: $(uname -srm), $(nproc) CPUs"
    echo "room: clients at $CLIENT, server links ${LINKS}x$RATE (ideal bond 1x$BOND), think x$THINK"
} > "$OUT/meta.txt"

# The config of a row: bench/storm/pools.yaml with absolute paths, the row's links' rates in
# server.link_speeds (bootpool paces by them), and the opt-in's setting.
config() { # variant k rate -> path
    local file="$OUT/pools-$1-$2x$3.yaml"
    python3 - "$REPO/bench/storm/pools.yaml" "$file" "$IMAGE" "$REPO/var/storm-state/" "$MACS" "$PLACEMENT" "$@" <<'EOF'
import sys
src, dst, image, state, macs, placement, variant, k, rate = sys.argv[1:]
text = open(src).read()
def once(old, new):
    global text
    if text.count(old) != 1:
        sys.exit(f"storm.sh: {src} no longer has `{old.strip()}` once; update config() in bench/storm.sh")
    text = text.replace(old, new)
once("dir: ../../images/demo", f"dir: {image}")
# A real room's MACs, not a range: purchased PCs rarely have contiguous ones, and a bond's
# layer-2 hash spreads contiguous last bytes evenly by construction. Seeded, the same for
# every row and run; --sequential-macs keeps the ranges.
if macs == "random":
    import random
    r, seen = random.Random(42), set()
    for first in ("52:54:00:78:00:00-52:54:00:78:00:ff", "52:54:00:78:01:00-52:54:00:78:01:ff"):
        drawn = []
        while len(drawn) < 256:
            mac = "52:54:00:%02x:%02x:%02x" % (r.randrange(256), r.randrange(256), r.randrange(256))
            if mac not in seen:
                seen.add(mac)
                drawn.append(mac)
        once(f'      - {{ macs: "{first}" }}', "\n".join(f'      - {{ mac: "{m}" }}' for m in drawn))
once("state_dir: ../../var/storm-state/", f"state_dir: {state}")
if placement:
    once(f"  state_dir: {state}", f"  state_dir: {state}\n  placement: {placement}")
speeds = ", ".join(f"s{i}: {rate}" for i in range(int(k)))
line = next(l for l in text.splitlines() if l.strip().startswith("link_speeds:"))
once(line, f"  link_speeds: {{ {speeds} }}")
if variant == "nocto":
    once('nfs_options: ""', "nfs_options: nocto")
elif variant == "zstd":
    once("    store: disk\n", "    store: disk\n    initrd_wire: zstd\n    root_wire: zstd\n")
open(dst, "w").write(text)
EOF
    echo "$file"
}

# The reference's one-line equivalents of `zstd`, made once into --out (its rows' commands
# name them): the initrd's gzip recompressed, and the squashfs root made again with zstd in
# its own block size, one thread (as bootpool's copy is made: the same blocks at the same
# offsets, so the zstd trace's reads are this file's too).
EQUIV="$OUT/equiv"
equivalents() {
    [ -f "$EQUIV/rootfs-zstd.img" ] && return 0
    mkdir -p "$EQUIV"
    echo "storm.sh: making the reference's zstd initrd and squashfs root" >&2
    gzip -dc "$IMAGE/initrd.img" | zstd -19 -q -T1 -c > "$EQUIV/initrd.img"
    local block
    block="$(unsquashfs -s "$IMAGE/rootfs.img" | awk '/^Block size/ {print $3}')"
    unsquashfs -no-progress -d "$EQUIV/tree" "$IMAGE/rootfs.img" > /dev/null
    mksquashfs "$EQUIV/tree" "$EQUIV/rootfs-zstd.tmp" -noappend -no-progress -quiet \
        -processors 1 -comp zstd -Xcompression-level 19 -b "$block" > /dev/null
    rm -rf "$EQUIV/tree"
    mv "$EQUIV/rootfs-zstd.tmp" "$EQUIV/rootfs-zstd.img"
}

run() { # server links variant root clients
    local server=$1 place=$2 variant=$3 root=$4 n=$5
    case " $SERVERS " in
        *" $server "*) ;;
        *) return 0 ;;
    esac
    if [ "$variant" = plain ] && [ "${place#site}" = "$place" ]; then
        case " $ROWS " in
            *" $server-$place "*) ;;
            *) return 0 ;;
        esac
    fi
    local name="$server-$place-$variant-$root-$n" shape k rate env=() extra=()
    case "$place" in
        bond) shape="1x$BOND" k=1 rate=$BOND ;;
        hashed) shape="${LINKS}x$RATE" k=$LINKS rate=$RATE extra=(--bond-hash) ;;
        site*) shape="${LINKS}x$RATE" k=$LINKS rate=$RATE extra=(--servers "${place#site}")
            if [ -n "$FAIL" ]; then
                extra+=(--fail "$FAIL" --fail-at "$FAIL_AT")
                name="$name-$FAIL"
            fi ;;
        *) shape="${LINKS}x$RATE" k=$LINKS rate=$RATE ;;
    esac
    local cfg
    cfg="$(config "$variant" "$k" "$rate")"
    local args=(storm --config "$cfg" --root "$root" --clients "$n" --tftp-loader
        --client-link "$CLIENT" --server-links "$shape" --think-scale "$THINK"
        --json "$OUT/$name.json" --label "$name" "${extra[@]}")
    if [ "$server" = reference ]; then
        case "$variant" in
            nocto) env=(REFERENCE_NFS_OPTIONS=nocto) ;;
            zstd)
                equivalents
                env=(REFERENCE_INITRD="$EQUIV/initrd.img")
                # The zstd trace attached bootpool's name for its copy; the export is named so.
                [ "$root" = nbd ] && env+=(REFERENCE_NBD_IMAGE="$EQUIV/rootfs-zstd.img"
                    REFERENCE_NBD_EXPORT="demo~zstd")
                ;;
        esac
        rm -rf "$WORK/ref"
        args+=(--server-cmd "${env[*]} $HERE/storm/reference.sh $root $WORK/ref" --ready-port 8080
            --no-callback)
    fi
    { printf 'cd %q && ' "$REPO"; printf '%q ' "$BIN" "${args[@]}"; echo; } > "$OUT/$name.cmd"
    echo "storm.sh: $name ($n clients, $root, links $shape)" >&2
    (cd "$REPO" && "$BIN" "${args[@]}") > "$OUT/$name.txt" 2> "$OUT/$name.log" ||
        echo "storm.sh: $name: some clients did not boot (see $OUT/$name.txt)" >&2
    tail -n 14 "$OUT/$name.txt" >&2
}

for root in $ROOTS; do
    if [ -n "$SITE" ]; then
        run bootpool "site$SITE" plain "$root" "$CLIENTS"
        # The reference as a site only when asked by name (site-storm.sh's rows are bootpool's).
        [ -n "$STACKS_SET" ] && run reference "site$SITE" plain "$root" "$CLIENTS"
        continue
    fi
    run bootpool links plain "$root" "$CLIENTS"
    run bootpool bond plain "$root" "$CLIENTS"
    run reference bond plain "$root" "$CLIENTS"
    run reference hashed plain "$root" "$CLIENTS"
    run reference 1link plain "$root" "$CLIENTS"
    for opt in $OPTINS; do
        [ "$opt" = nocto ] && [ "$root" != nfs ] && continue
        run bootpool bond "$opt" "$root" "$CLIENTS"
        run reference bond "$opt" "$root" "$CLIENTS"
    done
done
if [ "$BIG" -gt 0 ] && [ -z "$SITE" ]; then
    run bootpool links plain nfs "$BIG"
    run reference bond plain nfs "$BIG"
fi

python3 - "$OUT" <<'EOF' | tee "$OUT/summary.md"
import json, os, sys
out = sys.argv[1]
runs = {}
for f in sorted(os.listdir(out)):
    if f.endswith(".json"):
        runs[f[:-5]] = json.load(open(os.path.join(out, f)))
def fmt(v, d=1):
    return "-" if v is None else f"{v:.{d}f}"
def waited(s):
    u = s.get("waited_util")
    return "-" if u is None else f"{u*100:.0f}% of {s['waited_s']:.0f} link-s"
def host(r):
    h = r.get("host")
    return "-" if h is None else f"{h['mean_busy']*100:.0f}% / {h['cpu_bound_s']:.0f} s"
def bound(r):
    # Runs before the lower bound had a limit instead; it is not shown as a bound.
    b = r.get("bound")
    return (None, None) if b is None else (b["bound_s"], b["over_bound"])
def retries(r):
    s, sv = r["summary"], r["server"]
    return (f"{s['dhcp_retransmits']} / {s['tftp_retries']} / {s['http_retries']} / "
            f"{s.get('client_tcp_retransmits', '-')} / {sv.get('tcp_retransmits', '-')}")
def private(r):
    v = r["server"].get("private_per_client_kib")
    return "-" if v is None else f"{v:.0f}"
print("\n| run | clients | booted / failed / retried | all booted s | bound s | x bound | median s | p95 s | slowest/median | links used while wanted (mean / peak) | links used while waited for | retries: DHCP / TFTP / HTTP / TCP resent by clients / by server | MB per client (payload / wire) | server CPU s | private KiB per client | RSS KiB per client | machine's CPUs busy / CPU-bound s |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
for name, r in runs.items():
    s, sv = r["summary"], r["server"]
    b, x = bound(r)
    print(f"| {name} | {s['clients']} | {s['booted']} / {s['failed']} / {s['retried']} | {fmt(s['all_booted_s'])} | {fmt(b)} | {fmt(x, 2)} | {fmt(s['median_s'])} | {fmt(s['p95_s'])} | {fmt(s['slowest_over_median'], 2)} | {s['mean_util']*100:.0f}% / {s['peak_util']*100:.0f}% | {waited(s)} | {retries(r)} | {s.get('payload_bytes_per_client', 0)/1e6:.1f} / {s.get('wire_bytes_per_client', 0)/1e6:.1f} | {sv['cpu_s']:.1f} | {private(r)} | {sv['rss_per_client_kib']:.0f} | {host(r)} |")
print("\n| comparison (same files, options, trace) | bootpool s | x bound | links while waited for | reference s | x bound | links while waited for | bootpool / reference |")
print("|---|---|---|---|---|---|---|---|")
for name, r in runs.items():
    parts = name.split("-")
    if len(parts) != 5 or parts[0] != "bootpool":
        continue
    _, place, variant, root, n = parts
    for kind in ("bond", "hashed", "1link"):
        ref = runs.get(f"reference-{kind}-{variant}-{root}-{n}")
        if not ref:
            continue
        a, b = r["summary"]["all_booted_s"], ref["summary"]["all_booted_s"]
        ratio = "-" if not (a and b) else f"{a/b:.2f}"
        print(f"| {variant} {root}-{n}: bootpool on {place} vs reference on {kind} | {fmt(a)} | {fmt(bound(r)[1], 2)} | {waited(r['summary'])} | {fmt(b)} | {fmt(bound(ref)[1], 2)} | {waited(ref['summary'])} | {ratio} |")
# Sites: bootpool's members beside the reference on the same servers (its DHCP a Kea HA pair).
sites = [(n, r, runs.get("reference" + n[len("bootpool"):])) for n, r in runs.items()
         if n.startswith("bootpool-site")]
sites = [(n, r, ref) for n, r, ref in sites if ref]
if sites:
    def stall(r):
        f = r.get("failure")
        return None if f is None else f["longest_stall_s"]
    def booted(r):
        f = r.get("failure") or r["summary"]
        return f"{f['booted']} / {f['clients']}" + (f", {f['restarted']} restarted" if "restarted" in f else "")
    def over(a, b):
        return "-" if a is None or not b else f"{a/b:.2f}"
    print("\n| site (same servers, room, trace, failure) | bootpool booted | all booted s | longest stall after the failure s | reference booted | all booted s | longest stall s | bootpool / reference: all booted, stall |")
    print("|---|---|---|---|---|---|---|---|")
    for name, r, ref in sites:
        a, b = r["summary"]["all_booted_s"], ref["summary"]["all_booted_s"]
        print(f"| {name[len('bootpool-'):]} | {booted(r)} | {fmt(a)} | {fmt(stall(r))} | {booted(ref)} | {fmt(b)} | {fmt(stall(ref))} | {over(a, b)}, {over(stall(r), stall(ref))} |")
EOF
python3 "$HERE/storm-plot.py" "$OUT/links-and-cpus.svg" "$OUT"/*.json &&
    echo "storm.sh: the links and the machine's CPUs per second: $OUT/links-and-cpus.svg" >&2

if [ -n "$RECORD" ]; then
    KEEP="$REPO/bench/records/storm-$RECORD"
    mkdir -p "$KEEP"
    cp "$OUT/meta.txt" "$OUT/summary.md" "$OUT"/pools-*.yaml "$KEEP/"
    for f in "$OUT"/*.json; do
        name="$(basename "$f" .json)"
        cp "$OUT/$name.cmd" "$OUT/$name.txt" "$KEEP/"
        if [ "$(stat -c %s "$f")" -gt 262144 ]; then
            gzip -9 -c "$f" > "$KEEP/$name.json.gz"
        else
            cp "$f" "$KEEP/"
        fi
    done
    echo "storm.sh: kept in $KEEP (git add it)" >&2
fi
