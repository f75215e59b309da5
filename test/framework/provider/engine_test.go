package provider_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optrefresh"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

func writeProgram(t *testing.T, dir, body string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), []byte("name: engine\nruntime: yaml\n"+body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestThroughTheEngine runs the provider under the real pulumi engine: replace
// on rename, drift found by refresh after an out-of-band edit, and a failing
// create reported with the provider's error.
func TestThroughTheEngine(t *testing.T) {
	pe := substrate.NewPulumi(t)
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	record := func(name, extra string) string {
		return "resources:\n  rec:\n    type: stackflowtest:index:Record\n    properties:\n      name: " + name + "\n      content: v1\n" + extra
	}
	writeProgram(t, dir, record("first", ""))
	stack, err := auto.UpsertStackLocalSource(ctx, "engine", dir, auto.Pulumi(pe.Command(t)), auto.EnvVars(pe.EnvVars()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := stack.Up(ctx); err != nil {
		t.Fatalf("up: %v", err)
	}

	// Rename: the engine replaces the record.
	writeProgram(t, dir, record("second", ""))
	res, err := stack.Up(ctx)
	if err != nil {
		t.Fatalf("rename up: %v", err)
	}
	if got := (*res.Summary.ResourceChanges)["replace"]; got != 1 {
		t.Fatalf("rename changes = %v, want 1 replace", *res.Summary.ResourceChanges)
	}
	if _, ok := pe.Record(t, "first"); ok {
		t.Fatal("replaced record 'first' still exists")
	}
	if c, ok := pe.Record(t, "second"); !ok || c != "v1" {
		t.Fatalf("record 'second' = %q, %v", c, ok)
	}

	// Out-of-band edit: refresh finds the drift.
	if err := os.WriteFile(filepath.Join(pe.RecordsDir, "second"), []byte("tampered"), 0o644); err != nil {
		t.Fatal(err)
	}
	pre, err := stack.PreviewRefresh(ctx)
	if err != nil {
		t.Fatalf("preview refresh: %v", err)
	}
	if pre.ChangeSummary["update"] != 1 {
		t.Fatalf("preview refresh changes = %v, want 1 update (the drift)", pre.ChangeSummary)
	}
	if _, err := stack.Refresh(ctx, optrefresh.ExpectNoChanges()); err == nil {
		t.Fatal("refresh with expectNoChanges succeeded despite drift")
	}

	// A failing create surfaces the provider's message.
	writeProgram(t, dir, record("second", "  broken:\n    type: stackflowtest:index:Record\n    properties:\n      content: x\n      failOn: create\n"))
	_, err = stack.Up(ctx)
	if err == nil || !strings.Contains(err.Error(), "failOn=create: create refused") {
		t.Fatalf("up with failing record: err = %v", err)
	}
	if _, ok := pe.Record(t, "broken"); ok {
		t.Fatal("failed record was written")
	}
}
