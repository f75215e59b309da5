// Package controller holds the operator's reconcilers, one per kind: Stack
// (derives a Workspace and runs Updates following package stack's decisions),
// Program (publishes each generation as an artifact), Workspace (runs the
// workspace agent through a runtime and applies stack configuration through
// it) and Update (starts an operation in a workspace and follows it without
// holding a worker).
//
// # One reconcile shape
//
// Every Reconcile reads the same: load the object (not found is done), keep
// a copy as read (base), run ordered steps over a scope struct that holds
// what the reconcile has learned (stackScope, workspaceScope, updateScope; a
// Program's scope is the Program), and hand the outcome to the kind's
// finisher. Deletion replaces the steps with the kind's reconcileDelete.
//
// A step does one thing and returns nil to go on, or one typed outcome that
// ends the reconcile (outcome.go): upToDate (Ready, with an optional resync),
// a *stallingError (Stalled: someone must act; an optional look-again), a
// *waitingError (in progress: something under way will wake the object),
// errStale or errGone (nothing to write), or any other error, which is
// transient (returned: controller-runtime's backoff applies). Steps never
// set Ready, Reconciling or Stalled themselves and never requeue with
// Requeue: true; they say why, and the finisher decides the conditions.
//
// The finisher (finisher.go) is the same for all four kinds: it spells the
// outcome in the status through the kind's spelling (the markers below and
// observedGeneration), writes the status once as a merge patch with
// optimistic locking, and only once the status is stored as computed sends
// the events and metrics its transitions call for (report: a Stack's Ready
// change, its newly recorded drift check, its deletion that destroys
// nothing; a Workspace starting or stopping to fail, an Update starting and
// ending, a Program's new artifact) and runs the kind's follow-up (a Stack
// releases the Updates its stored status records; a Program prunes older
// artifacts). A write that loses a race to another writer (409 Conflict) is
// an expected outcome, requeued after a second and logged at debug level,
// never an error with a stack trace; a write that fails otherwise is counted
// as transient, never as the outcome it did not store. An event needing a
// fact the status does not hold gets it put in the status (a drift check's
// failure, a deletion that destroys nothing), never kept in memory: no step
// sends events. Every kind's write is locked, the Update's included: a
// reconcile from a cache that has not seen the Update's last write (woken by
// its follower or its Workspace meanwhile) would otherwise record, report
// and count the run's end twice. The patch's
// base carries the resourceVersion of the reconcile's own last write (its
// finalizer update), so only another writer's change makes it fail.
//
// Conditions are written by the generic markers of conditions.go
// (markReady, markReconciling, markStalled over any object exposing
// GetConditions), keeping each kind's PKO names: a Stack has Ready,
// Reconciling and Stalled with NotReadyInProgress/NotReadyStalled on Ready;
// a Workspace has Ready (its reason says what it waits for) and Stalled; an
// Update keeps PKO's Progressing, Complete and Failed (markNotStarted,
// markProgressing, markEnded) and carries beside them kstatus's Ready,
// Reconciling and Stalled, derived from PKO's in one place
// (markUpdateKstatus); a Program has none. Ready and Stalled record
// the generation they judged in status.observedGeneration, so kstatus reads
// them for the current spec. Each kind's spelling, finisher and report live
// in its *_controller_status.go.
//
// Wiring stays apart from logic: SetupWithManager, watches, predicates and
// RBAC markers in *_setup.go; the Stack's indexers in stack_indexers.go, its
// push entry point in stack_push.go, its Flux watches in stack_flux.go.
//
// Tests come in tiers: pure decisions in table tests; per-step tests of the
// Workspace and Update reconcilers (workspace_steps_test.go,
// update_steps_test.go) against the fake client and an in-process agent
// over bufconn, asserting kstatus conformance after each step, in a second;
// per-step tests of the Stack reconciler (stack_steps_test.go) against the
// fake client with writes that lose races or fail, asserting each event
// and metric is sent once its status is stored;
// the Stack controller against a real API server (stack_apiserver_test.go);
// whole flows in operator/test/e2e.
//
// It imports the operator API, the agent API and client, the workspace
// runtimes, the artifact store, git credentials and resolution, the stack
// policies, internal/conditions (a condition read from another object counts
// only for the generation it observed) and controller-runtime.
package controller
