package kargo

import (
	"context"
	"errors"
	"fmt"
	"os"
	osexec "os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stackflow-io/stackflow/test/framework/fakegithub"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/hostproxy"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

var (
	skipReason string
	cp         *substrate.ControlPlane
	kc         client.Client
	proxy      *hostproxy.Proxy
	procs      *Instance
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

// run starts a control plane and Kargo (its Argo CD and Argo Rollouts
// integrations off: the Kargo end-to-end tests run those).
func run(m *testing.M) int {
	b, err := Locate()
	if errors.Is(err, ErrNoSource) {
		skipReason = err.Error()
		return m.Run()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	if cp, err = substrate.StartControlPlane(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cp.Stop()
	if err := b.InstallCRDs(cp.Env); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	kc = cp.Client
	if proxy, err = hostproxy.Start(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer proxy.Close()
	dir, err := os.MkdirTemp("", "stackflow-kargo-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	start := time.Now()
	if procs, err = Start(ctx, Options{Build: b, Env: cp.Env, Client: kc, Dir: dir, AllowCredentialsOverHTTP: true, HTTPProxy: proxy.URL}); err != nil {
		fmt.Fprintf(os.Stderr, "start Kargo: %v\n", err)
		return 1
	}
	defer procs.Stop()
	fmt.Fprintf(os.Stderr, "Kargo %s up in %s\n", Version, time.Since(start).Round(100*time.Millisecond))
	code := m.Run()
	if code != 0 {
		fmt.Fprintln(os.Stderr, procs.Logs(6000))
	}
	return code
}

func apply(t *testing.T, yamlText string) {
	t.Helper()
	objs, err := decode([]byte(yamlText))
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range objs {
		if err := kc.Patch(context.Background(), u, client.Apply, client.FieldOwner("kubectl"), client.ForceOwnership); err != nil {
			t.Fatalf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
}

// TestKargoPromotesThroughAPullRequest: Kargo's processes as the harness
// runs them do what a cluster's do. The management controller and the
// webhooks make a Project's namespace; a Warehouse subscribed to a program
// repository served on loopback makes Freight of its commit, with an alias
// from the webhooks; a Promotion (created as a user does, its steps filled in
// from the Stage by the webhook) clones the manifests repository on a GitHub
// Enterprise server with the project's git credentials, pins a commit,
// pushes a branch, opens a pull request and waits until a reviewer merges
// it. With a wrong password in the credentials, the clone fails: the
// credentials, passed to git through credential-helper, are what git used.
func TestKargoPromotesThroughAPullRequest(t *testing.T) {
	if skipReason != "" {
		t.Skip(skipReason)
	}
	ctx := context.Background()
	const project, token = "harness", "ghp_harness0123456789"
	program, srv := gitrepo.NewServedHTTP(t, "program.git", nil)
	sha := program.Commit(t, "v1", map[string]string{"app/Pulumi.yaml": "name: app\nruntime: yaml\n"})

	gh, err := fakegithub.Start(fakegithub.Options{GitRoot: t.TempDir(), Host: "github.harness.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer gh.Close()
	gh.AddToken(token, "kargo", false)
	proxy.Route(gh.Host, gh.Addr)
	bare, err := gh.InitRepo(ctx, "org", "manifests")
	if err != nil {
		t.Fatal(err)
	}
	seed := &gitrepo.Repo{Bare: bare, Work: filepath.Join(t.TempDir(), "work")}
	if out, err := git(ctx, "", "clone", "-q", bare, seed.Work); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	seed.Commit(t, "stack", map[string]string{"stacks/dev.yaml": "# the dev Stack\napiVersion: pulumi.com/v1\nkind: Stack\nmetadata:\n  name: dev\nspec:\n  commit: \"0000000000000000000000000000000000000000\"  # pinned by Kargo\n"})
	manifests := gh.CloneURL("org", "manifests")

	apply(t, `apiVersion: kargo.akuity.io/v1alpha1
kind: Project
metadata:
  name: `+project+`
`)
	substrate.Eventually(t, time.Minute, "the project namespace", func() (bool, error) {
		ns := &corev1.Namespace{}
		err := kc.Get(ctx, types.NamespacedName{Name: project}, ns)
		return err == nil && ns.Labels["kargo.akuity.io/project"] == "true", err
	})
	creds := func(password string) {
		sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: project, Name: "manifests-git", Labels: map[string]string{"kargo.akuity.io/cred-type": "git"}},
			StringData: map[string]string{"repoURL": manifests, "username": "kargo", "password": password}}
		if err := kc.Delete(ctx, sec); err != nil && !strings.Contains(err.Error(), "not found") {
			t.Fatal(err)
		}
		if err := kc.Create(ctx, sec); err != nil {
			t.Fatal(err)
		}
	}
	creds("wrong-password")
	apply(t, fmt.Sprintf(`apiVersion: kargo.akuity.io/v1alpha1
kind: Warehouse
metadata:
  name: program
  namespace: %[1]s
spec:
  interval: 5m
  subscriptions:
    - git:
        repoURL: %[2]s
        branch: main
---
apiVersion: kargo.akuity.io/v1alpha1
kind: Stage
metadata:
  name: dev
  namespace: %[1]s
spec:
  vars:
    - {name: repoURL, value: %[2]s}
    - {name: manifests, value: %[3]s}
  requestedFreight:
    - origin: {kind: Warehouse, name: program}
      sources: {direct: true}
  promotionTemplate:
    spec:
      steps:
        - uses: git-clone
          config:
            repoURL: ${{ vars.manifests }}
            checkout: [{branch: main, path: ./m}]
        - uses: yaml-update
          config:
            path: ./m/stacks/dev.yaml
            updates: [{key: spec.commit, value: "${{ quote(commitFrom(vars.repoURL).ID) }}"}]
        - uses: git-commit
          as: commit
          config: {path: ./m, message: "dev to ${{ commitFrom(vars.repoURL).ID[0:7] }}"}
        - uses: git-push
          as: push
          config: {path: ./m, generateTargetBranch: true}
        - uses: git-open-pr
          as: open-pr
          config:
            repoURL: ${{ vars.manifests }}
            sourceBranch: ${{ outputs.push.branch }}
            targetBranch: main
            title: "dev to ${{ commitFrom(vars.repoURL).ID[0:7] }}"
        - uses: git-wait-for-pr
          as: wait
          config:
            repoURL: ${{ vars.manifests }}
            prNumber: ${{ outputs['open-pr'].pr.id }}
`, project, program.HTTPURL(srv), manifests))

	var freight *Freight
	p := &Pipeline{Namespace: project, c: kc}
	substrate.Eventually(t, time.Minute, "Freight of the program's commit, with an alias", func() (bool, error) {
		var err error
		freight, err = p.FreightOf(ctx, sha)
		return freight != nil && freight.Alias != "", err
	})

	// Wrong credentials: git is refused, and the Promotion says so.
	name, err := p.Promote(ctx, "dev", freight.Name)
	if err != nil {
		t.Fatal(err)
	}
	substrate.Eventually(t, 2*time.Minute, "the Promotion with wrong credentials to fail", func() (bool, error) {
		pr, err := p.PromotionOf(ctx, "dev", freight.Name)
		if err != nil || pr == nil {
			return false, err
		}
		if pr.Status.Phase == "Succeeded" {
			t.Fatalf("Promotion %s Succeeded with a wrong git password", pr.Name)
		}
		return pr.Terminal(), fmt.Errorf("%s: %s", pr.Status.Phase, pr.Status.Message)
	})
	failed, _ := p.PromotionOf(ctx, "dev", freight.Name)
	if !strings.Contains(failed.Status.Message, "401") && !strings.Contains(strings.ToLower(failed.Status.Message), "authentication") {
		t.Errorf("Promotion %s ended %s: %q, want git's authentication failure", name, failed.Status.Phase, failed.Status.Message)
	}

	// The right credentials: the pull request, then the merge.
	creds(token)
	if _, err := p.Promote(ctx, "dev", freight.Name); err != nil {
		t.Fatal(err)
	}
	var pr fakegithub.PullRequest
	substrate.Eventually(t, 2*time.Minute, "a pull request", func() (bool, error) {
		prs := gh.Pulls("org", "manifests")
		if len(prs) == 0 {
			promo, err := p.PromotionOf(ctx, "dev", freight.Name)
			if err == nil && promo != nil && promo.Name != name && promo.Terminal() {
				t.Fatalf("Promotion %s ended %s: %s", promo.Name, promo.Status.Phase, promo.Status.Message)
			}
			return false, err
		}
		pr = prs[0]
		return true, nil
	})
	if pr.Title != "dev to "+sha[:7] || pr.Base != "main" || !strings.HasPrefix(pr.Head, "kargo/promotion/") {
		t.Errorf("pull request %+v", pr)
	}
	substrate.Eventually(t, time.Minute, "the Promotion to wait in git-wait-for-pr", func() (bool, error) {
		promo, err := p.PromotionOf(ctx, "dev", freight.Name)
		return err == nil && promo.Status.Phase == "Running" && promo.CurrentStepUses() == "git-wait-for-pr", err
	})
	merge, err := gh.Merge(ctx, "org", "manifests", pr.Number)
	if err != nil {
		t.Fatal(err)
	}
	promo, _ := p.PromotionOf(ctx, "dev", freight.Name)
	if err := p.Refresh(ctx, PromotionKind, promo.Name); err != nil {
		t.Fatal(err)
	}
	substrate.Eventually(t, time.Minute, "the Promotion to succeed once merged", func() (bool, error) {
		promo, err := p.PromotionOf(ctx, "dev", freight.Name)
		if err != nil {
			return false, err
		}
		if promo.Terminal() && promo.Status.Phase != "Succeeded" {
			t.Fatalf("Promotion %s ended %s: %s", promo.Name, promo.Status.Phase, promo.Status.Message)
		}
		return promo.Status.Phase == "Succeeded", nil
	})
	out, err := git(ctx, bare, "show", merge+":stacks/dev.yaml")
	// yaml-update rewrites the value's line from the value on: the SHA,
	// unquoted (it quotes only what would read as a number, a bool or JSON),
	// and the line's comment gone; other lines stay byte for byte.
	if err != nil || !strings.Contains(out, "\n  commit: "+sha+"\n") || !strings.HasPrefix(out, "# the dev Stack\n") {
		t.Errorf("main after the merge (%v):\n%s", err, out)
	}
	st, err := p.Stage(ctx, "dev")
	if err != nil || st.CurrentFreight() != freight.Name {
		t.Errorf("Stage dev holds %q (%v), want Freight %s", st.CurrentFreight(), err, freight.Name)
	}
}

func git(ctx context.Context, dir string, args ...string) (string, error) {
	cmd := osexec.CommandContext(ctx, "git", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}
