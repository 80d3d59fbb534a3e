#!/usr/bin/env bash
# bench/bytes.sh: bytes per boot. One real VM boot (the lab, the demo image) per setting of the
# root's read sizes or the image's compression, and the bytes bootpool sent it beside its boot
# time. See --help.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"

usage() {
    cat <<EOF
usage: $0 [--rounds N] [--only nfs|nbd] [--bin PATH] [--out DIR] [--accel auto|kvm|tcg]
          [--variants FILE] [--images]

A room's boot is bound by the bytes its clients need over the server's capacity, so fewer
bytes per boot are capacity too. This boots one VM at a time in the lab (\`bootpool lab
--clients 1\`, pools.yaml's lab pools) once per variant and round, and prints, per variant,
the median of the megabytes bootpool sent the client (its boot record: every protocol) and
of its boot time (power-on to the booted line on its console), with their ratios to the
variant named \`default\` of the same root. The variants (--variants FILE: lines of \`NAME
ROOT IMAGE CMDLINE...\`, IMAGE an image folder or \`-\` for images/demo, CMDLINE the pool's)
change only what the client asks for:

  nfs default        the kernel's NFS client as the demo initrd mounts it (rsize = the rtmax
                     bootpool offers, 1 MiB; read-ahead the kernel's, 128 KiB on 6.1)
  nfs rsize-64k      rsize=65536 in the root argument's mount options
  nfs ra-128k        read-ahead 128 KiB (bootpool.read_ahead_kb, images/README.md)
  nfs ra-1m          read-ahead 1 MiB
  nbd default        the nbd device's read-ahead, the kernel's 128 KiB
  nbd ra-32k         read-ahead 32 KiB
  nbd ra-512k        read-ahead 512 KiB

--images adds images that differ from images/demo only in how they are compressed, made
here (in --out) from its kernel, its rootfs/ tree and its initrd's contents:

  nbd sqfs-zstd      rootfs.img made with mksquashfs -comp zstd -Xcompression-level 19
  nbd sqfs-xz        rootfs.img made with mksquashfs -comp xz
  nfs initrd-zstd    initrd.img recompressed with zstd -19 (an NFS root is a tree: its
                     initrd and kernel are what compression can shrink)

Rounds (default 3) alternate the variants. Bytes do not depend on the machine's load; boot
times under TCG do (the emulated client sets the pace, and decompression costs it more
than a PC), so read the times as a rough guide and the bytes as the finding. The table goes
to stdout and to --out (default bench/out/bytes-DATE/), with every run's lab table and serial
console. Needs root and what scripts/setup installs.
  --bin    boot with this bootpool binary instead of building one
EOF
}

ROUNDS=3 ONLY="" BIN="" OUT="" ACCEL=auto VARIANTS="" IMAGES=""
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --rounds) ROUNDS="$2"; shift ;;
        --only) ONLY="$2"; shift ;;
        --bin) BIN="$2"; shift ;;
        --out) OUT="$2"; shift ;;
        --accel) ACCEL="$2"; shift ;;
        --variants) VARIANTS="$2"; shift ;;
        --images) IMAGES=1 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[ "$(id -u)" = 0 ] || { echo "bytes.sh: must run as root" >&2; exit 1; }
if [ -z "$BIN" ]; then
    (cd "$REPO" && cargo build --release --quiet)
    BIN="$REPO/target/release/bootpool"
fi
OUT="${OUT:-$REPO/bench/out/bytes-$(date -u +%Y%m%d-%H%M)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
WORK="$(mktemp -d /tmp/bootpool-bytes.XXXXXX)"
trap 'rm -rf "$WORK"' EXIT
DEMO="$REPO/images/demo"

# The NFS root argument bootpool generates for the lab, for the variant that adds rsize (the
# demo initrd takes the last root= it is given).
NFS_ROOT="root=nfs:10.77.0.1:/demo:ro,port=2049,mountport=2049"
if [ -n "$VARIANTS" ]; then
    cp "$VARIANTS" "$WORK/variants"
else
    cat > "$WORK/variants" <<EOF
default nfs - console=ttyS0
rsize-64k nfs - console=ttyS0 $NFS_ROOT,rsize=65536
ra-128k nfs - console=ttyS0 bootpool.read_ahead_kb=128
ra-1m nfs - console=ttyS0 bootpool.read_ahead_kb=1024
default nbd - console=ttyS0
ra-32k nbd - console=ttyS0 bootpool.read_ahead_kb=32
ra-512k nbd - console=ttyS0 bootpool.read_ahead_kb=512
EOF
fi

# An image folder in --out named NAME holding images/demo's files as hard links (bootpool
# serves nothing through a symlink out of an image's folder), so the variant costs no space.
variant_image() {
    local dir="$OUT/images/$1"
    rm -rf "$dir"
    mkdir -p "$dir"
    for f in vmlinuz initrd.img rootfs.img; do
        ln "$DEMO/$f" "$dir/$f"
    done
    cp -al "$DEMO/rootfs" "$dir/rootfs"
    echo "$dir"
}
if [ -n "$IMAGES" ]; then
    echo "bytes.sh: compressing images/demo otherwise (mksquashfs, zstd)" >&2
    d="$(variant_image sqfs-zstd)"
    rm "$d/rootfs.img"
    mksquashfs "$DEMO/rootfs" "$d/rootfs.img" -comp zstd -Xcompression-level 19 \
        -noappend -quiet -no-progress -all-root >&2
    d="$(variant_image sqfs-xz)"
    rm "$d/rootfs.img"
    mksquashfs "$DEMO/rootfs" "$d/rootfs.img" -comp xz -noappend -quiet -no-progress -all-root >&2
    d="$(variant_image initrd-zstd)"
    rm "$d/initrd.img"
    gzip -dc "$DEMO/initrd.img" | zstd -19 -q -o "$d/initrd.img"
    cat >> "$WORK/variants" <<EOF
sqfs-zstd nbd $OUT/images/sqfs-zstd console=ttyS0
sqfs-xz nbd $OUT/images/sqfs-xz console=ttyS0
initrd-zstd nfs $OUT/images/initrd-zstd console=ttyS0
EOF
fi

# One config per variant: the shipped lab config with that pool's image folder and cmdline,
# and a state folder of its own.
config_for() { # name root image cmdline... -> path
    local name=$1 root=$2 image=$3
    shift 3
    local dir="$WORK/$root-$name"
    mkdir -p "$dir/var"
    [ "$image" = - ] && image="$DEMO"
    python3 - "$REPO/pools.yaml" "$dir/pools.yaml" "$dir/var" "$image" "lab-$root" "$*" <<'PY'
import re, sys
src, dst, state, image, pool, cmdline = sys.argv[1:]
text = open(src).read()
text = re.sub(r"(?m)^(\s*state_dir:).*$", rf"\1 {state}/", text)
text = re.sub(r"(?m)^(\s*dir:) images/demo\b.*$", rf"\1 {image}", text)
# The cmdline of the named pool only: the first `cmdline:` after `  POOL:`.
start = text.index(f"\n  {pool}:\n")
at = text.index("cmdline:", start)
end = text.index("\n", at)
text = text[:at] + "cmdline: " + cmdline + text[end:]
open(dst, "w").write(text)
PY
    echo "$dir/pools.yaml"
}

echo "bytes.sh: $ROUNDS rounds, results in $OUT" >&2
for round in $(seq 1 "$ROUNDS"); do
    while read -r name root image cmdline; do
        [ -n "$name" ] || continue
        [ -z "$ONLY" ] || [ "$ONLY" = "$root" ] || continue
        cfg="$(config_for "$name" "$root" "$image" "$cmdline")"
        tag="$root-$name-$round"
        echo "bytes.sh: round $round: $root $name" >&2
        (cd "$REPO" && timeout 600 "$BIN" lab --config "$cfg" --clients 1 --root "$root" \
            --accel "$ACCEL") > "$OUT/$tag.txt" 2> "$OUT/$tag.log" \
            || echo "bytes.sh: $tag: the boot failed (see $OUT/$tag.log)" >&2
        # Keep the client's serial console (it says the read-ahead the kernel used).
        serial="$(ls -t "$(dirname "$cfg")"/var/lab/*/*.log 2>/dev/null \
            | grep -Ev '/(bootpool|radvd|dnsmasq)\.log$' | head -n 1)"
        if [ -n "$serial" ]; then
            cp "$serial" "$OUT/$tag.console"
        fi
        rm -rf "$(dirname "$cfg")/var"
    done < "$WORK/variants"
done

python3 - "$OUT" "$WORK/variants" <<'PY' | tee "$OUT/bytes.md"
import os, re, statistics, sys
out, variants = sys.argv[1:]
order = [tuple(l.split()[:2]) for l in open(variants) if l.strip()]
runs = {}
for f in sorted(os.listdir(out)):
    if not f.endswith(".txt"):
        continue
    root, rest = f[:-4].split("-", 1)
    name, _round = rest.rsplit("-", 1)
    lines = open(os.path.join(out, f)).read().splitlines()
    head = next((l.split() for l in lines if l.startswith("client ")), None)
    row = next((l.split() for l in lines if head and re.match(r"^\S+\s+52:54:", l)), None)
    ra = "-"
    con = os.path.join(out, f[:-4] + ".console")
    if os.path.exists(con):
        seen = re.findall(r"read-ahead (\S+) KiB", open(con, errors="replace").read())
        ra = seen[-1] if seen else "-"
    if not head or not row or row[head.index("result")] != "booted":
        runs.setdefault((name, root), []).append(None)
        continue
    col = lambda c: float(row[head.index(c)])
    runs.setdefault((name, root), []).append((col("MB"), col("console_s"), ra))
print("| root | variant | boots | read-ahead KiB | MB per boot (median) | x default | boot s (median) | x default |")
print("|---|---|---|---|---|---|---|---|")
base = {}
for name, root in order:
    all_runs = runs.get((name, root), [])
    ok = [r for r in all_runs if r]
    if not ok:
        print(f"| {root} | {name} | 0 of {len(all_runs)} | - | - | - | - | - |")
        continue
    mb = statistics.median(r[0] for r in ok)
    s = statistics.median(r[1] for r in ok)
    if name == "default":
        base[root] = (mb, s)
    b = base.get(root)
    ratio = lambda v, i: f"{v / b[i]:.2f}" if b else "-"
    print(f"| {root} | {name} | {len(ok)} of {len(all_runs)} | {ok[-1][2]} | {mb:.1f} | {ratio(mb, 0)} | {s:.1f} | {ratio(s, 1)} |")
PY
