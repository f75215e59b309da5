package kargo

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Kargo's objects are read as unstructured (Kargo's Go modules are not
// dependencies of this repository) into these views: the fields tests and
// the demo read, as Kargo v1.11.2's API names them.

// The kinds read.
var (
	FreightKind     = schema.GroupVersionKind{Group: "kargo.akuity.io", Version: "v1alpha1", Kind: "Freight"}
	PromotionKind   = schema.GroupVersionKind{Group: "kargo.akuity.io", Version: "v1alpha1", Kind: "Promotion"}
	StageKind       = schema.GroupVersionKind{Group: "kargo.akuity.io", Version: "v1alpha1", Kind: "Stage"}
	WarehouseKind   = schema.GroupVersionKind{Group: "kargo.akuity.io", Version: "v1alpha1", Kind: "Warehouse"}
	AnalysisRunKind = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "AnalysisRun"}
)

// Freight is a piece of Freight: a commit of the program repository.
type Freight struct {
	Name    string
	Alias   string    `json:"alias"`
	Created time.Time `json:"-"`
	Commits []struct {
		RepoURL string `json:"repoURL"`
		ID      string `json:"id"`
		Message string `json:"message"`
	} `json:"commits"`
	Status struct {
		VerifiedIn  map[string]json.RawMessage `json:"verifiedIn"`
		CurrentlyIn map[string]json.RawMessage `json:"currentlyIn"`
	} `json:"status"`
}

// VerifiedIn reports the Freight verified in the Stage.
func (f *Freight) VerifiedIn(stage string) bool {
	_, ok := f.Status.VerifiedIn[stage]
	return ok
}

// Promotion is a Promotion of Freight into a Stage.
type Promotion struct {
	Name        string            `json:"-"`
	Created     time.Time         `json:"-"`
	Annotations map[string]string `json:"-"`
	Spec        struct {
		Stage   string `json:"stage"`
		Freight string `json:"freight"`
		Steps   []struct {
			Uses string `json:"uses"`
			As   string `json:"as"`
		} `json:"steps"`
	} `json:"spec"`
	Status struct {
		Phase       string         `json:"phase"`
		Message     string         `json:"message"`
		CurrentStep int            `json:"currentStep"`
		State       map[string]any `json:"state"`
		StepMeta    []struct {
			Alias      string     `json:"alias"`
			Status     string     `json:"status"`
			Message    string     `json:"message"`
			StartedAt  *time.Time `json:"startedAt"`
			FinishedAt *time.Time `json:"finishedAt"`
		} `json:"stepExecutionMetadata"`
		StartedAt  *time.Time `json:"startedAt"`
		FinishedAt *time.Time `json:"finishedAt"`
	} `json:"status"`
}

// Terminal reports a finished Promotion.
func (p *Promotion) Terminal() bool {
	switch p.Status.Phase {
	case "Succeeded", "Failed", "Errored", "Aborted":
		return true
	}
	return false
}

// CurrentStepUses is the kind of step the Promotion is at ("" past the end).
func (p *Promotion) CurrentStepUses() string {
	if p.Status.CurrentStep < len(p.Spec.Steps) {
		return p.Spec.Steps[p.Status.CurrentStep].Uses
	}
	return ""
}

// Verification is one verification of Freight in a Stage.
type Verification struct {
	Phase       string `json:"phase"`
	Message     string `json:"message"`
	AnalysisRun *struct {
		Name      string `json:"name"`
		Namespace string `json:"namespace"`
		Phase     string `json:"phase"`
	} `json:"analysisRun"`
	StartTime  *time.Time `json:"startTime"`
	FinishTime *time.Time `json:"finishTime"`
}

// Stage is a Stage's status.
type Stage struct {
	Status struct {
		// CurrentPromotion is the Promotion running, if any.
		CurrentPromotion *struct {
			Name string `json:"name"`
		} `json:"currentPromotion"`
		LastPromotion *struct {
			Name    string `json:"name"`
			Freight struct {
				Name string `json:"name"`
			} `json:"freight"`
			Status struct {
				Phase   string `json:"phase"`
				Message string `json:"message"`
			} `json:"status"`
		} `json:"lastPromotion"`
		FreightHistory []struct {
			Items map[string]struct {
				Name string `json:"name"`
			} `json:"items"`
			VerificationHistory []Verification `json:"verificationHistory"`
		} `json:"freightHistory"`
		// Health is Kargo's assessment of the Stage (from the health
		// checks its last promotion's argocd-update step registered).
		Health *struct {
			Status string   `json:"status"`
			Issues []string `json:"issues"`
		} `json:"health"`
	} `json:"status"`
}

// CurrentFreight is the Freight the Stage holds now ("" when none).
func (s *Stage) CurrentFreight() string {
	if len(s.Status.FreightHistory) == 0 {
		return ""
	}
	for _, it := range s.Status.FreightHistory[0].Items {
		return it.Name
	}
	return ""
}

// LastVerification is the newest verification of the current Freight (nil
// when none).
func (s *Stage) LastVerification() *Verification {
	if len(s.Status.FreightHistory) == 0 || len(s.Status.FreightHistory[0].VerificationHistory) == 0 {
		return nil
	}
	return &s.Status.FreightHistory[0].VerificationHistory[0]
}

func fromUnstructured(u *unstructured.Unstructured, into any) error {
	b, err := json.Marshal(u.Object)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}

func (p *Pipeline) list(ctx context.Context, gvk schema.GroupVersionKind) ([]unstructured.Unstructured, error) {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := p.c.List(ctx, l, client.InNamespace(p.Namespace)); err != nil {
		return nil, err
	}
	return l.Items, nil
}

