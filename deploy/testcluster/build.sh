#!/usr/bin/env bash
# Builds the binaries of the test cluster (README.md) from the Go module proxy into DIR (default
# /opt/corral-k8s/v1.37.2), each once: a binary already there is kept. About 25 minutes from a cold Go cache on
# two cores; 600 MB. Usage: build.sh [--check] [DIR]; --check only says (by its status) whether all are there.
set -euo pipefail
check=
if [ "${1:-}" = --check ]; then
  check=1
  shift
fi

K8S_VERSION=v1.37.2
ETCD_VERSION=v3.6.16
CONTAINERD_VERSION=v2.4.2
CNI_VERSION=v1.10.0
KUBE_ROUTER_VERSION=v2.6.3-k3s1
DIR=${1:-/opt/corral-k8s/$K8S_VERSION}
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOTOOLCHAIN=local

log() { printf '== %s\n' "$*" >&2; }
mkdir -p "$DIR/cni"

# module copies a module's source out of the module cache into a fresh writable directory and prints its path.
module() {
  local src tmp
  src=$(cd / && GOFLAGS= go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
  [ -d "${src:?go mod download gave no directory for $1}" ]
  tmp=$(mktemp -d)
  cp -r "$src/." "$tmp" && chmod -R u+w "$tmp"
  echo "$tmp"
}

need() { for b in "$@"; do [ -x "$DIR/$b" ] || return 0; done; return 1; }

if [ -n "$check" ]; then
  ! need etcd containerd containerd-shim-runc-v2 ctr cni/bridge cni/host-local cni/loopback cni/portmap \
    kube-apiserver kubelet kube-scheduler kube-controller-manager kube-router
  exit
fi

if need etcd; then
  log "etcd $ETCD_VERSION"
  src=$(module "go.etcd.io/etcd/server/v3@$ETCD_VERSION")
  # Its go.mod points the other etcd modules at ../ (the monorepo) and names a toolchain: use the released ones.
  (cd "$src" && sed -i -e '/=> \.\.\//d' -e '/^toolchain /d' go.mod && go build -trimpath -ldflags='-s -w' -o "$DIR/etcd" .)
  rm -rf "$src"
fi

if need containerd containerd-shim-runc-v2 ctr; then
  log "containerd $CONTAINERD_VERSION"
  src=$(module "github.com/containerd/containerd/v2@$CONTAINERD_VERSION")
  for c in containerd containerd-shim-runc-v2 ctr; do
    (cd "$src" && go build -trimpath -tags 'no_btrfs no_devmapper no_zfs' -ldflags='-s -w' -o "$DIR/$c" "./cmd/$c")
  done
  rm -rf "$src"
fi

if need cni/bridge cni/host-local cni/loopback cni/portmap; then
  log "CNI plugins $CNI_VERSION"
  src=$(module "github.com/containernetworking/plugins@$CNI_VERSION")
  (cd "$src" && for p in main/bridge ipam/host-local main/loopback meta/portmap; do
    go build -trimpath -ldflags='-s -w' -o "$DIR/cni/${p#*/}" "./plugins/$p"
  done)
  rm -rf "$src"
fi

k8s=(kube-apiserver kubelet kube-scheduler kube-controller-manager)
if need "${k8s[@]}"; then
  log "kubernetes $K8S_VERSION: ${k8s[*]}"
  src=$(module "k8s.io/kubernetes@$K8S_VERSION")
  # The repository builds its staging modules from ./staging; outside it, use the published ones of the release.
  minor=${K8S_VERSION#v1.}; minor=${minor%%.*}
  (cd "$src" && rm -f go.work go.work.sum &&
    sed -i -e '/^replace (/,/^)/d' -e '/=> \.\/staging/d' -e "s#^\(\s*k8s.io/[a-z0-9-]*\) v0.0.0\$#\1 v0.${K8S_VERSION#v1.}#" go.mod &&
    for c in "${k8s[@]}"; do
      [ -x "$DIR/$c" ] && continue
      log "  $c"
      go build -trimpath -o "$DIR/$c" -ldflags="-s -w -X k8s.io/component-base/version.gitVersion=$K8S_VERSION -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor" "./cmd/$c"
    done)
  rm -rf "$src"
fi

if need kube-router; then
  log "kube-router $KUBE_ROUTER_VERSION"
  src=$(module "github.com/k3s-io/kube-router/v2@$KUBE_ROUTER_VERSION")
  (cd "$src" && go build -trimpath -ldflags='-s -w' -o "$DIR/kube-router" ./cmd/kube-router)
  rm -rf "$src"
fi
log "done: $DIR"
