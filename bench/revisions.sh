#!/usr/bin/env bash
# bench/revisions.sh: what a revision costs. A generated root tree (files of varied sizes,
# seeded, so every run makes the same tree) is imported as r1, one file is changed, and it is
# imported again as r2: the time of each and the bytes on disk (du -sB1, a hard-linked inode
# counted once), for bootpool's store (`bootpool image import`, an NFS-only image: no squashfs),
# beside a full copy per revision (`cp -a`, what Warewulf and LTSP do) and, if rsync is
# installed, `rsync -a --link-dest` (unchanged files hard-linked to the previous copy).
# Prints a table and one line of JSON. Numbers, not a check; nothing is written to
# BENCHMARKS.md. Caches are warm (nothing is dropped): times compare the tools, not the disk.
set -euo pipefail
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
# shellcheck source=bench/common.sh
. "$HERE/common.sh"

SIZE_MB=1024
SEED=44
DATA=""
BIN=""
usage() {
  cat <<EOF
usage: $0 [--size MB] [--seed N] [--data DIR] [--bin PATH]
  --size   the tree's size in MB (default $SIZE_MB)
  --seed   the generator's seed (default $SEED): the same seed, the same tree
  --data   work in DIR (default: a new folder under /var/tmp, removed at the end); it needs
           about 5x --size free
  --bin    import with this bootpool binary instead of building one
EOF
}
while [ $# -gt 0 ]; do
  case "$1" in
    --size) SIZE_MB="$2"; shift ;;
    --seed) SEED="$2"; shift ;;
    --data) DATA="$2"; shift ;;
    --bin) BIN="$2"; shift ;;
    -h|--help) usage; exit 0 ;;
    *) usage >&2; exit 2 ;;
  esac
  shift
done
[ "$(id -u)" = 0 ] || { echo "$0: run as root (the trees keep owners)" >&2; exit 1; }

KEEP=1
if [ -z "$DATA" ]; then
  DATA=$(mktemp -d /var/tmp/bootpool-revisions.XXXXXX)
  KEEP=0
fi
mkdir -p "$DATA"
cleanup() { [ "$KEEP" = 1 ] || rm -rf "$DATA"; }
trap cleanup EXIT
bootpool_binary "$DATA/bootpool" "$BIN"

# The tree, shaped like a root filesystem: most files small (97% drawn log-uniformly from
# 100 B to 256 KiB), a few large (256 KiB to 16 MiB), until --size is reached (about 6,500
# files a GB), in folders of up to 64 files, bytes from a seeded generator; a kernel and an
# initrd in /boot, and an /sbin/init (an import refuses a tree with none).
python3 - "$DATA/src" "$SIZE_MB" "$SEED" <<'EOF'
import math, os, random, sys
root, size_mb, seed = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
r = random.Random(seed)
total, n = size_mb * 1_000_000, 0
os.makedirs(f"{root}/boot", exist_ok=True)
# An init, as an import asks of a tree that is to boot.
os.makedirs(f"{root}/sbin", exist_ok=True)
with open(f"{root}/sbin/init", "w") as f:
    f.write("#!/bin/sh\n")
