package rbac

import (
	"sort"
	"testing"

	rbacv1 "k8s.io/api/rbac/v1"
)

// clusterRoleNeeds is why the operator's ClusterRole grants each verb: the
// code path that needs it. A verb granted without an entry, or an entry not
// granted, fails TestEveryVerbJustified: adding a +kubebuilder:rbac marker
// means saying here why, and removing a code path means removing its verb.
// Keys are "<group>/<resource> <verb>" ("" for the core group omitted).
var clusterRoleNeeds = map[string]string{
	// Stacks (controller/stack_controller.go).
	"pulumi.com/stacks get":          "StackReconciler.Reconcile reads Stacks from the cache (the For watch's informer)",
	"pulumi.com/stacks list":         "the Stack informer; NotePush and the prerequisite/Program/ConfigMap map functions list Stacks by index (stack_controller.go)",
	"pulumi.com/stacks watch":        "the Stack informer (For, and the prerequisite watch)",
	"pulumi.com/stacks update":       "reconcileFinalizer adds and stack_delete.go removes finalizer.stack.pulumi.com",
	"pulumi.com/stacks patch":        "NotePush sets the push annotation (webhook); requestResync sets a prerequisite's reconcile request annotation",
	"pulumi.com/stacks/status patch": "StackReconciler's one status merge patch per reconcile (the finisher, finisher.go)",
	"pulumi.com/stacks/finalizers update": "the Stack's Workspace and Updates carry controller references with blockOwnerDeletion " +
		"(SetControllerReference in reconcileWorkspace, stack_updates.go startUpdate), which OwnerReferencesPermissionEnforcement checks against the owner's finalizers",

	// Programs (controller/program_controller.go; read by the Stack controller and the artifact server).
	// PlanApprovals (controller/stack_approval.go): read, never written.
	"stackflow.io/planapprovals get":   "planVerdicts reads the PlanApprovals naming a Stack from the cache (the PlanApproval informer)",
	"stackflow.io/planapprovals list":  "the PlanApproval informer; planVerdicts lists them by the spec.stackName index",
	"stackflow.io/planapprovals watch": "the PlanApproval informer: an approval wakes the Stack it names (approvedStack)",
	"pulumi.com/programs get":          "ProgramReconciler.Reconcile, resolveSource for programRef, the artifact renderer (cache)",
	"pulumi.com/programs list":         "the Program informer (setupPrograms registers it on every replica)",
	"pulumi.com/programs watch":        "the Program informer",
	"pulumi.com/programs update":       "ProgramReconciler adds and removes its finalizer",
	"pulumi.com/programs/status patch": "ProgramReconciler's status patch (artifact URL and digest)",

	// Workspaces (controller/workspace_controller.go, created by the Stack controller).
	"auto.pulumi.com/workspaces get":          "WorkspaceReconciler.Reconcile, reconcileWorkspace and the Update controller read Workspaces (cache)",
	"auto.pulumi.com/workspaces list":         "the Workspace informer (For, Owns in the Stack controller, Watches in the Update controller)",
	"auto.pulumi.com/workspaces watch":        "the Workspace informer",
	"auto.pulumi.com/workspaces create":       "reconcileWorkspace creates a Stack's Workspace",
	"auto.pulumi.com/workspaces update":       "reconcileWorkspace updates the Workspace spec; WorkspaceReconciler adds and removes its finalizer",
	"auto.pulumi.com/workspaces delete":       "stack_delete.go and reclaimWorkspace delete a Stack's Workspace",
	"auto.pulumi.com/workspaces/status patch": "WorkspaceReconciler's one status patch (the finisher, finisher.go)",
	"auto.pulumi.com/workspaces/finalizers update": "the agent token Secret, the StatefulSet and the Service carry the Workspace's controller reference " +
		"with blockOwnerDeletion (workspace_controller.go reconcileToken, workspace/podruntime.go Ensure)",

	// Updates (controller/update_controller.go, created by the Stack controller).
	"auto.pulumi.com/updates get":               "UpdateReconciler.Reconcile and the Stack controller read Updates (cache; APIReader before creating)",
	"auto.pulumi.com/updates list":              "the Update informer; ownedUpdates lists a Stack's Updates",
	"auto.pulumi.com/updates watch":             "the Update informer (For, Owns in the Stack controller)",
	"auto.pulumi.com/updates create":            "stack_updates.go startUpdate creates the Update it decided on",
	"auto.pulumi.com/updates patch":             "releaseUpdates removes the result finalizer once the Stack recorded the result",
	"auto.pulumi.com/updates delete":            "reconcileTTL deletes finished Updates; releaseUpdates deletes old drift checks",
	"auto.pulumi.com/updates/status patch":      "UpdateReconciler's one status patch (the finisher, finisher.go)",
	"auto.pulumi.com/updates/finalizers update": "the outputs Secret carries the Update's controller reference with blockOwnerDeletion (writeOutputs)",

	// Secrets: read by name from the API server, never listed or watched
	// (operator/secrets.go uncachedSecrets).
	"secrets get": "secretsRef/envRefs/gitAuth/envSecrets of a Stack (stack_controller_source.go readInputs, gitCredentials), " +
		"the agent token (reconcileToken, update_controller.go), outputs (stack_updates.go readOutputs), " +
		"redaction of a workspace pod's message (podruntime.go secretValues), the local runtime's env (local.go), the inputs digest key (operator.go)",
	"secrets create": "the agent token Secret (reconcileToken), the immutable outputs Secret of an Update (writeOutputs), the inputs digest key (operator.go inputsDigestKey), " +
		"a Stack's exported Secret (stack_exports.go writeExport)",
	"secrets update": "a Stack's exported Secret holds its last update's outputs (writeExport; only a Secret the Stack created, by its stackflow.io/exported-by annotation)",

	// ConfigMaps: referenced by Stacks; a change wakes the Stack.
	"configmaps get":    "configRef and envs of a Stack (readInputs, cache); the local runtime's env (local.go, API reader)",
	"configmaps list":   "the ConfigMap informer of the Stack controller's watch (a referenced ConfigMap appearing or changing wakes the Stack)",
	"configmaps watch":  "the ConfigMap informer",
	"configmaps create": "a Stack's exported ConfigMap (spec.exports, stack_exports.go writeExport)",
	"configmaps update": "a Stack's exported ConfigMap holds its last update's outputs (writeExport; only one the Stack created)",

	// The pod runtime (workspace/podruntime.go): no delete, the garbage
	// collector removes the owned StatefulSet and Service.
	"apps/statefulsets get":              "PodRuntime.Ensure reads the workspace StatefulSet (cache)",
	"apps/statefulsets list":             "the StatefulSet informer (Owns in the Workspace controller)",
	"apps/statefulsets watch":            "the StatefulSet informer",
	"apps/statefulsets create":           "PodRuntime.Ensure creates the workspace StatefulSet",
	"apps/statefulsets update":           "PodRuntime.Ensure replaces the pod template when its hash changes",
	"services get":                       "PodRuntime.Ensure reads the workspace's headless Service (cache)",
	"services list":                      "the Service informer the cached read starts",
	"services watch":                     "the Service informer",
	"services create":                    "PodRuntime.Ensure creates the headless Service",
	"services update":                    "PodRuntime.Ensure keeps the Service's ports, selector and labels",
	"namespaces get":                     "PodRuntime.Ensure reads the workspace's Namespace by name (API reader, uncached) for its Pod Security labels, with --pod-security-enforcement",
	"auto.pulumi.com/workspaces/rpc use": "with --workspace-auth=kube every agent's SubjectAccessReview checks that the operator may use its workspace (agent.KubeAuthenticator)",
	"pods get":                           "PodRuntime.podHealth reads the workspace pod (cache, workspace pods only: CacheOptions)",
	"pods list":                          "the Pod informer (Workspace controller's pod watch), label-selected to workspace pods",
	"pods watch":                         "the Pod informer",

	// Events: the controllers' recorders (mgr.GetEventRecorderFor).
	"events create": "events mirroring Stack, Workspace, Update and Program conditions",
	"events patch":  "the event recorder aggregates repeated events by patching their count",

	// Flux sources (controller/stack_flux.go): watched once their CRDs are served.
	"source.toolkit.fluxcd.io/gitrepositories get":   "fluxSource reads the artifact of a Stack's Flux source (cache)",
	"source.toolkit.fluxcd.io/gitrepositories list":  "the fluxWatcher informer",
	"source.toolkit.fluxcd.io/gitrepositories watch": "the fluxWatcher informer (a new artifact wakes the Stacks using it)",
	"source.toolkit.fluxcd.io/ocirepositories get":   "fluxSource",
	"source.toolkit.fluxcd.io/ocirepositories list":  "the fluxWatcher informer",
	"source.toolkit.fluxcd.io/ocirepositories watch": "the fluxWatcher informer",
	"source.toolkit.fluxcd.io/buckets get":           "fluxSource",
	"source.toolkit.fluxcd.io/buckets list":          "the fluxWatcher informer",
	"source.toolkit.fluxcd.io/buckets watch":         "the fluxWatcher informer",
}

