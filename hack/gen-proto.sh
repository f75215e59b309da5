#!/usr/bin/env bash
# gen-proto.sh regenerates the agent's protobuf code (operator/proto/agent/v1)
# with buf, protoc-gen-go and protoc-gen-go-grpc, but only when it must
# (hack/generated.sh): the digest of its inputs (the .proto files,
# buf.gen.yaml, this script and the generators' versions) and of its outputs
# (the generated .pb.go files) is recorded in generated.sha256 beside them.
# When both match, the generated code is what these inputs give, so neither
# the tools (about 5 minutes of a cold build) nor buf run.
#   hack/gen-proto.sh          regenerate when needed
#   hack/gen-proto.sh --force  regenerate always
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/generated.sh"
rel=operator/proto/agent/v1
dir=$GEN_ROOT/$rel

# The generator versions are part of the input: protoc_tools_dir names them.
tools=$("$here/substrate.sh" dir protoc-tools)
GEN_PARAMS=("tools=$(basename "$tools")")
GEN_INPUTS=(hack/gen-proto.sh "$rel/buf.gen.yaml")
GEN_OUTPUTS=()
for f in "$dir"/*.proto; do GEN_INPUTS+=("$rel/${f##*/}"); done
for f in "$dir"/*.pb.go; do GEN_OUTPUTS+=("$rel/${f##*/}"); done

[ "${1:-}" = --force ] && GENERATE_FORCE=1
generated_fresh "$rel/generated.sha256" && exit 0
"$here/substrate.sh" protoc-tools
(cd "$dir" && PATH="$tools:$PATH" buf generate --template buf.gen.yaml .)
generated_record "$rel/generated.sha256"
