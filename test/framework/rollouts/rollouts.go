// Package rollouts runs the real Argo Rollouts controller (its analysis
// controller only: it runs AnalysisRuns, for Kargo's verifications and the
// analysis templates' tests) against a local control plane, as a process.
// The controller and its CRDs are built by `make substrate` into
// $STACKFLOW_ROLLOUTS (`hack/substrate.sh env`).
//
// It imports substrate (for the build's location).
package rollouts

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// Build is a located Argo Rollouts build.
type Build struct {
	// Binary is rollouts-controller.
	Binary string
	// CRDs is the directory of Argo Rollouts' CRDs of the same version.
	CRDs string
}

// Locate finds the build (substrate.Paths.Rollouts), with an error saying how
// to get it.
func Locate() (Build, error) {
	p, err := substrate.Locate()
	if err != nil {
		return Build{}, err
	}
	dir := p.Rollouts
	b := Build{Binary: filepath.Join(dir, "rollouts-controller"), CRDs: filepath.Join(dir, "crds")}
	for _, f := range []string{b.Binary, b.CRDs} {
		if _, err := os.Stat(f); err != nil {
			return Build{}, fmt.Errorf("rollouts-controller not built (%v): run `make substrate`", err)
		}
	}
	return b, nil
}

// InstallCRDs installs Argo Rollouts' CRDs (AnalysisTemplate, AnalysisRun, …).
func (b Build) InstallCRDs(env *envtest.Environment) error {
	return substrate.InstallCRDs(env, b.CRDs)
}

// Options configure a running controller.
type Options struct {
	Build Build
	// Env is the control plane; a system:masters user is added for the
	// controller's kubeconfig.
	Env *envtest.Environment
	// Dir holds its kubeconfig and log (rollouts-controller.log).
	Dir string
	// HTTPProxy, when set, is its HTTP_PROXY: the web metric provider's
	// requests to hosts other than loopback go through it (see hostproxy).
	HTTPProxy string
	// Log, when set, also receives its output.
	Log io.Writer
}

// Controller is a running rollouts-controller.
type Controller struct {
	// LogPath is its log file.
	LogPath string
	cmd     *exec.Cmd
	done    chan struct{}
}

// Start starts the analysis controller and returns once its health port
// answers. Stop stops it.
func Start(ctx context.Context, o Options) (*Controller, error) {
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	user, err := o.Env.AddUser(envtest.User{Name: "argo-rollouts", Groups: []string{"system:masters"}}, nil)
	if err != nil {
		return nil, err
	}
	kc, err := user.KubeConfig()
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(o.Dir, "rollouts.kubeconfig")
	if err := os.WriteFile(kubeconfig, kc, 0o600); err != nil {
		return nil, err
	}
	ports, err := substrate.FreePorts(2)
	if err != nil {
		return nil, err
	}
	c := &Controller{LogPath: filepath.Join(o.Dir, "rollouts-controller.log"), done: make(chan struct{})}
	logFile, err := os.Create(c.LogPath)
	if err != nil {
		return nil, err
	}
	c.cmd = exec.Command(o.Build.Binary,
		"--kubeconfig", kubeconfig, "--controllers", "analysis", "--leader-elect=false",
		"--healthzPort", strconv.Itoa(ports[0]), "--metricsPort", strconv.Itoa(ports[1]), "--loglevel", "info")
	c.cmd.Env = os.Environ()
	if o.HTTPProxy != "" {
		c.cmd.Env = append(c.cmd.Env, "HTTP_PROXY="+o.HTTPProxy, "http_proxy="+o.HTTPProxy, "NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost")
	}
	var out io.Writer = logFile
	if o.Log != nil {
		out = io.MultiWriter(logFile, substrate.PrefixWriter(o.Log, "rollouts-controller"))
	}
	c.cmd.Stdout, c.cmd.Stderr = out, out
	c.cmd.SysProcAttr = substrate.ChildProcAttr(false)
	if err := c.cmd.Start(); err != nil {
		logFile.Close()
		return nil, err
	}
	go func() {
		_ = c.cmd.Wait()
		logFile.Close()
		close(c.done)
	}()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
	deadline := time.Now().Add(2 * time.Minute)
	for {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return c, nil
		}
		select {
		case <-c.done:
			return nil, fmt.Errorf("rollouts-controller exited: %s", substrate.Tail(c.LogPath, 3000))
		case <-ctx.Done():
			c.Stop()
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			c.Stop()
			return nil, fmt.Errorf("rollouts-controller not healthy on %s after 2 minutes: %s", addr, substrate.Tail(c.LogPath, 3000))
		}
	}
}

// Stop stops the controller (SIGTERM, then SIGKILL after 10 s).
func (c *Controller) Stop() {
	_ = c.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-c.done:
	case <-time.After(10 * time.Second):
		_ = c.cmd.Process.Kill()
		<-c.done
	}
}
