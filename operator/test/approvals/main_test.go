package approvals

import (
	"os"
	"testing"

	"github.com/stackflow-io/stackflow/operator/internal/operator/operatortest"
)

// suite is the control plane and the agent the tests share.
var suite operatortest.Suite

func TestMain(m *testing.M) { os.Exit(operatortest.RunSuite(m, &suite)) }

// newEnv is one test's namespace, Pulumi environment and operator options.
func newEnv(t testing.TB) *operatortest.Env { return suite.NewEnv(t) }
