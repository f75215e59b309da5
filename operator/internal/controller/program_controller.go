package controller

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/yaml"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/artifact"
)

// ProgramFinalizer lets the Program controller remove a Program's artifacts
// before the Program goes.
const ProgramFinalizer = "pulumi.com/program-artifacts"

// ProgramArtifactKind is the artifact store kind holding Programs' tarballs:
// they are served at /programs/<namespace>/<name>/<sha256>.tar.gz.
const ProgramArtifactKind = "programs"

// ProgramReasonArtifactPublished is the reason of the event recorded when a
// Program's content (its digest) changes and a new artifact is published.
const ProgramReasonArtifactPublished = "ArtifactPublished"

// projectFileName is the name of the project file inside a Program's tarball.
const projectFileName = "Pulumi.yaml"

// ProgramReconciler publishes each generation of a Program as a tarball
// artifact holding its Pulumi.yaml, and records it in status.artifact for the
// Stacks that reference the Program.
type ProgramReconciler struct {
	client.Client
	// Store holds and serves the artifacts.
	Store *artifact.Store
	// Recorder records an ArtifactPublished event for each new content.
	Recorder record.EventRecorder
	// Now is the clock (tests inject one); default time.Now.
	Now func() time.Time
}

// SetupWithManager registers the controller. Only spec changes (a new
// generation) and deletions start a reconcile: status patches do not.
func (r *ProgramReconciler) SetupWithManager(mgr ctrl.Manager) error {
	if r.Store == nil {
		return errors.New("the program controller needs an artifact store")
	}
	if r.Now == nil {
		r.Now = time.Now
	}
	return ctrl.NewControllerManagedBy(mgr).
		For(&pulumiv1.Program{}, builder.WithPredicates(predicate.GenerationChangedPredicate{})).
		Complete(quietConflicts(r))
}

// Programs: cached reads, the finalizer (Update), the status patch. A
// Program owns nothing, so no finalizers subresource.
// +kubebuilder:rbac:groups=pulumi.com,resources=programs,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=pulumi.com,resources=programs/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile converges one Program: its current content published, older
// artifacts pruned; all of them removed when it is deleted.
func (r *ProgramReconciler) Reconcile(ctx context.Context, req ctrl.Request) (result ctrl.Result, retErr error) {
	p := &pulumiv1.Program{}
	if err := r.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	base := p.DeepCopy()
	defer func() {
		if err := r.patchStatus(ctx, base, p); err != nil {
			if retErr == nil {
				retErr = err
			}
			return
		}
		// Older artifacts go only once the stored status no longer points at
		// one of them, so a Stack reading status.artifact never gets a 404
		// for the artifact it was just told about.
		if retErr == nil && p.DeletionTimestamp.IsZero() && p.Status.Artifact != nil {
			if err := r.Store.Prune(ProgramArtifactKind, p.Namespace, p.Name, p.Status.Artifact.Digest); err != nil {
				retErr = fmt.Errorf("prune older artifacts: %w", err)
			}
		}
	}()

	if !p.DeletionTimestamp.IsZero() {
		return ctrl.Result{}, r.reconcileDelete(ctx, p)
	}
	if controllerutil.AddFinalizer(p, ProgramFinalizer) {
		if err := r.Update(ctx, p); err != nil {
			return ctrl.Result{}, fmt.Errorf("add finalizer: %w", err)
		}
	}
	return ctrl.Result{}, r.reconcileArtifact(ctx, p)
}

// patchStatus writes the status when it changed, as a merge patch of the
// status alone (the object's metadata may have moved on since it was read:
// the finalizer).
func (r *ProgramReconciler) patchStatus(ctx context.Context, base, p *pulumiv1.Program) error {
	if equality.Semantic.DeepEqual(base.Status, p.Status) {
		return nil
	}
	from := p.DeepCopy()
	from.Status = *base.Status.DeepCopy()
	if err := r.Status().Patch(ctx, p, client.MergeFrom(from)); err != nil {
		return client.IgnoreNotFound(err)
	}
	return nil
}

// reconcileDelete removes the Program's artifacts, then its finalizer.
func (r *ProgramReconciler) reconcileDelete(ctx context.Context, p *pulumiv1.Program) error {
	if !controllerutil.ContainsFinalizer(p, ProgramFinalizer) {
		return nil
	}
	if err := r.Store.Remove(ProgramArtifactKind, p.Namespace, p.Name); err != nil {
		return fmt.Errorf("remove artifacts: %w", err)
	}
	log.FromContext(ctx).Info("Removed the program's artifacts")
	controllerutil.RemoveFinalizer(p, ProgramFinalizer)
	if err := r.Update(ctx, p); err != nil {
		return client.IgnoreNotFound(fmt.Errorf("remove finalizer: %w", err))
	}
	return nil
}

