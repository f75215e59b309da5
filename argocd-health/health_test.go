package argocdhealth

import (
	"testing"

	"github.com/argoproj/argo-cd/v2/util/lua"
	"github.com/argoproj/gitops-engine/pkg/health"
)

const (
	healthy     = health.HealthStatusHealthy
	progressing = health.HealthStatusProgressing
	degraded    = health.HealthStatusDegraded
	unknown     = health.HealthStatusUnknown
)

// healthCase is one row of the mapping (README.md): a fixture and the health
// Argo CD reports for it with the install files' settings (useOpenLibs where
// set), and without the standard libraries when the message differs.
type healthCase struct {
	fixture string
	status  health.HealthStatusCode
	// message is exact but for {duration} (see matches).
	message string
	// plain is the message without Lua's standard libraries ("" = message).
	plain string
}

const engineErr = `stackflowtest: record "fx-retrying": failOn=create: create refused`

var healthCases = []healthCase{
	// Stack, captured from the operator.
	{"captured/stack-running.yaml", progressing,
		"Running up deployed-00000001 for 5f3c2a1",
		"Running up deployed-00000001 for 5f3c2a1b9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a"},
	{"captured/stack-succeeded.yaml", healthy, "Last up succeeded at 5f3c2a1",
		"Last up succeeded at 5f3c2a1b9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a"},
	{"captured/stack-succeeded-program.yaml", healthy, "Last up succeeded at 1/sha256:47d369d",
		"Last up succeeded at 1/sha256:47d369d79bc511135a6e64e0544432ea246b570a433f0e8338d23ad8e448ee08"},
	{"captured/stack-preview-succeeded.yaml", healthy,
		"Preview mode: preview of 5f3c2a1 succeeded, nothing deployed; change counts are not in Stack status (see Update previewed-00000001)",
		"Preview mode: preview of 5f3c2a1b9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a succeeded, nothing deployed; change counts are not in Stack status (see Update previewed-00000001)"},
	{"captured/stack-retrying.yaml", degraded,
		"Update failed (attempt 1 of 5), retrying {duration} after 2025-01-01T00:00:00Z: " + engineErr,
		"Update failed, retrying: the update failed (attempt 1 of 5): " + engineErr + "; retrying in {duration} (failed at 2025-01-01T00:00:00Z)"},
	{"captured/stack-retry-running.yaml", degraded,
		"Retrying after 1 failed attempt: running up retrying-00000001 for 5f3c2a1; last error: " + engineErr,
		"Retrying after 1 failed attempt: running up retrying-00000001 for 5f3c2a1b9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a; last error: " + engineErr},
	{"captured/stack-stalled.yaml", degraded,
		`Stalled (UpdateFailed): the update failed 5 times in a row: stackflowtest: record "fx-stalled": failOn=create: create refused; fix the program or its configuration, push a new commit, or request a reconciliation (retrying anyway in {duration})`, ""},
	{"captured/stack-stalled-source.yaml", degraded,
		"Stalled (SourceUnavailable): resolve branch missing: branch missing not found in file:///git/fixtures.git", ""},
	{"captured/stack-waiting-prerequisite.yaml", progressing,
		"Waiting for prerequisite stalled: prerequisite stalled's last update failed", ""},
	{"captured/stack-new-generation.yaml", progressing,
		"Waiting for the operator to process generation 2 (the status describes generation 1)", ""},
	{"captured/stack-reconcile-requested.yaml", progressing,
		"Waiting for the operator to act on reconciliation request 2025-01-01T00:00:00Z-fixture", ""},
	{"captured/stack-deleting-update-running.yaml", progressing,
		"Deleting: running up destroyed-00000001 for 5f3c2a1; the destroy runs after it",
		"Deleting: running up destroyed-00000001 for 5f3c2a1b9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a; the destroy runs after it"},
	{"captured/stack-deleting-destroy-running.yaml", progressing,
		"Deleting: running destroy destroyed-00000001 for 5f3c2a1",
		"Deleting: running destroy destroyed-00000001 for 5f3c2a1b9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a"},
	{"captured/stack-deleting-destroy-failed.yaml", degraded,
		`Deleting: destroy failed (attempt 1): stackflowtest: record "fx-doomed": failOn=delete: delete refused; retrying in {duration}, the finalizer is kept until it succeeds`, ""},

	{"captured/stack-drift-check-running.yaml", healthy, "Last up succeeded at 5f3c2a1",
		"Last up succeeded at 5f3c2a1b9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a"},
	{"captured/stack-drift-detected.yaml", degraded,
		"Drift detected: 1 resource(s) differ from the last successful update of 5f3c2a1 (update 1): update stackflowtest:index:Record::rec; checked by drifted-00000001", ""},

	// Stack, hand-written.
	{"hand/stack-no-status.yaml", progressing, "Waiting for the operator to reconcile the Stack", ""},
	{"hand/stack-awaiting-approval.yaml", health.HealthStatusSuspended, "awaiting approval: +1 ~2 -0, plan 3f9a0c1d2e4b (expires 2025-01-02T00:00:00Z)", ""},
	{"hand/stack-drift.yaml", degraded, "Drift detected (DriftFound): refresh found 1 resource changed outside Pulumi: rec", ""},
	{"hand/stack-preview-changes.yaml", healthy,
		"Preview mode: preview of 5f3c2a1 succeeded, nothing deployed; changes: create 1, same 3, update 2",
		"Preview mode: preview of 5f3c2a1b9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a succeeded, nothing deployed; changes: create 1, same 3, update 2"},
	{"hand/stack-conflict-retry.yaml", progressing, "Reconciling (RetryingAfterConflict): another update holds the stack (conflict 1, dev-2); retrying in 10s", ""},
	{"hand/stack-request-while-source-stalled.yaml", degraded, "Stalled (SourceUnavailable): program dev-program not found", ""},
	{"hand/stack-request-while-update-stalled.yaml", progressing,
		"Waiting for the operator to act on reconciliation request 2025-01-02T00:00:00Z", ""},
	{"hand/stack-running-older-generation.yaml", progressing,
		"Running up dev-00000002 for 5f3c2a1 (started for generation 2; generation 3 runs next)",
		"Running up dev-00000002 for 5f3c2a1b9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a (started for generation 2; generation 3 runs next)"},
	{"hand/stack-deleting-waiting-workspace.yaml", progressing, "Deleting: destroying: waiting for the workspace", ""},
	{"hand/stack-deleting-no-destroy.yaml", progressing, "Deleting: waiting for the operator to remove its finalizer", ""},
	{"hand/stack-deleting-stale-stall.yaml", progressing, "Deleting: waiting for the operator to destroy the stack's resources", ""},
	{"hand/stack-unknown-reasons.yaml", progressing, "Reconciling (Refreshing): refreshing before the update", ""},
	{"hand/stack-stalled-unknown-reason.yaml", degraded, "Stalled (QuotaExceeded): quota exceeded", ""},
	// spec.exports, dependency cycles, dependents holding a deletion.
	{"hand/stack-exported.yaml", healthy, "Last up succeeded at 5f3c2a1; outputs exported to ConfigMap dev-outputs and Secret dev-secrets",
		"Last up succeeded at 5f3c2a1b9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a; outputs exported to ConfigMap dev-outputs and Secret dev-secrets"},
	{"hand/stack-export-failed.yaml", degraded,
		"Export failed (ExportConflict): the outputs of dev-00000001 were not exported: ConfigMap dev-outputs exists and was not created by this Stack (no stackflow.io/exported-by annotation): it is never overwritten; delete or rename it, or export to another name", ""},
	{"hand/stack-request-while-export-failed.yaml", progressing,
		"Waiting for the operator to act on reconciliation request 2025-01-02T00:00:00Z", ""},
	{"hand/stack-dependency-cycle.yaml", degraded,
		"Dependency cycle: dev lists db as a prerequisite; db reads ConfigMap/dev-outputs, exported by dev: nothing runs until it is broken (remove a prerequisite, or stop reading an export)",
		"Stalled (DependencyCycle): dependency cycle: dev lists db as a prerequisite; db reads ConfigMap/dev-outputs, exported by dev: nothing runs until it is broken (remove a prerequisite, or stop reading an export)"},
	{"hand/stack-deleting-dependents-exist.yaml", progressing,
		"Deleting: waiting to destroy until the Stacks depending on this one are deleted: app reads ConfigMap/dev-outputs, exported by dev", ""},
	{"hand/stack-malformed-status-string.yaml", unknown, "The Stack's status is not an object", ""},
	{"hand/stack-malformed-conditions-map.yaml", progressing, "Waiting for the operator to reconcile the Stack", ""},
	{"hand/stack-malformed-condition-items.yaml", progressing, "Not ready (Pending): the operator has not decided", ""},

	// Program.
	{"captured/program-ready.yaml", healthy, "Artifact 1/sha256:47d369d published",
		"Artifact 1/sha256:47d369d79bc511135a6e64e0544432ea246b570a433f0e8338d23ad8e448ee08 published"},
	{"hand/program-no-status.yaml", progressing, "Waiting for the operator to publish the program's artifact", ""},
	{"hand/program-old-generation.yaml", progressing, "Waiting for the artifact of generation 2 (the published one is for generation 1)", ""},
	{"hand/program-malformed-status.yaml", unknown, "The Program's status is not an object", ""},

	// Workspace.
	{"captured/workspace-ready.yaml", healthy, "Agent ready at 127.0.0.1:30000 (pulumi 3.274.1)", ""},
	{"hand/workspace-stalled.yaml", degraded, "Stalled (InstallationFailed): fetch file:///git/fixtures.git: reference not found", ""},
	{"hand/workspace-stale-stall.yaml", progressing, "Waiting for the operator to apply generation 2 (the status describes generation 1)", ""},
	{"hand/workspace-stalled-new-generation.yaml", degraded, "Stalled (InstallationFailed): fetch file:///git/fixtures.git: reference not found", ""},
	{"hand/workspace-initializing.yaml", progressing, "Not ready (Initializing): waiting for the agent to start", ""},
	{"hand/workspace-old-generation.yaml", progressing, "Waiting for the operator to apply generation 2 (the status describes generation 1)", ""},
	{"hand/workspace-no-status.yaml", progressing, "Waiting for the operator to start the workspace", ""},

	// Update.
	{"captured/update-running.yaml", progressing, "Up running since 2025-01-01T00:00:00Z", ""},
	{"captured/update-succeeded.yaml", healthy, "Up succeeded: create 2", ""},
	{"captured/update-failed.yaml", degraded, "Up failed (UpdateFailed): " + engineErr, ""},
	{"hand/update-aborted.yaml", degraded, "Up failed (Aborted): workspace dev was deleted while the update ran", ""},
	{"hand/update-conflict.yaml", degraded, "Preview failed (UpdateConflict): the stack is locked by an update on host ci-runner-7 (pid 4242)", ""},
	{"hand/update-not-started.yaml", progressing, "Waiting to start the up: waiting for workspace dev to be ready", ""},
	{"hand/update-no-status.yaml", progressing, "Waiting for the operator to start the up", ""},
	{"hand/update-complete-without-failed.yaml", healthy, "Refresh succeeded: same 2", ""},
	{"hand/update-malformed-conditions.yaml", progressing, "Waiting for the operator to start the up", ""},
}

