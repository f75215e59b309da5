package controller

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"time"

	corev1 "k8s.io/api/core/v1"
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
		Complete(r)
}

// Programs: cached reads, the finalizer (Update), the status patch. A
// Program owns nothing, so no finalizers subresource.
// +kubebuilder:rbac:groups=pulumi.com,resources=programs,verbs=get;list;watch;update
// +kubebuilder:rbac:groups=pulumi.com,resources=programs/status,verbs=patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch

// Reconcile converges one Program: its current content published; the
// finisher writes the status, then older artifacts are pruned; all of them
// are removed when it is deleted.
func (r *ProgramReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	p := &pulumiv1.Program{}
	if err := r.Get(ctx, req.NamespacedName, p); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	base := p.DeepCopy()
	steps := []step[*pulumiv1.Program]{r.reconcileFinalizer, r.reconcileArtifact}
	if !p.DeletionTimestamp.IsZero() {
		steps = []step[*pulumiv1.Program]{r.reconcileDelete}
	}
	outcome := runSteps(ctx, p, steps...)
	return r.finisher().finish(ctx, base, p, outcome, func(context.Context) error {
		// Older artifacts go only once the stored status no longer points
		// at one of them, so a Stack reading status.artifact never gets a
		// 404 for the artifact it was just told about.
		if outcome != nil || p.Status.Artifact == nil {
			return nil
		}
		if err := r.Store.Prune(ProgramArtifactKind, p.Namespace, p.Name, p.Status.Artifact.Digest); err != nil {
			return fmt.Errorf("prune older artifacts: %w", err)
		}
		return nil
	})
}

// finisher ends every Program reconcile (see finisher). A Program has no
// conditions (nor has PKO's): Ready is its artifact for the generation it
// observed.
func (r *ProgramReconciler) finisher() *finisher[*pulumiv1.Program] {
	return &finisher[*pulumiv1.Program]{kind: "program", client: r.Client, recorder: r.Recorder, report: reportProgram,
		spell: spelling[*pulumiv1.Program]{ready: func(p *pulumiv1.Program, _ string) { p.Status.ObservedGeneration = p.Generation }}}
}

// reportProgram records an ArtifactPublished event when the stored
// artifact's content (its digest) changed.
func reportProgram(rec record.EventRecorder, before, after *pulumiv1.Program) {
	a := after.Status.Artifact
	if a == nil || (before.Status.Artifact != nil && before.Status.Artifact.Digest == a.Digest) {
		return
	}
	rec.Eventf(after, corev1.EventTypeNormal, ProgramReasonArtifactPublished, "Published revision %s at %s", a.Revision, a.URL)
}

func (r *ProgramReconciler) reconcileFinalizer(ctx context.Context, p *pulumiv1.Program) error {
	if controllerutil.AddFinalizer(p, ProgramFinalizer) {
		if err := r.Update(ctx, p); err != nil {
			return fmt.Errorf("add finalizer: %w", err)
		}
	}
	return nil
}

// reconcileDelete removes the Program's artifacts, then its finalizer.
func (r *ProgramReconciler) reconcileDelete(ctx context.Context, p *pulumiv1.Program) error {
	if !controllerutil.ContainsFinalizer(p, ProgramFinalizer) {
		return errGone
	}
	if err := r.Store.Remove(ProgramArtifactKind, p.Namespace, p.Name); err != nil {
		return fmt.Errorf("remove artifacts: %w", err)
	}
	log.FromContext(ctx).Info("Removed the program's artifacts")
	controllerutil.RemoveFinalizer(p, ProgramFinalizer)
	if err := r.Update(ctx, p); client.IgnoreNotFound(err) != nil {
		return fmt.Errorf("remove finalizer: %w", err)
	}
	return errGone
}

// reconcileArtifact renders the Program's Pulumi.yaml, publishes its tarball
// and records it in the status. Publishing the same content again is a no-op
// in the store; lastUpdateTime and the event (reportProgram) only follow a
// change of digest.
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
	if changed {
		log.FromContext(ctx).Info("Publishing artifact", "revision", p.Status.Artifact.Revision, "url", a.URL, "size", a.Size)
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
