package workspace

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/podsecurity"
)

// The pod runtime creates and updates the StatefulSet and Service (read from
// the cache) and deletes neither: the garbage collector does, through their
// owner references (Remove). It reads the workspace pod (cached, labelled
// ones only) and, to redact a pod's message, the Secrets the pod reads.
// +kubebuilder:rbac:groups=apps,resources=statefulsets,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list;watch;create;update
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch
// +kubebuilder:rbac:groups="",resources=secrets,verbs=get
// With --pod-security-enforcement it reads the workspace's Namespace (its
// Pod Security labels), by name, uncached.
// +kubebuilder:rbac:groups="",resources=namespaces,verbs=get

// PodRuntime runs each workspace as a StatefulSet of one pod behind a headless
// Service, both owned by the Workspace (deleted with it).
type PodRuntime struct {
	Client  client.Client
	Scheme  *runtime.Scheme
	Options pod.Options
	// Health decides when a failing workspace pod is stalled; zero fields
	// take pod.DefaultThresholds.
	Health pod.Thresholds
	// Now is the clock of the health thresholds; default time.Now.
	Now func() time.Time
	// PodSecurity, when enabled, refuses a workspace pod its namespace's Pod
	// Security level forbids, before creating or changing its StatefulSet.
	PodSecurity *podsecurity.Checker
	// Reader reads Namespaces (uncached: no cluster-wide watch) for
	// PodSecurity.
	Reader client.Reader
}

var _ Runtime = (*PodRuntime)(nil)

// TokenSecretName is the Secret holding a workspace agent's bearer token:
// "<workspace>-agent-token-<first 8 characters of its UID>". The UID makes
// each Workspace's token its own: a Workspace recreated under the same name
// gets a new Secret and a new token at once, while its predecessor's is left
// to the garbage collector (no delete or update right on Secrets needed).
func TokenSecretName(ws *autov1alpha1.Workspace) string {
	name := ws.Name + "-agent-token"
	if uid := string(ws.UID); len(uid) >= 8 {
		name += "-" + uid[:8]
	}
	return name
}

