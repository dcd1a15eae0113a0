#!/usr/bin/env bash
# helm lint (strict) and helm template of charts/coastguard with the helm
# pinned in tools/go.mod: the defaults, every optional feature on, and a list
# of bad values that must NOT render (values.schema.json and the templates'
# `required`), each failing with the expected message.
#   hack/helm-check.sh   (make helm-check; HELM_KUBE_VERSION overrides 1.33.0)
set -euo pipefail
cd "$(dirname "$0")/.."
kv="${HELM_KUBE_VERSION:-1.33.0}"
helm() { go tool -modfile="$PWD/tools/go.mod" helm "$@"; }
tmpl() { helm template coastguard charts/coastguard --kube-version "$kv" --namespace coastguard-system --include-crds "$@"; }

helm lint --strict --kube-version "$kv" --namespace coastguard-system --set clusterID=eu-1 charts/coastguard
tmpl --set clusterID=eu-1 >/dev/null
tmpl --set clusterID=eu-1 --set globalnetPolicy=drop --set monitoring.enabled=true --set metricsAuth.enabled=true \
  --set selfProtection.enabled=true --set rbac.aggregateEdit=true --set submariner.serviceExport=true \
  --set persistence.hostPath.enabled=true --set 'imagePullSecrets[0].name=regcred' \
  --set image.digest=sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef \
  --set fullnameOverride=coastguard-b --set clusterDomain=corp.example \
  --set monitoring.dashboard.enabled=true --set monitoring.dashboard.namespace=grafana \
  --set-json 'consent={"rules":[{"name":"platform","origins":{"matchLabels":{"team":"platform"}},"namespaces":{}}],"forbidWidening":true,"clusterLabels":{"eu-2":{"team":"platform"}}}' >/dev/null
tmpl --set clusterID=eu-1 --set metricsAuth.enabled=false --set submariner.serviceExport=false \
  --set monitoring.enabled=true --set 'seeds={a.example:7946,b.example}' >/dev/null

# Each case: the --set arguments (one word, comma-separated) | a substring of
# the expected error.
fails=0
while IFS='|' read -r set want; do
  [ -z "$set" ] && continue
  args=()
  [ "$set" != "-" ] && args=(--set "$set")
  if out=$(tmpl "${args[@]}" 2>&1 >/dev/null); then
    echo "helm-check: --set $set rendered; it must be rejected ($want)" >&2
    fails=$((fails + 1))
  elif ! grep -qF -- "$want" <<<"$out"; then
    echo "helm-check: --set $set failed without \"$want\":" >&2
    echo "$out" >&2
    fails=$((fails + 1))
  else
    echo "helm-check: rejected as expected: --set $set"
  fi
done <<'CASES'
-|clusterID is required
clusterID=Bad_ID|/clusterID
clusterID=-eu|/clusterID
clusterID=aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa|/clusterID
clusterID=eu-1,gossipProfile=fast|/gossipProfile
clusterID=eu-1,globalnetPolicy=strict|/globalnetPolicy
clusterID=eu-1,image.digest=latest|/image/digest
clusterID=eu-1,image.pullPolicy=Sometimes|/image/pullPolicy
clusterID=eu-1,namespace.create=false|additional properties 'namespace'
clusterID=eu-1,metricsAuth.enabled=yes|/metricsAuth/enabled
clusterID=eu-1,monitoring.interval=30|/monitoring/interval
clusterID=eu-1,gossipKey.existingSecret=|/gossipKey/existingSecret
clusterID=eu-1,clusterDomain=Corp_Local|/clusterDomain
clusterID=eu-1,extraConfig.FOO=1|'FOO' does not match
clusterID=eu-1,seeds={a b}|/seeds/0
clusterID=eu-1,consent.rules[0].name=x|origins
clusterID=eu-1,consent.forbidWidenin=true|forbidWidenin
clusterID=eu-1,monitoring.dashboard.namespace=Grafana|/monitoring/dashboard/namespace
CASES
if [ "$fails" -ne 0 ]; then
  echo "helm-check: $fails bad value set(s) not rejected as expected" >&2
  exit 1
fi
