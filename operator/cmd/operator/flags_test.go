package main

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"

	"github.com/stackflow-io/stackflow/operator/internal/controller"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/podsecurity"
)

// resolveArgs parses and resolves args as main does, returning the config,
// the lines logged and the error.
func resolveArgs(t *testing.T, args ...string) (*config, []string, error) {
	t.Helper()
	c, err := parseFlags(flag.NewFlagSet("operator", flag.ContinueOnError), args)
	if err != nil {
		t.Fatalf("parse %v: %v", args, err)
	}
	var lines []string
	log := funcr.New(func(prefix, args string) { lines = append(lines, args) }, funcr.Options{})
	err = c.resolve(logr.Logger(log))
	return c, lines, err
}

func TestWebhookOffWithoutSecretFile(t *testing.T) {
	for _, args := range [][]string{
		nil, // the default install
		{"--webhook-bind-address=:9292"},
	} {
		c, lines, err := resolveArgs(t, args...)
		if err != nil {
			t.Fatalf("%v: want no error (the operator starts), got %v", args, err)
		}
		if c.opts.WebhookAddr != "" || c.opts.WebhookSecret != "" {
			t.Errorf("%v: webhook on (%q), want off", args, c.opts.WebhookAddr)
		}
		n := 0
		for _, l := range lines {
			if strings.Contains(l, "Push webhook disabled: no --webhook-secret-file") {
				n++
			}
		}
		if n != 1 {
			t.Errorf("%v: want one line saying the webhook is disabled, got %q", args, lines)
		}
	}
}

func TestWebhookSecretFileMissing(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "secret")
	_, _, err := resolveArgs(t, "--webhook-bind-address=:9292", "--webhook-secret-file="+missing)
	if err == nil || !strings.Contains(err.Error(), "read the push webhook secret (--webhook-secret-file)") || !strings.Contains(err.Error(), missing) {
		t.Fatalf("want a clear error naming the flag and the file, got %v", err)
	}
}

func TestWebhookOn(t *testing.T) {
	file := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(file, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, lines, err := resolveArgs(t, "--webhook-bind-address=:9292", "--webhook-secret-file="+file)
	if err != nil {
		t.Fatal(err)
	}
	if c.opts.WebhookAddr != ":9292" || c.opts.WebhookSecret != "s3cret" {
		t.Errorf("webhook %q secret set %v", c.opts.WebhookAddr, c.opts.WebhookSecret != "")
	}
	for _, l := range lines {
		if strings.Contains(l, "s3cret") {
			t.Errorf("the secret was logged: %s", l)
		}
	}
}

func TestWebhookSecretFileEmptyOrWithoutAddress(t *testing.T) {
	empty := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := resolveArgs(t, "--webhook-bind-address=:9292", "--webhook-secret-file="+empty); err == nil || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("empty secret file: got %v", err)
	}
	if _, _, err := resolveArgs(t, "--webhook-secret-file="+empty); err == nil || !strings.Contains(err.Error(), "needs --webhook-bind-address") {
		t.Errorf("secret file without address: got %v", err)
	}
}

func TestWatchNamespaces(t *testing.T) {
	c, _, err := resolveArgs(t, "--watch-namespaces= a, b,,")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.opts.WatchNamespaces, ","); got != "a,b" {
		t.Errorf("watch namespaces %q, want a,b", got)
	}
}

func TestSecretPollInterval(t *testing.T) {
	c, _, err := resolveArgs(t)
	if err != nil || c.opts.SecretPollInterval != controller.DefaultSecretPoll {
		t.Fatalf("default: %s, %v; want %s", c.opts.SecretPollInterval, err, controller.DefaultSecretPoll)
	}
	if c, _, err = resolveArgs(t, "--secret-poll-interval=15s"); err != nil || c.opts.SecretPollInterval != 15*time.Second {
		t.Fatalf("15s: %s, %v", c.opts.SecretPollInterval, err)
	}
	if _, _, err := resolveArgs(t, "--secret-poll-interval=0s"); err == nil || !strings.Contains(err.Error(), "--secret-poll-interval") {
		t.Fatalf("0s: %v, want an error naming the flag", err)
	}
}

// TestDefaultInstallArgs: the arguments the default install passes
// (operator/config/default, which operator/test/install keeps equal to the
// Helm chart's defaults) resolve without a webhook Secret, the webhook off.
func TestDefaultInstallArgs(t *testing.T) {
	dir := filepath.Join("..", "..", "config", "default")
	rm, err := krusty.MakeKustomizer(krusty.MakeDefaultOptions()).Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for _, r := range rm.Resources() {
		if r.GetKind() != "Deployment" || r.GetName() != "stackflow-operator" {
			continue
		}
		raw, err := r.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		var u unstructured.Unstructured
		if err := u.UnmarshalJSON(raw); err != nil {
			t.Fatal(err)
		}
		cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		args, _, _ = unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
	}
	if len(args) == 0 {
		t.Fatal("no stackflow-operator Deployment args in operator/config/default")
	}
	c, lines, err := resolveArgs(t, args...)
	if err != nil {
		t.Fatalf("the default install's args %q: %v", args, err)
	}
	if c.opts.WebhookAddr != "" || !strings.Contains(strings.Join(lines, "\n"), "Push webhook disabled") {
		t.Errorf("default install: webhook %q, log %q; want it off and said so", c.opts.WebhookAddr, lines)
	}
}