// leaderElectionNeeds is why the leader election Role (in the operator's
// namespace) grants each verb (operator/leaderelection.go: client-go's
// LeaseLock, without an event recorder).
var leaderElectionNeeds = map[string]string{
	"coordination.k8s.io/leases get":    "LeaseLock.Get: who holds the Lease",
	"coordination.k8s.io/leases create": "LeaseLock.Create: the first replica creates the Lease",
	"coordination.k8s.io/leases update": "LeaseLock.Update: acquire, renew, and release on a clean shutdown",
}

// metricsAuthNeeds is why the metrics authentication ClusterRole grants each
// verb (operator/internal/operator/servers.go, --metrics-auth=kube).
var metricsAuthNeeds = map[string]string{
	"authentication.k8s.io/tokenreviews create":        "requireAccess: who the scraper's bearer token belongs to",
	"authorization.k8s.io/subjectaccessreviews create": "requireAccess: whether that user may get /metrics",
}

// grants flattens rules into "<group>/<resource> <verb>" keys.
func grants(t *testing.T, rules []rbacv1.PolicyRule) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, r := range rules {
		if len(r.ResourceNames) > 0 || len(r.NonResourceURLs) > 0 {
			t.Fatalf("rule %+v: resourceNames and nonResourceURLs are not expected (add them to this test)", r)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					if g == "*" || res == "*" || v == "*" {
						t.Errorf("rule %+v grants a wildcard", r)
					}
					k := res + " " + v
					if g != "" {
						k = g + "/" + k
					}
					out[k] = true
				}
			}
		}
	}
	return out
}

