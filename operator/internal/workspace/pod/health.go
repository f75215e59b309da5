package pod

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
)

// HealthState is what the workspace pod's status says about the agent.
type HealthState int

const (
	// HealthStarting: the pod is being created, scheduled, pulled or
	// initialised, or the agent is preparing the program; nothing has failed.
	HealthStarting HealthState = iota
	// HealthReady: the pod is ready (the agent serves).
	HealthReady
	// HealthRetrying: something failed and Kubernetes is retrying; the
	// Workspace is not ready (Ready=False with the reason) but not stalled.
	HealthRetrying
	// HealthFailed: the failure needs the user (Stalled=True). Kubernetes keeps
	// retrying, so the state recovers by itself when the pod becomes ready.
	HealthFailed
)

func (s HealthState) String() string {
	switch s {
	case HealthStarting:
		return "Starting"
	case HealthReady:
		return "Ready"
	case HealthRetrying:
		return "Retrying"
	case HealthFailed:
		return "Failed"
	}
	return fmt.Sprintf("HealthState(%d)", int(s))
}

// Health is the classification of a workspace pod.
type Health struct {
	State HealthState
	// Reason is a Workspace condition reason (autov1alpha1.WorkspaceReason*).
	Reason string
	// Message names the container, the kubelet's reason and, for a container
	// that exited, the last line of its termination message. It is not
	// redacted: the caller masks secret values before showing it.
	Message string
	// RecheckAfter, when positive, is when the classification changes by the
	// clock alone (a retrying state reaching its threshold).
	RecheckAfter time.Duration
}

// Thresholds decide when a retrying workspace pod counts as failed (stalled).
type Thresholds struct {
	// CrashLoopRestarts: a container that exited with an error is failed once
	// the kubelet restarted it this many times (default 3).
	CrashLoopRestarts int32
	// ImagePull: an image that cannot be pulled is failed once the pod has
	// existed this long (default 1 minute).
	ImagePull time.Duration
	// CreateContainer: a container the runtime cannot create
	// (CreateContainerError) is failed once the pod has existed this long
	// (default 1 minute).
	CreateContainer time.Duration
	// Unschedulable: a pod the scheduler cannot place is failed once it has
	// been unschedulable this long (default 5 minutes).
	Unschedulable time.Duration
}

// DefaultThresholds are the thresholds the operator uses.
func DefaultThresholds() Thresholds {
	return Thresholds{CrashLoopRestarts: 3, ImagePull: time.Minute, CreateContainer: time.Minute, Unschedulable: 5 * time.Minute}
}

// withDefaults fills unset thresholds.
func (t Thresholds) withDefaults() Thresholds {
	d := DefaultThresholds()
	if t.CrashLoopRestarts <= 0 {
		t.CrashLoopRestarts = d.CrashLoopRestarts
	}
	if t.ImagePull <= 0 {
		t.ImagePull = d.ImagePull
	}
	if t.CreateContainer <= 0 {
		t.CreateContainer = d.CreateContainer
	}
	if t.Unschedulable <= 0 {
		t.Unschedulable = d.Unschedulable
	}
	return t
}

// Classified termination messages: the agent writes "<Reason>: <message>" to
// its termination message file when it cannot prepare the program.
var agentReasons = []string{autov1alpha1.WorkspaceReasonSourceUnavailable, autov1alpha1.WorkspaceReasonInstallationFailed}

// SplitAgentReason splits a line the agent left when it stopped into its
// classification (a Workspace reason, "" when unclassified) and message.
func SplitAgentReason(line string) (reason, msg string) {
	for _, r := range agentReasons {
		if rest, ok := strings.CutPrefix(line, r+": "); ok {
			return r, rest
		}
	}
	return "", line
}

// LastLine is the last non-empty line of s, trimmed and capped in length.
func LastLine(s string) string { return lastLine(s) }

