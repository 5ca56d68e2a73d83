#!/usr/bin/env bash
# The partition harness against planted bugs: its power, measured.
#
# For each plant (tests/jepsen/plants/NAME.patch, a small patch of the library or the
# harness's worker), copies the checked-out tree (tracked and new files, as they are now) to a
# scratch directory, applies the patch there, builds the copy with a target directory of its
# own under target/ (dependencies built once, then only the crate), and runs the harness with
# `--stop-at-first`: it checks the records after every fault and stops at the first violation.
# Prints one Markdown row per plant: name, seed, seconds of faults until the first report (or
# "not caught in S s"), and the violation. The library itself never carries the plants. Each
# run's whole output stays in target/plants/logs/NAME.log.
#
#   tests/jepsen/plants.sh [--seconds S] [--seed N] [--release] [--expect-caught] [NAME ...]
#
# No NAME: every plant. --expect-caught: exit 1 unless every named plant was caught (CI runs
# one plant so, to show its short run still has teeth). Other harness flags after `--`.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
seconds=300
seed=424242
profile=()
expect=0
names=()
extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    --seconds) seconds="$2"; shift 2 ;;
    --seed) seed="$2"; shift 2 ;;
    --release) profile=(--release); shift ;;
    --expect-caught) expect=1; shift ;;
    --) shift; extra=("$@"); break ;;
    *) names+=("$1"); shift ;;
  esac
done
if [ ${#names[@]} -eq 0 ]; then
  for p in "$root"/tests/jepsen/plants/*.patch; do names+=("$(basename "$p" .patch)"); done
fi

scratch="$(mktemp -d "${TMPDIR:-/tmp}/zkr-plants.XXXXXX")"
# The main build's target directory: the dependencies built for the tests are used again.
# The planted copy of the crate is NOT a unit of its own there: cargo names a path package's
# artifacts by its path within its workspace, the same for the copy, so the planted library
# and its fingerprint replace the tree's, and the tree's sources, older, look built. Every
# build after a plant linked the planted library until a source changed (CI's TLS, Kerberos,
# demo and bench steps ran on it; found when a plant broke `tests/idle.rs` over TLS). So on
# the way out the tree's sources are touched: the next build rebuilds them.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$root/target}"
# A marker stands while a planted library may be in the target directory: a run killed before
# its trap (SIGKILL, a machine's timeout) leaves it, and the next run touches first.
dirty="$CARGO_TARGET_DIR/plants/planted"
touch_tree() {
  (cd "$root" && git ls-files -z --cached --others --exclude-standard -- src tests Cargo.toml \
     | xargs -0 -r touch -c)
}
restore() {
  # The touch first, and nothing here may stop the trap before it (`set -e` ends a trap at
  # its first failing command).
  touch_tree || true
  rm -f "$dirty" || true
  rm -rf "$scratch" || true
}
[ -f "$dirty" ] && touch_tree
mkdir -p "$(dirname "$dirty")" && : >"$dirty"
trap restore EXIT
tree="$scratch/tree"

echo "| plant | seed | first report | violation |"
echo "|---|---|---|---|"
missed=0
for name in "${names[@]}"; do
  patch="$root/tests/jepsen/plants/$name.patch"
  [ -f "$patch" ] || { echo "no plant $name ($patch)" >&2; exit 2; }
  rm -rf "$tree" && mkdir -p "$tree"
  (cd "$root" && git ls-files -z --cached --others --exclude-standard --deduplicate \
     | tar --null --ignore-failed-read -T - -cf - 2>/dev/null) | tar -x -m -C "$tree"
  # Every file new (`tar -m`): the crate is rebuilt for each plant, also one that patches only
  # the harness (else the previous plant's library would be linked in).
  (cd "$tree" && git apply --unsafe-paths "$patch") \
    || { echo "| $name | | patch does not apply | |"; missed=1; continue; }
  mkdir -p "$root/target/plants/logs"
  log="$root/target/plants/logs/$name.log"
  (cd "$tree" && cargo build -q "${profile[@]}" --test jepsen) >"$log" 2>&1 \
    || { echo "| $name | | does not build (see below) | |"; tail -20 "$log" >&2; missed=1; continue; }
  set +e
  (cd "$tree" && cargo test -q "${profile[@]}" --test jepsen -- \
     --seconds "$seconds" --seed "$seed" --stop-at-first "${extra[@]}") >>"$log" 2>&1
  status=$?
  set -e
  first="$(grep -m1 '^jepsen: first violation after' "$log" || true)"
  if [ -n "$first" ]; then
    secs="$(sed -E 's/^jepsen: first violation after ([0-9.]+) s.*/\1/' <<<"$first")"
    what="$(sed -E 's/^jepsen: first violation after [0-9.]+ s of faults: //' <<<"$first" | cut -c1-160)"
    echo "| $name | $seed | $secs s | $what |"
  elif [ $status -eq 0 ]; then
    echo "| $name | $seed | not caught in $seconds s | |"
    missed=1
  else
    why="$(grep -m1 -E "panicked|assert" "$log" | cut -c1-160 || true)"
    echo "| $name | $seed | failed after the faults (status $status) | ${why} |"
  fi
  if [ -n "${ZKR_PLANTS_VERBOSE:-}" ]; then cat "$log" >&2; fi
done
if [ $expect -eq 1 ] && [ $missed -ne 0 ]; then
  echo "a plant was not caught" >&2
  exit 1
fi
