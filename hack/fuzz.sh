#!/usr/bin/env bash
# Runs every Go fuzz target of the project for a while each (default 20s).
# The checked-in seed corpora (testdata/fuzz/) also run as plain tests in
# `make test`; this script explores beyond them.
#   hack/fuzz.sh [duration]
set -euo pipefail
cd "$(dirname "$0")/.."
dur="${1:-20s}"
for file in $(grep -rl --include='*_test.go' '^func Fuzz' .); do
  pkg="./$(dirname "${file#./}")"
  for fn in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)' "$file" | awk '{print $2}'); do
    echo "== $pkg $fn ($dur)"
    go test "$pkg" -run '^$' -fuzz "^${fn}\$" -fuzztime "$dur"
  done
done
