#!/usr/bin/env bash
# substrate.sh obtains the real binaries the tests, `make run` and `make demo` need.
# Each tool is taken, in this order, from:
#
#   1. an explicit, compatible installation: KUBEBUILDER_ASSETS (kube-apiserver and
#      etcd) when it is set;
#   2. the cache, when it holds a complete build of the pinned version:
#      ${STACKFLOW_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/stackflow}/<tool>-<version>/
#      (marked by .complete);
#   3. a compatible installation found on the machine: kube-apiserver and etcd in
#      setup-envtest's store (~/.local/share/kubebuilder-envtest/k8s/*), pulumi and
#      pulumi-language-yaml on PATH (see "compatible" below);
#   4. otherwise a build from the Go module proxy into the cache, printing its
#      progress while it runs and its time when done ([phase] substrate/<tool>: Ns).
#
# Compatible (checked from each binary's own version report):
#   kube-apiserver   v1.35.x (the pinned minor: the CRDs' CEL rules and the
#                    operator's client are tested against it)
#   etcd             v3.5.x or v3.6.x (the versions Kubernetes 1.35 supports)
#   pulumi           v3.274.0 or later v3 (the Automation API of the pinned SDK
#                    needs no newer CLI; later v3 releases keep its contract)
#   pulumi-language-yaml  v1.25.0 or later v1 (read with `go version -m`; a binary
#                    without module information is not taken)
#
# Kargo is built from its Go source at KARGO_VERSION, shared reference data beside
# the repository root (../shared/kargo/src, or $STACKFLOW_KARGO_SRC), never copied
# into the repository; where that folder is absent, kargo is skipped with a line
# saying so, and the tests and the demo that run Kargo skip or fall back.
#
# Usage: hack/substrate.sh COMMAND
#   run | demo | all [SET|TOOL...]  obtain the set `make run`, `make demo`, `make test` need (and more)
#   cluster                what the single-node cluster needs (the set `cluster`, below)
#   chromium               Chromium for the browser tests, from Debian packages (chromium_packages)
#   TOOL...                obtain these tools (see `tools` below)
#   plan SET|TOOL...       say what would be taken or built, and how long a cold build takes
#   cluster-check          succeed when this machine can run the cluster; else say why not
#   env                    print where the binaries are, as shell exports
#   dir TOOL               print TOOL's cache directory
#   cached TOOL            succeed when TOOL is complete in the cache (builds nothing)
#   tools                  list the tools
# The set `cluster` (kube-apiserver and etcd, then the rest of a single-node
# cluster: kube-controller-manager, kube-scheduler, kubelet, kube-proxy; and
# kube-network-policies; and the node's Debian packages, node_packages) is not
# part of `all`: make test asks for `all cluster` where cluster-check passes
# (root, namespaces, cgroups), and `all` elsewhere.
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
# The newest Argo CD v3 that builds as a dependency (see hack/gen-tools-argocd.sh).
ARGOCD3_VERSION=v3.2.11
KARGO_VERSION=v1.11.2
KARGO_COMMIT=20c56384dc3aa29911368fa9c0916e8f4a541252
KARGO_SRC=${STACKFLOW_KARGO_SRC:-$here/../../shared/kargo/src}
NETPOL_VERSION=v0.8.0
# Argo CD's web UI (argocd3-ui): its source is the argo-cd module's ui/ with its
# yarn.lock; the lockfile's one git dependency, argo-ui at the commit below, is
# shared reference data beside the repository root (never copied into it).
ARGO_UI_COMMIT=5cf36101733ce43eed57242a12389f2a7e40bd2b
ARGO_UI_SRC=${STACKFLOW_ARGO_UI_SRC:-$here/../../shared/argo-ui/src}
YARN_VERSION=1.22.22

# Compatible version ranges of installed binaries: [min, max) (see the header).
KUBE_RANGE=(v1.35.0 v1.36.0)
ETCD_RANGE=(v3.5.0 v3.7.0)
PULUMI_RANGE=(v3.274.0 v4.0.0)
PULUMI_YAML_RANGE=(v1.25.0 v2.0.0)

# The sets of tools each entry point needs.
SET_run=(kube pulumi-yaml pulumi)
SET_demo=(kube pulumi-yaml pulumi rollouts argocd3 kargo)
# Argo CD v2.14 (argocd, past end of life) is not in `all`: a cold `make test`
# would spend ~19 CPU-minutes on it. The suite runs its Argo CD tests on v2.14
# too when it is cached, and skips them saying so when not; `make
# test-argocd-2.14` builds it and runs them.
SET_all=(kube pulumi-yaml pulumi rollouts argocd3 kargo chromium)
# The single-node cluster (test/framework/cluster): obtaining `cluster` also
# installs the node's Debian packages (node_packages).
SET_cluster=(kube cluster netpol)

# Cold build estimates, in minutes on 2 cores with an empty Go build cache and
# nothing else running (DEVELOPMENT.md, "Cold and warm times"); `plan` prints them.
# Kargo and Rollouts are the minutes they add after Argo CD v3 in their unit,
# the cluster's components those they add after kube-apiserver and etcd in
# theirs (2026-12-05: the cluster 507 s and kube-network-policies 437 s, one
# after the other at a load average of 10, 570 CPU-s for both).
declare -A COLD_MIN=(
  [kube]=10 [pulumi]=7 [pulumi-yaml]=2 [rollouts]=2 [argocd]=19 [argocd3]=13 [argocd3-ui]=3 [kargo]=3
  [controller-gen]=2 [protoc-tools]=5 [cluster]=5 [netpol]=4
)

# The tools are built without cgo, as their projects release them, and with
# -trimpath (see gobuild's callers), as make builds the main module: the Go
# build cache then shares the standard library between them, and any package
# whose module and dependencies are at the same versions.
export CGO_ENABLED=0
# and with GOGC=400 (or STACKFLOW_GOGC): the compiler then spends ~12 % less
# CPU collecting garbage (see the Makefile).
BUILD_GOGC=${STACKFLOW_GOGC:-400}

