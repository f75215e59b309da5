# generated.sh is sourced by the generators in hack/ whose work is slow and
# whose result is a pure function of files in the repository (and the
# shared folder beside it): a tools module's go.mod regenerated with `go mod
# tidy` (which downloads every module of its graph), the protobuf code buf
# writes. Each records, beside what it writes, the digest of its parameters,
# its inputs and its outputs (generated.sha256). When the recorded digest is
# the current one, the outputs are what these inputs give and the generator
# does nothing; when it differs (an input edited, a version raised, an output
# edited by hand), the generator runs and records the new digest, so that
# `make verify-generate` sees every change in git as before.
#
# A generator sets three arrays, paths relative to the repository root (so
# that the digest is the same in every checkout):
#   GEN_PARAMS   strings that select what is generated (e.g. KUBE_VERSION=v1.35.4)
#   GEN_INPUTS   files read (the generator itself, the scripts it calls, the
#                go.mod files it derives from)
#   GEN_OUTPUTS  files written
# then:
#   generated_fresh RECORD || { generate …; generated_record RECORD; }
# GENERATE_FORCE=1 in the environment regenerates always.

GEN_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# generated_digest prints the digest of GEN_PARAMS, GEN_INPUTS and GEN_OUTPUTS.
generated_digest() {
  (
    cd "$GEN_ROOT"
    printf 'param %s\n' "${GEN_PARAMS[@]}"
    echo inputs
    sha256sum -- "${GEN_INPUTS[@]}"
    echo outputs
    sha256sum -- "${GEN_OUTPUTS[@]}" 2>/dev/null || echo "an output is missing"
  ) | sha256sum | cut -d' ' -f1
}

# generated_fresh RECORD succeeds when RECORD (relative to the repository
# root) holds the current digest, and says so on stderr.
generated_fresh() {
  local record=$GEN_ROOT/$1
  [ "${GENERATE_FORCE:-}" != 1 ] && [ -f "$record" ] && [ "$(cat "$record")" = "$(generated_digest)" ] || return 1
  echo "[generate] $1: inputs and outputs match; not regenerated (GENERATE_FORCE=1 regenerates)" >&2
}

# generated_record RECORD writes the current digest to RECORD.
generated_record() {
  generated_digest > "$GEN_ROOT/$1"
  echo "[generate] $1: regenerated; digest recorded" >&2
}
