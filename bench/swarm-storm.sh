#!/usr/bin/env bash
# bench/swarm-storm.sh: the storm's swarm rows (issue 48), the agents sharing beside unicast. See --help.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"

usage() {
    cat <<EOF
usage: $0 [--sizes "10 40"] [--links K] [--link-rate RATE] [--client-link RATE]
          [--think-scale F] [--faults SHARE] [--torrent] [--multicast] [--no-unicast]
          [--out DIR] [--bin PATH] [--agent PATH] [--record NAME]

For each room size in --sizes (default "10 40"), two rows of \`bootpool storm\` on the same
room, image and trace (bench/storm/pools.yaml's NBD pool, bench/traces/demo-nbd.trace), one
after the other in this run:
  unicast   the kernel's NBD client of each simulated client reads the root from bootpool
  swarm     \`--swarm AGENT\`: the pool's root through the static bootpool-agent in every
            client's namespace, the agents sharing chunks through bootpool's tracker
            (docs/swarm.md); the tracker's prefetch order is the trace's
With --faults SHARE (0.1 for a tenth), two more rows per size, the same swarm with faults
(issue 48 part 3; instruments' storm/swarm_faults.rs):
  swarm-cut    SHARE of the room switched off mid-boot, 2 s after each one's agent started:
               the agent killed with -9 and its switch port taken down (--swarm-cut)
  swarm-slow   SHARE of the room sending at a tenth of --client-link (--swarm-slow)
  swarm-corrupt  one client playing a corrupting peer instead of booting: it claims every
               chunk and sends wrong bytes (--swarm-corrupt 1)
and the summary gives each one's time over the plain swarm row's.
With --torrent, two more rows per size, both with the server on the ideal bond (one link of
--links x --link-rate: the seed below announces one address, so it gets what the K links
carry together):
  swarm-bond   the swarm row again on that bond
  torrent      the reference swarm: each client reads the root through nbdkit's torrent
               plugin (libtorrent, Debian's build, its defaults) instead of the agent, from
               a seed (nbdkit torrent of the image) and opentracker beside the server
               (\`bootpool storm --torrent\`, instruments' storm/torrent.rs)
and the summary gives the torrent row's time over the swarm-bond row's. libtorrent fetches
the whole image (the agent only what the tracker's order names) and tries uTP first; its
CPU is the clients' nbdkit processes'. It needs more CPU than the agent: lower
--client-link and --link-rate together until the rows are valid, and say the scale.
With --multicast, one more row per size on the same links as the swarm row:
  multicast    udpcast (Debian's udp-sender and udp-receiver): the sender beside the server
               waits for the whole room, then multicasts the image once at 95% of
               --client-link; each client reads its root locally (nbdkit file) once its copy
               is whole (\`bootpool storm --multicast\`, instruments' storm/multicast.rs)
and the summary gives its time over the swarm row's.
--no-unicast leaves the unicast rows out (at 200 clients the server sends 200 copies, which
takes minutes at a scale two cores can push; its copies are N by construction).
All rows check every read against the image's bytes; both directions of each client port
are shaped. The scale: clients at --client-link (default 100mbit), the server on --links
(default 4) x --link-rate (default 250mbit), think times x --think-scale (default 0.2): the
storm's defaults (docs/storm.md), a tenth of a room of PCs on 1GbE. Each row prints the
server's chunks (unicast: its root bytes in 256 KiB chunks) against the one-copy floor (the
chunks one boot reads), the chunks from peers, the agents' CPU per GB moved, and INVALID when
the machine's CPUs set the pace for 10% of the room's time or more.

Evidence: each row's JSON, .cmd, .txt and log in --out (default bench/out/swarm-storm-DATE/),
the config, meta.txt and summary.md; --record NAME copies them to bench/records/NAME/ (JSON
over 256 KiB gzipped).
  --bin    run this bootpool binary (default: cargo build --release, copied aside)
  --agent  this static bootpool-agent (default: the release musl build, copied aside)
Needs root, tc, libnbd0 and the demo image (scripts/setup); --torrent also nbdkit,
opentracker and nftables; --multicast udpcast and nftables.
EOF
}

ARGS="$(printf "%q " "$@")"
SIZES="10 40" LINKS=4 RATE=250mbit CLIENT=100mbit THINK=0.2 OUT="" BIN="" AGENT="" RECORD=""
FAULTS="" TORRENT="" MULTICAST="" UNICAST=1
while [ $# -gt 0 ]; do
    case "$1" in
        -h|--help) usage; exit 0 ;;
        --sizes) SIZES="$2"; shift ;;
        --links) LINKS="$2"; shift ;;
        --link-rate) RATE="$2"; shift ;;
        --client-link) CLIENT="$2"; shift ;;
        --think-scale) THINK="$2"; shift ;;
        --faults) FAULTS="$2"; shift ;;
        --torrent) TORRENT=1 ;;
        --multicast) MULTICAST=1 ;;
        --no-unicast) UNICAST="" ;;
        --out) OUT="$2"; shift ;;
        --bin) BIN="$2"; shift ;;
        --agent) AGENT="$2"; shift ;;
        --record) RECORD="$2"; shift ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[ "$(id -u)" = 0 ] || { echo "swarm-storm.sh: must run as root" >&2; exit 1; }
command -v tc >/dev/null || { echo "swarm-storm.sh: tc missing" >&2; exit 1; }
OUT="${OUT:-$REPO/bench/out/swarm-storm-$(date -u +%Y%m%d-%H%M)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
TARGET="${CARGO_TARGET_DIR:-$REPO/target}"
if [ -z "$BIN" ]; then
    (cd "$REPO" && cargo build --release --quiet)
    mkdir -p "$OUT/bin"
    cp "$TARGET/release/bootpool" "$TARGET/release/bootpool-instruments" "$OUT/bin/"
    BIN="$OUT/bin/bootpool"
fi
if [ -z "$AGENT" ]; then
    (cd "$REPO" && cargo build --release --quiet -p bootpool-agent --target x86_64-unknown-linux-musl)
    mkdir -p "$OUT/bin"
    cp "$TARGET/x86_64-unknown-linux-musl/release/bootpool-agent" "$OUT/bin/"
    AGENT="$OUT/bin/bootpool-agent"
fi
# The ideal bond: one link of the K links' rate together (--torrent's rows).
BOND="$(python3 -c "
import re,sys; m=re.fullmatch(r'([0-9.]+)([kmg]?)(bit)?', sys.argv[1].lower())
mbit={'':1e-6,'k':1e-3,'m':1,'g':1e3}[m.group(2)]*float(m.group(1))
print(f'{mbit*int(sys.argv[2]):g}mbit')" "$RATE" "$LINKS")"
{
    echo "command: $0 $ARGS"
    echo "commit: $(git -C "$REPO" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$REPO" diff --quiet 2>/dev/null || echo ' (with changes)')"
    echo "binary: $BIN ($("$BIN" --version 2>/dev/null || echo '?'))"
    echo "agent: $AGENT ($(stat -c %s "$AGENT") bytes; $(file -b "$AGENT" | cut -d, -f1-2))"
    echo "date: $(date -u +%FT%TZ)"
    echo "machine: $(uname -srm), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
    echo "room: clients at $CLIENT (both directions), server links ${LINKS}x$RATE, think x$THINK"
    if [ -n "$MULTICAST" ]; then
        echo "multicast rows: udpcast $(dpkg-query -W -f='${Version}' udpcast 2>/dev/null || echo '?')"
    fi
    if [ -n "$TORRENT" ]; then
        echo "torrent rows: server on the ideal bond 1x$BOND; $(nbdkit --version 2>&1 | head -1), opentracker $(dpkg-query -W -f='${Version}' opentracker 2>/dev/null || echo '?'), libtorrent-rasterbar $(dpkg-query -W -f='${Version}' 'libtorrent-rasterbar2.0*' 2>/dev/null | head -1 || echo '?')"
    fi
} > "$OUT/meta.txt"

# The storm's config for K links of RATE (the file's one link_speeds line rewritten).
config_for() { # K RATE FILE
python3 - "$REPO/bench/storm/pools.yaml" "$3" "$REPO/images/demo" "$REPO/var/storm-state/" "$1" "$2" <<'EOF'
import sys
src, dst, image, state, k, rate = sys.argv[1:]
text = open(src).read()
def once(old, new):
    global text
    if text.count(old) != 1:
        sys.exit(f"swarm-storm.sh: {src} no longer has `{old.strip()}` once")
    text = text.replace(old, new)
once("dir: ../../images/demo", f"dir: {image}")
once("state_dir: ../../var/storm-state/", f"state_dir: {state}")
line = next(l for l in text.splitlines() if l.strip().startswith("link_speeds:"))
once(line, "  link_speeds: { " + ", ".join(f"s{i}: {rate}" for i in range(int(k))) + " }")
open(dst, "w").write(text)
EOF
}
CONFIG="$OUT/pools-${LINKS}x$RATE.yaml"
config_for "$LINKS" "$RATE" "$CONFIG"
if [ -n "$TORRENT" ]; then
    BOND_CONFIG="$OUT/pools-1x$BOND.yaml"
    config_for 1 "$BOND" "$BOND_CONFIG"
fi

row() { # name clients [extra storm arguments...]; on the ideal bond when ON_BOND=1
    local name="$1" n="$2"; shift 2
    local config="$CONFIG" links="${LINKS}x$RATE"
    if [ "${ON_BOND:-}" = 1 ]; then config="$BOND_CONFIG" links="1x$BOND"; fi
    local cmd=("$BIN" storm --config "$config" --root nbd --clients "$n" --tftp-loader
        --client-link "$CLIENT" --server-links "$links" --think-scale "$THINK"
        --label "$name" --json "$OUT/$name.json" "$@")
    echo "${cmd[*]}" > "$OUT/$name.cmd"
    echo "== $name: ${cmd[*]}" >&2
    if (cd "$REPO" && "${cmd[@]}") > "$OUT/$name.txt" 2> "$OUT/$name.log"; then
        tail -n 4 "$OUT/$name.txt" >&2
    else
        echo "$name: the storm failed (see $OUT/$name.log)" >&2
        tail -n 5 "$OUT/$name.log" >&2
    fi
}

for n in $SIZES; do
    [ -z "$UNICAST" ] || row "unicast-nbd-$n" "$n"
    row "swarm-nbd-$n" "$n" --swarm "$AGENT"
    if [ -n "$FAULTS" ]; then
        slow_rate="$(python3 -c "
import re,sys; m=re.fullmatch(r'([0-9.]+)([kmg]?)(bit)?', sys.argv[1].lower())
mbit={'':1e-6,'k':1e-3,'m':1,'g':1e3}[m.group(2)]*float(m.group(1))
print(f'{max(mbit/10, 1):g}mbit')" "$CLIENT")"
        row "swarm-cut-nbd-$n" "$n" --swarm "$AGENT" --swarm-cut "$FAULTS" --swarm-cut-after 2
        row "swarm-slow-nbd-$n" "$n" --swarm "$AGENT" --swarm-slow "$FAULTS" --swarm-slow-rate "$slow_rate"
        row "swarm-corrupt-nbd-$n" "$n" --swarm "$AGENT" --swarm-corrupt 1
    fi
    if [ -n "$MULTICAST" ]; then
        row "multicast-nbd-$n" "$n" --swarm "$AGENT" --multicast
    fi
    if [ -n "$TORRENT" ]; then
        ON_BOND=1 row "swarm-bond-nbd-$n" "$n" --swarm "$AGENT"
        ON_BOND=1 row "torrent-nbd-$n" "$n" --swarm "$AGENT" --torrent
    fi
done

python3 - "$OUT" > "$OUT/summary.md" <<'EOF'
import json, os, sys
out = sys.argv[1]
print("| row | clients | booted | switched off / rogue | all booted s | x swarm row (torrent: x swarm-bond) | slowest root phase s | server chunks (unicast: root bytes / 256 KiB; torrent, multicast: the seed's or sender's payload / 256 KiB) | one-copy floor | copies | chunks from peers | agents' (references: their clients') CPU s per GB | % of a core at 1 Gbit/s | CPU-bound s | valid | chunks refused / rogue's answers |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
rows = sorted((f for f in os.listdir(out) if f.endswith(".json")),
              key=lambda f: (int(f.rsplit("-", 1)[1][:-5]), f))
def booted_s(f):
    try:
        return json.load(open(os.path.join(out, f)))["summary"].get("all_booted_s")
    except OSError:
        return None
for f in rows:
    r = json.load(open(os.path.join(out, f)))
    s, w, h = r["summary"], r.get("swarm") or {}, r["host"]
    fmt = lambda v, p="{:.2f}": "-" if v is None else p.format(v)
    swarm = w.get("mode") == "swarm"
    torrent = w.get("mode") in ("torrent", "multicast")
    n = f.rsplit("-", 1)[1][:-5]
    # Each row against the swarm row on the same links: the torrent row against swarm-bond.
    against = f"swarm-bond-nbd-{n}.json" if w.get("mode") == "torrent" else f"swarm-nbd-{n}.json"
    plain = booted_s(against) if (swarm or torrent) else None
    mine = s.get("all_booted_s")
    x = fmt(mine / plain) if (plain and mine and f != against) else "-"
    # The root phase alone: the boot files before it are the server's unicast in every row.
    roots = [p[1] for c in r["clients"] if c.get("result") == "booted"
             for p in c.get("phases", []) if p[0] == "root"]
    root_max = max(roots) if roots else None
    print(f"| {r['label']} | {s['clients']} | {s['booted']} | {s.get('cut', 0)} / {s.get('rogues', 0)} | {fmt(mine, '{:.1f}')} | {x} | {fmt(root_max, '{:.1f}')} "
          f"| {fmt(w.get('server_chunks'), '{:.0f}')} | {w.get('floor_chunks', '-')} | {fmt(w.get('copies'))} "
          f"| {w.get('from_peers', '-') if swarm else '-'} | {fmt(w.get('cpu_s_per_gb')) if swarm or torrent else '-'} "
          f"| {fmt(w.get('core_pct_at_1gbit'), '{:.1f}') if swarm or torrent else '-'} | {h['cpu_bound_s']:.0f} "
          f"| {'no (CPUs set the pace)' if w.get('invalid') else 'yes'} "
          f"| {w.get('refused', '-') if swarm else '-'} / {w.get('rogue_answers', '-') if swarm else '-'} |")
EOF
cat "$OUT/summary.md"

if [ -n "$RECORD" ]; then
    DEST="$REPO/bench/records/$RECORD"
    mkdir -p "$DEST"
    cp "$OUT"/meta.txt "$OUT"/summary.md "$OUT"/*.yaml "$OUT"/*.cmd "$OUT"/*-nbd-*.txt "$DEST/"
    for j in "$OUT"/*.json; do
        if [ "$(stat -c %s "$j")" -gt 262144 ]; then
            gzip -9c "$j" > "$DEST/$(basename "$j").gz"
        else
            cp "$j" "$DEST/"
        fi
    done
    echo "recorded in $DEST" >&2
fi
