package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/provider"
)

// The tests of this file follow the Stack lifecycle a PKO user relies on:
// conflicts, stalls that still watch their source, inputs as desired state,
// TTLs that never lose a result, deletion.

// stackUpdates lists a Stack's Updates (all, deleting ones included).
func stackUpdates(t testing.TB, ns, stackName string) []autov1alpha1.Update {
	t.Helper()
	var list autoUpdateList
	if err := cp.Client.List(context.Background(), &list.UpdateList, client.InNamespace(ns), client.MatchingLabels{"pulumi.com/stack-name": stackName}); err != nil {
		t.Fatal(err)
	}
	return list.Items
}

// cliHoldLock runs `pulumi up` of stack in the repository's working clone
// whose record creation waits until release is called, so it holds the
// stack's lock until then, however slow the machine; it returns once the
// lock is taken, with release and a channel that gets the CLI's exit.
func cliHoldLock(t *testing.T, e *env, repo *gitrepo.Repo, stackName string) (release func(), exited <-chan error) {
	t.Helper()
	pulumi := filepath.Join(e.pe.Paths.PulumiRoot, "bin", "pulumi")
	hold := filepath.Join(t.TempDir(), "hold")
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	release = func() { _ = os.Remove(hold) }
	run := func(args ...string) *exec.Cmd {
		cmd := exec.Command(pulumi, args...)
		cmd.Dir = repo.Work
		cmd.Env = append(e.pe.Environ(), provider.HoldEnv+"="+hold)
		return cmd
	}
	if out, err := run("stack", "init", stackName, "--non-interactive").CombinedOutput(); err != nil {
		t.Fatalf("pulumi stack init %s: %v\n%s", stackName, err, out)
	}
	logPath := filepath.Join(t.TempDir(), "cli.log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := run("up", "--yes", "--skip-preview", "--non-interactive", "-s", stackName,
		"-c", "recordName="+stackName+"-cli", "-c", "content=cli")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); logf.Close() }()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	// Locked once the CLI's record is being created (its file appears only
	// after the sleep): wait for the backend's lock file.
	locks := filepath.Join(strings.TrimPrefix(e.pe.Backend, "file://"), ".pulumi", "locks")
	eventually(t, time.Minute, "the CLI to lock "+stackName, func() (bool, error) {
		found := false
		_ = filepath.Walk(locks, func(p string, info os.FileInfo, err error) error {
			found = found || (err == nil && !info.IsDir() && strings.Contains(p, stackName) && strings.HasSuffix(p, ".json"))
			return nil
		})
		select {
		case err := <-done:
			out, _ := os.ReadFile(logPath)
			t.Fatalf("the CLI ended before locking (%v):\n%s", err, out)
		default:
		}
		return found, nil
	})
	return release, done
}

