#!/usr/bin/env bash
# e2e-failures.sh LOG: prints what the failed tests themselves said in a
# `go test -v` e2e log (assertions, the nemesis checker's explanations and
# log windows, t.Log lines), without the daemon and apiserver log dumps
# around them, so that the last lines of a CI run explain a failure. At
# most 400 lines.
set -euo pipefail
log=${1:-.cache/e2e.log}
awk '
  function top(name) { sub(/\/.*/, "", name); return name }
  /^=== (RUN|CONT|PAUSE|NAME) / { cur = top($3); keep = 0; next }
  /^ *--- FAIL: / { failed[top($3)] = 1; buf[top($3)] = buf[top($3)] $0 "\n"; keep = 0; next }
  /^ *[A-Za-z0-9_]+\.go:[0-9]+: / {
    keep = ($0 !~ /harness: (=====|-----)|harness: etcd ready|kube-apiservers ready|dataplane ready/)
    if (keep && cur != "") buf[cur] = buf[cur] $0 "\n"
    next
  }
  keep && /^        / && $0 !~ /^ *(\{"time"|=== harness|[IEWF][0-9][0-9][0-9][0-9] |time=|[0-9][0-9][0-9][0-9]\/[0-9][0-9]\/[0-9][0-9] )/ {
    if (cur != "") buf[cur] = buf[cur] $0 "\n"
    next
  }
  { keep = 0 }
  END { for (t in failed) printf "%s", buf[t] }
' "$log" | head -n 400
