package preview

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/stackflow-io/stackflow/github-action/result"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// program writes a record named and filled by configuration; "settings" is
// structured configuration shown as an output.
const program = `name: previewtest
runtime: yaml
config:
  recordName:
    type: string
  content:
    type: string
  settings:
    default: {}
resources:
  rec:
    type: stackflowtest:index:Record
    properties:
      name: ${recordName}
      content: ${content}
outputs:
  settings: ${settings}
`

func writeProgram(t testing.TB, src string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Pulumi.yaml"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// deploy brings a stack up with plain string configuration.
func deploy(t testing.TB, pe *substrate.Pulumi, dir, stack string, cfg map[string]string) {
	t.Helper()
	ctx := context.Background()
	s, err := auto.UpsertStackLocalSource(ctx, stack, dir, auto.Pulumi(pe.Command(t)), auto.EnvVars(pe.EnvVars()))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range cfg {
		if err := s.SetConfig(ctx, k, auto.ConfigValue{Value: v}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Up(ctx); err != nil {
		t.Fatalf("up %s: %v", stack, err)
	}
}

// TestRunProgramMode previews three stacks of one program: an existing one
// whose record's content changes, one that does not exist yet, and one
// whose preview fails on a secret value that must not leak.
func TestRunProgramMode(t *testing.T) {
	pe := substrate.NewPulumi(t)
	dir := writeProgram(t, program)
	deploy(t, pe, dir, "dev", map[string]string{"recordName": "dev-rec", "content": "one"})

	const secret = "not a valid name s3cr3t"
	reqs := []Request{
		{WorkDir: dir, Stack: "dev", Source: "program in infra/", Config: map[string]ConfigValue{
			"recordName": {Value: "dev-rec"}, "content": {Value: "two"},
			"settings": {Value: `{"replicas":3,"zones":["a","b"]}`, JSON: true},
		}},
		{WorkDir: dir, Stack: "organization/previewtest/new", Notes: []string{"given note"}, Config: map[string]ConfigValue{
			"recordName": {Value: "new-rec"}, "content": {Value: `"quoted"`, JSON: true},
		}},
		{WorkDir: dir, Stack: "bad", Config: map[string]ConfigValue{
			"recordName": {Value: secret, Secret: true}, "content": {Value: "x"},
		}},
	}
	var mu sync.Mutex
	var masked []string
	o := Options{PulumiCommand: pe.Command(t), Env: pe.EnvVars(), Mask: func(s string) {
		mu.Lock()
		defer mu.Unlock()
		masked = append(masked, s)
	}}
	rs := o.Run(context.Background(), reqs, 3)
	if len(rs) != 3 {
		t.Fatalf("%d results", len(rs))
	}

	dev := rs[0]
	if dev.Status != result.Succeeded || dev.Key != "previewtest/dev" || dev.Project != "previewtest" || dev.Source != "program in infra/" {
		t.Fatalf("dev = %+v", dev)
	}
	if want := (result.Changes{Update: 1, Same: 1}); dev.Changes != want {
		t.Errorf("dev changes = %+v, want %+v", dev.Changes, want)
	}
	if len(dev.Resources) != 1 || dev.Resources[0].Op != "update" || dev.Resources[0].Type != "stackflowtest:index:Record" || dev.Resources[0].Name != "rec" ||
		!strings.HasSuffix(dev.Resources[0].URN, "::stackflowtest:index:Record::rec") {
		t.Errorf("dev resources = %+v", dev.Resources)
	}
	if !strings.Contains(dev.Output, "replicas") || len(dev.Notes) != 0 {
		t.Errorf("dev output lacks the structured config output, or notes %q:\n%s", dev.Notes, dev.Output)
	}

	nw := rs[1]
	if nw.Status != result.Succeeded || nw.Key != "organization/previewtest/new" || nw.Stack != "organization/previewtest/new" {
		t.Fatalf("new = %+v", nw)
	}
	if want := (result.Changes{Create: 2}); nw.Changes != want {
		t.Errorf("new changes = %+v, want %+v", nw.Changes, want)
	}
	if len(nw.Resources) != 2 || nw.Resources[0].Type != "pulumi:pulumi:Stack" || nw.Resources[1].Name != "rec" || nw.Resources[1].Op != "create" {
		t.Errorf("new resources = %+v", nw.Resources)
	}
	if len(nw.Notes) != 2 || nw.Notes[0] != "given note" || !strings.Contains(nw.Notes[1], "does not exist in the backend yet") {
		t.Errorf("new notes = %q", nw.Notes)
	}
	ws, err := auto.NewLocalWorkspace(context.Background(), auto.WorkDir(dir), auto.Pulumi(pe.Command(t)), auto.EnvVars(pe.EnvVars()))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auto.SelectStack(context.Background(), "new", ws); !auto.IsSelectStack404Error(err) {
		t.Errorf("the stack created for the preview is still there (select: %v)", err)
	}

	bad := rs[2]
	if bad.Status != result.Failed || bad.Key != "previewtest/bad" {
		t.Fatalf("bad = %+v", bad)
	}
	if !strings.Contains(bad.Error, "must match") || !strings.Contains(bad.Error, SecretMask) {
		t.Errorf("bad error = %q", bad.Error)
	}
	for _, s := range []string{bad.Error, bad.Output, dev.Output, nw.Output} {
		if strings.Contains(s, secret) {
			t.Errorf("secret leaked: %q", s)
		}
	}
	if len(masked) != 1 || masked[0] != secret {
		t.Errorf("Mask got %q", masked)
	}
}

// TestRunSkipAndErr: requests that run nothing, and one that cannot run
// without a pulumi CLI on PATH.
func TestRunSkipAndErr(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	rs := Run(context.Background(), []Request{
		{Key: "ns/a", Project: "p", Stack: "s", Skip: true, Notes: []string{"removed"}},
		{Key: "ns/b", Stack: "s", Err: errString("clone failed: token hunter2"), Masks: []string{"hunter2"}},
		{Key: "ns/c", Stack: "s", WorkDir: t.TempDir()},
	}, 2)
	if rs[2].Status != result.Failed || !strings.HasPrefix(rs[2].Error, "pulumi CLI: ") {
		t.Errorf("without a CLI = %+v", rs[2])
	}
	if rs[0].Status != result.Skipped || rs[0].Notes[0] != "removed" || rs[0].Key != "ns/a" {
		t.Errorf("skip = %+v", rs[0])
	}
	if rs[1].Status != result.Failed || rs[1].Error != "clone failed: token [secret]" {
		t.Errorf("err = %+v", rs[1])
	}
}

type errString string

func (e errString) Error() string { return string(e) }

// TestSecrets: the values masked are the secret config values (a JSON one
// also as its string) and each line of a multi-line one, longest first;
// values shorter than redact.MinLength ("abc") are not masked, as everywhere
// in Stackflow.
func TestSecrets(t *testing.T) {
	r := Request{Config: map[string]ConfigValue{
		"a": {Value: "abc", Secret: true},
		"b": {Value: `"abcdef"`, Secret: true, JSON: true},
		"c": {Value: "plain"},
		"d": {Value: "line1\nline2", Secret: true},
	}}
	got := strings.Join(r.secrets().List(), ",")
	if want := `line1\nline2,"abcdef",abcdef,line1,line2`; got != strings.ReplaceAll(want, `\n`, "\n") {
		t.Errorf("secrets = %q", got)
	}
	if m := r.secrets().Text(`x "abcdef" abc plain`); m != "x [secret] abc plain" {
		t.Errorf("mask = %q", m)
	}
}

// TestStackSecretsMasked: a secret of the stack's own settings file (as
// program mode finds it, "secure:" in Pulumi.<stack>.yaml) is masked before
// the preview runs and never appears in the result, even when the provider
// repeats it in an error.
func TestStackSecretsMasked(t *testing.T) {
	pe := substrate.NewPulumi(t)
	dir := writeProgram(t, program)
	ctx := context.Background()
	const secret = "leaky name s3cr3t"
	s, err := auto.UpsertStackLocalSource(ctx, "sec", dir, auto.Pulumi(pe.Command(t)), auto.EnvVars(pe.EnvVars()))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetConfig(ctx, "recordName", auto.ConfigValue{Value: secret, Secret: true}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetConfig(ctx, "content", auto.ConfigValue{Value: "x"}); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "Pulumi.sec.yaml")); err != nil || strings.Contains(string(b), secret) || !strings.Contains(string(b), "secure:") {
		t.Fatalf("settings file: %v\n%s", err, b)
	}
	var masked []string
	rs := Options{PulumiCommand: pe.Command(t), Env: pe.EnvVars(), Mask: func(s string) { masked = append(masked, s) }}.
		Run(ctx, []Request{{WorkDir: dir, Stack: "sec"}}, 1)
	r := rs[0]
	if r.Status != result.Failed || !strings.Contains(r.Error, "must match") || !strings.Contains(r.Error, SecretMask) {
		t.Fatalf("result %+v", r)
	}
	for _, out := range []string{r.Error, r.Output} {
		if strings.Contains(out, secret) {
			t.Errorf("the secret leaked: %q", out)
		}
	}
	if strings.Join(masked, "|") != secret {
		t.Errorf("Mask got %q, want the stack's secret", masked)
	}
}

// TestPreviewTimeout: a preview whose program never finishes (it reads a
// FIFO no one writes to) fails within the preview timeout, saying so, while
// the other stack's preview succeeds.
func TestPreviewTimeout(t *testing.T) {
	pe := substrate.NewPulumi(t)
	fifo := filepath.Join(t.TempDir(), "never")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A reader still blocked (a program that outlived the timeout)
		// is let go, so the test leaves no process behind.
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	hung := writeProgram(t, "name: hung\nruntime: yaml\nresources:\n  rec:\n    type: stackflowtest:index:Record\n    properties:\n      name: hung\n      content:\n        fn::readFile: "+fifo+"\n")
	ok := writeProgram(t, program)
	const timeout = 30 * time.Second
	start := time.Now()
	rs := Options{PulumiCommand: pe.Command(t), Env: pe.EnvVars(), Timeout: timeout}.Run(context.Background(), []Request{
		{WorkDir: hung, Stack: "dev"},
		{WorkDir: ok, Stack: "dev", Config: map[string]ConfigValue{"recordName": {Value: "r"}, "content": {Value: "c"}}},
	}, 2)
	took := time.Since(start)
	if rs[0].Status != result.Failed || rs[0].Error != "the preview did not finish within 30s (the preview-timeout input): stopped" {
		t.Errorf("hung: %s %q", rs[0].Status, rs[0].Error)
	}
	if rs[1].Status != result.Succeeded {
		t.Errorf("ok: %s %q", rs[1].Status, rs[1].Error)
	}
	// The CLI gets 10 s to stop after its interrupt, the stack made for the
	// preview is removed, the event log is drained: well under a minute.
	if took > timeout+50*time.Second {
		t.Errorf("the previews took %s", took)
	}
	t.Logf("the previews took %s", took)
}
