#!/usr/bin/env bash
# bench/store.sh: the record store's append and replay rates (bench/store.rs), in a release
# build. Arguments go to the program (--events N, --batch N, --dir DIR; --help). Numbers, not a
# check; nothing is written to BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
# Its own target dir, so the engineers' debug builds are not clobbered.
export CARGO_TARGET_DIR=${BENCH_TARGET_DIR:-/work/target-bench}
exec cargo run --release -q --example store -- "$@"
