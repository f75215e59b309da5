#!/usr/bin/env bash
# align-modules.sh DIR REF [KEEP...]
#
# Raises every module that the go.mod in DIR requires to the version the module
# at REF selects, where REF's is newer, except the KEEP modules (those DIR
# cannot build at REF's version), then tidies DIR; repeated until nothing is
# raised, as a raise can raise others. It prints how many it raised in all.
# TIDY_FLAGS are passed to `go mod tidy` (e.g. -e for the Kargo module: see
# hack/gen-tools-argo-kargo.sh).
#
# Why: two modules that select the same version of a module, and of everything
# under it, share its compiled packages in the Go build cache. The tools
# modules of hack/tools build large programs (kube-apiserver, Argo CD, Kargo)
# whose dependencies overlap the main module's or each other's (client-go, the
# Kubernetes APIs, gRPC, protobuf, OpenTelemetry, golang.org/x/…); at their
# own versions each compiled them again (DEVELOPMENT.md, "Cold and warm
# times"). REF itself is never changed: a module newer in DIR stays newer.
set -euo pipefail
dir=${1:?usage: $0 DIR REF [KEEP...]} ref=${2:?usage: $0 DIR REF [KEEP...]}
shift 2
declare -A keep=()
for m in "$@"; do keep[$m]=1; done

# versions DIR [MODULE...]: each module's selected version (a replace's, where
# one applies) in the module at DIR; all of its build list by default.
versions() { local d=$1; shift; (cd "$d" && go list -m -e -f '{{.Path}} {{with .Replace}}{{.Version}}{{else}}{{.Version}}{{end}}' "${@:-all}"); }
# required DIR: the modules DIR's go.mod requires, which after tidy are those
# that provide it packages (the rest of the build list, raised, would be tidied
# away again).
required() { (cd "$1" && go mod edit -print | awk '/^require \(/{r=1; next} r && /^\)/{r=0; next} r {print $1} /^require [^(]/{print $2}' | sort -u); }
# newer A B: A is a newer version than B: sort -V orders releases and
# pseudo-versions as semver does, except that it puts a pre-release after its
# release (v1.2.3 < v1.2.3-rc.1), which the last test rules out.
newer() { [ "$1" != "$2" ] && [ "$(printf '%s\n%s\n' "$1" "$2" | sort -V | tail -1)" = "$1" ] && ! [[ "$1" == "${2}-"* ]]; }

ref_versions=$(versions "$ref" | sort)
total=0
for round in 1 2 3 4 5; do
  raises=()
  while read -r mod dir_v ref_v; do
    [ -n "$ref_v" ] && [ -z "${keep[$mod]:-}" ] && newer "$ref_v" "$dir_v" && raises+=("-require=$mod@$ref_v")
  done < <(join <(versions "$dir" $(required "$dir") | sort) <(echo "$ref_versions") 2>/dev/null)
  [ ${#raises[@]} -gt 0 ] || break
  total=$((total + ${#raises[@]}))
  (cd "$dir" && go mod edit "${raises[@]}" && go mod tidy ${TIDY_FLAGS:-})
done
echo "align-modules: raised $total modules of $dir to $ref's versions${*:+ (kept: $*)}" >&2
