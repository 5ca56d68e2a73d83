#!/usr/bin/env bash
# Mutation runs over the safety core (issue 36), with the tests as the oracle: every mutant
# cargo-mutants makes of these files must make some test fail, or be listed in
# tests/mutants-equivalent.txt (why, in tests/MUTANTS.md). Exits 1 if a survivor is not
# listed there. The figures and the survivors are in tests/MUTANTS.md.
#
#   tests/mutants.sh [SET ...]     # no SET: all of them, one after the other
#
# Sets, each with the tests that judge it:
#   pure   client/touches.rs, lock/names.rs, lock/fencing.rs: the library's unit tests
#   clock  client/clock.rs: the unit tests and tests/suspend.rs (the seam moves BOOTTIME)
#   lease  lock/lease.rs: the suites that hold leases (mutex, while_held, mutex_faults,
#          rwlock for the downgrade's token, metrics for the check-failure count)
#   rules  lock/core.rs's grant and wait rules: the lock suites (mutex, rwlock, threads,
#          mutex_faults for waits that meet faults, suspend for a downgrade's last look,
#          security for a waiter refused a look ahead, deadlines for a selector's close)
#   latch  leader/latch.rs's leadership check: tests/leader.rs and tests/suspend.rs
#
# Needs `cargo install cargo-mutants` (not in CI: a whole run takes hours on 2 cores). Each
# set's outcome goes to target/mutants/SET/mutants.out (missed.txt: the survivors).
set -euo pipefail
cd "$(dirname "$0")/.."
command -v cargo-mutants >/dev/null || { echo "cargo install cargo-mutants" >&2; exit 2; }

sets=("$@")
[ ${#sets[@]} -gt 0 ] || sets=(pure clock lease rules latch)
for set in "${sets[@]}"; do
  case "$set" in
    pure)
      args=(--file src/client/touches.rs --file src/lock/names.rs --file src/lock/fencing.rs)
      oracle=(--lib) ;;
    clock)
      args=(--file src/client/clock.rs)
      oracle=(--lib --test suspend) ;;
    lease)
      # Debug and Display text, the node path and the time held are not safety.
      args=(--file src/lock/lease.rs -E 'fmt::|node_path|held_for')
      oracle=(--test mutex --test while_held --test mutex_faults --test metrics --test rwlock) ;;
    rules)
      args=(--file src/lock/core.rs
            -F 'Rule|decide|watches_line|grant|wait_for_turn|LockCore::wait\b|while_waiting|keep_listening|watching')
      oracle=(--test mutex --test rwlock --test threads --test mutex_faults --test suspend
              --test security --test deadlines) ;;
    latch)
      args=(--file src/leader/latch.rs
            -F 'leads|lapse|lease_bound|claim|set_leading|has_leadership|LeaderLatch::lease')
      oracle=(--test leader --test suspend) ;;
    *) echo "no set $set" >&2; exit 2 ;;
  esac
  echo "== $set"
  # cargo-mutants exits non-zero when a mutant survives: the list below judges.
  cargo mutants --no-shuffle -j 1 -o "target/mutants/$set" "${args[@]}" -- "${oracle[@]}" \
    || true
  missed="target/mutants/$set/mutants.out/missed.txt"
  [ -f "$missed" ] || { echo "$set: no outcome (did the baseline fail?)" >&2; failed=1; continue; }
  unlisted=$(grep -vxF -f <(grep -v '^#' tests/mutants-equivalent.txt) "$missed" || true)
  if [ -n "$unlisted" ]; then
    echo "$set: survivors not known to be equivalent:"; echo "$unlisted"; failed=1
  fi
done
exit "${failed:-0}"