// TestHealth evaluates each fixture with Argo CD's Lua VM, with the install
// files' useOpenLibs and without the standard libraries.
func TestHealth(t *testing.T) {
	yes, no := true, false
	for _, tc := range healthCases {
		t.Run(tc.fixture, func(t *testing.T) {
			obj := fixture(t, tc.fixture)
			got := luaHealth(t, obj, nil)
			if got.Status != tc.status || !matches(got.Message, tc.message) {
				t.Errorf("health = %s %q\nwant     %s %q", got.Status, got.Message, tc.status, tc.message)
			}
			plain := tc.plain
			if plain == "" {
				plain = tc.message
			}
			got = luaHealth(t, obj, &no)
			if got.Status != tc.status || !matches(got.Message, plain) {
				t.Errorf("without the standard libraries: health = %s %q\nwant %s %q", got.Status, got.Message, tc.status, plain)
			}
			// Every standard library open (as Argo CD's built-in scripts
			// run) changes nothing either.
			if all := luaHealth(t, obj, &yes); all.Status != tc.status {
				t.Errorf("with the standard libraries: health = %s %q", all.Status, all.Message)
			}
		})
	}
}

// TestHealthCoversEveryFixture: each captured or hand-written fixture has a
// row, so a newly captured state cannot go unchecked.
func TestHealthCoversEveryFixture(t *testing.T) {
	rows := map[string]bool{}
	for _, tc := range healthCases {
		rows[tc.fixture] = true
	}
	all := allFixtures(t)
	if len(fixtures(t, "captured")) == 0 {
		t.Fatal("no captured fixtures: run STACKFLOW_UPDATE_FIXTURES=1 go test ./operator/test/e2e/ -run Fixtures")
	}
	for _, f := range all {
		if !rows[f] {
			t.Errorf("fixture %s has no row in healthCases", f)
		}
	}
	for f := range rows {
		found := false
		for _, a := range all {
			found = found || a == f
		}
		if !found {
			t.Errorf("healthCases names %s, which does not exist", f)
		}
	}
}

