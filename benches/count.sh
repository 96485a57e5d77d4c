#!/usr/bin/env bash
# Counts instructions per call (hot_loop cases) or per request (e2e
# stacks) with cachegrind, as BENCHMARKS.md describes, for the commit or
# working tree given (default: this working tree).
#
#   benches/count.sh sync async call_async             # hot_loop cases
#   benches/count.sh hyper/bare hyper/backstop_layer   # e2e stacks
#   SOURCE=<commit> benches/count.sh sync              # another commit
#
# valgrind cannot follow rustix's own vDSO lookup, so the count is made on
# a copy of the source with rustix's `use-libc` feature turned on (the same
# clocks, read through libc); the tree itself is not touched. Each source
# builds in a target directory of its own under $COUNT_DIR (cargo would
# take one commit's build for another's in a shared one).
set -euo pipefail

[ $# -gt 0 ] || { sed -n '2,14p' "$0"; exit 2; }
command -v valgrind >/dev/null || { echo "count.sh: valgrind is needed" >&2; exit 2; }

top=$(git rev-parse --show-toplevel)
source_rev=${SOURCE:-}
count_dir=${COUNT_DIR:-${TMPDIR:-/tmp}/backstop-count}
copy="$count_dir/src-${source_rev:-worktree}"
target="$count_dir/target-${source_rev:-worktree}"
mkdir -p "$count_dir"

# The source to count: a commit, or the working tree as it is.
rm -rf "$copy"
if [ -n "$source_rev" ]; then
  mkdir -p "$copy"
  git -C "$top" archive "$source_rev" | tar -x -C "$copy"
else
  mkdir -p "$copy"
  git -C "$top" ls-files -z --cached --others --exclude-standard \
    | (cd "$top" && xargs -0 cp --parents -t "$copy" 2>/dev/null || true)
fi
sed -i 's/features = \["std", "time"\]/features = ["std", "time", "use-libc"]/' \
  "$copy/retry-runtime/Cargo.toml"
grep -q 'use-libc' "$copy/retry-runtime/Cargo.toml" \
  || { echo "count.sh: rustix's dependency line was not found" >&2; exit 1; }

e2e=0 hot=0
for case in "$@"; do
  case "$case" in */*) e2e=1 ;; *) hot=1 ;; esac
done
# Builds a bench of the copy and says its binary's path.
build() {
  local log="$count_dir/build.log"
  if ! (cd "$copy" && CARGO_PROFILE_BENCH_DEBUG=line-tables-only \
    cargo bench "$@" --no-run --target-dir "$target") >"$log" 2>&1; then
    tail -20 "$log" >&2
    echo "count.sh: cargo bench $* --no-run failed (all of it in $log)" >&2
    exit 1
  fi
  sed -n 's/.*Executable.*(\(.*\))$/\1/p' "$log" | tail -1
}
if [ $hot = 1 ]; then hot_bin=$(build --bench hot_loop); fi
if [ $e2e = 1 ]; then e2e_bin=$(build --bench e2e --features tower,hyper-util,reqwest-middleware); fi

refs() {
  valgrind --tool=cachegrind --cache-sim=no --cachegrind-out-file=/dev/null "$@" 2>&1 \
    | awk '/I *refs/ {gsub(",", "", $NF); print $NF}'
}
for case in "$@"; do
  case "$case" in
    */*)
      a=$(E2E_ONLY=$case E2E_N=2000 refs "$e2e_bin" --interleaved)
      b=$(E2E_ONLY=$case E2E_N=4000 refs "$e2e_bin" --interleaved)
      echo "$case $(( (b - a) / 2000 )) instructions per request"
      ;;
    *fail)
      # (A tenth of N calls.)
      a=$(N=1000000 refs "$hot_bin" "$case")
      b=$(N=2000000 refs "$hot_bin" "$case")
      echo "$case $(( (b - a) / 100000 )) instructions per call"
      ;;
    *)
      a=$(N=100000 refs "$hot_bin" "$case")
      b=$(N=300000 refs "$hot_bin" "$case")
      echo "$case $(( (b - a) / 200000 )) instructions per call"
      ;;
  esac
done
