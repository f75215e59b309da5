package exports

import (
	"os"
	"testing"

	"github.com/stackflow-io/stackflow/operator/internal/operator"
	"github.com/stackflow-io/stackflow/operator/internal/operator/operatortest"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// suite is the control plane and the agent the tests share.
var suite operatortest.Suite

func TestMain(m *testing.M) { os.Exit(operatortest.RunSuite(m, &suite)) }

// env is one test's world: a namespace, a Pulumi environment, local-runtime
// options.
type env struct {
	ns   string
	pe   *substrate.Pulumi
	opts operator.Options
}

func newEnv(t testing.TB) *env {
	t.Helper()
	pe := substrate.NewPulumi(t)
	return &env{ns: suite.CP.Namespace(t), pe: pe, opts: operatortest.LocalOptions(t, pe, suite.Agent)}
}