// TestHealthThroughGitopsEngine: the application controller's path,
// gitops-engine's GetResourceHealth with the overrides, reports the same,
// except that it answers "Pending deletion" itself for any object with a
// deletionTimestamp, before the Lua script runs, unless the object carries
// Argo CD's hook finalizer (a Stack used as a sync hook).
func TestHealthThroughGitopsEngine(t *testing.T) {
	hooks := lua.ResourceHealthOverrides(overrides(t))
	for _, tc := range healthCases {
		t.Run(tc.fixture, func(t *testing.T) {
			obj := fixture(t, tc.fixture)
			got, err := health.GetResourceHealth(obj, hooks)
			if err != nil {
				t.Fatal(err)
			}
			viaPackage, err := Health(obj)
			if err != nil || *viaPackage != *got {
				t.Errorf("Health = %+v, %v; GetResourceHealth = %+v", viaPackage, err, got)
			}
			if obj.GetDeletionTimestamp() != nil {
				if got.Status != progressing || got.Message != "Pending deletion" {
					t.Errorf("deleting object: %s %q, want gitops-engine's Progressing \"Pending deletion\"", got.Status, got.Message)
				}
				// As a sync hook it keeps the hook finalizer, and the script
				// decides.
				obj.SetFinalizers(append(obj.GetFinalizers(), "argocd.argoproj.io/hook-finalizer"))
				got, err = health.GetResourceHealth(obj, hooks)
				if err != nil {
					t.Fatal(err)
				}
			}
			if got.Status != tc.status || !matches(got.Message, tc.message) {
				t.Errorf("GetResourceHealth = %s %q, want %s %q", got.Status, got.Message, tc.status, tc.message)
			}
		})
	}
}

