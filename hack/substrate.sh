#!/usr/bin/env bash
# substrate.sh obtains the real binaries the tests and `make run` need, building each
# from the Go module proxy into a versioned cache directory outside the work tree:
#
#   ${STACKFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stackflow}/<tool>-<version>/
#
# A tool whose directory already holds a complete build (marked by .complete) is
# reused. Usage: hack/substrate.sh [kube|cluster|netpol|node-packages|pulumi|pulumi-yaml|rollouts|argocd|kargo|controller-gen|protoc-tools|all|env|dir TOOL]
#   env   prints where the binaries are (KUBEBUILDER_ASSETS, STACKFLOW_PULUMI_ROOT, …).
#   cluster builds the rest of a single-node cluster (kube-controller-manager,
#         kube-scheduler, kubelet, kube-proxy) and installs the node packages; it is
#         not part of `all` (its cold build is long; see README).
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
CACHE=${STACKFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stackflow}

KUBE_VERSION=v1.35.4
ETCD_VERSION=v3.6.5
PULUMI_VERSION=v3.274.1
PULUMI_YAML_VERSION=v1.25.0
CONTROLLER_GEN_VERSION=v0.20.1
BUF_VERSION=v1.75.0
PROTOC_GEN_GO_VERSION=v1.36.11
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2
ROLLOUTS_VERSION=v1.10.1
ARGOCD_VERSION=v2.14.21
KARGO_VERSION=v1.11.2
KARGO_COMMIT=20c56384dc3aa29911368fa9c0916e8f4a541252
# Kargo's modules are not on the module proxy: its source (Go parts, tag
# KARGO_VERSION) is shared reference data beside the repository root.
KARGO_SRC=${STACKFLOW_KARGO_SRC:-$here/../../shared/kargo/src}
NETPOL_VERSION=v0.8.0