// maxLineLength caps the log line quoted in a message (it ends up in the
// Workspace's and the Stack's conditions).
const maxLineLength = 512

// Kubelet waiting reasons.
const (
	waitErrImagePull        = "ErrImagePull"
	waitImagePullBackOff    = "ImagePullBackOff"
	waitErrImageNeverPull   = "ErrImageNeverPull"
	waitInvalidImageName    = "InvalidImageName"
	waitRegistryUnavailable = "RegistryUnavailable"
	waitSignatureValidation = "SignatureValidationFailed"
	waitCreateContainerCfg  = "CreateContainerConfigError"
	waitCreateContainer     = "CreateContainerError"
	waitPreCreateHook       = "PreCreateHookError"
	waitPreStartHook        = "PreStartHookError"
	waitPostStartHook       = "PostStartHookError"
	waitCrashLoopBackOff    = "CrashLoopBackOff"
	waitRunContainerError   = "RunContainerError"
)

// Classify decides, from the workspace pod's status alone, whether the agent
// is starting, ready, failing while Kubernetes retries, or failed. p may be
// nil (the StatefulSet has not created it yet). wantHash is the pod spec hash
// the pod must carry (AnnotationPodSpecHash): an older pod is being replaced
// and its failures no longer count. Nothing is remembered between calls: the
// result follows the pod, so a pod that becomes ready is Ready again.
//
// Thresholds (see Thresholds for the defaults):
//   - a container waiting with InvalidImageName, ErrImageNeverPull or
//     CreateContainerConfigError: failed at once (the spec or a referenced
//     object must change);
//   - ErrImagePull, ImagePullBackOff: retrying, failed once the pod is older
//     than Thresholds.ImagePull; CreateContainerError likewise with
//     Thresholds.CreateContainer;
//   - a container that exited with an error: retrying, failed once restarted
//     Thresholds.CrashLoopRestarts times, or at once when the agent reported
//     SourceUnavailable in its termination message;
//   - unschedulable: retrying with the scheduler's message, failed after
//     Thresholds.Unschedulable;
//   - a failed pod (evicted): retrying (the StatefulSet replaces it).
func Classify(p *corev1.Pod, wantHash string, now time.Time, th Thresholds) Health {
	th = th.withDefaults()
	switch {
	case p == nil:
		return Health{State: HealthStarting, Message: "waiting for the StatefulSet to create the workspace pod"}
	case !p.DeletionTimestamp.IsZero():
		return Health{State: HealthStarting, Message: fmt.Sprintf("workspace pod %s is being deleted", p.Name)}
	case wantHash != "" && p.Annotations[AnnotationPodSpecHash] != wantHash:
		return Health{State: HealthStarting, Message: fmt.Sprintf("workspace pod %s is being replaced", p.Name)}
	case podCondition(p, corev1.PodReady) == corev1.ConditionTrue:
		return Health{State: HealthReady, Message: fmt.Sprintf("workspace pod %s is ready", p.Name)}
	case p.Status.Phase == corev1.PodFailed:
		msg := fmt.Sprintf("workspace pod %s failed", p.Name)
		if p.Status.Reason != "" {
			msg += " (" + p.Status.Reason + ")"
		}
		if p.Status.Message != "" {
			msg += ": " + lastLine(p.Status.Message)
		}
		return Health{State: HealthRetrying, Reason: autov1alpha1.WorkspaceReasonPodFailed, Message: msg + "; the StatefulSet replaces it"}
	}
	if c := findCondition(p, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionFalse && c.Reason == corev1.PodReasonUnschedulable {
		since := c.LastTransitionTime.Time
		if since.IsZero() {
			since = p.CreationTimestamp.Time
		}
		msg := fmt.Sprintf("workspace pod %s cannot be scheduled", p.Name)
		if c.Message != "" {
			msg += ": " + lastLine(c.Message)
		}
		return overdue(Health{Reason: autov1alpha1.WorkspaceReasonUnschedulable, Message: msg}, now.Sub(since), th.Unschedulable)
	}
	age := now.Sub(podStart(p))
	statuses := make([]corev1.ContainerStatus, 0, len(p.Status.InitContainerStatuses)+len(p.Status.ContainerStatuses))
	statuses = append(statuses, p.Status.InitContainerStatuses...)
	statuses = append(statuses, p.Status.ContainerStatuses...)
	for i := range statuses {
		if h, ok := classifyContainer(&statuses[i], age, th); ok {
			return h
		}
	}
	for _, cs := range p.Status.InitContainerStatuses {
		if cs.State.Terminated == nil || cs.State.Terminated.ExitCode != 0 {
			return Health{State: HealthStarting, Message: fmt.Sprintf("workspace pod %s is initialising (init container %s)", p.Name, cs.Name)}
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name == ContainerName && cs.State.Running != nil {
			return Health{State: HealthStarting, Message: fmt.Sprintf("the agent in workspace pod %s is fetching the program and installing its dependencies", p.Name)}
		}
	}
	return Health{State: HealthStarting, Message: fmt.Sprintf("workspace pod %s is starting (%s)", p.Name, phase(p))}
}

// classifyContainer reports a failing container; ok is false for one that is
// fine (or still starting).
func classifyContainer(cs *corev1.ContainerStatus, age time.Duration, th Thresholds) (Health, bool) {
	if cs.Ready {
		return Health{}, false
	}
	if w := cs.State.Waiting; w != nil {
		msg := fmt.Sprintf("container %s: %s", cs.Name, w.Reason)
		if w.Message != "" {
			msg += ": " + lastLine(w.Message)
		}
		switch w.Reason {
		case waitInvalidImageName, waitErrImageNeverPull:
			return Health{State: HealthFailed, Reason: autov1alpha1.WorkspaceReasonImagePullFailed, Message: msg}, true
		case waitErrImagePull, waitImagePullBackOff, waitRegistryUnavailable, waitSignatureValidation:
			return overdue(Health{Reason: autov1alpha1.WorkspaceReasonImagePullFailed, Message: msg}, age, th.ImagePull), true
		case waitCreateContainerCfg:
			return Health{State: HealthFailed, Reason: autov1alpha1.WorkspaceReasonContainerConfigInvalid, Message: msg}, true
		case waitCreateContainer, waitPreCreateHook, waitPreStartHook, waitPostStartHook:
			return overdue(Health{Reason: autov1alpha1.WorkspaceReasonContainerConfigInvalid, Message: msg}, age, th.CreateContainer), true
		}
	}
	// An exit with an error, now or before the current (re)start. A running
	// container that failed before still counts, so a crash loop does not
	// flap between failed and starting at each restart.
	term := cs.State.Terminated
	if term == nil || term.ExitCode == 0 {
		term = cs.LastTerminationState.Terminated
	}
	if term == nil || term.ExitCode == 0 {
		if w := cs.State.Waiting; w != nil && (w.Reason == waitCrashLoopBackOff || w.Reason == waitRunContainerError) {
			msg := fmt.Sprintf("container %s: %s", cs.Name, w.Reason)
			if w.Message != "" {
				msg += ": " + lastLine(w.Message)
			}
			return crashLoop(Health{Reason: autov1alpha1.WorkspaceReasonCrashLooping, Message: msg}, cs.RestartCount, th), true
		}
		return Health{}, false
	}
	reason, line := SplitAgentReason(lastLine(term.Message))
	if reason == "" {
		reason = autov1alpha1.WorkspaceReasonCrashLooping
	}
	how := term.Reason
	if how == "" {
		how = "an error"
	}
	detail := fmt.Sprintf("%s (exit code %d", how, term.ExitCode)
	if cs.RestartCount > 0 {
		detail += fmt.Sprintf(", restarted %d %s", cs.RestartCount, plural(cs.RestartCount, "time", "times"))
	}
	if w := cs.State.Waiting; w != nil && w.Reason == waitCrashLoopBackOff {
		detail += ", " + waitCrashLoopBackOff
	}
	detail += ")"
	var msg string
	switch {
	case reason != autov1alpha1.WorkspaceReasonCrashLooping:
		// The agent's own account comes first.
		msg = fmt.Sprintf("%s (container %s exited with %s)", line, cs.Name, detail)
	case line != "":
		msg = fmt.Sprintf("container %s exited with %s: %s", cs.Name, detail, line)
	default:
		msg = fmt.Sprintf("container %s exited with %s", cs.Name, detail)
	}
	h := Health{Reason: reason, Message: msg}
	if reason == autov1alpha1.WorkspaceReasonSourceUnavailable {
		// The agent found the source missing or refused: retrying will not
		// help until the source or the spec changes.
		h.State = HealthFailed
		return h, true
	}
	return crashLoop(h, cs.RestartCount, th), true
}

// overdue is h retrying, or failed once elapsed reaches limit.
func overdue(h Health, elapsed, limit time.Duration) Health {
	if elapsed >= limit {
		h.State = HealthFailed
		return h
	}
	h.State = HealthRetrying
	h.RecheckAfter = limit - elapsed
	return h
}

// crashLoop is h retrying, or failed after th.CrashLoopRestarts restarts.
func crashLoop(h Health, restarts int32, th Thresholds) Health {
	if restarts >= th.CrashLoopRestarts {
		h.State = HealthFailed
	} else {
		h.State = HealthRetrying
	}
	return h
}

// lastLine is the last non-empty line of s, trimmed and capped.
func lastLine(s string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if l := strings.TrimSpace(lines[i]); l != "" {
			if len(l) > maxLineLength {
				l = l[:maxLineLength] + "…"
			}
			return l
		}
	}
	return ""
}

func plural(n int32, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func podStart(p *corev1.Pod) time.Time {
	if p.Status.StartTime != nil && !p.Status.StartTime.IsZero() {
		return p.Status.StartTime.Time
	}
	return p.CreationTimestamp.Time
}

func phase(p *corev1.Pod) string {
	if p.Status.Phase == "" {
		return string(corev1.PodPending)
	}
	return string(p.Status.Phase)
}

func findCondition(p *corev1.Pod, typ corev1.PodConditionType) *corev1.PodCondition {
	for i := range p.Status.Conditions {
		if p.Status.Conditions[i].Type == typ {
			return &p.Status.Conditions[i]
		}
	}
	return nil
}

func podCondition(p *corev1.Pod, typ corev1.PodConditionType) corev1.ConditionStatus {
	if c := findCondition(p, typ); c != nil {
		return c.Status
	}
	return corev1.ConditionUnknown
}

// SecretNames are the Secrets a pod spec reads (env secretKeyRef, envFrom
// secretRef, secret and projected volumes), sorted: their values are masked
// in what is reported about the pod.
func SecretNames(spec *corev1.PodSpec) []string {
	seen := map[string]bool{}
	add := func(name string) {
		if name != "" {
			seen[name] = true
		}
	}
	for _, cs := range [][]corev1.Container{spec.InitContainers, spec.Containers} {
		for _, c := range cs {
			for _, e := range c.Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
					add(e.ValueFrom.SecretKeyRef.Name)
				}
			}
			for _, f := range c.EnvFrom {
				if f.SecretRef != nil {
					add(f.SecretRef.Name)
				}
			}
		}
	}
	for _, v := range spec.Volumes {
		if v.Secret != nil {
			add(v.Secret.SecretName)
		}
		if v.Projected != nil {
			for _, src := range v.Projected.Sources {
				if src.Secret != nil {
					add(src.Secret.Name)
				}
			}
		}
	}
	return slices.Sorted(maps.Keys(seen))
}
