#!/usr/bin/env bash
# Builds the suite with AddressSanitizer + UndefinedBehaviorSanitizer into a build directory of its
# own and runs the tests of the given ctest labels (default: unit) there.
#   tests/run_sanitized.sh [BUILD_DIR] [LABEL_REGEX]     e.g. tests/run_sanitized.sh build-asan 'unit|e2e'
# As root with CORDON_TEST_STRICT=1 it runs the privileged tests too. The preload shim is built
# without sanitizers whatever CORDON_SANITIZE says (it is loaded into programs that lack the
# runtime).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build-asan}
LABELS=${2:-unit}
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCORDON_SANITIZE="address;undefined" >/dev/null
# The unit tests alone need only their own binaries (target tests_unit); anything else runs the
# built cordon and its daemons, so everything is built.
if [ "$LABELS" = unit ]; then
  cmake --build "$BUILD" -j"$(nproc)" --target tests_unit
else
  cmake --build "$BUILD" -j"$(nproc)"
fi
# -fno-sanitize-recover=all (CMakeLists.txt): the first report fails its test.
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
ctest --test-dir "$BUILD" -L "$LABELS" --output-on-failure -j"$(nproc)"