// TestStackUpdateConflicts: a Pulumi stack locked by another run. With
// retryOnUpdateConflict the Stack retries under new Update names with backoff
// and succeeds once the lock frees; without, it stays Stalled (UpdateConflict)
// with one Warning event — no flapping — until a reconcile request.
func TestStackUpdateConflicts(t *testing.T) {
	e, repo := stackEnv(t)
	ctx := context.Background()
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": recordProgram, ".gitignore": "Pulumi.*.yaml\n"})
	releaseRetry, retrying := cliHoldLock(t, e, repo, "conf-retry")
	releaseStall, stalling := cliHoldLock(t, e, repo, "conf-stall")

	retry := newStack(e.ns, "conf-retry", pulumiv1.StackSpec{Stack: "conf-retry", GitSource: gitSpec(repo.URL(), "", sha), RetryOnUpdateConflict: true,
		Config: cfg("recordName", "conf-retry", "content", "operator")})
	stall := newStack(e.ns, "conf-stall", pulumiv1.StackSpec{Stack: "conf-stall", GitSource: gitSpec(repo.URL(), "", sha),
		Config: cfg("recordName", "conf-stall", "content", "operator")})
	for _, s := range []*pulumiv1.Stack{retry, stall} {
		if err := cp.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	waitStack(t, retry, 2*time.Minute, "retrying after the conflict", func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.ReconcilingCondition)
		return c != nil && c.Reason == pulumiv1.ReconcilingConflictRetryReason && s.Status.Conflict != nil
	})
	waitStack(t, stall, 2*time.Minute, "stalled on the conflict", stalledWith(pulumiv1.StalledConflictReason, "set spec.retryOnUpdateConflict"))
	conflicted := stall.Status.Conflict.Update
	releaseRetry()
	releaseStall()

	// Both CLI runs end well: their locks were respected.
	for _, exited := range []<-chan error{retrying, stalling} {
		if err := <-exited; err != nil {
			t.Fatalf("a CLI run holding the lock failed: %v", err)
		}
	}
	waitStack(t, retry, 3*time.Minute, "ready once the lock freed", readyAt(sha))
	names := map[string]bool{}
	for _, u := range stackUpdates(t, e.ns, "conf-retry") {
		names[u.Name] = true
	}
	if len(names) < 2 || !names[retry.Status.LastUpdate.Name] {
		t.Fatalf("updates %v: the retry must be a new Update", names)
	}
	if got, _ := e.pe.Record(t, "conf-retry"); got != "operator" {
		t.Fatalf("record = %q", got)
	}

	// Meanwhile (a window as long as the other Stack's retries and success),
	// the stalled Stack did not retry nor flap: one Update, one Warning.
	if err := get(t, stall); err != nil {
		t.Fatal(err)
	}
	if c := condition(stall, pulumiv1.StalledCondition); c == nil || c.Reason != pulumiv1.StalledConflictReason {
		t.Fatalf("the conflicted Stack left Stalled by itself: %+v", stall.Status.Conditions)
	}
	if ups := stackUpdates(t, e.ns, "conf-stall"); len(ups) != 1 || stall.Status.UpdateSequence != 1 {
		t.Fatalf("the conflicted Stack started %d updates (sequence %d)", len(ups), stall.Status.UpdateSequence)
	}
	var events corev1.EventList
	if err := cp.Client.List(ctx, &events, client.InNamespace(e.ns)); err != nil {
		t.Fatal(err)
	}
	warnings := 0
	for _, ev := range events.Items {
		if ev.InvolvedObject.Kind == "Stack" && ev.InvolvedObject.Name == "conf-stall" && ev.Type == corev1.EventTypeWarning {
			warnings += int(max(ev.Count, 1))
		}
	}
	if warnings != 1 {
		t.Fatalf("%d Warning events for the stalled Stack, want 1", warnings)
	}
	// A reconcile request runs it again, under a new name.
	patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"retry-now"}}}`, pulumiv1.ReconcileRequestAnnotation)
	if err := cp.Client.Patch(ctx, stall, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
		t.Fatal(err)
	}
	waitStack(t, stall, 3*time.Minute, "ready after the reconcile request", readyAt(sha))
	if stall.Status.LastUpdate.Name == conflicted || stall.Status.Conflict != nil {
		t.Fatalf("after the request: lastUpdate %s, conflict %+v", stall.Status.LastUpdate.Name, stall.Status.Conflict)
	}
}

// TestStalledStackWakesOnChanges: a Stack shown Stalled after repeated
// failures keeps watching its source and inputs: a new commit on its branch,
// an edited ConfigMap it reads, an edited Program each run at once. The
// stalled state is written as a previous operator would have left it: the
// new operator decides from the status alone.
func TestStalledStackWakesOnChanges(t *testing.T) {
	e := newEnv(t)
	e.opts.StackResyncOverride = time.Second
	stop := startOperator(t, e.opts)
	ctx := context.Background()
	repo := gitrepo.New(t)
	failing := strings.Replace(stackProgram, "failOn: ${failOn}", `failOn: create`, 1)
	sha1 := repo.Commit(t, "v1 fails", map[string]string{"Pulumi.yaml": failing})

	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "knobs"}, Data: map[string]string{"failOn": "create"}}
	if err := cp.Client.Create(ctx, cm); err != nil {
		t.Fatal(err)
	}
	raw := func(v any) pulumiv1.Expression { b, _ := json.Marshal(v); return pulumiv1.Expression{Raw: b} }
	program := func(failOn string) pulumiv1.ProgramSpec {
		return pulumiv1.ProgramSpec{Resources: map[string]pulumiv1.Resource{"rec": {Type: "stackflowtest:index:Record",
			Properties: map[string]pulumiv1.Expression{"name": raw("wake-program"), "content": raw("p"), "failOn": raw(failOn)}}}}
	}
	prog := &pulumiv1.Program{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "wake-program"}, Program: program("create")}
	if err := cp.Client.Create(ctx, prog); err != nil {
		t.Fatal(err)
	}
	byBranch := newStack(e.ns, "wake-branch", pulumiv1.StackSpec{Stack: "wake-branch", GitSource: gitSpec(repo.URL(), "main", ""),
		Config: cfg("recordName", "wake-branch", "content", "c")})
	fixedRepo := gitrepo.New(t)
	fixedSHA := fixedRepo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})
	byConfigMap := newStack(e.ns, "wake-configmap", pulumiv1.StackSpec{Stack: "wake-configmap", GitSource: gitSpec(fixedRepo.URL(), "", fixedSHA),
		Config:    cfg("recordName", "wake-configmap", "content", "c"),
		ConfigRef: map[string]pulumiv1.ConfigMapRef{"failOn": {Name: "knobs", Key: "failOn"}}})
	byProgram := newStack(e.ns, "wake-program", pulumiv1.StackSpec{Stack: "wake-program", ProgramRef: &pulumiv1.ProgramReference{Name: "wake-program"}})
	stacks := []*pulumiv1.Stack{byBranch, byConfigMap, byProgram}
	for _, s := range stacks {
		if err := cp.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	for _, s := range stacks {
		waitStack(t, s, 3*time.Minute, "failed once", func(s *pulumiv1.Stack) bool {
			return s.Status.LastUpdate != nil && s.Status.LastUpdate.State == pulumiv1.FailedStackStateMessage && s.Status.CurrentUpdate == nil
		})
	}
	// The operator stops; the status says five failures, as a previous
	// operator would have left it after retrying (the default backoff cap, an
	// hour, is far away).
	stop()
	for _, s := range stacks {
		if err := get(t, s); err != nil {
			t.Fatal(err)
		}
		base := s.DeepCopy()
		// A retry the operator started before it stopped (under load the
		// three first failures take a while) ends failing too, and the
		// next operator records it: it is then the fifth.
		s.Status.LastUpdate.Failures = 5
		if s.Status.CurrentUpdate != nil {
			s.Status.LastUpdate.Failures = 4
		}
		s.Status.LastUpdate.LastResyncTime = metav1.Now()
		if err := cp.Client.Status().Patch(ctx, s, client.MergeFrom(base)); err != nil {
			t.Fatal(err)
		}
	}
	startOperator(t, e.opts)
	for _, s := range stacks {
		waitStack(t, s, time.Minute, "stalled", stalledWith(pulumiv1.StalledUpdateFailedReason, "failed 5 times in a row"))
	}
	seq := map[string]int64{}
	for _, s := range stacks {
		seq[s.Name] = s.Status.UpdateSequence
	}

	sha2 := repo.Commit(t, "v2 fixed", map[string]string{"Pulumi.yaml": stackProgram})
	mutate(t, cm, func() { cm.Data["failOn"] = "" })
	mutate(t, prog, func() { prog.Program = program("") })
	waitStack(t, byBranch, 2*time.Minute, "deployed the new commit", readyAt(sha2))
	waitStack(t, byConfigMap, 2*time.Minute, "deployed the new ConfigMap value", readyAt(fixedSHA))
	waitStack(t, byProgram, 2*time.Minute, "deployed the edited Program", func(s *pulumiv1.Stack) bool {
		return readyState(s) && s.Status.LastUpdate.State == pulumiv1.SucceededStackStateMessage && strings.HasPrefix(s.Status.LastUpdate.LastSuccessfulCommit, "2/")
	})
	for _, s := range stacks {
		// One update each: the change, not a retry.
		if s.Status.UpdateSequence != seq[s.Name]+1 {
			t.Errorf("%s ran %d updates after stalling, want 1", s.Name, s.Status.UpdateSequence-seq[s.Name])
		}
	}
	if sha1 == sha2 {
		t.Fatal("no new commit")
	}
}

// TestStalledStackHealsByItself: a failure outside the Stack (here the
// record's file is blocked by a directory) stalls it after the threshold; it
// is still retried at the backoff cap and becomes Ready once the outage ends,
// with no change to the Stack.
func TestStalledStackHealsByItself(t *testing.T) {
	e, repo := stackEnv(t)
	ctx := context.Background()
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})
	blocker := filepath.Join(e.pe.RecordsDir, "outage", "placeholder")
	if err := os.MkdirAll(blocker, 0o755); err != nil {
		t.Fatal(err)
	}
	s := newStack(e.ns, "outage", pulumiv1.StackSpec{Stack: "outage", GitSource: gitSpec(repo.URL(), "", sha), RetryMaxBackoffDurationSeconds: 2,
		Config: cfg("recordName", "outage", "content", "healed")})
	if err := cp.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	waitStack(t, s, 3*time.Minute, "stalled by the outage", stalledWith(pulumiv1.StalledUpdateFailedReason, "failed 5 times in a row"))
	if err := os.RemoveAll(filepath.Join(e.pe.RecordsDir, "outage")); err != nil {
		t.Fatal(err)
	}
	waitStack(t, s, 2*time.Minute, "healed", readyAt(sha))
	if got, _ := e.pe.Record(t, "outage"); got != "healed" {
		t.Fatalf("record = %q", got)
	}
	if s.Generation != 1 {
		t.Fatalf("the Stack was changed (generation %d)", s.Generation)
	}
}

// TestStackInputsAreDesiredState: a changed value in a referenced ConfigMap
// (configRef) or Secret (secretsRef) runs an up, once per distinct value; the
// digest in status reveals nothing of the Secret.
func TestStackInputsAreDesiredState(t *testing.T) {
	e := newEnv(t)
	// No resync override: the ConfigMap watch wakes the Stack, and Secrets
	// (never watched) are re-read every SecretPollInterval.
	e.opts.SecretPollInterval = 2 * time.Second
	startOperator(t, e.opts)
	repo := gitrepo.New(t)
	ctx := context.Background()
	program := strings.Replace(stackProgram, "content: ${content}", "content: ${content}-${password}", 1)
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": program})
	const pw1, pw2 = "first-s3cret-value", "second-s3cret-value"
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "db"}, StringData: map[string]string{"password": pw1}}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "app"}, Data: map[string]string{"content": "c1"}}
	for _, o := range []client.Object{sec, cm} {
		if err := cp.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	s := newStack(e.ns, "inputs", pulumiv1.StackSpec{Stack: "inputs", GitSource: gitSpec(repo.URL(), "", sha),
		Config:    cfg("recordName", "inputs"),
		ConfigRef: map[string]pulumiv1.ConfigMapRef{"content": {Name: "app", Key: "content"}},
		SecretRefs: map[string]pulumiv1.ResourceRef{"password": {SelectorType: pulumiv1.ResourceSelectorSecret,
			ResourceSelector: pulumiv1.ResourceSelector{SecretRef: &pulumiv1.SecretSelector{Name: "db", Key: "password"}}}}})
	if err := cp.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	recordIs := func(want string) func(*pulumiv1.Stack) bool {
		return func(s *pulumiv1.Stack) bool {
			got, _ := e.pe.Record(t, "inputs")
			return readyAt(sha)(s) && got == want
		}
	}
	waitStack(t, s, 3*time.Minute, "deployed", recordIs("c1-"+pw1))
	d1 := s.Status.LastUpdate.InputsDigest
	if d1 == "" || s.Status.UpdateSequence != 1 {
		t.Fatalf("inputs digest %q, sequence %d", d1, s.Status.UpdateSequence)
	}

	// A change that is not a value (a label) runs nothing; the value change
	// after it runs exactly one up.
	mutate(t, cm, func() { cm.Labels = map[string]string{"touched": "yes"} })
	mutate(t, cm, func() { cm.Data["content"] = "c2" })
	waitStack(t, s, 2*time.Minute, "redeployed with the new ConfigMap value", recordIs("c2-"+pw1))
	if s.Status.UpdateSequence != 2 {
		t.Fatalf("sequence %d after one ConfigMap value change, want 2", s.Status.UpdateSequence)
	}
	// A rotated Secret reaches the program: the workspace restarts with it.
	mutate(t, sec, func() { sec.Data = map[string][]byte{"password": []byte(pw2)} })
	waitStack(t, s, 3*time.Minute, "redeployed with the rotated Secret", recordIs("c2-"+pw2))
	if s.Status.UpdateSequence != 3 || s.Status.LastUpdate.InputsDigest == d1 {
		t.Fatalf("sequence %d, digest %q after the rotation", s.Status.UpdateSequence, s.Status.LastUpdate.InputsDigest)
	}
	all, _ := json.Marshal(s)
	for _, pw := range []string{pw1, pw2} {
		if strings.Contains(string(all), pw) {
			t.Fatal("a secret value in the Stack")
		}
	}
	for _, h := range stackHistory(t, e, repo, "inputs") {
		if h.Kind != "update" {
			t.Fatalf("history %+v", h)
		}
	}
	if n := len(stackHistory(t, e, repo, "inputs")); n != 3 {
		t.Fatalf("%d updates in the backend history, want 3 (one per distinct inputs)", n)
	}
}

// TestUpdateTTLZeroKeepsResults: with ttlAfterCompleted 0s every Update is
// deleted as soon as its Stack recorded it: no loop (one backend update per
// commit), no lost result, and a destroyOnFinalize deletion completes.
func TestUpdateTTLZeroKeepsResults(t *testing.T) {
	e, repo := stackEnv(t)
	ctx := context.Background()
	sha1 := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})
	zero := metav1.Duration{}
	s := newStack(e.ns, "ttl-zero", pulumiv1.StackSpec{Stack: "ttl-zero", GitSource: gitSpec(repo.URL(), "main", ""), DestroyOnFinalize: true,
		UpdateTemplate: &pulumiv1.UpdateTemplate{Spec: &autov1alpha1.UpdateSpec{TtlAfterCompleted: &zero}},
		Config:         cfg("recordName", "ttl-zero", "content", "one")})
	if err := cp.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	waitStack(t, s, 3*time.Minute, "ready", readyAt(sha1))
	first := s.Status.LastUpdate.Name
	eventually(t, time.Minute, "the recorded Update deleted", func() (bool, error) {
		return len(stackUpdates(t, e.ns, "ttl-zero")) == 0, nil
	})
	sha2 := repo.Commit(t, "v2", map[string]string{"Pulumi.yaml": strings.Replace(stackProgram, "content: ${content}", "content: v2-${content}", 1)})
	waitStack(t, s, 3*time.Minute, "ready at the second commit", readyAt(sha2))
	if s.Status.LastUpdate.Name == first || s.Status.UpdateSequence != 2 {
		t.Fatalf("lastUpdate %s, sequence %d: want the second Update recorded", s.Status.LastUpdate.Name, s.Status.UpdateSequence)
	}
	perCommit := map[string]int{}
	for _, h := range stackHistory(t, e, repo, "ttl-zero") {
		perCommit[h.Environment["git.head"]]++
	}
	if perCommit[sha1] != 1 || perCommit[sha2] != 1 || len(perCommit) != 2 {
		t.Fatalf("backend updates per commit = %v, want one each", perCommit)
	}
	if err := cp.Client.Delete(ctx, s); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, "the Stack deleted after its destroy", func() (bool, error) {
		err := get(t, s)
		return err != nil && strings.Contains(err.Error(), "not found"), err
	})
	if _, ok := e.pe.Record(t, "ttl-zero"); ok {
		t.Fatal("the destroy did not run")
	}
}

// TestStackDeletionEdges: a preview Stack never destroys (it says so); a
// Stack whose Program is deleted together with it destroys from the
// workspace as last deployed; a Stack in a namespace being deleted stalls
// with NamespaceTerminating and says how to release it.
func TestStackDeletionEdges(t *testing.T) {
	e, repo := stackEnv(t)
	ctx := context.Background()
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})

	// A real Stack and a preview of it on the same Pulumi stack (the PKO +
	// Kargo pattern).
	real := newStack(e.ns, "shared-real", pulumiv1.StackSpec{Stack: "shared", GitSource: gitSpec(repo.URL(), "", sha),
		Config: cfg("recordName", "shared", "content", "real")})
	if err := cp.Client.Create(ctx, real); err != nil {
		t.Fatal(err)
	}
	waitStack(t, real, 3*time.Minute, "ready", readyAt(sha))
	preview := newStack(e.ns, "shared-preview", pulumiv1.StackSpec{Stack: "shared", GitSource: gitSpec(repo.URL(), "", sha), Preview: true, DestroyOnFinalize: true,
		Config: cfg("recordName", "shared", "content", "real")})
	raw := func(v any) pulumiv1.Expression { b, _ := json.Marshal(v); return pulumiv1.Expression{Raw: b} }
	prog := &pulumiv1.Program{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: "gone-with-it"}, Program: pulumiv1.ProgramSpec{
		Resources: map[string]pulumiv1.Resource{"rec": {Type: "stackflowtest:index:Record", Properties: map[string]pulumiv1.Expression{"name": raw("gone-with-it"), "content": raw("p")}}}}}
	fromProgram := newStack(e.ns, "gone-with-it", pulumiv1.StackSpec{Stack: "gone-with-it", ProgramRef: &pulumiv1.ProgramReference{Name: "gone-with-it"}, DestroyOnFinalize: true})
	for _, o := range []client.Object{preview, prog, fromProgram} {
		if err := cp.Client.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	waitStack(t, preview, 3*time.Minute, "previewed", func(s *pulumiv1.Stack) bool { return readyState(s) && s.Status.LastUpdate != nil })
	waitStack(t, fromProgram, 3*time.Minute, "ready", func(s *pulumiv1.Stack) bool { return readyState(s) && s.Status.LastUpdate != nil })

	for _, o := range []client.Object{preview, prog, fromProgram} {
		if err := cp.Client.Delete(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range []client.Object{preview, fromProgram} {
		eventually(t, 3*time.Minute, o.GetName()+" deleted", func() (bool, error) {
			err := get(t, o)
			return err != nil && strings.Contains(err.Error(), "not found"), err
		})
	}
	if got, ok := e.pe.Record(t, "shared"); !ok || got != "real" {
		t.Fatalf("deleting the preview Stack destroyed the real stack's record (%q, %v)", got, ok)
	}
	if _, ok := e.pe.Record(t, "gone-with-it"); ok {
		t.Fatal("the Stack deleted with its Program did not destroy")
	}
	var events corev1.EventList
	if err := cp.Client.List(ctx, &events, client.InNamespace(e.ns)); err != nil {
		t.Fatal(err)
	}
	said := false
	for _, ev := range events.Items {
		said = said || (ev.InvolvedObject.Name == "shared-preview" && ev.Reason == pulumiv1.EventReasonDestroySkipped && strings.Contains(ev.Message, "without destroying"))
	}
	if !said {
		t.Fatal("no DestroySkipped event for the preview Stack")
	}

	// The namespace goes (envtest runs no namespace controller: the test
	// deletes the Stack as the namespace controller would).
	nsObj := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: e.ns}}
	mutateStack(t, real, func(s *pulumiv1.Stack) { s.Spec.DestroyOnFinalize = true })
	waitStack(t, real, 3*time.Minute, "ready again", readyAt(sha))
	if err := cp.Client.Delete(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Delete(ctx, &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: e.ns, Name: real.Name}}); err != nil {
		t.Fatal(err)
	}
	if err := cp.Client.Delete(ctx, real); err != nil {
		t.Fatal(err)
	}
	waitStack(t, real, 2*time.Minute, "stalled, saying how to release it", stalledWith(pulumiv1.StalledNamespaceTerminatingReason, "were NOT destroyed"))
	msg := condition(real, pulumiv1.StalledCondition).Message
	if !strings.Contains(msg, "kubectl patch stack shared-real -n "+e.ns+" --type=merge -p '{\"metadata\":{\"finalizers\":null}}'") {
		t.Fatalf("message %q does not say how to release the Stack", msg)
	}
	// The namespace refuses new Events: the instructions are on the
	// Namespace's events (kubectl describe namespace), in "default".
	found := false
	eventually(t, time.Minute, "a Warning event on the namespace with the instructions", func() (bool, error) {
		if err := cp.Client.List(ctx, &events, client.InNamespace("default")); err != nil {
			return false, err
		}
		for _, ev := range events.Items {
			found = found || (ev.InvolvedObject.Kind == "Namespace" && ev.InvolvedObject.Name == e.ns && ev.Type == corev1.EventTypeWarning &&
				strings.Contains(ev.Message, "Stack shared-real") && strings.Contains(ev.Message, "kubectl patch stack"))
		}
		return found, nil
	})
	// The instruction works.
	if err := cp.Client.Patch(ctx, real, client.RawPatch(types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`))); err != nil {
		t.Fatal(err)
	}
	eventually(t, time.Minute, "the released Stack gone", func() (bool, error) {
		err := get(t, real)
		return err != nil && strings.Contains(err.Error(), "not found"), err
	})
}