os.chmod(f"{root}/sbin/init", 0o755)
for name, k in (("vmlinuz-6.1.0-1", 8_000_000), ("initrd.img-6.1.0-1", 30_000_000)):
    with open(f"{root}/boot/{name}", "wb") as f:
        f.write(r.randbytes(min(k, total // 4)))
        total -= min(k, total // 4)
while total > 0:
    lo, hi = (100, 256 << 10) if r.random() < 0.97 else (256 << 10, 16 << 20)
    size = min(total, int(math.exp(r.uniform(math.log(lo), math.log(hi)))))
    d = f"{root}/usr/d{n // 64 // 16}/e{n // 64 % 16}"
    os.makedirs(d, exist_ok=True)
    with open(f"{d}/f{n % 64}", "wb") as f:
        f.write(r.randbytes(size))
    total -= size
    n += 1
print(f"tree: {n} files", file=sys.stderr)
EOF
FILES=$(find "$DATA/src" -type f | wc -l)
TREE=$(du -sB1 "$DATA/src" | cut -f1)
# The file changed for r2: the first file of the tree of at least 64 KiB.
CHANGED=$(find "$DATA/src/usr" -type f -size +64k | sort | sed -n 1p)
change() { printf 'changed by bench/revisions.sh\n' >> "$1"; }

bytes() { du -sB1 "$@" | awk '{s += $1} END {print s}'; }
# Seconds taken by the command.
timed() {
  local t0 t1
  t0=$(date +%s.%N)
  # A failure ends the run (set -e does not reach into the $(...) that calls this).
  "$@" >/dev/null || { echo "$0: $* failed" >&2; exit 1; }
  sync
  t1=$(date +%s.%N)
  echo "$t1 - $t0" | bc -l | xargs printf '%.2f'
}

# bootpool: an image with revisions, one NFS pool, nothing served.
cat >"$DATA/pools.yaml" <<EOF
server: { address: 127.0.0.1, http: 127.0.0.1:0, state_dir: $DATA/var }
dhcp: { subnet: 127.0.0.0/8, range: 127.0.0.100-127.0.0.199 }
images:
  bench: { dir: $DATA/img }
pools:
  room:
    image: bench
    root: nfs
    clients: [ { macs: "52:54:00:77:00:00-52:54:00:77:00:0f" } ]
EOF
import() { "$DATA/bootpool" image import bench --from "$DATA/src" -c "$DATA/pools.yaml"; }
cp -a "$CHANGED" "$DATA/changed.orig"
sync
B1_T=$(timed import)
B1=$(bytes "$DATA/img")
change "$CHANGED"
B2_T=$(timed import)
B2=$(bytes "$DATA/img")
cp -a "$DATA/changed.orig" "$CHANGED"
rm -rf "$DATA/img" "$DATA/var"

# A full copy per revision.
C1_T=$(timed cp -a "$DATA/src" "$DATA/cp1")
C1=$(bytes "$DATA/cp1")
change "$CHANGED"
C2_T=$(timed cp -a "$DATA/src" "$DATA/cp2")
C2=$(bytes "$DATA/cp1" "$DATA/cp2")
cp -a "$DATA/changed.orig" "$CHANGED"
rm -rf "$DATA/cp1" "$DATA/cp2"

# rsync --link-dest.
R='null'
if command -v rsync >/dev/null; then
  R1_T=$(timed rsync -a "$DATA/src/" "$DATA/rs1/")
  R1=$(bytes "$DATA/rs1")
  change "$CHANGED"
  R2_T=$(timed rsync -a --link-dest="$DATA/rs1" "$DATA/src/" "$DATA/rs2/")
  R2=$(du -sB1 "$DATA/rs1" "$DATA/rs2" | awk '{s += $1} END {print s}')
  cp -a "$DATA/changed.orig" "$CHANGED"
  rm -rf "$DATA/rs1" "$DATA/rs2"
  R="{\"import_s\": $R1_T, \"update_s\": $R2_T, \"bytes_r1\": $R1, \"bytes_r1_r2\": $R2, \"update_bytes\": $((R2 - R1))}"
fi

ratio() { echo "$1 / $2" | bc -l | xargs printf '%.1f'; }
printf '%-22s %10s %10s %14s %14s %14s\n' "" "r1 (s)" "r2 (s)" "r1 bytes" "r1+r2 bytes" "r2 added"
printf '%-22s %10s %10s %14s %14s %14s\n' "bootpool store" "$B1_T" "$B2_T" "$B1" "$B2" "$((B2 - B1))"
printf '%-22s %10s %10s %14s %14s %14s\n' "cp -a per revision" "$C1_T" "$C2_T" "$C1" "$C2" "$((C2 - C1))"
if [ "$R" != null ]; then
  printf '%-22s %10s %10s %14s %14s %14s\n' "rsync --link-dest" "$R1_T" "$R2_T" "$R1" "$R2" "$((R2 - R1))"
else
  echo "rsync: not installed, left out"
fi
echo "tree: $FILES files, $TREE bytes on disk; r2 changed one file of $(stat -c %s "$DATA/changed.orig") bytes"
echo "a revision update adds $(ratio $((C2 - C1)) $((B2 - B1)))x fewer bytes with the store than with cp -a"
printf '{"size_mb": %s, "seed": %s, "files": %s, "tree_bytes": %s, "changed_file_bytes": %s, "bootpool": {"import_s": %s, "update_s": %s, "bytes_r1": %s, "bytes_r1_r2": %s, "update_bytes": %s}, "cp": {"import_s": %s, "update_s": %s, "bytes_r1": %s, "bytes_r1_r2": %s, "update_bytes": %s}, "rsync_link_dest": %s}\n' \
  "$SIZE_MB" "$SEED" "$FILES" "$TREE" "$(stat -c %s "$DATA/changed.orig")" \
  "$B1_T" "$B2_T" "$B1" "$B2" "$((B2 - B1))" "$C1_T" "$C2_T" "$C1" "$C2" "$((C2 - C1))" "$R"
