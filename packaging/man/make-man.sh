#!/usr/bin/env bash
# make-man.sh CORDON OUTDIR VERSION: the manual pages cordon(1) and cordon-SUBCOMMAND(1), made by
# help2man from the built cordon's own --help, so they say exactly what the command line does;
# gzip'ed, as OUTDIR/*.1.gz.
set -euo pipefail
cordon=$1 out=$2 version=$3
mkdir -p "$out"
wrap=$(mktemp -d)
trap 'rm -rf "$wrap"' EXIT
page() {  # page NAME SUMMARY PROGRAM
  help2man --no-info --no-discard-stderr --version-string="$version" --section=1 \
    --source="cordon $version" --name="$2" "$3" > "$out/$1.1"
  gzip -9nf "$out/$1.1"  # Debian's form: compressed, without a name or time stamp
}
page cordon "run a program in a sandbox that sees only what a policy grants" "$cordon"
# Each subcommand as its own program (help2man runs PROGRAM --help): "cordon-run" runs
# "cordon run".
"$cordon" --help | sed -n '/^Subcommands:/,$p' | awk 'NF && $1 !~ /:$/ {print $1}' |
  while read -r sub; do
    # sed, not head: head closes the pipe after one line, cordon may die of SIGPIPE, and
    # pipefail then ends this script without a word (the build failed that way, now and then).
    summary=$("$cordon" "$sub" --help | sed -n 1p)
    printf '#!/bin/sh\nexec "%s" %s "$@"\n' "$cordon" "$sub" > "$wrap/cordon-$sub"
    chmod +x "$wrap/cordon-$sub"
    page "cordon-$sub" "$(echo "$summary" | sed 's/^\(.\)/\L\1/; s/[.:].*$//')" "$wrap/cordon-$sub"
  done
touch "$out/stamp"
