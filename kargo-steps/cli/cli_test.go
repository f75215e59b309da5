package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stackflow-io/stackflow/analysis/verification"
)

const sha = "0123456789abcdef0123456789abcdef01234567"

func runCLI(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := Main(context.Background(), args, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func write(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const tracking = `apiVersion: pulumi.com/v1
kind: Stack
metadata:
  name: web
  namespace: dev
spec:
  stack: web
  projectRepo: https://example.com/infra.git
  branch: main # followed until pinned
`

func TestSetCommitCommand(t *testing.T) {
	dir := t.TempDir()
	file := write(t, dir, "stacks/web.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n---\n"+tracking)
	out := filepath.Join(t.TempDir(), "out.json")
	t.Setenv(OutputEnv, out)
	code, stdout, stderr := runCLI(t, "set-commit", "--dir", dir, "--stack", "web", "--commit", strings.ToUpper(sha))
	if code != ExitOK || !strings.Contains(stdout, "spec.branch removed") {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	b, _ := os.ReadFile(file)
	if !strings.Contains(string(b), "commit: "+sha) || strings.Contains(string(b), "branch:") || !strings.HasPrefix(string(b), "apiVersion: v1\nkind: ConfigMap") {
		t.Fatalf("file:\n%s", b)
	}
	var o SetCommitOutput
	if raw, err := os.ReadFile(out); err != nil || json.Unmarshal(raw, &o) != nil || !o.Changed || o.File != "stacks/web.yaml" || o.Document != 2 || !o.BranchRemoved {
		t.Fatalf("output %s (%v)", raw, err)
	}
	// Again: nothing to change, exit 0, file untouched.
	if code, stdout, _ := runCLI(t, "set-commit", "--dir", dir, "--stack", "web", "--commit", sha); code != ExitOK || !strings.Contains(stdout, "nothing changed") {
		t.Fatalf("second run: %d %s", code, stdout)
	}
	for _, tt := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"--dir", dir, "--stack", "web", "--commit", "abc1234"}, ExitFailed, "40"},
		{[]string{"--dir", dir, "--stack", "api", "--commit", sha}, ExitFailed, "web"},
		{[]string{"--dir", dir, "--commit", sha}, ExitUsage, "required"},
		{[]string{"--dir", dir, "--stack", "web", "--commit", sha, "extra"}, ExitUsage, "unexpected"},
	} {
		code, stdout, stderr := runCLI(t, append([]string{"set-commit"}, tt.args...)...)
		if code != tt.code || !strings.Contains(stdout+stderr, tt.msg) {
			t.Errorf("%v: exit %d: %s%s", tt.args, code, stdout, stderr)
		}
	}
}

// Flags come from STACKFLOW_KARGO_* variables; the command line wins.
func TestFlagsFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	file := write(t, dir, "web.yaml", tracking)
	t.Setenv(EnvName("dir"), dir)
	t.Setenv(EnvName("stack"), "nope")
	t.Setenv(EnvName("commit"), sha)
	if code, stdout, stderr := runCLI(t, "set-commit", "--stack", "web"); code != ExitOK {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	if b, _ := os.ReadFile(file); !strings.Contains(string(b), sha) {
		t.Fatalf("file:\n%s", b)
	}
	t.Setenv(EnvName("timeout"), "soon")
	if code, _, stderr := runCLI(t, "wait"); code != ExitUsage || !strings.Contains(stderr, EnvName("timeout")) {
		t.Fatalf("a bad environment value: exit %d: %s", code, stderr)
	}
}

func TestLintCommand(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "dev.yaml", strings.Replace(tracking, "branch: main # followed until pinned", "commit: "+sha, 1))
	if code, stdout, stderr := runCLI(t, "lint", "--dir", dir); code != ExitOK || !strings.Contains(stdout, "ok    Stack dev/web in dev.yaml (document 1): stackFile=dev.yaml stackNamespace=dev stackName=web\n") {
		t.Fatalf("exit %d: %s%s", code, stdout, stderr)
	}
	write(t, dir, "prod.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n---\n"+strings.Replace(tracking, "namespace: dev", "namespace: prod", 1))
	code, stdout, _ := runCLI(t, "lint", "--dir", dir)
	if code != ExitFailed || !strings.Contains(stdout, "FAIL  Stack prod/web in prod.yaml (document 2)") || !strings.Contains(stdout, "1 of 2 Stacks") {
		t.Fatalf("exit %d: %s", code, stdout)
	}
	// Without a namespace, the tasks cannot check the file is the Stage's
	// Stack: they refuse it, and lint says so.
	noNS := t.TempDir()
	write(t, noNS, "web.yaml", strings.Replace(strings.Replace(tracking, "branch: main # followed until pinned", "commit: "+sha, 1), "  namespace: dev\n", "", 1))
	if code, stdout, _ := runCLI(t, "lint", "--dir", noNS); code != ExitFailed || !strings.Contains(stdout, "FAIL  Stack web in web.yaml (document 1): metadata.namespace is missing") {
		t.Fatalf("no namespace: exit %d: %s", code, stdout)
	}
	if code, _, stderr := runCLI(t, "lint", "--dir", t.TempDir()); code != ExitFailed || !strings.Contains(stderr, "no Stack manifest") {
		t.Fatalf("empty dir: exit %d %s", code, stderr)
	}
}

