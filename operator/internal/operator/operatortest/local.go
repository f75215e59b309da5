package operatortest

import (
	"testing"

	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/local"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// LocalOptions are an operator's options for one test on the local
// workspace runtime: agents (the binary agent) run as processes of this
// machine under a fresh root, with pe's Pulumi environment. The agents are
// stopped at the test's end, after any operator started later (cleanups
// run last-registered first; local agents outlive their operator by
// design).
func LocalOptions(t testing.TB, pe *substrate.Pulumi, agent string) operator.Options {
	t.Helper()
	root := t.TempDir()
	t.Cleanup(func() { local.StopAll(root) })
	return operator.Options{
		Runtime: operator.RuntimeLocal, LocalRoot: root, AgentBinary: agent,
		PulumiRoot: pe.Paths.PulumiRoot, AgentEnv: pe.EnvVars(), WorkspaceWorkers: 2, UpdateWorkers: 2,
		ArtifactDir: t.TempDir(),
	}
}