func TestWorkspaceAuthAndLockdownFlags(t *testing.T) {
	c, _, err := resolveArgs(t)
	if err != nil {
		t.Fatal(err)
	}
	if c.opts.Pod.AgentAuth != pod.AgentAuthToken || c.opts.PodSecurity != podsecurity.ModeOff || c.opts.Pod.DefaultServiceAccount != "" {
		t.Errorf("defaults: auth %q, pod security %q, default SA %q; want token, off, none", c.opts.Pod.AgentAuth, c.opts.PodSecurity, c.opts.Pod.DefaultServiceAccount)
	}
	c, _, err = resolveArgs(t, "--workspace-auth=kube", "--pod-security-enforcement=restricted", "--default-workspace-service-account=workspace")
	if err != nil {
		t.Fatal(err)
	}
	if c.opts.Pod.AgentAuth != pod.AgentAuthKube || c.opts.PodSecurity != podsecurity.ModeRestricted || c.opts.Pod.DefaultServiceAccount != "workspace" ||
		c.opts.AgentTokenFile != "/var/run/secrets/stackflow/agent/token" || c.opts.Pod.KubeAudience != pod.DefaultKubeAudience {
		t.Errorf("lockdown flags not applied: %+v", c.opts)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--workspace-auth=mtls"}, "--workspace-auth=mtls: use token or kube"},
		{[]string{"--workspace-auth=kube", "--workspace-runtime=local"}, "--workspace-auth=kube needs --workspace-runtime=pod"},
		{[]string{"--pod-security-enforcement=strict"}, "not one of off, namespace, baseline, restricted"},
	} {
		if _, _, err := resolveArgs(t, tc.args...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: err = %v, want %q", tc.args, err, tc.want)
		}
	}
}

// TestSSHKnownHosts: --ssh-known-hosts is read and checked at start; a
// missing or malformed file is an error naming the flag; without it a line
// says what SSH Stacks then need.
func TestSSHKnownHosts(t *testing.T) {
	c, lines, err := resolveArgs(t)
	if err != nil || c.opts.SSHKnownHosts != "" || !strings.Contains(strings.Join(lines, "\n"), "spec.gitAuth.sshAuth.knownHosts") {
		t.Fatalf("default: %q, %v, lines %q", c.opts.SSHKnownHosts, err, lines)
	}
	dir := t.TempDir()
	good := filepath.Join(dir, "known_hosts")
	const line = "github.com ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl\n"
	if err := os.WriteFile(good, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	if c, _, err = resolveArgs(t, "--ssh-known-hosts="+good); err != nil || c.opts.SSHKnownHosts != line {
		t.Fatalf("file: %q, %v", c.opts.SSHKnownHosts, err)
	}
	if _, _, err := resolveArgs(t, "--ssh-known-hosts="+filepath.Join(dir, "missing")); err == nil || !strings.Contains(err.Error(), "--ssh-known-hosts") {
		t.Fatalf("missing file: %v, want an error naming the flag", err)
	}
	bad := filepath.Join(dir, "bad")
	if err := os.WriteFile(bad, []byte("github.com ssh-ed25519 not-base64!\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := resolveArgs(t, "--ssh-known-hosts="+bad); err == nil || !strings.Contains(err.Error(), "--ssh-known-hosts="+bad) {
		t.Fatalf("malformed file: %v, want an error naming the flag", err)
	}
	var help strings.Builder
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	fs.SetOutput(&help)
	if _, err := parseFlags(fs, nil); err != nil {
		t.Fatal(err)
	}
	fs.PrintDefaults()
	if !strings.Contains(help.String(), "-ssh-known-hosts") || !strings.Contains(help.String(), "never accepted unverified") {
		t.Fatalf("--help does not document --ssh-known-hosts:\n%s", help.String())
	}
}

// TestGitHubAPIHosts: --github-api-hosts lists the hosts Stacks' GitHub App
// apiURL may name; a value that is no host is an error naming the flag, and
// --help documents it.
func TestGitHubAPIHosts(t *testing.T) {
	c, _, err := resolveArgs(t)
	if err != nil || c.opts.GitHubAPIHosts != nil {
		t.Fatalf("default: %v, %v", c.opts.GitHubAPIHosts, err)
	}
	c, _, err = resolveArgs(t, "--github-api-hosts= ghe.example.com, ghe.example.com:8443 ,")
	if err != nil || strings.Join(c.opts.GitHubAPIHosts, "|") != "ghe.example.com|ghe.example.com:8443" {
		t.Fatalf("list: %q, %v", c.opts.GitHubAPIHosts, err)
	}
	if _, _, err := resolveArgs(t, "--github-api-hosts=https://ghe.example.com/api/v3"); err == nil || !strings.Contains(err.Error(), "--github-api-hosts") {
		t.Fatalf("a URL: %v, want an error naming the flag", err)
	}
	var help strings.Builder
	fs := flag.NewFlagSet("operator", flag.ContinueOnError)
	fs.SetOutput(&help)
	if _, err := parseFlags(fs, nil); err != nil {
		t.Fatal(err)
	}
	fs.PrintDefaults()
	if !strings.Contains(help.String(), "-github-api-hosts") || !strings.Contains(help.String(), "githubApp.apiURL may name") {
		t.Fatalf("--help does not document --github-api-hosts:\n%s", help.String())
	}
}
