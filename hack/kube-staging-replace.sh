#!/usr/bin/env bash
# kube-staging-replace.sh MODULE_DIR
#
# k8s.io/kubernetes requires its staging modules (k8s.io/api, k8s.io/apiserver, …)
# at the placeholder version v0.0.0 and points them at ./staging in its own go.mod.
# Any module that depends on k8s.io/kubernetes must therefore map each of them to the
# published v0.X.Y release. This script reads kubernetes' own go.mod at KUBE_VERSION
# and writes exactly that replace list into MODULE_DIR/go.mod with `go mod edit`, so
# the list is generated, never typed by hand. It is idempotent.
set -euo pipefail
KUBE_VERSION=${KUBE_VERSION:-v1.35.4}
dir=${1:?usage: $0 MODULE_DIR}
staging=v0.${KUBE_VERSION#v1.}

modfile=$(cd "$dir" && GOFLAGS=-mod=mod go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/.*"GoMod": "\(.*\)",/\1/p')
[ -f "$modfile" ] || { echo "kube-staging-replace: cannot download k8s.io/kubernetes@${KUBE_VERSION} go.mod" >&2; exit 1; }

args=()
while read -r m; do
  args+=("-replace=$m=$m@$staging")
done < <(awk '/^require \(/{r=1; next} r && /^\)/{r=0} r && $2=="v0.0.0" {print $1}' "$modfile" | sort -u)
[ ${#args[@]} -gt 0 ] || { echo "kube-staging-replace: no v0.0.0 staging modules found in $modfile" >&2; exit 1; }
(cd "$dir" && go mod edit "${args[@]}")
echo "kube-staging-replace: $dir/go.mod maps ${#args[@]} staging modules of k8s.io/kubernetes ${KUBE_VERSION} to ${staging}" >&2
