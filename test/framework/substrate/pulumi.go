package substrate

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"

	"github.com/stackflow-io/stackflow/test/framework/provider"
)

// TestPassphrase encrypts the test stacks' secrets (passphrase secrets provider).
const TestPassphrase = "stackflow-test-passphrase"

// Pulumi is a Pulumi environment for tests: CLI, YAML language host, the test
// provider installed in a private PULUMI_HOME, and a file:// backend.
type Pulumi struct {
	// Paths locate the binaries.
	Paths Paths
	// Home is PULUMI_HOME, holding the installed test provider plugin.
	Home string
	// Backend is the file:// backend URL.
	Backend string
	// RecordsDir is where the test provider writes its records (provider config
	// stackflowtest:dir defaults to it through STACKFLOW_TEST_PROVIDER_DIR).
	RecordsDir string
}

var (
	homeOnce sync.Once
	homeDir  string
	homeErr  error
)

// sharedHome builds the test provider and installs it into a PULUMI_HOME shared by
// the tests of this process (plugins are read-only once installed).
func sharedHome(p Paths) (string, error) {
	homeOnce.Do(func() {
		dir, err := os.MkdirTemp("", "stackflow-pulumi-home-")
		if err != nil {
			homeErr = err
			return
		}
		homeDir, homeErr = InstallTestProvider(p, dir)
	})
	return homeDir, homeErr
}

// InstallTestProvider builds the test provider under dir and installs it as a
// plugin into dir/home, which it returns for PULUMI_HOME.
func InstallTestProvider(p Paths, dir string) (string, error) {
	bin := filepath.Join(dir, "build", "pulumi-resource-"+provider.Name)
	build := exec.Command("go", "build", "-o", bin, "./test/framework/provider/cmd/pulumi-resource-"+provider.Name)
	build.Dir = RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build test provider: %w\n%s", err, out)
	}
	home := filepath.Join(dir, "home")
	install := exec.Command(filepath.Join(p.PulumiRoot, "bin", "pulumi"), "plugin", "install",
		"resource", provider.Name, provider.Version, "--file", bin)
	install.Env = append(os.Environ(), "PULUMI_HOME="+home, "PULUMI_SKIP_UPDATE_CHECK=true")
	if out, err := install.CombinedOutput(); err != nil {
		return "", fmt.Errorf("install test provider plugin: %w\n%s", err, out)
	}
	return home, nil
}

// NewPulumi prepares a Pulumi environment with a fresh backend and records
// directory for one test.
func NewPulumi(t testing.TB) *Pulumi {
	t.Helper()
	p := MustLocate(t)
	home, err := sharedHome(p)
	if err != nil {
		t.Fatal(err)
	}
	backend := t.TempDir()
	records := t.TempDir()
	return &Pulumi{Paths: p, Home: home, Backend: "file://" + backend, RecordsDir: records}
}

// PATH puts the pulumi CLI and the YAML language host first.
func (pe *Pulumi) PATH() string {
	return strings.Join([]string{filepath.Join(pe.Paths.PulumiRoot, "bin"), pe.Paths.LanguageYAML, os.Getenv("PATH")}, string(os.PathListSeparator))
}

// EnvVars is the environment a Pulumi process needs in tests.
func (pe *Pulumi) EnvVars() map[string]string {
	return map[string]string{
		"PATH":                     pe.PATH(),
		"PULUMI_HOME":              pe.Home,
		"PULUMI_BACKEND_URL":       pe.Backend,
		"PULUMI_CONFIG_PASSPHRASE": TestPassphrase,
		"PULUMI_SKIP_UPDATE_CHECK": "true",
		"PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
		provider.DirEnv: pe.RecordsDir,
	}
}

// Environ is EnvVars as KEY=VALUE pairs appended to the current environment.
func (pe *Pulumi) Environ() []string {
	env := os.Environ()
	for k, v := range pe.EnvVars() {
		env = append(env, k+"="+v)
	}
	return env
}

// Command is the Automation API's handle on the pulumi CLI.
func (pe *Pulumi) Command(t testing.TB) auto.PulumiCommand {
	t.Helper()
	cmd, err := auto.NewPulumiCommand(&auto.PulumiCommandOptions{Root: pe.Paths.PulumiRoot})
	if err != nil {
		t.Fatalf("pulumi CLI at %s: %v", pe.Paths.PulumiRoot, err)
	}
	return cmd
}

// Record reads a test provider record's content; ok is false when it does not
// exist.
func (pe *Pulumi) Record(t testing.TB, name string) (content string, ok bool) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(pe.RecordsDir, name))
	if os.IsNotExist(err) {
		return "", false
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b), true
}

// Stack is the Pulumi stack name as a person with the pulumi CLI sees it
// beside the operator: on pe's backend, from the program in workDir (a
// clone of the Stack's repository).
func (pe *Pulumi) Stack(t testing.TB, workDir, name string) auto.Stack {
	t.Helper()
	ctx := context.Background()
	ws, err := auto.NewLocalWorkspace(ctx, auto.WorkDir(workDir), auto.Pulumi(pe.Command(t)), auto.EnvVars(pe.EnvVars()))
	if err != nil {
		t.Fatal(err)
	}
	st, err := auto.SelectStack(ctx, name, ws)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