func TestUsage(t *testing.T) {
	if code, _, stderr := runCLI(t); code != ExitUsage || !strings.Contains(stderr, "set-commit") {
		t.Fatalf("no args: %d %s", code, stderr)
	}
	if code, _, _ := runCLI(t, "frobnicate"); code != ExitUsage {
		t.Fatalf("unknown command: %d", code)
	}
	if code, _, stderr := runCLI(t, "wait", "-h"); code != ExitOK || !strings.Contains(stderr, "--token-file") && !strings.Contains(stderr, "-token-file") {
		t.Fatalf("wait -h: %d %s", code, stderr)
	}
	if code, stdout, _ := runCLI(t, "version"); code != ExitOK || !strings.HasPrefix(stdout, "stackflow-kargo ") {
		t.Fatalf("version: %d %s", code, stdout)
	}
}

// TestTokenSource: the wait's token comes from --token-file, else
// $STACKFLOW_KARGO_TOKEN, else the projected token for stackflow-analysis;
// never from the pod's own ServiceAccount token, a credential for the API
// server that whatever --url names would receive.
func TestTokenSource(t *testing.T) {
	for _, tt := range []struct {
		name, file, env string
		mounted         []string
		wantFile, want  string
	}{
		{name: "flag", file: "/tmp/t", env: "env-token", mounted: []string{DefaultTokenFile}, wantFile: "/tmp/t"},
		{name: "environment", env: " env-token\n", mounted: []string{DefaultTokenFile}, want: "env-token"},
		{name: "projected token", mounted: []string{DefaultTokenFile, PodTokenFile}, wantFile: DefaultTokenFile},
		{name: "only the pod's own token", mounted: []string{PodTokenFile}},
		{name: "nothing"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			exists := func(p string) bool { return slices.Contains(tt.mounted, p) }
			file, tok := tokenSource(tt.file, tt.env, exists)
			if file != tt.wantFile || tok != tt.want {
				t.Fatalf("token from file %q, value %q; want file %q, value %q", file, tok, tt.wantFile, tt.want)
			}
		})
	}
}

// TestWaitSendsTheEnvironmentToken: with $STACKFLOW_KARGO_TOKEN (and no
// token file) the wait sends it; without any token it says how to mount one.
func TestWaitSendsTheEnvironmentToken(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
		if r.Header.Get("Authorization") == "" {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			_ = json.NewEncoder(w).Encode(verification.Error{Code: 401, Reason: "Unauthorized", Message: "missing Authorization header"})
			return
		}
		_ = json.NewEncoder(w).Encode(verification.Result{Phase: verification.PhaseSucceeded, Reason: verification.ReasonUpdateSucceeded, Message: "up succeeded"})
	}))
	defer srv.Close()
	args := []string{"wait", "--url", srv.URL, "--namespace", "dev", "--stack", "web", "--commit", sha, "--timeout", "10s"}
	t.Setenv(TokenEnv, "the-token")
	if code, stdout, stderr := runCLI(t, args...); code != ExitOK || len(got) != 1 || got[0] != "Bearer the-token" {
		t.Fatalf("exit %d, Authorization %q: %s%s", code, got, stdout, stderr)
	}
	t.Setenv(TokenEnv, "")
	code, _, stderr := runCLI(t, args...)
	if code != ExitFailed || got[len(got)-1] != "" || !strings.Contains(stderr, "No token: mount a projected ServiceAccount token for the audience stackflow-analysis") {
		t.Fatalf("without a token: exit %d, Authorization %q: %s", code, got, stderr)
	}
}

// TestWaitDenyOnFlag: --deny-on takes the analysis service's operations
// and refuses anything else before any request.
func TestWaitDenyOnFlag(t *testing.T) {
	code, _, stderr := runCLI(t, "wait", "--url", "http://127.0.0.1:1", "--namespace", "dev", "--stack", "web", "--commit", sha, "--deny-on", "destroy")
	if code != ExitUsage || !strings.Contains(stderr, `--deny-on: denyOn "destroy" names "destroy": use a comma-separated list of create, update, delete`) {
		t.Fatalf("--deny-on destroy: exit %d: %s", code, stderr)
	}
}