// reconcileArtifact renders the Program's Pulumi.yaml, publishes its tarball
// and records it in the status. Publishing the same content again is a no-op
// in the store; lastUpdateTime and the event only follow a change of digest.
func (r *ProgramReconciler) reconcileArtifact(ctx context.Context, p *pulumiv1.Program) error {
	tarball, err := ProgramTarball(p)
	if err != nil {
		return err
	}
	a, err := r.Store.Put(ProgramArtifactKind, p.Namespace, p.Name, tarball)
	if err != nil {
		return fmt.Errorf("publish artifact: %w", err)
	}
	prev := p.Status.Artifact
	changed := prev == nil || prev.Digest != a.Digest
	updated := metav1.NewTime(r.Now())
	if !changed {
		updated = prev.LastUpdateTime
	}
	size := a.Size
	p.Status.Artifact = &pulumiv1.Artifact{
		Path:           a.Path,
		URL:            a.URL,
		Revision:       fmt.Sprintf("%d/%s", p.Generation, a.Digest),
		Digest:         a.Digest,
		LastUpdateTime: updated,
		Size:           &size,
	}
	p.Status.ObservedGeneration = p.Generation
	if changed {
		log.FromContext(ctx).Info("Published artifact", "revision", p.Status.Artifact.Revision, "url", a.URL, "size", a.Size)
		r.Recorder.Eventf(p, corev1.EventTypeNormal, ProgramReasonArtifactPublished,
			"Published revision %s at %s", p.Status.Artifact.Revision, a.URL)
	}
	return nil
}

// ProgramTarball is the Program's artifact: a deterministic tarball holding
// its rendered Pulumi.yaml. Every replica renders the same bytes for the same
// spec (built by the same Go release), hence the same digest.
func ProgramTarball(p *pulumiv1.Program) ([]byte, error) {
	project, err := renderProject(p)
	if err != nil {
		return nil, err
	}
	tarball, err := artifact.TarGz(map[string][]byte{projectFileName: project})
	if err != nil {
		return nil, fmt.Errorf("build artifact: %w", err)
	}
	return tarball, nil
}

// programReadTimeout bounds the renderer's read of a Program.
const programReadTimeout = 5 * time.Second

// ProgramArtifactRenderer rebuilds Programs' artifacts from c (the manager's
// cache) for the artifact server, so that a replica that did not publish an
// artifact serves it all the same. A missing or deleting Program, or another
// kind, is fs.ErrNotExist.
func ProgramArtifactRenderer(c client.Reader) artifact.RenderFunc {
	return func(ctx context.Context, kind, namespace, name string) ([]byte, error) {
		if kind != ProgramArtifactKind {
			return nil, fmt.Errorf("artifact kind %q: %w", kind, fs.ErrNotExist)
		}
		// A cache that has not synced yet blocks reads until it has: the
		// request gets a 503 after a while instead of hanging.
		ctx, cancel := context.WithTimeout(ctx, programReadTimeout)
		defer cancel()
		p := &pulumiv1.Program{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: namespace, Name: name}, p); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, fmt.Errorf("program %s/%s: %w", namespace, name, fs.ErrNotExist)
			}
			return nil, fmt.Errorf("read program %s/%s: %w", namespace, name, err)
		}
		if !p.DeletionTimestamp.IsZero() {
			return nil, fmt.Errorf("program %s/%s is being deleted: %w", namespace, name, fs.ErrNotExist)
		}
		return ProgramTarball(p)
	}
}

// projectHeader is what a Program's Pulumi.yaml says before the program.
type projectHeader struct {
	Name    string `json:"name"`
	Runtime string `json:"runtime"`
}

// renderProject renders the Program's Pulumi.yaml: its name and the yaml
// runtime first, then the program's sections (configuration, resources,
// variables, outputs, packages), each omitted when empty. It goes through JSON
// (sigs.k8s.io/yaml), so expression values keep their JSON types, and map keys
// are sorted, so the same program always renders the same bytes.
func renderProject(p *pulumiv1.Program) ([]byte, error) {
	head, err := yaml.Marshal(projectHeader{Name: p.Name, Runtime: "yaml"})
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", projectFileName, err)
	}
	body, err := yaml.Marshal(p.Program)
	if err != nil {
		return nil, fmt.Errorf("render %s: %w", projectFileName, err)
	}
	if string(body) == "{}\n" { // no sections
		return head, nil
	}
	return append(head, body...), nil
}
