#!/usr/bin/env bash
# Builds the real Kubernetes test binaries (kube-apiserver, kube-controller-manager,
# kubectl, etcd) from the Go module proxy into a cached, git-ignored folder.
#
# The k8s.io/kubernetes and etcd server modules carry replace directives, so
# `go install pkg@version` refuses them. We build them through small wrapper
# modules generated under .cache/tools/, which keeps their replace lines out of
# the project's own go.mod (they would pin client-go to the server's version).
#
# A second run is a no-op: each binary is stamped with the version it was built
# from and skipped when the stamp matches.
#
# Usage: hack/build-testbins.sh [BIN_DIR]     (default: .cache/bin)
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BIN_DIR="${1:-${TESTBIN_DIR:-$ROOT/.cache/bin}}"
K8S_VERSION="${K8S_VERSION:-v1.33.13}"
ETCD_VERSION="${ETCD_VERSION:-v3.5.21}"
TOOLS="$ROOT/.cache/tools"
mkdir -p "$BIN_DIR" "$TOOLS"

log() { printf '[testbins %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

stamp_ok() { # name version
  [[ -x "$BIN_DIR/$1" && -f "$BIN_DIR/.$1.version" && "$(cat "$BIN_DIR/.$1.version")" == "$2" ]]
}

# progress ticker so a newcomer sees the long first build is alive
with_ticker() { # label cmd...
  local label="$1"; shift
  local start=$SECONDS
  ( while sleep 30; do log "$label: still building ($((SECONDS - start))s elapsed)"; done ) &
  local ticker=$!
  local rc=0
  "$@" || rc=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  return $rc
}

build_k8s() {
  local need=()
  for b in kube-apiserver kubectl kube-controller-manager kube-proxy; do
    stamp_ok "$b" "$K8S_VERSION" || need+=("$b")
  done
  [[ ${#need[@]} -eq 0 ]] && { log "kubernetes $K8S_VERSION binaries cached"; return 0; }

  local mod="$TOOLS/k8s-$K8S_VERSION"
  mkdir -p "$mod"
  if [[ ! -f "$mod/go.mod" ]]; then
    log "generating wrapper module for k8s.io/kubernetes $K8S_VERSION"
    local gomod
    gomod="$(cd "$mod" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@$K8S_VERSION" | sed -n 's/.*"GoMod": "\(.*\)".*/\1/p')"
    local minor="${K8S_VERSION#v1.}"        # 33.13
    local staging_ver="v0.$minor"           # v0.33.13
    {
      echo "module coastguard.local/testbins/k8s"
      echo
      echo "go 1.24.0"
      echo
      echo "require k8s.io/kubernetes $K8S_VERSION"
      echo
      grep -oE '^\s*k8s.io/[a-z0-9-]+ => ./staging/src/k8s.io/[a-z0-9-]+' "$gomod" \
        | awk -v v="$staging_ver" '{print "replace " $1 " => " $1 " " v}'
      echo
      echo "tool ("
      echo "	k8s.io/kubernetes/cmd/kube-apiserver"
      echo "	k8s.io/kubernetes/cmd/kube-controller-manager"
      echo "	k8s.io/kubernetes/cmd/kubectl"
      echo "	k8s.io/kubernetes/cmd/kube-proxy"
      echo ")"
    } >"$mod/go.mod.tmp"
    mv "$mod/go.mod.tmp" "$mod/go.mod"
    (cd "$mod" && GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || GOFLAGS=-mod=mod go mod download)
  fi
  local major=1 minorn
  minorn="$(echo "$K8S_VERSION" | cut -d. -f2)"
  local ld=""
  for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $p.gitVersion=$K8S_VERSION -X $p.gitMajor=$major -X $p.gitMinor=$minorn"
    ld+=" -X $p.buildDate=1970-01-01T00:00:00Z -X $p.gitTreeState=clean"
  done
  for b in "${need[@]}"; do
    log "building $b $K8S_VERSION (first build takes several minutes; later runs are cached)"
    with_ticker "$b" bash -c "cd '$mod' && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags '-s -w $ld' -o '$BIN_DIR/$b.tmp' k8s.io/kubernetes/cmd/$b"
    mv "$BIN_DIR/$b.tmp" "$BIN_DIR/$b"
    echo "$K8S_VERSION" >"$BIN_DIR/.$b.version"
  done
}

build_etcd() {
  stamp_ok etcd "$ETCD_VERSION" && { log "etcd $ETCD_VERSION cached"; return 0; }
  local mod="$TOOLS/etcd-$ETCD_VERSION"
  mkdir -p "$mod"
  if [[ ! -f "$mod/go.mod" ]]; then
    log "generating wrapper module for etcd $ETCD_VERSION"
    cat >"$mod/go.mod" <<EOF
module coastguard.local/testbins/etcd

go 1.24.0

require (
	go.etcd.io/etcd/server/v3 $ETCD_VERSION
	go.etcd.io/etcd/api/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/pkg/v3 $ETCD_VERSION
	go.etcd.io/etcd/client/v2 v2.305.${ETCD_VERSION#v3.5.}
	go.etcd.io/etcd/client/v3 $ETCD_VERSION
	go.etcd.io/etcd/pkg/v3 $ETCD_VERSION
	go.etcd.io/etcd/raft/v3 $ETCD_VERSION
)

tool go.etcd.io/etcd/server/v3
EOF
    (cd "$mod" && GOFLAGS=-mod=mod go mod tidy >/dev/null 2>&1 || GOFLAGS=-mod=mod go mod download)
  fi
  log "building etcd $ETCD_VERSION"
  with_ticker etcd bash -c "cd '$mod' && GOFLAGS=-mod=mod CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o '$BIN_DIR/etcd.tmp' go.etcd.io/etcd/server/v3"
  mv "$BIN_DIR/etcd.tmp" "$BIN_DIR/etcd"
  echo "$ETCD_VERSION" >"$BIN_DIR/.etcd.version"
}

# The e2e harness cuts links between simulated clusters with iptables DROP
# rules (test/harness, Partition). Install it when missing and we can; the
# harness itself fails loudly, naming this remedy, if it is still absent.
ensure_iptables() {
  command -v iptables >/dev/null 2>&1 && { log "iptables present"; return 0; }
  if [[ "${TESTBINS_NO_APT:-}" == 1 ]]; then
    log "WARNING: iptables missing and TESTBINS_NO_APT=1; e2e partition tests will fail"
    return 0
  fi
  if [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    log "installing iptables (apt-get)"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null 2>&1; then
      apt-get update -qq >/dev/null 2>&1 || true
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq iptables >/dev/null
    fi
    return 0
  fi
  log "WARNING: iptables missing; install it (apt-get install -y iptables) as root, or e2e partition tests will fail"
}

# kube-router's network policy controller is the dataplane's NetworkPolicy
# engine (test/harness/dataplane.go). The Go module proxy serves v2.1.0 only,
# which has reported security flaws: it runs only inside the harness's network
# namespaces, is never linked into coastguard and never shipped.
KUBE_ROUTER_VERSION="${KUBE_ROUTER_VERSION:-v2.1.0}"
build_kube_router() {
  stamp_ok kube-router "$KUBE_ROUTER_VERSION" && { log "kube-router $KUBE_ROUTER_VERSION cached"; return 0; }
  local gobin="$TOOLS/kube-router-$KUBE_ROUTER_VERSION"
  mkdir -p "$gobin"
  log "building kube-router $KUBE_ROUTER_VERSION (test-only NetworkPolicy engine)"
  with_ticker kube-router bash -c "GOBIN='$gobin' GOFLAGS=-mod=mod CGO_ENABLED=0 go install -trimpath -ldflags '-s -w' github.com/cloudnativelabs/kube-router/v2/cmd/kube-router@$KUBE_ROUTER_VERSION"
  mv "$gobin/kube-router" "$BIN_DIR/kube-router"
  echo "$KUBE_ROUTER_VERSION" >"$BIN_DIR/.kube-router.version"
}

# The dataplane also needs ipset (kube-router programs it), iproute2 and
# sysctl (procps).
ensure_dataplane_tools() {
  local missing=()
  command -v ipset >/dev/null 2>&1 || missing+=(ipset)
  command -v ip >/dev/null 2>&1 || missing+=(iproute2)
  command -v sysctl >/dev/null 2>&1 || missing+=(procps)
  [[ ${#missing[@]} -eq 0 ]] && { log "ipset and iproute2 present"; return 0; }
  if [[ "${TESTBINS_NO_APT:-}" != 1 && "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1; then
    log "installing ${missing[*]} (apt-get)"
    if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null 2>&1; then
      apt-get update -qq >/dev/null 2>&1 || true
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
    fi
    return 0
  fi
  log "WARNING: ${missing[*]} missing; the packet-level e2e scenarios will skip"
}

ensure_iptables
ensure_dataplane_tools
build_etcd
build_k8s
build_kube_router
log "test binaries ready in $BIN_DIR"
ls -la "$BIN_DIR" >&2
