package kargoe2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/stackflow-io/stackflow/test/framework/argocd"
	"github.com/stackflow-io/stackflow/test/framework/hostproxy"
	"github.com/stackflow-io/stackflow/test/framework/kargo"
	"github.com/stackflow-io/stackflow/test/framework/rollouts"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// The system the tests share: one control plane with Kargo's, Argo CD's and
// Argo Rollouts' CRDs, the real Argo CD, Argo Rollouts' analysis controller
// and Kargo, and the loopback proxy that serves the hosts they reach by name.
var (
	// skipReason is set when Kargo's source is not beside the repository
	// (a checkout without ../shared/kargo): every test skips with it.
	skipReason string
	cp         *substrate.ControlPlane
	c          client.Client
	argo       *argocd.Instance
	kargoProcs *kargo.Instance
	rc         *rollouts.Controller
	proxy      *hostproxy.Proxy
	// agentBin is the workspace agent built for this run.
	agentBin string
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	kb, err := kargo.Locate()
	if errors.Is(err, kargo.ErrNoSource) {
		skipReason = err.Error()
		return m.Run()
	}
	fail := func(what string, err error) int {
		fmt.Fprintf(os.Stderr, "%s: %v\n", what, err)
		return 1
	}
	if err != nil {
		return fail("locate Kargo", err)
	}
	ab, err := argocd.Locate(argocd.V3)
	if err != nil {
		return fail("locate Argo CD", err)
	}
	rb, err := rollouts.Locate()
	if err != nil {
		return fail("locate Argo Rollouts", err)
	}
	dir, err := os.MkdirTemp("", "stackflow-kargoe2e-")
	if err != nil {
		return fail("temp dir", err)
	}
	keep := false
	defer func() {
		if keep {
			fmt.Fprintf(os.Stderr, "kargoe2e: the processes' logs are kept in %s\n", dir)
			return
		}
		os.RemoveAll(dir)
	}()
	agentBin = filepath.Join(dir, "agent")
	if err := substrate.GoBuild(agentBin, "./operator/cmd/agent"); err != nil {
		return fail("build the agent", err)
	}
	ctrl.SetLogger(zap.New(zap.UseDevMode(true), zap.WriteTo(os.Stderr)))
	start := time.Now()
	if cp, err = substrate.StartControlPlane(); err != nil {
		return fail("start the control plane", err)
	}
	defer cp.Stop()
	for name, install := range map[string]func() error{
		"Kargo":         func() error { return kb.InstallCRDs(cp.Env) },
		"Argo CD":       func() error { return ab.InstallCRDs(cp.Env) },
		"Argo Rollouts": func() error { return rb.InstallCRDs(cp.Env) },
	} {
		if err := install(); err != nil {
			return fail("install the CRDs of "+name, err)
		}
	}
	if c, err = client.New(cp.Config, client.Options{Scheme: substrate.Scheme()}); err != nil {
		return fail("client", err)
	}
	// The operator's admission policy recording who approves a plan (the
	// prod Stack requires approval; Argo CD's approve action approves it).
	policyCtx, policyCancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer policyCancel()
	if err := substrate.InstallPlanApprovalPolicy(policyCtx, cp.Config, c, "default"); err != nil {
		return fail("install the plan approval policy", err)
	}
	if proxy, err = hostproxy.Start(); err != nil {
		return fail("start the host proxy", err)
	}
	defer proxy.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	if argo, err = argocd.Start(ctx, argocd.Options{Build: ab, Env: cp.Env, Client: c, Dir: filepath.Join(dir, "argocd"), RepoRoot: substrate.RepoRoot()}); err != nil {
		return fail("start Argo CD", err)
	}
	defer argo.Stop()
	if rc, err = rollouts.Start(ctx, rollouts.Options{Build: rb, Env: cp.Env, Dir: filepath.Join(dir, "rollouts"), HTTPProxy: proxy.URL}); err != nil {
		return fail("start Argo Rollouts", err)
	}
	defer rc.Stop()
	if kargoProcs, err = kargo.Start(ctx, kargo.Options{Build: kb, Env: cp.Env, Client: c, Dir: filepath.Join(dir, "kargo"),
		ArgoCD: true, Rollouts: true, AllowCredentialsOverHTTP: true, HTTPProxy: proxy.URL}); err != nil {
		return fail("start Kargo", err)
	}
	defer kargoProcs.Stop()
	fmt.Fprintf(os.Stderr, "kargoe2e: control plane, Argo CD, Argo Rollouts and Kargo %s up in %s\n", kargo.Version, time.Since(start).Round(100*time.Millisecond))

	code := m.Run()
	if code != 0 {
		keep = true
		fmt.Fprintln(os.Stderr, kargoProcs.Logs(8000))
		fmt.Fprintln(os.Stderr, argo.Logs(3000))
		fmt.Fprintf(os.Stderr, "---- rollouts-controller\n%s\n", substrate.Tail(rc.LogPath, 3000))
	}
	return code
}
