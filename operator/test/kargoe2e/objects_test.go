package kargoe2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"
)

// Kargo's and Argo Rollouts' objects are read as unstructured: their Go
// modules are not dependencies of this repository. These are the fields the
// tests assert on, as Kargo v1.11.2's API documents them.

var (
	freightGVK   = schema.GroupVersionKind{Group: "kargo.akuity.io", Version: "v1alpha1", Kind: "Freight"}
	promotionGVK = schema.GroupVersionKind{Group: "kargo.akuity.io", Version: "v1alpha1", Kind: "Promotion"}
	stageGVK     = schema.GroupVersionKind{Group: "kargo.akuity.io", Version: "v1alpha1", Kind: "Stage"}
	warehouseGVK = schema.GroupVersionKind{Group: "kargo.akuity.io", Version: "v1alpha1", Kind: "Warehouse"}
	runGVK       = schema.GroupVersionKind{Group: "argoproj.io", Version: "v1alpha1", Kind: "AnalysisRun"}
)

// freight is a Freight, as far as the tests read it.
type freight struct {
	Name    string
	Alias   string
	Created time.Time
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

// promotion is a Promotion, as far as the tests read it.
type promotion struct {
	Name string
	Spec struct {
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
			Alias   string `json:"alias"`
			Status  string `json:"status"`
			Message string `json:"message"`
		} `json:"stepExecutionMetadata"`
	} `json:"status"`
	Annotations map[string]string
}

// terminal reports a finished Promotion.
func (p promotion) terminal() bool {
	switch p.Status.Phase {
	case "Succeeded", "Failed", "Errored", "Aborted":
		return true
	}
	return false
}

// stage is a Stage's status, as far as the tests read it.
type stage struct {
	Status struct {
		LastPromotion *struct {
			Name    string `json:"name"`
			Freight struct {
				Name string `json:"name"`
			} `json:"freight"`
			Status struct {
				Phase string `json:"phase"`
			} `json:"status"`
		} `json:"lastPromotion"`
		FreightHistory []struct {
			Items               map[string]struct{ Name string } `json:"items"`
			VerificationHistory []struct {
				Phase       string `json:"phase"`
				Message     string `json:"message"`
				AnalysisRun *struct {
					Name      string `json:"name"`
					Namespace string `json:"namespace"`
					Phase     string `json:"phase"`
				} `json:"analysisRun"`
			} `json:"verificationHistory"`
		} `json:"freightHistory"`
		Health *struct {
			Status string `json:"status"`
		} `json:"health"`
	} `json:"status"`
}

// decode converts an unstructured object into one of the views above.
func decode(u *unstructured.Unstructured, into any) error {
	b, err := json.Marshal(u.Object)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, into)
}

func list(ctx context.Context, gvk schema.GroupVersionKind, ns string, opts ...client.ListOption) ([]unstructured.Unstructured, error) {
	l := &unstructured.UnstructuredList{}
	l.SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err := c.List(ctx, l, append(opts, client.InNamespace(ns))...); err != nil {
		return nil, err
	}
	return l.Items, nil
}

func get(ctx context.Context, gvk schema.GroupVersionKind, ns, name string) (*unstructured.Unstructured, error) {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	return u, c.Get(ctx, types.NamespacedName{Namespace: ns, Name: name}, u)
}

// freightOf finds the project's Freight holding commit sha (nil when none).
func freightOf(ctx context.Context, ns, sha string) (*freight, error) {
	items, err := list(ctx, freightGVK, ns)
	if err != nil {
		return nil, err
	}
	for i := range items {
		f := &freight{}
		if err := decode(&items[i], f); err != nil {
			return nil, err
		}
		for _, cm := range f.Commits {
			if cm.ID == sha {
				f.Name, f.Alias, f.Created = items[i].GetName(), items[i].GetLabels()["kargo.akuity.io/alias"], items[i].GetCreationTimestamp().Time
				if f.Alias == "" {
					f.Alias, _, _ = unstructured.NestedString(items[i].Object, "alias")
				}
				return f, nil
			}
		}
	}
	return nil, nil
}

// promotionFor finds the newest Promotion of freight into stage (nil when
// none).
func promotionFor(ctx context.Context, ns, stageName, freightName string) (*promotion, error) {
	items, err := list(ctx, promotionGVK, ns)
	if err != nil {
		return nil, err
	}
	var found *promotion
	var newest time.Time
	for i := range items {
		p := &promotion{}
		if err := decode(&items[i], p); err != nil {
			return nil, err
		}
		if p.Spec.Stage != stageName || p.Spec.Freight != freightName {
			continue
		}
		if ts := items[i].GetCreationTimestamp().Time; found == nil || !ts.Before(newest) {
			p.Name, p.Annotations, found, newest = items[i].GetName(), items[i].GetAnnotations(), p, ts
		}
	}
	return found, nil
}

func getStage(ctx context.Context, ns, name string) (*stage, error) {
	u, err := get(ctx, stageGVK, ns, name)
	if err != nil {
		return nil, err
	}
	st := &stage{}
	return st, decode(u, st)
}

// refresh asks Kargo to reconcile an object now, as its CLI and its webhook
// receivers do (the annotation kargo.akuity.io/refresh, with a new token).
func refresh(ctx context.Context, gvk schema.GroupVersionKind, ns, name string) error {
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(gvk)
	u.SetNamespace(ns)
	u.SetName(name)
	patch := fmt.Sprintf(`{"metadata":{"annotations":{"kargo.akuity.io/refresh":%q}}}`, time.Now().Format(time.RFC3339Nano))
	return c.Patch(ctx, u, client.RawPatch(types.MergePatchType, []byte(patch)))
}

// backendUpdate is one update in the file backend's history.
type backendUpdate struct {
	Kind, Result, Head string
}

// backendHistory reads the file backend's history of a Pulumi stack of the
// project, oldest first (each file is named <stack>-<unix nanos>).
func backendHistory(t testing.TB, backend, project, stack string) []backendUpdate {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(strings.TrimPrefix(backend, "file://"), ".pulumi", "history", project, stack, "*.history.json"))
	if err != nil {
		t.Fatal(err)
	}
	var out []backendUpdate
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var h struct {
			Kind        string            `json:"kind"`
			Result      string            `json:"result"`
			Environment map[string]string `json:"environment"`
		}
		if err := json.Unmarshal(b, &h); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, backendUpdate{Kind: h.Kind, Result: h.Result, Head: h.Environment["git.head"]})
	}
	return out
}

// appliedOnce checks that the backend applied commit to the stack in exactly
// one succeeded update.
func appliedOnce(t testing.TB, backend, project, stack, commit string) {
	t.Helper()
	n := 0
	var all []string
	for _, u := range backendHistory(t, backend, project, stack) {
		all = append(all, fmt.Sprintf("%s %s %.7s", u.Kind, u.Result, u.Head))
		if u.Kind == "update" && u.Result == "succeeded" && u.Head == commit {
			n++
		}
	}
	if n != 1 {
		t.Errorf("the backend applied %.7s to stack %s %d times, want once; history: %v", commit, stack, n, all)
	}
}

// decodeAll reads the objects of a multi-document YAML stream.
func decodeAll(t testing.TB, b []byte) []*unstructured.Unstructured {
	t.Helper()
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(b)))
	var out []*unstructured.Unstructured
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatal(err)
		}
		if len(u.Object) > 0 {
			out = append(out, u)
		}
	}
}
