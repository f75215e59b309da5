#!/usr/bin/env bash
# gen-tools-pulumi.sh aligns hack/tools/pulumi (the module the pulumi CLI is
# built from; its go.mod, which pins PULUMI_VERSION's pkg/v3, is written by
# hand) with the main module: every module they share is raised to the main
# module's version where that is newer, so that the Go build cache compiles
# their common packages (gRPC, protobuf, OpenTelemetry, the Pulumi SDK, …)
# once for both. (The main module was raised to the pulumi CLI's versions the
# same way, by `hack/align-modules.sh . hack/tools/pulumi`, when the CLI was
# last upgraded.) Skipped when nothing it reads or writes changed
# (hack/generated.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/generated.sh"
GEN_PARAMS=()
GEN_INPUTS=(hack/gen-tools-pulumi.sh hack/align-modules.sh go.mod go.sum hack/tools/pulumi/tools.go)
GEN_OUTPUTS=(hack/tools/pulumi/go.mod hack/tools/pulumi/go.sum)
generated_fresh hack/tools/pulumi/generated.sha256 && exit 0
(cd "$here/tools/pulumi" && go mod tidy)
"$here/align-modules.sh" "$here/tools/pulumi" "$here/.."
generated_record hack/tools/pulumi/generated.sha256
