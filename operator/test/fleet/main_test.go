package fleet

import (
	"os"
	"testing"

	"github.com/stackflow-io/stackflow/operator/internal/operator/operatortest"
)

// suite is the control plane and the agent the tests share.
var suite operatortest.Suite

func TestMain(m *testing.M) { os.Exit(operatortest.RunSuite(m, &suite)) }

// agentPath is the agent built for this run.
func agentPath() string { return suite.Agent }
