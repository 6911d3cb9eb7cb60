#!/usr/bin/env bash
# scripts/release.sh [BUILD]: the release files of this checkout's HEAD in dist/: the Debian
# package (cpack, from BUILD, default ./build, built by .ci/setup), a source tarball made with
# git archive, and SHA256SUMS of both; then runs tests/package-test.sh on the same build. As
# root (the package test builds and enters a Debian root).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=$(realpath "${1:-$SRC/build}")
say() { echo "release: $*"; }
die() { echo "release: $*" >&2; exit 1; }

cd "$SRC"
git diff --quiet HEAD -- || die "the checkout has uncommitted changes: a release is made from a commit"
version=$(sed -n 's/^project(cordon VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
[ -n "$version" ] || die "no project version in CMakeLists.txt"
grep -q "^## \[$version\]" CHANGELOG.md || die "CHANGELOG.md has no section for $version"
DIST=$SRC/dist
rm -rf "$DIST" && mkdir -p "$DIST"

say "building cordon $version in $BUILD"
cmake -S "$SRC" -B "$BUILD" >/dev/null
cmake --build "$BUILD" --target cordon cordon-fs cordon-netproxy cordon_preload cordon-capture \
  cordon-man cordon-policy-man cordon-completion -- --quiet
(cd "$BUILD" && cpack -G DEB -B "$DIST/cpack" >/dev/null)
mv "$DIST"/cpack/cordon_*.deb "$DIST/"
rm -rf "$DIST/cpack"
git archive --format=tar.gz --prefix="cordon-$version/" -o "$DIST/cordon-$version.tar.gz" HEAD
(cd "$DIST" && sha256sum cordon_*.deb "cordon-$version.tar.gz" > SHA256SUMS)
say "$(cd "$DIST" && cat SHA256SUMS)"

tests/package-test.sh "$BUILD"
say "cordon $version: the files and their checksums are in $DIST"
