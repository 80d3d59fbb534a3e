# Sourced by the bench scripts: what they share.

# Copies the bootpool binary to serve with to $1: the one given (--bin, $2), or a release build
# of this tree in /work/target-bench (its own target dir, so engineers' builds are not clobbered).
bootpool_binary() {
  local dest=$1 given=${2:-}
  if [ -n "$given" ]; then
    cp "$given" "$dest"
  else
    echo "building bootpool --release" >&2
    (cd "$REPO" && CARGO_TARGET_DIR=/work/target-bench cargo build --release -q)
    cp /work/target-bench/release/bootpool "$dest"
  fi
}