// TestHealthNeverFails: every script answers every fixture of every kind
// (scripts see objects of other kinds only through misconfiguration, but must
// not fail on odd input), and stripped variants of each, with a valid status.
func TestHealthNeverFails(t *testing.T) {
	cs, err := Customizations()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range allFixtures(t) {
		base := fixture(t, f)
		variants := map[string]func(map[string]any){
			"as is":             func(map[string]any) {},
			"no metadata":       func(o map[string]any) { delete(o, "metadata") },
			"metadata string":   func(o map[string]any) { o["metadata"] = "x" },
			"spec string":       func(o map[string]any) { o["spec"] = "x" },
			"status number":     func(o map[string]any) { o["status"] = int64(3) },
			"status list":       func(o map[string]any) { o["status"] = []any{"x"} },
			"generation string": func(o map[string]any) { setIn(o, "x", "metadata", "generation") },
		}
		for name, mutate := range variants {
			for _, c := range cs {
				obj := base.DeepCopy()
				mutate(obj.Object)
				for _, open := range []bool{false, true} {
					vm := lua.VM{UseOpenLibs: open}
					h, err := vm.ExecuteHealthLua(obj, c.Health)
					if err != nil {
						t.Errorf("%s script on %s (%s, openLibs %v): %v", c.Key(), f, name, open, err)
						continue
					}
					if h.Status == "" || h.Message == "" {
						t.Errorf("%s script on %s (%s): empty health %+v", c.Key(), f, name, h)
					}
				}
			}
		}
	}
}

func setIn(o map[string]any, v any, path ...string) {
	for _, p := range path[:len(path)-1] {
		next, ok := o[p].(map[string]any)
		if !ok {
			return
		}
		o = next
	}
	o[path[len(path)-1]] = v
}

// TestScriptsWithoutOpenLibsNeedNone: a kind whose script is installed without
// useOpenLibs gives exactly the same answer with the standard libraries; one
// installed with it gives the same status without them.
func TestScriptsWithoutOpenLibsNeedNone(t *testing.T) {
	yes, no := true, false
	for _, f := range allFixtures(t) {
		obj := fixture(t, f)
		with, without := luaHealth(t, obj, &yes), luaHealth(t, obj, &no)
		o := overrides(t)[obj.GroupVersionKind().Group+"/"+obj.GetKind()]
		if !o.UseOpenLibs && *with != *without {
			t.Errorf("%s: %s is installed without useOpenLibs but answers %+v with them and %+v without", f, obj.GetKind(), with, without)
		}
		if with.Status != without.Status {
			t.Errorf("%s: status %s with the standard libraries, %s without", f, with.Status, without.Status)
		}
	}
}
