package inputs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(t *testing.T, m map[string]string) func(string) string {
	t.Helper()
	ev := filepath.Join(t.TempDir(), "event.json")
	if err := os.WriteFile(ev, []byte(`{"number": 7, "pull_request": {"number": 7, "head": {"sha": "hhh"}, "base": {"sha": "bbb"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	base := map[string]string{"GITHUB_EVENT_PATH": ev, "GITHUB_REPOSITORY": "acme/infra", "GITHUB_RUN_ID": "42", "GITHUB_WORKSPACE": "/ws",
		"INPUT_GITHUB-TOKEN": "tok", "INPUT_STACKS": "dev"}
	for k, v := range m {
		base[k] = v
	}
	return func(k string) string { return base[k] }
}

func TestLoadDefaults(t *testing.T) {
	c, err := Load(env(t, nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.Mode != ModeProgram || c.WorkDir != "." || c.ManifestsDir != "." || c.Comment != CommentAlways || !c.StatusChecks || c.Parallel != 4 || c.Refresh ||
		c.GitToken != "tok" || c.APIURL != "https://api.github.com" || c.PR != 7 || c.HeadSHA != "hhh" || c.BaseSHA != "bbb" ||
		c.RunURL() != "https://github.com/acme/infra/actions/runs/42" || strings.Join(c.GitTokenHosts, ",") != "github.com" ||
		c.NotPreviewed != "failure" || len(c.Backends) != 0 || c.GitTimeout != 5*time.Minute || c.PreviewTimeout != 30*time.Minute {
		t.Fatalf("%+v", c)
	}
}

func TestLoad(t *testing.T) {
	for _, tt := range []struct {
		name string
		env  map[string]string
		err  string
		ok   func(Config) bool
	}{
		{"stacks by newline and comma", map[string]string{"INPUT_STACKS": "dev, test\nprod\n"}, "", func(c Config) bool { return strings.Join(c.Stacks, "|") == "dev|test|prod" }},
		{"manifests mode needs no stacks", map[string]string{"INPUT_MODE": "manifests", "INPUT_STACKS": ""}, "", func(c Config) bool { return c.Mode == ModeManifests }},
		{"GHES", map[string]string{"GITHUB_API_URL": "https://ghe.example.com/api/v3", "GITHUB_SERVER_URL": "https://ghe.example.com"}, "", func(c Config) bool {
			return c.APIURL == "https://ghe.example.com/api/v3" && strings.HasPrefix(c.RunURL(), "https://ghe.example.com/")
		}},
		{"git token", map[string]string{"INPUT_GIT-TOKEN": "gtok"}, "", func(c Config) bool { return c.GitToken == "gtok" }},
		{"git token hosts default to the server's", map[string]string{"GITHUB_SERVER_URL": "https://GHE.example.com:8443"}, "", func(c Config) bool {
			return strings.Join(c.GitTokenHosts, ",") == "ghe.example.com:8443"
		}},
		{"git token hosts", map[string]string{"INPUT_GIT-TOKEN-HOSTS": "github.com\n GitLab.example.com:8443 ,"}, "", func(c Config) bool {
			return strings.Join(c.GitTokenHosts, ",") == "github.com,gitlab.example.com:8443"
		}},
		{"bad git token host", map[string]string{"INPUT_GIT-TOKEN-HOSTS": "https://github.com/"}, "input git-token-hosts", nil},
		{"backends", map[string]string{"INPUT_BACKENDS": "s3://a\nhttps://api.pulumi.com"}, "", func(c Config) bool {
			return strings.Join(c.Backends, ",") == "s3://a,https://api.pulumi.com"
		}},
		{"not previewed succeeds", map[string]string{"INPUT_NOT-PREVIEWED": "success"}, "", func(c Config) bool { return c.NotPreviewed == "success" }},
		{"timeouts", map[string]string{"INPUT_GIT-TIMEOUT": "90s", "INPUT_PREVIEW-TIMEOUT": "1h"}, "", func(c Config) bool {
			return c.GitTimeout == 90*time.Second && c.PreviewTimeout == time.Hour
		}},
		{"no timeout", map[string]string{"INPUT_PREVIEW-TIMEOUT": "0"}, "input preview-timeout", nil},
		{"timeout beyond a job's", map[string]string{"INPUT_GIT-TIMEOUT": "7h"}, "input git-timeout", nil},
		{"timeout in minutes", map[string]string{"INPUT_GIT-TIMEOUT": "5"}, "input git-timeout", nil},
		{"workflow from its ref", map[string]string{"GITHUB_WORKFLOW_REF": "acme/infra/.github/workflows/preview.yml@refs/pull/7/merge", "GITHUB_WORKFLOW": "preview"}, "", func(c Config) bool {
			return c.Workflow == "acme/infra/.github/workflows/preview.yml"
		}},
		{"workflow from its name", map[string]string{"GITHUB_WORKFLOW": "preview"}, "", func(c Config) bool { return c.Workflow == "preview" }},
		{"bad not previewed", map[string]string{"INPUT_NOT-PREVIEWED": "pending"}, "input not-previewed", nil},
		{"pull_request from a fork", map[string]string{"GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": event(t, "fork/infra")}, "", func(c Config) bool {
			return c.FromFork() && c.HeadRepo == "fork/infra"
		}},
		{"pull_request_target from the same repository", map[string]string{"GITHUB_EVENT_NAME": "pull_request_target", "GITHUB_EVENT_PATH": event(t, "acme/infra")}, "", func(c Config) bool {
			return !c.FromFork()
		}},
		{"pull_request_target from a fork", map[string]string{"GITHUB_EVENT_NAME": "pull_request_target", "GITHUB_EVENT_PATH": event(t, "fork/infra")}, "refusing to preview a pull request from a fork (fork/infra) on pull_request_target", nil},
		{"pull_request_target from a deleted fork", map[string]string{"GITHUB_EVENT_NAME": "pull_request_target", "GITHUB_EVENT_PATH": event(t, "")}, "a deleted repository", nil},
		{"program mode needs stacks", map[string]string{"INPUT_STACKS": " "}, "input stacks", nil},
		{"bad mode", map[string]string{"INPUT_MODE": "all"}, "input mode", nil},
		{"bad comment", map[string]string{"INPUT_COMMENT": "sometimes"}, "input comment", nil},
		{"bad parallel", map[string]string{"INPUT_PARALLEL": "0"}, "input parallel", nil},
		{"bad bool", map[string]string{"INPUT_STATUS-CHECKS": "yes please"}, "input status-checks", nil},
		{"no pull request", map[string]string{"GITHUB_EVENT_PATH": ""}, "no pull request", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(env(t, tt.env))
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || !tt.ok(c) {
				t.Fatalf("%+v, %v", c, err)
			}
		})
	}
}

// event writes a pull_request event whose head is in repository head
// ("" for a deleted fork) and whose base is in acme/infra.
func event(t *testing.T, head string) string {
	t.Helper()
	headRepo := "null"
	if head != "" {
		headRepo = `{"full_name": "` + head + `"}`
	}
	p := filepath.Join(t.TempDir(), "event.json")
	body := `{"number": 7, "pull_request": {"number": 7, "head": {"sha": "hhh", "repo": ` + headRepo + `}, "base": {"sha": "bbb", "repo": {"full_name": "acme/infra"}}}}`
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestScrubEnvironment: after the configuration is read, no child process
// can see an input (the tokens among them) or a variable holding a token.
func TestScrubEnvironment(t *testing.T) {
	t.Setenv("INPUT_GITHUB-TOKEN", "ghs_workflowToken")
	t.Setenv("INPUT_GIT-TOKEN", "ghp_programRepos")
	t.Setenv("INPUT_MODE", "manifests")
	t.Setenv("GITHUB_TOKEN", "ghs_workflowToken")
	t.Setenv("MY_COPY", "ghp_programRepos")
	t.Setenv("PULUMI_ACCESS_TOKEN", "pul-keep")
	t.Setenv("AWS_REGION", "eu-west-1")
	if got := ChildEnviron([]string{"INPUT_X=1", "A=ghs_workflowToken", "B=2", "input_lower=3"}, "ghs_workflowToken", ""); strings.Join(got, " ") != "B=2" {
		t.Errorf("ChildEnviron = %q", got)
	}
	if err := ScrubEnvironment("ghs_workflowToken", "ghp_programRepos"); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"INPUT_GITHUB-TOKEN", "INPUT_GIT-TOKEN", "INPUT_MODE", "GITHUB_TOKEN", "MY_COPY"} {
		if v, ok := os.LookupEnv(name); ok {
			t.Errorf("%s=%q is still in the environment", name, v)
		}
	}
	for _, kv := range os.Environ() {
		if strings.Contains(kv, "ghs_workflowToken") || strings.Contains(kv, "ghp_programRepos") {
			t.Errorf("a token is still in the environment: %s", kv)
		}
	}
	if os.Getenv("PULUMI_ACCESS_TOKEN") != "pul-keep" || os.Getenv("AWS_REGION") != "eu-west-1" {
		t.Error("the CLI's own settings were removed")
	}
}
