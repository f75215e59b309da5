package devenv

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestRunSampleBecomesReady runs what `make run` runs, until the sample Stack
// is Ready: control plane, operator, a real agent and pulumi, the sample
// repository.
func TestRunSampleBecomesReady(t *testing.T) {
	substrate.MustLocate(t)
	var out bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	if err := Run(ctx, Options{Dir: t.TempDir(), Sample: true, UntilReady: 3 * time.Minute, Out: &out}); err != nil {
		t.Fatalf("run: %v\n%s", err, out.String())
	}
	for _, want := range []string{"kubectl: export KUBECONFIG=", "sample Stack Ready at ", `holds "Hello from Stackflow"`} {
		if !strings.Contains(out.String(), want) {
			t.Fatalf("output lacks %q:\n%s", want, out.String())
		}
	}
}
