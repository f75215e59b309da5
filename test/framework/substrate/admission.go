package substrate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	stackflowv1alpha1 "github.com/stackflow-io/stackflow/operator/api/stackflow/v1alpha1"
)

// DecodeObjects decodes the objects of a YAML (or JSON) stream, skipping
// empty documents.
func DecodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, err
		}
		if m != nil {
			objs = append(objs, &unstructured.Unstructured{Object: m})
		}
	}
}

// InstallPlanApprovalPolicy installs the admission policy that records who
// approves a plan (operator/config/admission, as shipped) and waits until
// the API server enforces it: a PlanApproval created in ns by one user in
// another's name is refused. What the server accepted before is removed.
func InstallPlanApprovalPolicy(ctx context.Context, cfg *rest.Config, c client.Client, ns string) error {
	data, err := os.ReadFile(filepath.Join(RepoRoot(), "operator", "config", "admission", "plan-approval-policy.yaml"))
	if err != nil {
		return err
	}
	objs, err := DecodeObjects(data)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		if err := c.Create(ctx, obj); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	probe := rest.CopyConfig(cfg)
	probe.Impersonate = rest.ImpersonationConfig{UserName: "stackflow-policy-probe", Groups: []string{"system:masters", "system:authenticated"}}
	pc, err := client.New(probe, client.Options{Scheme: c.Scheme()})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for {
		forged := &stackflowv1alpha1.PlanApproval{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "stackflow-policy-probe"},
			Spec: stackflowv1alpha1.PlanApprovalSpec{StackName: "none", Fingerprint: strings.Repeat("0", 64), Approver: "someone-else"}}
		err := pc.Create(ctx, forged)
		if err != nil && strings.Contains(err.Error(), "spec.approver must be the user creating the PlanApproval") {
			return nil
		}
		if err == nil {
			_ = c.Delete(ctx, forged)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the API server does not enforce the admission policy stackflow-plan-approval after a minute (a forged PlanApproval: %v)", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
