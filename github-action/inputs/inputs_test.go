package inputs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
		c.RunURL() != "https://github.com/acme/infra/actions/runs/42" {
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
