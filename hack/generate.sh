#!/usr/bin/env bash
# Regenerates code and manifests derived from api/: deepcopy functions and the
# MultiClusterNetworkPolicy CRD. controller-gen is pinned as a Go tool
# dependency in go.mod, so no separate install is needed.
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"
cd "$ROOT"
go tool controller-gen object paths=./api/...
go tool controller-gen crd paths=./api/... output:crd:dir=deploy/crds
# Bounds, patterns and rules for the borrowed selector and ipBlock schemas,
# which markers cannot reach (see hack/crdschema).
go run ./hack/crdschema deploy/crds/networking.submariner.io_multiclusternetworkpolicies.yaml
# The Helm chart ships the same CRD (Helm installs crds/ before templates).
cp deploy/crds/networking.submariner.io_multiclusternetworkpolicies.yaml charts/coastguard/crds/