// Ensure creates or updates the StatefulSet and Service. The pod template is
// replaced only when its hash (source, image, env, pod shape) changes, or,
// for a new source revision alone, when no agent serves: a serving agent
// checks the new revision out in place (the Workspace controller asks it to),
// keeping its pod.
func (r *PodRuntime) Ensure(ctx context.Context, ws *autov1alpha1.Workspace, _ string) (Status, error) {
	opts := r.Options
	if opts.AgentAuth != pod.AgentAuthKube {
		opts.TokenSecretName = TokenSecretName(ws)
	}
	sts, svc, err := pod.Build(ws, opts)
	if err != nil {
		return Status{Failed: true, Reason: autov1alpha1.WorkspaceReasonSpecInvalid, Message: err.Error()}, nil
	}
	// The variables of envFrom Secrets are known from their keys only: read
	// them, and build again with the agent told to redact those variables.
	if names := pod.EnvFromSecrets(&sts.Spec.Template.Spec); len(names) > 0 {
		if opts.EnvFromSecretKeys, err = r.secretKeys(ctx, ws.Namespace, names); err != nil {
			return Status{}, err
		}
		if sts, svc, err = pod.Build(ws, opts); err != nil {
			return Status{Failed: true, Reason: autov1alpha1.WorkspaceReasonSpecInvalid, Message: err.Error()}, nil
		}
	}
	if r.PodSecurity.Enabled() {
		var ns corev1.Namespace
		if err := r.Reader.Get(ctx, types.NamespacedName{Name: ws.Namespace}, &ns); err != nil {
			return Status{}, fmt.Errorf("read namespace %s for its Pod Security level: %w", ws.Namespace, err)
		}
		tmpl := &sts.Spec.Template
		if v := r.PodSecurity.Check(ws.Namespace, ns.Labels, &tmpl.ObjectMeta, &tmpl.Spec); v != nil {
			return Status{Failed: true, Reason: autov1alpha1.WorkspaceReasonPodSecurityForbidden, Message: v.Error()}, nil
		}
	}
	if err := controllerutil.SetControllerReference(ws, svc, r.Scheme); err != nil {
		return Status{}, err
	}
	if err := controllerutil.SetControllerReference(ws, sts, r.Scheme); err != nil {
		return Status{}, err
	}

	var curSvc corev1.Service
	switch err := r.Client.Get(ctx, client.ObjectKeyFromObject(svc), &curSvc); {
	case apierrors.IsNotFound(err):
		if err := r.Client.Create(ctx, svc); err != nil {
			return Status{}, fmt.Errorf("create service: %w", err)
		}
	case err != nil:
		return Status{}, err
	case !serviceMatches(&curSvc, svc):
		curSvc.Labels, curSvc.Annotations = svc.Labels, svc.Annotations
		curSvc.Spec.Ports, curSvc.Spec.Selector = svc.Spec.Ports, svc.Spec.Selector
		if err := r.Client.Update(ctx, &curSvc); err != nil {
			return Status{}, fmt.Errorf("update service: %w", err)
		}
	}

	var cur appsv1.StatefulSet
	switch err := r.Client.Get(ctx, client.ObjectKeyFromObject(sts), &cur); {
	case apierrors.IsNotFound(err):
		if err := r.Client.Create(ctx, sts); err != nil {
			return Status{}, fmt.Errorf("create statefulset: %w", err)
		}
		return Status{Message: "workspace pod created"}, nil
	case err != nil:
		return Status{}, err
	}
	want := sts.Spec.Template.Annotations[pod.AnnotationPodSpecHash]
	if cur.Spec.Template.Annotations[pod.AnnotationPodSpecHash] != want {
		cur.Spec.Template = sts.Spec.Template
		cur.Labels = sts.Labels
		if err := r.Client.Update(ctx, &cur); err != nil {
			return Status{}, fmt.Errorf("update statefulset: %w", err)
		}
		return Status{Message: "workspace pod is being replaced"}, nil
	}
	ready := cur.Status.ObservedGeneration == cur.Generation &&
		cur.Status.ReadyReplicas == 1 && cur.Status.UpdatedReplicas == 1 &&
		(cur.Status.UpdateRevision == "" || cur.Status.CurrentRevision == cur.Status.UpdateRevision)
	if !ready && !slices.Equal(pod.RevisionArgs(&cur), pod.RevisionArgs(sts)) {
		// Only the revision changed, which a running agent checks out in
		// place; but no agent serves (the pod is starting, or failing at
		// the revision it was created with): start the next one at the
		// wanted revision.
		cur.Spec.Template = sts.Spec.Template
		if err := r.Client.Update(ctx, &cur); err != nil {
			return Status{}, fmt.Errorf("update statefulset: %w", err)
		}
		return Status{Message: "workspace pod is being replaced to start at the new revision"}, nil
	}
	if !ready {
		return r.podHealth(ctx, ws, &cur.Spec.Template.Spec, want)
	}
	if opts.AddressByPodIP {
		return r.podIPStatus(ctx, ws, want)
	}
	return Status{Ready: true, Address: pod.Address(ws, opts.Port), Message: "workspace pod ready"}, nil
}

// serviceMatches: cur (as read) already has the labels, annotations, ports
// and selector the operator sets on want, so it is not written again (every
// reconcile of every Workspace would otherwise update its Service). The
// built ports set every field the API server would default.
func serviceMatches(cur, want *corev1.Service) bool {
	return equality.Semantic.DeepEqual(cur.Labels, want.Labels) &&
		equality.Semantic.DeepEqual(cur.Annotations, want.Annotations) &&
		equality.Semantic.DeepEqual(cur.Spec.Ports, want.Spec.Ports) &&
		equality.Semantic.DeepEqual(cur.Spec.Selector, want.Spec.Selector)
}

