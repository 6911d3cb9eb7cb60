#!/usr/bin/env bash
# Runs every libFuzzer target (executables named fuzz_*) in a build for a fixed time each.
#   tests/run_fuzz.sh BUILD_DIR SECONDS
# BUILD_DIR must be configured with CC=clang CXX=clang++ -DCORDON_FUZZ=ON and the targets built.
# Seeds come from tests/**/fuzz_corpus/<target>/ when present; they are copied into a scratch corpus
# so the checked-in seeds never change. Any crash, leak, sanitizer report or timeout fails the run;
# the reproducer is left in BUILD_DIR/fuzz-artifacts/.
set -euo pipefail

if [[ $# -ne 2 || ! -d $1 || ! $2 =~ ^[0-9]+$ || $2 -lt 1 ]]; then
  echo "usage: $0 BUILD_DIR SECONDS   (SECONDS >= 1, BUILD_DIR an existing build directory)" >&2
  exit 2
fi
build_dir=$(cd "$1" && pwd)
seconds=$2
source_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

mapfile -t targets < <(find "$build_dir" -type f -name 'fuzz_*' -perm -u+x -not -path '*/CMakeFiles/*' \
                         -not -path '*/fuzz-work/*' -not -path '*/fuzz-artifacts/*' | sort)
if [[ ${#targets[@]} -eq 0 ]]; then
  echo "$0: no fuzz_* executables under $build_dir (configure with CC=clang CXX=clang++ -DCORDON_FUZZ=ON and build them)" >&2
  exit 2
fi

artifacts="$build_dir/fuzz-artifacts"
mkdir -p "$artifacts"
# halt_on_error: a UBSan report must fail the run like a crash; detect_leaks stays on.
export ASAN_OPTIONS="${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"

failed=()
for bin in "${targets[@]}"; do
  name=$(basename "$bin")
  work="$build_dir/fuzz-work/$name"
  rm -rf "$work"
  mkdir -p "$work"
  seeds=()
  while IFS= read -r dir; do
    cp -r "$dir"/. "$work"/
    seeds+=("$dir")
  done < <(find "$source_dir/tests" -type d -path "*/fuzz_corpus/$name" | sort)
  echo "== $name: ${seconds}s, $(find "$work" -type f | wc -l) seed inputs${seeds:+ from ${seeds[*]}}"
  log="$build_dir/fuzz-work/$name.log"
  # -timeout: one input taking >10 s is a hang. -rss_limit_mb: a memory blow-up is a bug too.
  if "$bin" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -max_len=65536 \
       -print_final_stats=1 -artifact_prefix="$artifacts/$name-" "$work" >"$log" 2>&1; then
    grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb|^#[0-9]+.*DONE' "$log" | sed "s/^/   /" || true
    echo "   ok ($(find "$work" -type f | wc -l) corpus inputs after the run)"
  else
    rc=$?
    echo "   FAILED (exit $rc); last lines of $log:" >&2
    tail -n 40 "$log" >&2
    failed+=("$name")
  fi
done

if [[ ${#failed[@]} -gt 0 ]]; then
  echo "fuzzing found problems in: ${failed[*]} (reproducers in $artifacts)" >&2
  exit 1
fi
echo "all ${#targets[@]} fuzz targets ran ${seconds}s each without a crash"