func checkJustified(t *testing.T, what string, granted map[string]bool, needs map[string]string) {
	t.Helper()
	var unjustified, missing []string
	for k := range granted {
		if needs[k] == "" {
			unjustified = append(unjustified, k)
		}
	}
	for k := range needs {
		if !granted[k] {
			missing = append(missing, k)
		}
	}
	sort.Strings(unjustified)
	sort.Strings(missing)
	for _, k := range unjustified {
		t.Errorf("%s grants %q, which no entry justifies: name the code path that needs it in this file, or drop the marker", what, k)
	}
	for _, k := range missing {
		t.Errorf("%s does not grant %q, which is justified here (%s): restore the marker or remove the entry", what, k, needs[k])
	}
}

// TestEveryVerbJustified: the generated ClusterRole and the leader election
// Role grant exactly the verbs the tables justify.
func TestEveryVerbJustified(t *testing.T) {
	cluster, roles := loadRoles(t, clusterRoleFile)
	if len(cluster) != 1 || len(roles) != 0 {
		t.Fatalf("%s: %d ClusterRoles and %d Roles, want the one ClusterRole", clusterRoleFile, len(cluster), len(roles))
	}
	checkJustified(t, clusterRoleFile, grants(t, cluster[0].Rules), clusterRoleNeeds)

	_, le := loadRoles(t, leaderElectionFile)
	if len(le) != 1 {
		t.Fatalf("%s: %d Roles, want the leader election Role", leaderElectionFile, len(le))
	}
	checkJustified(t, leaderElectionFile+" Role "+le[0].Name, grants(t, le[0].Rules), leaderElectionNeeds)

	ma, _ := loadRoles(t, metricsAuthFile)
	if len(ma) != 1 {
		t.Fatalf("%s: %d ClusterRoles, want the metrics authentication ClusterRole", metricsAuthFile, len(ma))
	}
	checkJustified(t, metricsAuthFile, grants(t, ma[0].Rules), metricsAuthNeeds)

	// The point of the exercise, stated on its own. The one Secret the
	// operator changes is a Stack's export (update, never patch or
	// delete), and only one it created (writeExport checks the
	// stackflow.io/exported-by annotation before writing).
	g := grants(t, cluster[0].Rules)
	for _, v := range []string{"list", "watch", "patch", "delete"} {
		if g["secrets "+v] {
			t.Errorf("the ClusterRole grants secrets %s: the operator reads Secrets by name only and changes none but the exports it created", v)
		}
	}
}