// podIPStatus is the ready Status addressing the agent at its pod's IP
// (Options.AddressByPodIP), once the pod of the current template is ready.
func (r *PodRuntime) podIPStatus(ctx context.Context, ws *autov1alpha1.Workspace, wantHash string) (Status, error) {
	var p corev1.Pod
	if err := r.Client.Get(ctx, types.NamespacedName{Namespace: ws.Namespace, Name: pod.PodName(ws.Name)}, &p); err != nil {
		if apierrors.IsNotFound(err) {
			return Status{Message: "waiting for the workspace pod"}, nil
		}
		return Status{}, fmt.Errorf("get workspace pod: %w", err)
	}
	ready := p.DeletionTimestamp == nil && p.Status.PodIP != "" && p.Annotations[pod.AnnotationPodSpecHash] == wantHash
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status != corev1.ConditionTrue {
			ready = false
		}
	}
	if !ready {
		return Status{Message: "waiting for the workspace pod's address"}, nil
	}
	port := r.Options.Port
	if port == 0 {
		port = pod.DefaultPort
	}
	return Status{Ready: true, Address: net.JoinHostPort(p.Status.PodIP, strconv.Itoa(int(port))), Message: "workspace pod ready"}, nil
}

// podHealth reports the state of a workspace whose StatefulSet is not ready
// from its pod: a failure the kubelet reports (image pull, crash loop, the
// agent's own account of a missing source…) becomes the Status's reason, with
// the values of every Secret the pod reads masked.
func (r *PodRuntime) podHealth(ctx context.Context, ws *autov1alpha1.Workspace, spec *corev1.PodSpec, wantHash string) (Status, error) {
	var p corev1.Pod
	var found *corev1.Pod
	switch err := r.Client.Get(ctx, types.NamespacedName{Namespace: ws.Namespace, Name: pod.PodName(ws.Name)}, &p); {
	case err == nil:
		found = &p
	case !apierrors.IsNotFound(err):
		return Status{}, fmt.Errorf("get workspace pod: %w", err)
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	h := pod.Classify(found, wantHash, now(), r.Health)
	switch h.State {
	case pod.HealthReady:
		return Status{Message: h.Message + "; waiting for its StatefulSet to report it"}, nil
	case pod.HealthStarting:
		return Status{Message: h.Message}, nil
	}
	secrets, err := r.secretValues(ctx, ws.Namespace, pod.SecretNames(spec))
	if err != nil {
		return Status{}, err
	}
	return Status{
		Failed: h.State == pod.HealthFailed, Reason: h.Reason,
		Message: Redact(h.Message, secrets), RecheckAfter: h.RecheckAfter,
	}, nil
}

// secretValues are the values of the named Secrets; a missing Secret has
// none (the pod cannot have read it).
func (r *PodRuntime) secretValues(ctx context.Context, namespace string, names []string) ([]string, error) {
	var values []string
	// Without the values the message cannot be shown safely.
	err := r.eachSecret(ctx, namespace, names, "to redact the workspace pod's message", func(name, key, value string) {
		values = append(values, value)
	})
	return values, err
}

// secretKeys are the keys of the named Secrets, sorted (a stable pod template
// hash); a missing Secret has none (the kubelet will not start the pod, or
// the reference is optional).
func (r *PodRuntime) secretKeys(ctx context.Context, namespace string, names []string) (map[string][]string, error) {
	keys := map[string][]string{}
	err := r.eachSecret(ctx, namespace, names, "to redact the variables of envFrom", func(name, key, _ string) {
		keys[name] = append(keys[name], key)
	})
	for _, k := range keys {
		slices.Sort(k)
	}
	return keys, err
}

// eachSecret reads the named Secrets by name (uncached) and calls f for each
// key and value; Secrets that do not exist are skipped. why says, in an
// error, what the Secret was read for.
func (r *PodRuntime) eachSecret(ctx context.Context, namespace string, names []string, why string, f func(name, key, value string)) error {
	for _, name := range names {
		var s corev1.Secret
		err := r.Client.Get(ctx, types.NamespacedName{Namespace: namespace, Name: name}, &s)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			return fmt.Errorf("read secret %s %s: %w", name, why, err)
		}
		for k, v := range s.Data {
			f(name, k, string(v))
		}
		for k, v := range s.StringData {
			f(name, k, v)
		}
	}
	return nil
}

// Remove leaves deletion to the garbage collector: the StatefulSet and Service
// are owned by the Workspace.
func (r *PodRuntime) Remove(context.Context, *autov1alpha1.Workspace) error { return nil }