log() { printf '[substrate %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# done_or_build DIR FUNC: runs FUNC to fill DIR unless DIR/.complete exists.
done_or_build() {
  local dir=$1 fn=$2
  if [ -f "$dir/.complete" ]; then
    log "cached: $dir"
    return 0
  fi
  log "building into $dir (first time only; see timings in README)"
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
  local start=$SECONDS
  "$fn" "$dir.tmp"
  touch "$dir.tmp/.complete"
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
  log "built $dir in $((SECONDS - start))s"
}

# kube_ldflags prints the -ldflags that stamp KUBE_VERSION into a Kubernetes binary
# (the kubelet and the API server compare versions, so every component gets the same).
kube_ldflags() {
  local minor=${KUBE_VERSION#v1.}; minor=${minor%%.*}
  local ld="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ld+=" -X $pkg.gitVersion=$KUBE_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$minor"
    ld+=" -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  done
  echo "$ld"
}

build_kube() {
  local out=$1 ld; ld=$(kube_ldflags)
  (cd "$here/tools/kube" && \
    log "go build kube-apiserver $KUBE_VERSION (about 20 min cold)" && \
    go build -trimpath -ldflags "$ld" -o "$out/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver && \
    log "go build etcd $ETCD_VERSION (about 3 min cold)" && \
    go build -trimpath -ldflags "-s -w" -o "$out/etcd" go.etcd.io/etcd/server/v3)
}

# build_cluster builds the node and controller components of the single-node
# cluster (operator/test/cluster) from the same tools module as kube-apiserver, each
# timed, into its own directory so that the kube-… directory stays valid.
build_cluster() {
  local out=$1 ld bin start; ld=$(kube_ldflags)
  for bin in kube-controller-manager kube-scheduler kubelet kube-proxy; do
    start=$SECONDS
    log "go build $bin $KUBE_VERSION"
    (cd "$here/tools/kube" && go build -trimpath -ldflags "$ld" -o "$out/$bin" "k8s.io/kubernetes/cmd/$bin")
    log "built $bin in $((SECONDS - start))s"
  done
}

# build_netpol builds kube-network-policies (a SIG Network NetworkPolicy
# controller: nftables rules send the first packet of each connection of a pod
# selected by a policy to an NFQUEUE, where it gets a verdict), which the cluster
# runs beside the bridge CNI, from its own module (hack/tools/netpol) into its own
# directory so that the cluster-… directory stays valid.
build_netpol() {
  local out=$1
  (cd "$here/tools/netpol" && \
    log "go build kube-network-policies $NETPOL_VERSION (about 2 min cold)" && \
    go build -trimpath -ldflags "-s -w" -o "$out/kube-network-policies" sigs.k8s.io/kube-network-policies/cmd)
}

# node_packages installs, from the machine's Debian packages, what the kubelet's
# node needs besides Kubernetes itself: the container runtime (containerd, runc),
# the CNI plugins for a bridge network, and iptables for kube-proxy and the CNI
# portmap plugin, and nftables (nft, with which the cluster removes
# kube-network-policies' table). It runs only what is missing, and needs root
# (CI runs as root).
NODE_PACKAGES=(containerd runc containernetworking-plugins iptables nftables)
node_packages() {
  local missing=() p start=$SECONDS
  for p in "${NODE_PACKAGES[@]}"; do
    dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    log "installed: ${NODE_PACKAGES[*]}"
    return 0
  fi
  [ "$(id -u)" -eq 0 ] || { log "need root to apt-get install ${missing[*]}"; return 1; }
  log "apt-get install ${missing[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  # The package starts containerd as a service where there is an init system; the
  # cluster runs its own containerd with its own socket, so the service is not needed.
  log "installed ${missing[*]} in $((SECONDS - start))s"
}

build_pulumi() {
  local out=$1
  mkdir -p "$out/bin"
  (cd "$here/tools/pulumi" && \
    log "go build pulumi $PULUMI_VERSION (about 11 CPU-minutes cold)" && \
    go build -trimpath -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION" \
      -o "$out/bin/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi)
}

build_pulumi_yaml() {
  local out=$1
  log "go install pulumi-language-yaml $PULUMI_YAML_VERSION (about 3 min cold)"
  GOBIN="$out" go install -trimpath -ldflags "-s -w" "github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml@$PULUMI_YAML_VERSION"
}

# build_rollouts builds the Argo Rollouts controller and keeps, beside it, the
# CRDs of the same version (the module's manifests/crds), which the analysis e2e
# installs before starting it.
build_rollouts() {
  local out=$1
  (cd "$here/tools/rollouts" && \
    log "go build rollouts-controller $ROLLOUTS_VERSION (about 7 CPU-minutes cold)" && \
    go build -trimpath -ldflags "-s -w" -o "$out/rollouts-controller" github.com/argoproj/argo-rollouts/cmd/rollouts-controller && \
    mkdir -p "$out/crds" && \
    cp "$(go list -m -f '{{.Dir}}' github.com/argoproj/argo-rollouts)"/manifests/crds/*-crd.yaml "$out/crds/" && \
    chmod u+w "$out"/crds/*)
}

# build_argocd builds Argo CD's multi-call binary (the component is picked by
# ARGOCD_BINARY_NAME: argocd-application-controller, argocd-repo-server, …) and
# keeps, beside it, the CRDs of the same version (the module's manifests/crds).
build_argocd() {
  local out=$1
  (cd "$here/tools/argocd" && \
    log "go build argocd $ARGOCD_VERSION (about 7 CPU-minutes cold)" && \
    go build -trimpath -ldflags "-s -w -X github.com/argoproj/argo-cd/v2/common.version=${ARGOCD_VERSION#v}" \
      -o "$out/argocd" github.com/argoproj/argo-cd/v2/cmd && \
    mkdir -p "$out/crds" && \
    cp "$(go list -m -f '{{.Dir}}' github.com/argoproj/argo-cd/v2)"/manifests/crds/*-crd.yaml "$out/crds/" && \
    chmod u+w "$out"/crds/*)
}

# build_kargo builds Kargo's control plane (one binary; sub-commands controller,
# kubernetes-webhooks-server, management-controller, …) and its git askpass
# program credential-helper (which Kargo's git steps run as
# /usr/local/bin/credential-helper, where its image puts it) from a copy of the
# shared source made inside the build directory, so that -mod=mod (which
# completes go.mod and go.sum from the proxy) never writes to the shared folder,
# and keeps Kargo's CRDs of the same tag beside them. The copy is removed once
# built.
build_kargo() {
  local out=$1 ver=${KARGO_VERSION#v}
  local ld="-s -w -X github.com/akuity/kargo/pkg/x/version.version=$ver -X github.com/akuity/kargo/pkg/x/version.gitCommit=$KARGO_COMMIT -X github.com/akuity/kargo/pkg/x/version.gitTreeState=clean"
  cp -R "$KARGO_SRC" "$out/src" && chmod -R u+w "$out/src"
  (cd "$out/src" && \
    log "go build kargo $KARGO_VERSION (about 1,800 packages cold)" && \
    GOFLAGS=-mod=mod go build -trimpath -ldflags "$ld" -o "$out/kargo" ./cmd/controlplane && \
    GOFLAGS=-mod=mod go build -trimpath -ldflags "-s -w" -o "$out/credential-helper" ./cmd/credential-helper) && \
  mkdir -p "$out/crds" && cp "$KARGO_SRC"/../crds/*.yaml "$out/crds/" && chmod u+w "$out"/crds/* && \
  rm -rf "$out/src"
}

# kargo_available: the shared Kargo source is there (a checkout without it skips
# Kargo, and so do the tests that run it).
kargo_available() { [ -f "$KARGO_SRC/go.mod" ]; }
kargo_if_available() {
  if kargo_available; then done_or_build "$(kargo_dir)" build_kargo
  else log "no Kargo source at $KARGO_SRC: skipping kargo (the Kargo tests skip too)"; fi
}

build_controller_gen() {
  local out=$1
  GOBIN="$out" go install "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_GEN_VERSION"
}

build_protoc_tools() {
  local out=$1
  log "go install buf $BUF_VERSION, protoc-gen-go $PROTOC_GEN_GO_VERSION, protoc-gen-go-grpc $PROTOC_GEN_GO_GRPC_VERSION (about 4 min cold)"
  GOBIN="$out" go install "github.com/bufbuild/buf/cmd/buf@$BUF_VERSION"
  GOBIN="$out" go install "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
  GOBIN="$out" go install "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"
}

kube_dir() { echo "$CACHE/kube-$KUBE_VERSION-etcd-$ETCD_VERSION"; }
cluster_dir() { echo "$CACHE/cluster-$KUBE_VERSION"; }
pulumi_dir() { echo "$CACHE/pulumi-$PULUMI_VERSION"; }
pulumi_yaml_dir() { echo "$CACHE/pulumi-language-yaml-$PULUMI_YAML_VERSION"; }
controller_gen_dir() { echo "$CACHE/controller-gen-$CONTROLLER_GEN_VERSION"; }
rollouts_dir() { echo "$CACHE/rollouts-$ROLLOUTS_VERSION"; }
argocd_dir() { echo "$CACHE/argocd-$ARGOCD_VERSION"; }
kargo_dir() { echo "$CACHE/kargo-$KARGO_VERSION"; }
netpol_dir() { echo "$CACHE/kube-network-policies-$NETPOL_VERSION"; }
protoc_tools_dir() { echo "$CACHE/protoc-tools-buf-$BUF_VERSION-go-$PROTOC_GEN_GO_VERSION-grpc-$PROTOC_GEN_GO_GRPC_VERSION"; }

case "${1:-all}" in
  kube) done_or_build "$(kube_dir)" build_kube ;;
  cluster)
    # kube-apiserver and etcd first (usually cached), then the rest of the node.
    node_packages
    done_or_build "$(kube_dir)" build_kube
    done_or_build "$(cluster_dir)" build_cluster
    done_or_build "$(netpol_dir)" build_netpol
    ;;
  netpol) done_or_build "$(netpol_dir)" build_netpol ;;
  node-packages) node_packages ;;
  pulumi) done_or_build "$(pulumi_dir)" build_pulumi ;;
  pulumi-yaml) done_or_build "$(pulumi_yaml_dir)" build_pulumi_yaml ;;
  controller-gen) done_or_build "$(controller_gen_dir)" build_controller_gen ;;
  protoc-tools) done_or_build "$(protoc_tools_dir)" build_protoc_tools ;;
  rollouts) done_or_build "$(rollouts_dir)" build_rollouts ;;
  argocd) done_or_build "$(argocd_dir)" build_argocd ;;
  kargo)
    kargo_available || { log "no Kargo source at $KARGO_SRC: not building kargo"; exit 1; }
    done_or_build "$(kargo_dir)" build_kargo
    ;;
  all)
    # The builds run side by side: each go build leaves cores idle while it
    # downloads and links, so together they finish well before one after another.
    pids=()
    # Kargo (built only where its shared source is) follows Argo Rollouts.
    (done_or_build "$(kube_dir)" build_kube && done_or_build "$(rollouts_dir)" build_rollouts && kargo_if_available) & pids+=($!)
    (done_or_build "$(pulumi_yaml_dir)" build_pulumi_yaml && done_or_build "$(pulumi_dir)" build_pulumi && done_or_build "$(argocd_dir)" build_argocd) & pids+=($!)
    rc=0
    for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
    [ $rc -eq 0 ] || { log "a substrate build failed (see above)"; exit 1; }
    ;;
  env)
    # Where the binaries are (built or not); tests check that they exist.
    echo "export KUBEBUILDER_ASSETS=$(kube_dir)"
    echo "export STACKFLOW_PULUMI_ROOT=$(pulumi_dir)"
    echo "export STACKFLOW_PULUMI_LANGUAGE_YAML=$(pulumi_yaml_dir)"
    echo "export STACKFLOW_ROLLOUTS=$(rollouts_dir)"
    echo "export STACKFLOW_ARGOCD=$(argocd_dir)"
    echo "export STACKFLOW_KARGO=$(kargo_dir)"
    echo "export STACKFLOW_CLUSTER=$(cluster_dir)"
    echo "export STACKFLOW_NETPOL=$(netpol_dir)"
    ;;
  dir) echo "$("${2//-/_}_dir")" ;;
  # cached TOOL: succeeds when TOOL's build is complete in the cache (builds nothing).
  cached) [ -f "$("${2//-/_}_dir")/.complete" ] ;;
  *) echo "usage: $0 [kube|cluster|netpol|node-packages|pulumi|pulumi-yaml|rollouts|argocd|kargo|controller-gen|protoc-tools|all|env|dir TOOL|cached TOOL]" >&2; exit 2 ;;
esac