// Get reads an object of the project (or, for AnalysisRuns, of namespace).
func (p *Pipeline) Get(ctx context.Context, gvk schema.GroupVersionKind, name string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u, p.c.Get(ctx, types.NamespacedName{Namespace: p.Namespace, Name: name}, u)
}

// FreightOf is the Freight holding commit sha (nil when none yet).
func (p *Pipeline) FreightOf(ctx context.Context, sha string) (*Freight, error) {
	items, err := p.list(ctx, FreightKind)
	if err != nil {
		return nil, err
	}
	for i := range items {
		f := &Freight{}
		if err := fromUnstructured(&items[i], f); err != nil {
			return nil, err
		}
		for _, cm := range f.Commits {
			if cm.ID == sha {
				f.Name, f.Created = items[i].GetName(), items[i].GetCreationTimestamp().Time
				return f, nil
			}
		}
	}
	return nil, nil
}

// AllFreight lists the project's Freight (nil on error).
func (p *Pipeline) AllFreight(ctx context.Context) []*Freight {
	items, err := p.list(ctx, FreightKind)
	if err != nil {
		return nil
	}
	var out []*Freight
	for i := range items {
		f := &Freight{}
		if err := fromUnstructured(&items[i], f); err != nil {
			continue
		}
		f.Name, f.Created = items[i].GetName(), items[i].GetCreationTimestamp().Time
		out = append(out, f)
	}
	return out
}

// Freight reads a Freight by name.
func (p *Pipeline) Freight(ctx context.Context, name string) (*Freight, error) {
	u, err := p.Get(ctx, FreightKind, name)
	if err != nil {
		return nil, err
	}
	f := &Freight{}
	if err := fromUnstructured(u, f); err != nil {
		return nil, err
	}
	f.Name, f.Created = u.GetName(), u.GetCreationTimestamp().Time
	return f, nil
}

// AllPromotions lists the project's Promotions (nil on error).
func (p *Pipeline) AllPromotions(ctx context.Context) []*Promotion {
	out, _ := p.promotions(ctx)
	return out
}

func (p *Pipeline) promotions(ctx context.Context) ([]*Promotion, error) {
	items, err := p.list(ctx, PromotionKind)
	if err != nil {
		return nil, err
	}
	out := make([]*Promotion, 0, len(items))
	for i := range items {
		pr := &Promotion{}
		if err := fromUnstructured(&items[i], pr); err != nil {
			return nil, err
		}
		pr.Name, pr.Created, pr.Annotations = items[i].GetName(), items[i].GetCreationTimestamp().Time, items[i].GetAnnotations()
		out = append(out, pr)
	}
	return out, nil
}

// PromotionOf is the newest Promotion of the Freight into the Stage (nil
// when none).
func (p *Pipeline) PromotionOf(ctx context.Context, stage, freight string) (*Promotion, error) {
	all, err := p.promotions(ctx)
	if err != nil {
		return nil, err
	}
	var found *Promotion
	for _, pr := range all {
		if pr.Spec.Stage != stage || pr.Spec.Freight != freight {
			continue
		}
		if found == nil || !pr.Created.Before(found.Created) {
			found = pr
		}
	}
	return found, nil
}

// Stage reads a Stage.
func (p *Pipeline) Stage(ctx context.Context, name string) (*Stage, error) {
	u, err := p.Get(ctx, StageKind, name)
	if err != nil {
		return nil, err
	}
	st := &Stage{}
	return st, fromUnstructured(u, st)
}

// Promote creates a Promotion of the Freight into the Stage, as a user does
// (`kargo promote`, the UI, kubectl): Kargo's webhook names it and copies
// the Stage's steps into it, or refuses it (e.g. Freight not available to
// the Stage). It returns the Promotion's name.
func (p *Pipeline) Promote(ctx context.Context, stage, freight string) (string, error) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kargo.akuity.io/v1alpha1", "kind": "Promotion",
		"metadata": map[string]any{"namespace": p.Namespace, "name": stage + "-by-user-" + short(freight)},
		"spec":     map[string]any{"stage": stage, "freight": freight},
	}}
	if err := p.c.Create(ctx, u); err != nil {
		return "", err
	}
	return u.GetName(), nil
}

func short(s string) string {
	if len(s) > 8 {
		return s[:8]
	}
	return s
}

// ApproveFor makes the Freight available to the Stage whatever its
// verification upstream, as `kargo approve --freight <f> --stage <s>` (a
// hotfix path) does: Kargo's API server records it in the Freight's
// status.approvedFor.
func (p *Pipeline) ApproveFor(ctx context.Context, freight, stage string) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(FreightKind)
	u.SetNamespace(p.Namespace)
	u.SetName(freight)
	patch := fmt.Sprintf(`{"status":{"approvedFor":{%q:{"approvedAt":%q}}}}`, stage, time.Now().UTC().Format(time.RFC3339))
	return p.c.Status().Patch(ctx, u, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// Refresh asks Kargo to reconcile an object of the project now, as its CLI
// and its webhook receivers do (the annotation kargo.akuity.io/refresh with
// a new token): a Warehouse discovers new commits, a Promotion re-runs its
// waiting step.
func (p *Pipeline) Refresh(ctx context.Context, gvk schema.GroupVersionKind, name string) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(p.Namespace)
	u.SetName(name)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"kargo.akuity.io/refresh":%q}}}`, time.Now().Format(time.RFC3339Nano))
	return p.c.Patch(ctx, u, client.RawPatch(types.MergePatchType, []byte(patch)))
}