log() { printf '[substrate %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }

# --- versions ---------------------------------------------------------------

# ver_ge A B: A >= B for versions vX.Y.Z (pre-release suffixes sort before).
ver_ge() { [ "$(printf '%s\n%s\n' "${1#v}" "${2#v}" | sort -V | head -1)" = "${2#v}" ]; }
# in_range V MIN MAX: MIN <= V < MAX.
in_range() { ver_ge "$1" "$2" && ! ver_ge "$1" "$3"; }

# Each *_version prints the version the binary reports of itself, or nothing.
kube_apiserver_version() { "$1" --version 2>/dev/null | grep -Eo 'v[0-9]+\.[0-9]+\.[0-9]+' | head -1; }
etcd_version() { "$1" --version 2>/dev/null | sed -n 's/^etcd Version: *\([0-9.]*\).*/v\1/p' | head -1; }
pulumi_version() { "$1" version 2>/dev/null | grep -Eo '^v[0-9]+\.[0-9]+\.[0-9]+' | head -1; }
# pulumi-language-yaml has no version flag: its Go build information says it.
pulumi_yaml_version() {
  go version -m "$1" 2>/dev/null | awk '$1=="mod" && $2=="github.com/pulumi/pulumi-yaml" {print $3}' | grep -E '^v[0-9]' | head -1
}

# kube_assets_ok DIR: DIR holds a compatible kube-apiserver and etcd; says why not.
kube_assets_ok() {
  local dir=$1 kv ev
  [ -x "$dir/kube-apiserver" ] && [ -x "$dir/etcd" ] || { echo "no kube-apiserver and etcd in $dir"; return 1; }
  kv=$(kube_apiserver_version "$dir/kube-apiserver"); ev=$(etcd_version "$dir/etcd")
  in_range "${kv:-v0}" "${KUBE_RANGE[@]}" || { echo "$dir/kube-apiserver is ${kv:-of unknown version}, not ${KUBE_RANGE[0]%.0}.x"; return 1; }
  in_range "${ev:-v0}" "${ETCD_RANGE[@]}" || { echo "$dir/etcd is ${ev:-of unknown version}, not v3.5.x–v3.6.x"; return 1; }
  echo "kube-apiserver $kv, etcd $ev"
}

# --- where each tool is -----------------------------------------------------

# A tool built from a tools module (hack/tools/NAME) is cached under its
# version and the module's digest (its go.mod, go.sum and Go files): when the
# module changes (e.g. a dependency's version), the tool is built again, and
# an old build is never taken for the new recipe.
tools_digest() { (cd "$here/tools/$1" && find . -type f \( -name go.mod -o -name go.sum -o -name '*.go' \) | LC_ALL=C sort | xargs cat | sha256sum | cut -c1-8); }
kube_dir() { echo "$CACHE/kube-$KUBE_VERSION-etcd-$ETCD_VERSION-$(tools_digest kube)"; }
cluster_dir() { echo "$CACHE/cluster-$KUBE_VERSION-$(tools_digest kube)"; }
pulumi_dir() { echo "$CACHE/pulumi-$PULUMI_VERSION-$(tools_digest pulumi)"; }
pulumi_yaml_dir() { echo "$CACHE/pulumi-language-yaml-$PULUMI_YAML_VERSION"; }
controller_gen_dir() { echo "$CACHE/controller-gen-$CONTROLLER_GEN_VERSION"; }
rollouts_dir() { echo "$CACHE/rollouts-$ROLLOUTS_VERSION-$(tools_digest argo)"; }
argocd_dir() { echo "$CACHE/argocd-$ARGOCD_VERSION-components-$(tools_digest argocd)"; }
# (-rbac: the layout that keeps the API server's RBAC manifests too)
# (-ui: the API server embeds Argo CD's web UI, built by argocd3-ui; -noui where
# ../shared/argo-ui is absent and the UI cannot be built)
argocd3_dir() { echo "$CACHE/argocd-$ARGOCD3_VERSION-components-rbac-$(ui_layout)-$(tools_digest argo)"; }
argocd3_ui_dir() { echo "$CACHE/argocd-ui-$ARGOCD3_VERSION-argo-ui-${ARGO_UI_COMMIT:0:8}-yarn-$YARN_VERSION"; }
ui_layout() { if [ -f "$ARGO_UI_SRC/package.json" ]; then echo ui; else echo noui; fi; }
kargo_dir() { echo "$CACHE/kargo-$KARGO_VERSION-$(tools_digest kargo)"; }
netpol_dir() { echo "$CACHE/kube-network-policies-$NETPOL_VERSION-$(tools_digest netpol)"; }
protoc_tools_dir() { echo "$CACHE/protoc-tools-buf-$BUF_VERSION-go-$PROTOC_GEN_GO_VERSION-grpc-$PROTOC_GEN_GO_GRPC_VERSION"; }

tool_dir() { "${1//-/_}_dir"; }
is_cached() { [ -f "$(tool_dir "$1")/.complete" ]; }

# installed_kube prints a compatible kube-apiserver/etcd directory other than the
# cache: KUBEBUILDER_ASSETS when set (explicit), else setup-envtest's store.
installed_kube() {
  local why d
  if [ -n "${KUBEBUILDER_ASSETS:-}" ] && [ "$KUBEBUILDER_ASSETS" != "$(kube_dir)" ]; then
    if why=$(kube_assets_ok "$KUBEBUILDER_ASSETS"); then echo "$KUBEBUILDER_ASSETS|$why"; return 0; fi
    log "KUBEBUILDER_ASSETS not taken: $why"
  fi
  for d in $(ls -d "${XDG_DATA_HOME:-$HOME/.local/share}"/kubebuilder-envtest/k8s/1.35.*-linux-* 2>/dev/null | sort -rV); do
    if why=$(kube_assets_ok "$d"); then echo "$d|$why"; return 0; fi
  done
  return 1
}

# installed_on_path NAME VERSIONFN MIN MAX: NAME on PATH, outside the cache, at a
# compatible version; prints "path|version".
installed_on_path() {
  local name=$1 fn=$2 min=$3 max=$4 bin v
  bin=$(command -v "$name" 2>/dev/null) || return 1
  case "$bin" in "$CACHE"/*) return 1 ;; esac
  v=$("$fn" "$bin")
  if [ -z "$v" ] || ! in_range "$v" "$min" "$max"; then
    log "$bin not taken: ${v:-version unknown}, compatible is $min up to (not including) $max"
    return 1
  fi
  echo "$bin|$v"
}

# pulumi_root_for BIN: the directory holding bin/pulumi for BIN (PulumiCommandOptions.Root
# wants that layout); when BIN is not in a bin/ directory, a link to it is made in the cache.
pulumi_root_for() {
  local bin=$1 dir; dir=$(dirname "$bin")
  if [ "$(basename "$dir")" = bin ]; then dirname "$dir"; return; fi
  mkdir -p "$CACHE/pulumi-installed/bin"
  ln -sfn "$bin" "$CACHE/pulumi-installed/bin/pulumi"
  echo "$CACHE/pulumi-installed"
}

# resolve TOOL sets WHERE (directory to use), HOW (explicit|cached|installed|build|
# absent: cannot be built here) and WHAT (a description).
resolve() {
  local tool=$1 found
  WHERE=$(tool_dir "$tool"); HOW=build; WHAT=""
  case "$tool" in
    kube)
      # An explicit KUBEBUILDER_ASSETS wins over the cache; setup-envtest's
      # store comes after it.
      if found=$(installed_kube); then
        case "$found" in
          "${KUBEBUILDER_ASSETS:-/nonexistent}|"*) WHERE=${found%%|*}; HOW=explicit; WHAT=${found#*|}; return ;;
        esac
        is_cached kube && { HOW=cached; return; }
        WHERE=${found%%|*}; HOW=installed; WHAT=${found#*|}; return
      fi
      is_cached kube && HOW=cached ;;
    pulumi)
      is_cached pulumi && { HOW=cached; return; }
      if found=$(installed_on_path pulumi pulumi_version "${PULUMI_RANGE[@]}"); then
        WHERE=$(pulumi_root_for "${found%%|*}"); HOW=installed; WHAT="pulumi ${found#*|} at ${found%%|*}"
      fi ;;
    pulumi-yaml)
      is_cached pulumi-yaml && { HOW=cached; return; }
      if found=$(installed_on_path pulumi-language-yaml pulumi_yaml_version "${PULUMI_YAML_RANGE[@]}"); then
        WHERE=$(dirname "${found%%|*}"); HOW=installed; WHAT="pulumi-language-yaml ${found#*|} at ${found%%|*}"
      fi ;;
    kargo)
      is_cached kargo && { HOW=cached; return; }
      [ -f "$KARGO_SRC/go.mod" ] || { HOW=absent; WHAT="no Kargo source at $KARGO_SRC"; } ;;
    *) is_cached "$tool" && HOW=cached ;;
  esac
  return 0
}

# --- building ---------------------------------------------------------------

# gobuild LABEL DIR PKG GOFLAGS...: `go build GOFLAGS... PKG` in DIR, printing every
# 30 s how many packages it has compiled (of how many it needs), so that a cold
# build is never a silent wait. DIR empty: `go install PKG@VERSION` style (no total).
gobuild() {
  local label=$1 dir=$2 pkg=$3; shift 3
  local out total=? start=$SECONDS rc=0 printer
  out=$(mktemp)
  if [ -n "$dir" ]; then
    total=$(cd "$dir" && go list -deps "$pkg" 2>/dev/null | wc -l) || total=?
    (cd "$dir" && GOGC=$BUILD_GOGC exec go build -v "$@" "$pkg") 2>"$out" &
  else
    (GOGC=$BUILD_GOGC exec go install -v "$@" "$pkg") 2>"$out" &
  fi
  local pid=$!
  (
    while sleep 30; do
      log "$label: $(grep -cE '^[A-Za-z0-9][^ ]*$' "$out") of ${total} packages compiled (cached ones are not counted), $((SECONDS - start))s"
    done
  ) &
  printer=$!
  wait "$pid" || rc=$?
  kill "$printer" 2>/dev/null; wait "$printer" 2>/dev/null || true
  if [ $rc -ne 0 ]; then
    grep -vE '^[A-Za-z0-9][^ ]*$' "$out" >&2 || true
    rm -f "$out"
    return $rc
  fi
  rm -f "$out"
}

# children_cpu sets CPU to the CPU seconds (user + system) of the processes this
# shell has waited for so far (bash's `times`, second line: "1m2.5s 0m3.1s"),
# so that each build says its CPU time, the figure to compare on a shared
# machine. Called as a command, not in $(…), whose subshell has no children.
children_cpu() {
  local tf; tf=$(mktemp); times >"$tf"
  CPU=$(sed -n 2p "$tf" | awk '{ t = 0; for (i = 1; i <= 2; i++) { split($i, a, "m"); sub("s", "", a[2]); t += a[1] * 60 + a[2] }; printf "%d", t }')
  rm -f "$tf"
}

# done_or_build TOOL: builds TOOL into its cache directory unless it is complete
# there. A lock serialises concurrent calls for the same tool (they share the
# .tmp directory); the second one then finds the build complete.
done_or_build() {
  local tool=$1 dir; dir=$(tool_dir "$tool")
  mkdir -p "$CACHE"
  exec {lockfd}>"$dir.lock"
  flock "$lockfd"
  if [ -f "$dir/.complete" ]; then
    log "cached: $dir"
    exec {lockfd}>&-
    return 0
  fi
  log "building $tool into $dir (first time only; ~${COLD_MIN[$tool]:-?} min cold on 2 cores)"
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp"
  local start=$SECONDS cpu0
  children_cpu; cpu0=$CPU
  "build_${tool//-/_}" "$dir.tmp"
  children_cpu
  echo "$((SECONDS - start))" > "$dir.tmp/.build-seconds"
  touch "$dir.tmp/.complete"
  rm -rf "$dir" && mv "$dir.tmp" "$dir"
  exec {lockfd}>&-
  log "built $dir in $((SECONDS - start))s"
  printf '[phase] substrate/%s: %ds, %d CPU-s, ok\n' "$tool" "$((SECONDS - start))" "$((CPU - cpu0))" >&2
}

# obtain TOOL: takes TOOL from where resolve finds it, building it when nothing
# usable is there, and says which.
obtain() {
  local tool=$1
  # Chromium is Debian packages, not a build (chromium_packages).
  if [ "$tool" = chromium ]; then HOW=packages; chromium_packages; return; fi
  resolve "$tool"
  case "$HOW" in
    explicit) log "$tool: using KUBEBUILDER_ASSETS=$WHERE ($WHAT)" ;;
    installed) log "$tool: using the installed $WHAT (nothing to build)" ;;
    cached) log "cached: $WHERE" ;;
    absent) log "$tool: skipped, $WHAT (what runs it skips or falls back)" ;;
    build) done_or_build "$tool" ;;
  esac
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
  log "go build kube-apiserver $KUBE_VERSION"
  gobuild kube-apiserver "$here/tools/kube" k8s.io/kubernetes/cmd/kube-apiserver -trimpath -ldflags "$ld" -o "$out/kube-apiserver"
  log "go build etcd $ETCD_VERSION"
  gobuild etcd "$here/tools/kube" go.etcd.io/etcd/server/v3 -trimpath -ldflags "-s -w" -o "$out/etcd"
}

# build_cluster builds the node and controller components of the single-node
# cluster (test/framework/cluster) from the same tools module as kube-apiserver, each
# timed, into its own directory so that the kube-… directory stays valid.
build_cluster() {
  local out=$1 ld bin start; ld=$(kube_ldflags)
  for bin in kube-controller-manager kube-scheduler kubelet kube-proxy; do
    start=$SECONDS
    log "go build $bin $KUBE_VERSION"
    gobuild "$bin" "$here/tools/kube" "k8s.io/kubernetes/cmd/$bin" -trimpath -ldflags "$ld" -o "$out/$bin"
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
  log "go build kube-network-policies $NETPOL_VERSION"
  gobuild kube-network-policies "$here/tools/netpol" sigs.k8s.io/kube-network-policies/cmd -trimpath -ldflags "-s -w" -o "$out/kube-network-policies"
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

# chromium_packages installs, from the machine's Debian packages, the Chromium
# that test/framework/browser drives headless (the browser tests of Argo CD's
# UI), and fonts-liberation (metric-compatible Arial, Times and Courier, which
# chromium does not pull in) so that screenshots show text as a person's
# browser does. Like node_packages it runs only what is missing and needs root.
# Where there is no apt-get it says how to install Chromium and succeeds: the
# browser tests then skip (browser.LocateOrSkip); where apt-get is, they fail
# until this step has run.
CHROMIUM_PACKAGES=(chromium fonts-liberation)
# chromium_bin prints the Chromium the browser tests take, as
# browser.Locate finds it: STACKFLOW_CHROMIUM, else chromium or
# chromium-browser on PATH.
chromium_bin() {
  if [ -n "${STACKFLOW_CHROMIUM:-}" ]; then [ -x "$STACKFLOW_CHROMIUM" ] && echo "$STACKFLOW_CHROMIUM"; return; fi
  command -v chromium 2>/dev/null || command -v chromium-browser 2>/dev/null
}
# chromium_missing prints the CHROMIUM_PACKAGES not installed (all of them
# where there is no dpkg).
chromium_missing() {
  local p
  for p in "${CHROMIUM_PACKAGES[@]}"; do
    dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
  done
}
chromium_packages() {
  local missing bin start=$SECONDS cpu0
  mapfile -t missing < <(chromium_missing)
  if [ ${#missing[@]} -eq 0 ] || ! command -v apt-get >/dev/null; then
    if bin=$(chromium_bin); then log "chromium: using the installed $("$bin" --version 2>/dev/null) at $bin"; return 0; fi
    log "chromium: skipped, no Chromium and no apt-get to install it: install Chromium with the machine's package manager (or set STACKFLOW_CHROMIUM to its binary); the browser tests skip meanwhile"
    return 0
  fi
  [ "$(id -u)" -eq 0 ] || { log "chromium: need root to apt-get install ${missing[*]} (sudo $0 chromium); the browser tests fail without it"; return 1; }
  log "apt-get install ${missing[*]}"
  children_cpu; cpu0=$CPU
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  children_cpu
  bin=$(chromium_bin) || { log "chromium: apt-get installed ${missing[*]}, but no chromium is on PATH"; return 1; }
  log "installed ${missing[*]} ($("$bin" --version 2>/dev/null) at $bin) in $((SECONDS - start))s"
  printf '[phase] substrate/chromium: %ds, %d CPU-s, ok\n' "$((SECONDS - start))" "$((CPU - cpu0))" >&2
}

# NODE_COMMANDS are what test/framework/cluster runs from the machine (its
# checkBinaries): NODE_PACKAGES' programs, util-linux's and iproute2's.
NODE_COMMANDS=(containerd containerd-shim-runc-v2 runc ctr iptables nft unshare nsenter ip)
CNI_BIN_DIR=/usr/lib/cni

# cluster_check succeeds, printing nothing, when this machine can run the
# single-node cluster (test/framework/cluster) and so the cluster tests;
# otherwise it prints the first requirement missing, in a few words, and
# fails. make test asks it before building the cluster substrate and before
# running the cluster tests, so that a machine that cannot run them says so
# at once, and why, rather than by a failing test. It takes 0.2 CPU-s, a few
# seconds at most on a loaded machine (making and removing cgroups, mostly),
# and leaves nothing behind (its namespaces end with their commands, its
# cgroups and directories are removed).
cluster_check() {
  local err h dir c missing=() have
  # cluster.BuildImages puts the substrate's amd64 binaries in the test
  # workspace image.
  [ "$(uname -s)/$(uname -m)" = Linux/x86_64 ] || { echo "not linux/amd64 but $(uname -s)/$(uname -m) (the test workspace image holds amd64 binaries)"; return 1; }
  [ "$(id -u)" -eq 0 ] || { echo "not root (containerd, the kubelet, the pods' bridge and iptables rules need it)"; return 1; }
  for c in unshare nsenter ip; do command -v "$c" >/dev/null || missing+=("$c"); done
  [ ${#missing[@]} -eq 0 ] || { echo "no ${missing[*]} on PATH (util-linux, iproute2)"; return 1; }
  # containerd and the kubelet run in a mount namespace of their own.
  err=$(unshare --mount --propagation private true 2>&1) || { echo "cannot make a mount namespace (unshare --mount: ${err##*: })"; return 1; }
  # containerd's CNI gives each pod a network namespace on a bridge.
  err=$(unshare --net true 2>&1) || { echo "cannot make a network namespace (unshare --net: ${err##*: })"; return 1; }
  err=$(unshare --net ip link add sfcheck0 type bridge 2>&1) || { echo "cannot make a bridge (ip link add type bridge: ${err##*: })"; return 1; }
  # containerd's snapshotter mounts overlays under /tmp (the cluster's directory).
  dir=$(mktemp -d /tmp/sfcheck-XXXXXX) && mkdir "$dir/l" "$dir/u" "$dir/w" "$dir/m" || { echo "cannot write /tmp"; return 1; }
  err=$(unshare --mount --propagation private mount -t overlay overlay -o "lowerdir=$dir/l,upperdir=$dir/u,workdir=$dir/w" "$dir/m" 2>&1) || {
    rm -rf "$dir"; echo "cannot mount an overlay filesystem on /tmp (${err:-mount failed})"; return 1; }
  rm -rf "$dir"
  # The kubelet (cgroupfs driver) makes the pods' cgroups under a root of
  # the cluster's own in every hierarchy.
  if [ "$(stat -f -c %T /sys/fs/cgroup 2>/dev/null)" = cgroup2fs ]; then
    # cgroup v2: the pods' cgroups need cpu, memory and pids (a memory limit
    # is a test) delegated to the root's children.
    dir=/sys/fs/cgroup/sfcheck-$$
    err=$(mkdir "$dir" 2>&1) || { echo "/sys/fs/cgroup is not writable (${err##*: })"; return 1; }
    have=" $(cat "$dir/cgroup.controllers" 2>/dev/null) "; rmdir "$dir"
    for c in cpu memory pids; do [[ $have == *" $c "* ]] || missing+=("$c"); done
    [ ${#missing[@]} -eq 0 ] || { echo "cgroup v2 gives /sys/fs/cgroup's children no ${missing[*]} controller (its cgroup.subtree_control: $(cat /sys/fs/cgroup/cgroup.subtree_control 2>/dev/null || true))"; return 1; }
  else
    # cgroup v1: the kubelet requires cpu, cpuacct, cpuset and memory
    # (its validateSystemRequirements); the cluster writes every hierarchy.
    have=" $(awk '{ for (i = 1; i < NF; i++) if ($i == "-" && $(i+1) == "cgroup") print $(i+3) }' /proc/self/mountinfo | tr ',\n' '  ') "
    for c in cpu cpuacct cpuset memory; do [[ $have == *" $c "* ]] || missing+=("$c"); done
    [ ${#missing[@]} -eq 0 ] || { echo "no cgroup v1 hierarchy for ${missing[*]} (the kubelet requires cpu, cpuacct, cpuset, memory)"; return 1; }
    for h in $(awk '{ for (i = 1; i < NF; i++) if ($i == "-" && ($(i+1) == "cgroup" || $(i+1) == "cgroup2")) print $5 }' /proc/self/mountinfo); do
      err=$(mkdir "$h/sfcheck-$$" 2>&1) || { echo "$h is not writable (${err##*: })"; return 1; }
      rmdir "$h/sfcheck-$$"
    done
  fi
  # The node's programs: present, or apt-get to install them (node_packages).
  for c in "${NODE_COMMANDS[@]}"; do command -v "$c" >/dev/null || missing+=("$c"); done
  [ -x "$CNI_BIN_DIR/bridge" ] || missing+=("$CNI_BIN_DIR/bridge")
  if [ ${#missing[@]} -gt 0 ] && ! command -v apt-get >/dev/null; then
    echo "no ${missing[*]}, and no apt-get to install ${NODE_PACKAGES[*]}"; return 1
  fi
  return 0
}

build_pulumi() {
  local out=$1
  mkdir -p "$out/bin"
  log "go build pulumi $PULUMI_VERSION"
  gobuild pulumi "$here/tools/pulumi" github.com/pulumi/pulumi/pkg/v3/cmd/pulumi -trimpath \
    -ldflags "-s -w -X github.com/pulumi/pulumi/sdk/v3/go/common/version.Version=$PULUMI_VERSION" \
    -o "$out/bin/pulumi"
}

build_pulumi_yaml() {
  local out=$1
  log "go install pulumi-language-yaml $PULUMI_YAML_VERSION"
  GOBIN="$out" gobuild pulumi-language-yaml "" "github.com/pulumi/pulumi-yaml/cmd/pulumi-language-yaml@$PULUMI_YAML_VERSION" -trimpath -ldflags "-s -w"
}

# build_rollouts builds the Argo Rollouts controller from the Argo tools module
# (beside Argo CD v3: hack/gen-tools-argo-kargo.sh) and keeps, beside it, the
# CRDs of the same version (the module's manifests/crds), which the analysis e2e
# installs before starting it.
build_rollouts() {
  local out=$1
  log "go build rollouts-controller $ROLLOUTS_VERSION"
  gobuild rollouts-controller "$here/tools/argo" github.com/argoproj/argo-rollouts/cmd/rollouts-controller -trimpath -ldflags "-s -w" -o "$out/rollouts-controller"
  mkdir -p "$out/crds"
  cp "$(cd "$here/tools/argo" && go list -m -f '{{.Dir}}' github.com/argoproj/argo-rollouts)"/manifests/crds/*-crd.yaml "$out/crds/"
  chmod u+w "$out"/crds/*
}

# build_argocd_components DIR PKG MAJOR VERSION OUT builds, from the tools
# module DIR, the Argo CD components the tests run (application controller,
# repo server, API server, git-ask-pass: the main package PKG, picking the
# component from ARGOCD_BINARY_NAME like Argo CD's multi-call binary) and
# keeps, beside it, the CRDs and the argocd-cm that the version's install
# manifests ship (its defaults, e.g. v3's ignoreResourceUpdates), the RBAC they
# give the API server (server-rbac/: its ClusterRole, Role and bindings, for
# tests that run it as its ServiceAccount), and its VERSION. The whole multi-call binary (CLI, Dex, notifications, ApplicationSet
# controller, …) compiles about 160 more packages, and its cold build takes
# longer (DEVELOPMENT.md, "Argo CD versions").
build_argocd_components() {
  local dir=$1 pkg=$2 major=$3 version=$4 out=$5 src
  log "go build argocd $version components (application controller, repo server, API server)"
  gobuild "argocd $version" "$dir" "$pkg" -trimpath \
    -ldflags "-s -w -X github.com/argoproj/argo-cd/$major/common.version=${version#v}" -o "$out/argocd"
  src=$(cd "$dir" && go list -m -f '{{.Dir}}' "github.com/argoproj/argo-cd/$major")
  mkdir -p "$out/crds"
  cp "$src"/manifests/crds/*-crd.yaml "$out/crds/"
  cp "$src"/manifests/base/config/argocd-cm.yaml "$out/argocd-cm.yaml"
  mkdir -p "$out/server-rbac"
  cp "$src"/manifests/cluster-rbac/server/argocd-server-cluster*.yaml "$src"/manifests/base/server/argocd-server-role*.yaml "$out/server-rbac/"
  chmod u+w "$out"/crds/* "$out/argocd-cm.yaml" "$out"/server-rbac/*
  echo "$version" > "$out/VERSION"
}
build_argocd() { build_argocd_components "$here/tools/argocd" . v2 "$ARGOCD_VERSION" "$1"; }
# build_argocd3 builds the v3 components with Argo CD's web UI embedded in the
# API server: it reads index.html only from the assets embedded at build time
# (ui.Embedded, `//go:embed dist/app` in the module's ui/), so the build takes a
# writable copy of the argo-cd module whose ui/dist/app holds argocd3-ui's
# assets and replaces the module with it (-modfile: a copy of the tools
# module's go.mod, in OUT, removed after). Where argo-ui's source is absent,
# the components are built without the UI, saying so.
build_argocd3() {
  local out=$1 dir=$here/tools/argo src
  if [ "$(ui_layout)" = noui ]; then
    log "argocd $ARGOCD3_VERSION: built without its web UI (no argo-ui source at $ARGO_UI_SRC; the browser tests skip)"
    build_argocd_components "$dir" ./cmd/argocd v3 "$ARGOCD3_VERSION" "$out"
    return
  fi
  done_or_build argocd3-ui
  src=$(cd "$dir" && go list -m -f '{{.Dir}}' github.com/argoproj/argo-cd/v3)
  cp -r "$src" "$out/.argo-cd" && chmod -R u+w "$out/.argo-cd"
  cp -r "$(argocd3_ui_dir)"/app/. "$out/.argo-cd/ui/dist/app/"
  cp "$dir/go.mod" "$out/argo.mod"; cp "$dir/go.sum" "$out/argo.sum"
  (cd "$dir" && go mod edit -modfile="$out/argo.mod" -replace="github.com/argoproj/argo-cd/v3=$out/.argo-cd")
  GOFLAGS="${GOFLAGS:-} -modfile=$out/argo.mod" build_argocd_components "$dir" ./cmd/argocd v3 "$ARGOCD3_VERSION" "$out"
  rm -rf "$out/.argo-cd" "$out/argo.mod" "$out/argo.sum"
  touch "$out/ui-embedded"
}

# build_argocd3_ui builds Argo CD's web UI (the assets its API server embeds)
# from the argo-cd module's ui/ and yarn.lock with yarn v1 from the npm
# registry: argo-ui, the lockfile's git dependency, is taken from ARGO_UI_SRC
# (a copy, as `file:../../argo-ui`: its lockfile entry is rewritten to that,
# dependencies unchanged, and every registry.yarnpkg.com URL read as the npm
# registry's, same tarballs and integrity hashes), and `yarn install
# --frozen-lockfile` refuses any resolution the lockfile does not pin.
# Measured here: install ~70 s, build ~70 s on 2 cores; 42 MB of assets in
# OUT/app (node_modules, ~1 GB, and yarn's download cache are removed after).
build_argocd3_ui() {
  local out=$1 src work=$1/.work rel lock
  src=$(cd "$here/tools/argo" && go list -m -f '{{.Dir}}' github.com/argoproj/argo-cd/v3)
  grep -q "#$ARGO_UI_COMMIT\"" "$src/ui/yarn.lock" || { log "argo-cd $ARGOCD3_VERSION's ui/yarn.lock does not pin argo-ui $ARGO_UI_COMMIT (update ARGO_UI_COMMIT and ../shared/argo-ui)"; return 1; }
  mkdir -p "$work/argo-cd"
  cp -r "$src/ui" "$work/argo-cd/ui" && chmod -R u+w "$work/argo-cd/ui"
  cp -r "$ARGO_UI_SRC" "$work/argo-ui" && chmod -R u+w "$work/argo-ui"
  rel=../../argo-ui
  log "npm install yarn@$YARN_VERSION"
  npm install --silent --no-audit --no-fund --prefix "$work/yarn" "yarn@$YARN_VERSION" >/dev/null
  (
    cd "$work/argo-cd/ui"
    sed -i "s#\"argo-ui\": \"git+https://github.com/argoproj/argo-ui.git\"#\"argo-ui\": \"file:$rel\"#" package.json
    grep -q "\"argo-ui\": \"file:$rel\"" package.json || { log "ui/package.json: no argo-ui git dependency to point at $rel"; exit 1; }
    lock=$(awk -v rel="$rel" '
      /^"argo-ui@git\+/ { print "\"argo-ui@file:" rel "\":"; inentry = 1; next }
      inentry && /^  resolved / { next }
      /^$/ { inentry = 0 }
      { print }' yarn.lock | sed 's#https://registry.yarnpkg.com/#https://registry.npmjs.org/#')
    printf '%s\n' "$lock" > yarn.lock
    export YARN_CACHE_FOLDER=$work/yarn-cache
    local start=$SECONDS
    log "yarn install --frozen-lockfile (argo-cd $ARGOCD3_VERSION ui/, ~70 s)"
    "$work/yarn/node_modules/.bin/yarn" install --frozen-lockfile --non-interactive --silent --network-timeout 120000 >"$work/install.log" 2>&1 ||
      { tail -30 "$work/install.log" >&2; exit 1; }
    log "yarn install: $((SECONDS - start))s"
    start=$SECONDS
    log "yarn build (webpack, production, ~70 s)"
    "$work/yarn/node_modules/.bin/yarn" build >"$work/build.log" 2>&1 || { tail -30 "$work/build.log" >&2; exit 1; }
    log "yarn build: $((SECONDS - start))s"
  )
  [ -f "$work/argo-cd/ui/dist/app/index.html" ] || { log "the UI build wrote no index.html"; return 1; }
  mv "$work/argo-cd/ui/dist/app" "$out/app"
  rm -rf "$work"
}

# build_kargo builds Kargo's control plane (one binary; sub-commands controller,
# kubernetes-webhooks-server, management-controller, …) and its git askpass
# program credential-helper (which Kargo's git steps run; its image puts it on
# PATH) from the Kargo tools module, and keeps Kargo's CRDs of the same tag
# beside them. That module's go.mod reaches Kargo's source by a relative path
# (the shared folder beside the repository root, never written to); where
# KARGO_SRC is another folder, the build takes a copy of go.mod and go.sum
# (-modfile, in OUT) that points there.
build_kargo() {
  local out=$1 ver=${KARGO_VERSION#v} dir=$here/tools/kargo
  local ld="-s -w -X github.com/akuity/kargo/pkg/x/version.version=$ver -X github.com/akuity/kargo/pkg/x/version.gitCommit=$KARGO_COMMIT -X github.com/akuity/kargo/pkg/x/version.gitTreeState=clean"
  local rel=$dir/../../../../shared/kargo/src src; src=$(cd "$KARGO_SRC" && pwd -P)
  (
    if ! [ -f "$rel/go.mod" ] || [ "$(cd "$rel" && pwd -P)" != "$src" ]; then
      cp "$dir/go.mod" "$out/kargo.mod"; cp "$dir/go.sum" "$out/kargo.sum"
      go mod edit -modfile="$out/kargo.mod" -replace="github.com/akuity/kargo=$src" \
        -replace="github.com/akuity/kargo/api=$src/api" \
        -replace="github.com/akuity/kargo/pkg/x/client/generated=$src/pkg/x/client/generated"
      export GOFLAGS="${GOFLAGS:-} -modfile=$out/kargo.mod"
    fi
    log "go build kargo $KARGO_VERSION (controller, webhooks server, management controller) and credential-helper"
    gobuild kargo "$dir" github.com/akuity/kargo/cmd/controlplane -trimpath -ldflags "$ld" -o "$out/kargo"
    gobuild credential-helper "$dir" github.com/akuity/kargo/cmd/credential-helper -trimpath -ldflags "-s -w" -o "$out/credential-helper"
  )
  rm -f "$out/kargo.mod" "$out/kargo.sum"
  mkdir -p "$out/crds"
  cp "$KARGO_SRC"/../crds/*.yaml "$out/crds/"
  chmod u+w "$out"/crds/*
}

build_controller_gen() {
  local out=$1
  GOBIN="$out" gobuild controller-gen "" "sigs.k8s.io/controller-tools/cmd/controller-gen@$CONTROLLER_GEN_VERSION"
}

build_protoc_tools() {
  local out=$1
  log "go install buf $BUF_VERSION, protoc-gen-go $PROTOC_GEN_GO_VERSION, protoc-gen-go-grpc $PROTOC_GEN_GO_GRPC_VERSION"
  GOBIN="$out" gobuild buf "" "github.com/bufbuild/buf/cmd/buf@$BUF_VERSION"
  GOBIN="$out" gobuild protoc-gen-go "" "google.golang.org/protobuf/cmd/protoc-gen-go@$PROTOC_GEN_GO_VERSION"
  GOBIN="$out" gobuild protoc-gen-go-grpc "" "google.golang.org/grpc/cmd/protoc-gen-go-grpc@$PROTOC_GEN_GO_GRPC_VERSION"
}

# --- sets -------------------------------------------------------------------

# set_tools NAME: the tools of a set, or NAME itself when it is a tool.
set_tools() {
  local var="SET_$1[@]"
  if declare -p "SET_$1" >/dev/null 2>&1; then printf '%s\n' "${!var}"; else echo "$1"; fi
}

# Tools whose tools modules select the same versions of their dependencies
# share a chain (TOOL -> unit), so that the Go build cache compiles those
# dependencies once rather than in both chains at the same time; the others
# are each their own unit.
# Argo CD v3 and Rollouts share the Argo module, and the Kargo module is aligned
# with it (hack/gen-tools-argo-kargo.sh), so the three are one unit. The
# cluster's components are built from kube-apiserver's module (hack/tools/kube):
# after kube-apiserver and etcd, they compile 498 packages more, of 2,639.
declare -A MODULE_OF=([argocd3]=argo-kargo [rollouts]=argo-kargo [kargo]=argo-kargo [cluster]=kube)

# deal TOOL...: deals the tools to two chains, printed as two lines: the units
# (a tool, or the tools of one unit), longest first, each to the chain with less
# estimated work; a unit's tools longest first.
deal() {
  local tool unit m w0=0 w1=0 chain0=() chain1=()
  declare -A unit_min=() unit_tools=()
  while read -r _ tool; do
    unit=${MODULE_OF[$tool]:-$tool}
    unit_min[$unit]=$(( ${unit_min[$unit]:-0} + ${COLD_MIN[$tool]:-5} ))
    unit_tools[$unit]="${unit_tools[$unit]:-} $tool"
  done < <(for tool in "$@"; do echo "${COLD_MIN[$tool]:-5} $tool"; done | sort -k1,1rn -k2)
  while read -r m unit; do
    if [ "$w0" -le "$w1" ]; then chain0+=(${unit_tools[$unit]}); w0=$((w0 + m)); else chain1+=(${unit_tools[$unit]}); w1=$((w1 + m)); fi
  done < <(for unit in "${!unit_min[@]}"; do echo "${unit_min[$unit]} $unit"; done | sort -k1,1rn -k2)
  echo "${chain0[*]}"
  echo "${chain1[*]:-}"
}

# expand SET|TOOL...: their tools, one a line, each once.
expand() { for a in "$@"; do set_tools "$a"; done | awk '!seen[$0]++'; }

# obtain_all SET|TOOL...: obtains the tools in two chains side by side (each go
# build leaves cores idle while it downloads modules and links, so two finish
# well before one after the other), dealt by deal. With the cluster, the node's
# Debian packages are installed beside the chains (apt-get waits on the
# network and the disk more than on the CPU).
obtain_all() {
  local tool todo=() chain0 chain1 pids=() rc=0 tools
  mapfile -t tools < <(expand "$@")
  for tool in "${tools[@]}"; do
    [ "$tool" != chromium ] || continue
    resolve "$tool"
    if [ "$HOW" = build ]; then todo+=("$tool"); else obtain "$tool"; fi
  done
  # The Debian packages run one apt-get after the other: they share dpkg's lock.
  local apt=()
  if [[ " ${tools[*]} " == *" cluster "* ]]; then apt+=(node_packages); fi
  if [[ " ${tools[*]} " == *" chromium "* ]]; then apt+=(chromium_packages); fi
  if [ ${#apt[@]} -gt 0 ]; then (for f in "${apt[@]}"; do "$f" || exit 1; done) & pids+=($!); fi
  if [ ${#todo[@]} -gt 0 ]; then
    log "to build: ${todo[*]} (cold estimate $(estimate "${todo[@]}"))"
    { read -r chain0; read -r chain1; } < <(deal "${todo[@]}")
    log "chains: ${chain0} | ${chain1}"
    (for tool in $chain0; do done_or_build "$tool"; done) & pids+=($!)
    if [ -n "$chain1" ]; then (for tool in $chain1; do done_or_build "$tool"; done) & pids+=($!); fi
  fi
  for pid in "${pids[@]}"; do wait "$pid" || rc=1; done
  [ $rc -eq 0 ] || { log "a substrate build failed (see above)"; exit 1; }
}

# estimate TOOL...: the wall-clock estimate of building TOOLs in two chains.
estimate() {
  local tool sum=0 max=0 m
  for tool in "$@"; do m=${COLD_MIN[$tool]:-5}; sum=$((sum + m)); [ "$m" -gt "$max" ] && max=$m; done
  local half=$(((sum + 1) / 2)); [ "$half" -lt "$max" ] && half=$max
  echo "~$half min on 2 cores, $sum CPU-minutes of builds"
}

# plan SET|TOOL...: what obtaining them would do, without doing it.
plan() {
  local tool todo=() p missing=()
  for tool in $(expand "$@"); do
    if [ "$tool" = chromium ]; then plan_chromium; continue; fi
    resolve "$tool"
    case "$HOW" in
      explicit) printf '  %-14s KUBEBUILDER_ASSETS %s (%s)\n' "$tool" "$WHERE" "$WHAT" ;;
      installed) printf '  %-14s installed: %s\n' "$tool" "$WHAT" ;;
      cached) printf '  %-14s cached: %s\n' "$tool" "$WHERE" ;;
      absent) printf '  %-14s skipped: %s\n' "$tool" "$WHAT" ;;
    build) printf '  %-14s to build (~%s min cold): %s\n' "$tool" "${COLD_MIN[$tool]:-?}" "$WHERE"; todo+=("$tool") ;;
    esac
    if [ "$tool" = cluster ]; then
      for p in "${NODE_PACKAGES[@]}"; do
        dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
      done
      if [ ${#missing[@]} -eq 0 ]; then printf '  %-14s installed: %s\n' "node packages" "${NODE_PACKAGES[*]}"
      else printf '  %-14s to install with apt-get (~1 min, beside the builds): %s\n' "node packages" "${missing[*]}"; fi
    fi
  done
  if [ ${#todo[@]} -eq 0 ]; then echo "  nothing to build"; return; fi
  echo "  building ${todo[*]}: $(estimate "${todo[@]}"), with progress every 30 s"
  local chain0 chain1
  { read -r chain0; read -r chain1; } < <(deal "${todo[@]}")
  echo "  chains: ${chain0} | ${chain1}"
}

# plan_chromium: plan's line for Chromium (Debian packages, not a build).
plan_chromium() {
  local missing bin
  mapfile -t missing < <(chromium_missing)
  if [ ${#missing[@]} -gt 0 ] && command -v apt-get >/dev/null; then
    printf '  %-14s to install with apt-get (~30 s, beside the builds): %s\n' chromium "${missing[*]}"
  elif bin=$(chromium_bin); then printf '  %-14s installed: %s\n' chromium "$bin"
  else printf '  %-14s skipped: no Chromium and no apt-get (the browser tests skip)\n' chromium; fi
}

# env_line VAR TOOL: the export of TOOL's resolved directory (built or not).
env_line() { resolve "$2"; echo "export $1=$WHERE"; }

case "${1:-all}" in
  # SET [SET|TOOL...]: the set, and these sets or tools besides.
  run|demo|all) obtain_all "$@" ;;
  cluster) obtain_all cluster ;;
  node-packages) node_packages ;;
  chromium) chromium_packages ;;
  # cluster-check: succeeds when this machine can run the cluster; else says why not.
  cluster-check) cluster_check ;;
  plan) shift; plan "$@" ;;
  env)
    # Where the binaries are (built or not); tests check that they exist.
    env_line KUBEBUILDER_ASSETS kube
    env_line STACKFLOW_PULUMI_ROOT pulumi
    env_line STACKFLOW_PULUMI_LANGUAGE_YAML pulumi-yaml
    env_line STACKFLOW_ROLLOUTS rollouts
    env_line STACKFLOW_ARGOCD argocd
    env_line STACKFLOW_ARGOCD3 argocd3
    env_line STACKFLOW_KARGO kargo
    env_line STACKFLOW_CLUSTER cluster
    env_line STACKFLOW_NETPOL netpol
    # Chromium only where it is installed (a package, not a build).
    if bin=$(chromium_bin); then echo "export STACKFLOW_CHROMIUM=$bin"; fi
    ;;
  dir) tool_dir "$2" ;;
  # cached TOOL: succeeds when TOOL's build is complete in the cache (builds nothing).
  cached) is_cached "$2" ;;
  tools) printf '%s\n' kube pulumi pulumi-yaml rollouts argocd argocd3 argocd3-ui kargo controller-gen protoc-tools cluster netpol chromium ;;
  kube|pulumi|pulumi-yaml|rollouts|argocd|argocd3|argocd3-ui|kargo|controller-gen|protoc-tools|netpol)
    # A tool asked for by name and absent here is a failure, not a skip.
    for tool in "$@"; do obtain "$tool"; [ "$HOW" != absent ] || exit 1; done ;;
  *) echo "usage: $0 [run|demo|all|TOOL...|plan SET|TOOL...|env|dir TOOL|cached TOOL|tools|cluster|node-packages|chromium]" >&2; exit 2 ;;
esac
