#!/usr/bin/env bash
# gen-proto.sh regenerates the agent's protobuf code (operator/proto/agent/v1)
# with buf, protoc-gen-go and protoc-gen-go-grpc, but only when it must: the
# digest of its inputs (the .proto files, buf.gen.yaml and the generators'
# versions) and of its outputs (the generated .pb.go files) is recorded in
# generated.sha256 beside them. When both match, the generated code is what these
# inputs give, so neither the tools (about 5 minutes of a cold build) nor buf run.
# When either differs (a .proto edited, a generator upgraded, a generated file
# edited by hand), it builds the tools, generates, and records the new digest,
# so `make verify-generate` sees the change in git as before.
#   hack/gen-proto.sh          regenerate when needed
#   hack/gen-proto.sh --force  regenerate always
#   hack/gen-proto.sh --digest print the current digest
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=$here/../operator/proto/agent/v1
record=$dir/generated.sha256

# The generator versions are part of the input: protoc_tools_dir names them.
tools=$("$here/substrate.sh" dir protoc-tools)

digest() {
  (cd "$dir" && {
    echo "tools $(basename "$tools")"
    sha256sum -- *.proto buf.gen.yaml
    echo "outputs"
    sha256sum -- *.pb.go
  }) | sha256sum | cut -d' ' -f1
}

[ "${1:-}" = --digest ] && { digest; exit 0; }
if [ "${1:-}" != --force ] && [ -f "$record" ] && [ "$(cat "$record")" = "$(digest)" ]; then
  echo "[generate] protobuf: inputs and outputs match generated.sha256; buf not run" >&2
  exit 0
fi
"$here/substrate.sh" protoc-tools
(cd "$dir" && PATH="$tools:$PATH" buf generate --template buf.gen.yaml .)
digest > "$record"
echo "[generate] protobuf regenerated; digest recorded in operator/proto/agent/v1/generated.sha256" >&2