// TestSourceErrorsTransientOrPermanent: a repository that cannot be reached
// (nothing listens: a network outage) keeps the Stack Reconciling with the
// error and backoff — never Stalled — and it deploys once the server is back;
// a repository the server does not have stalls with SourceUnavailable.
func TestSourceErrorsTransientOrPermanent(t *testing.T) {
	e, repo := stackEnv(t)
	ctx := context.Background()
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": stackProgram})
	srv := gitrepo.NewHTTPServer(t, filepath.Dir(repo.Bare))
	outage := newStack(e.ns, "outage-http", pulumiv1.StackSpec{Stack: "outage-http", GitSource: gitSpec(repo.HTTPURL(srv), "main", ""),
		Config: cfg("recordName", "outage-http", "content", "over-http")})
	missing := newStack(e.ns, "missing-repo", pulumiv1.StackSpec{Stack: "missing-repo", GitSource: gitSpec("http://"+srv.Addr+"/missing.git", "main", ""),
		Config: cfg("recordName", "missing-repo", "content", "x")})
	for _, s := range []*pulumiv1.Stack{outage, missing} {
		if err := cp.Client.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	waitStack(t, outage, time.Minute, "reconciling on the unreachable source", func(s *pulumiv1.Stack) bool {
		c := condition(s, pulumiv1.ReconcilingCondition)
		return c != nil && c.Reason == pulumiv1.ReconcilingSourceUnreachableReason && strings.Contains(c.Message, "connection refused")
	})
	// Watched until it deploys: it must never show Stalled on the way.
	stalledSeen := ""
	srv.Start(t)
	waitStack(t, outage, 3*time.Minute, "deployed once the server is back", func(s *pulumiv1.Stack) bool {
		if c := condition(s, pulumiv1.StalledCondition); c != nil {
			stalledSeen = c.Reason + ": " + c.Message
		}
		return readyAt(sha)(s)
	})
	if stalledSeen != "" {
		t.Fatalf("a transient outage stalled the Stack: %s", stalledSeen)
	}
	waitStack(t, missing, time.Minute, "stalled on the missing repository", stalledWith(pulumiv1.StalledSourceUnavailableReason, "repository not found"))
}
