package pod

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// warningRecorder keeps the warnings the API server sends back.
type warningRecorder struct {
	mu   sync.Mutex
	msgs []string
}

// HandleWarningHeaderWithContext implements rest.WarningHandlerWithContext.
func (w *warningRecorder) HandleWarningHeaderWithContext(_ context.Context, _ int, _, text string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.msgs = append(w.msgs, text)
}

// take returns the warnings recorded since the last call.
func (w *warningRecorder) take() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	msgs := w.msgs
	w.msgs = nil
	return msgs
}

// strict rejects fields the schema does not know, so acceptance proves every
// generated field is a real one.
var strict = &client.CreateOptions{FieldValidation: "Strict"}

// restrictedSidecar is a sidecar that satisfies the restricted Pod Security
// Standard on its own (spec.podTemplate containers get no security context
// from the operator).
var restrictedSidecar = corev1.Container{
	Name:  "proxy",
	Image: "ghcr.io/example/egress-proxy:1.2",
	SecurityContext: &corev1.SecurityContext{
		AllowPrivilegeEscalation: new(false),
		Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
	},
}

// TestAPIServerAcceptsObjects creates the objects Build returns for several
// Workspaces in a real kube-apiserver, with strict field validation and the
// Pod Security admission warning at the Workspace's profile, and checks that
// they are accepted without warnings and that the security settings survive.
func TestAPIServerAcceptsObjects(t *testing.T) {
	cp := substrate.StartControlPlaneT(t)
	warnings := &warningRecorder{}
	cfg := rest.CopyConfig(cp.Config)
	cfg.WarningHandlerWithContext = warnings
	c, err := client.New(cfg, client.Options{Scheme: cp.Client.Scheme()})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	tests := []struct {
		name string
		ws   *autov1alpha1.Workspace
		// level is the Pod Security Standard the namespace warns about.
		level string
		// wantWarnings are parts of the expected warnings; none when empty.
		wantWarnings []string
	}{{
		name:  "git source with token auth",
		ws:    workspace(withGit),
		level: "restricted",
	}, {
		name: "flux source with env and envFrom",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.Flux = &autov1alpha1.FluxSource{Url: "http://source-controller/a.tar.gz", Digest: "sha256:00", Dir: "app"}
			ws.Spec.Env = []corev1.EnvVar{{Name: "AWS_REGION", Value: "eu-west-1"}, {Name: "HOME", Value: "/home/pulumi"}}
			ws.Spec.EnvFrom = []corev1.EnvFromSource{{Prefix: "CLOUD_", SecretRef: &corev1.SecretEnvSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cloud"}}}}
		}),
		level: "restricted",
	}, {
		name: "local source with resources and service template",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Spec.Local = &autov1alpha1.LocalSource{Dir: "/program"}
			ws.Spec.PulumiLogVerbosity = 11
			ws.Spec.Resources = corev1.ResourceRequirements{
				Requests: requests("ephemeral-storage", "10Gi"),
				Limits:   requests("memory", "256Mi", "ephemeral-storage", "20Gi"),
			}
			ws.Spec.ServiceTemplate = &autov1alpha1.EmbeddedServiceTemplateSpec{Metadata: autov1alpha1.EmbeddedObjectMeta{
				Labels: map[string]string{"team": "platform"}, Annotations: map[string]string{"a": "b"},
			}}
		}),
		level: "restricted",
	}, {
		name: "git source with every credential, longest name",
		ws: workspace(func(ws *autov1alpha1.Workspace) {
			ws.Name = strings.Repeat("w", 42)
			ws.Spec.Git = &autov1alpha1.GitSource{URL: "git@github.com:e/i.git", Ref: "main", Auth: &autov1alpha1.GitAuth{
				SSHPrivateKey: secretKey("ssh", "key"), Username: secretKey("b", "u"), Password: secretKey("b", "p"),
				Token: secretKey("t", "t"), GitHubApp: &autov1alpha1.GitHubAppAuth{
					AppID: secretKey("a", "id"), InstallationID: secretKey("a", "inst"), PrivateKey: secretKey("a", "key"),
				},
			}}
		}),
		level: "restricted",
	}, {
		name: "baseline profile",
		ws: workspace(withGit, func(ws *autov1alpha1.Workspace) {
			ws.Spec.SecurityProfile = autov1alpha1.SecurityProfileBaseline
			ws.Spec.Image = "pulumi/pulumi:3.274.1"
		}),
		level: "baseline",
	}, {
		name: "pod template with volume, mount, toleration and a restricted sidecar",
		ws: workspace(withGit, withPodTemplate, func(ws *autov1alpha1.Workspace) {
			ws.Spec.PodTemplate.Spec.Containers[1] = restrictedSidecar
		}),
		level: "restricted",
	}, {
		// The control: Pod Security admission is active, so the cases above
		// mean something. The sidecar as given has no security context.
		name:         "pod template sidecar without security context",
		ws:           workspace(withGit, withPodTemplate),
		level:        "restricted",
		wantWarnings: []string{`allowPrivilegeEscalation != false (container "proxy"`},
	}, {
		name:         "baseline profile in a restricted namespace",
		ws:           workspace(func(ws *autov1alpha1.Workspace) { ws.Spec.SecurityProfile = autov1alpha1.SecurityProfileBaseline }),
		level:        "restricted",
		wantWarnings: []string{"runAsNonRoot != true", "unrestricted capabilities"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.ws.Namespace = podSecurityNamespace(t, cp, tt.level)
			sts, svc, err := Build(tt.ws, testOpts)
			if err != nil {
				t.Fatal(err)
			}
			sent := sts.DeepCopy()
			if len(tt.wantWarnings) > 0 {
				// Pod Security admission learns a new namespace's labels
				// through an informer: wait (with dry runs) until it enforces
				// them, so the warnings below are the real ones.
				deadline := time.Now().Add(15 * time.Second)
				for {
					warnings.take()
					probe := sts.DeepCopy()
					if err := c.Create(ctx, probe, client.DryRunAll); err != nil {
						t.Fatalf("dry run: %v", err)
					}
					if len(warnings.take()) > 0 || time.Now().After(deadline) {
						break
					}
					time.Sleep(200 * time.Millisecond)
				}
			}
			warnings.take()
			if err := c.Create(ctx, sts, strict); err != nil {
				t.Fatalf("StatefulSet rejected: %v", err)
			}
			if err := c.Create(ctx, svc, strict); err != nil {
				t.Fatalf("Service rejected: %v", err)
			}
			got := warnings.take()
			checkWarnings(t, got, tt.wantWarnings)

			var stored appsv1.StatefulSet
			if err := c.Get(ctx, client.ObjectKeyFromObject(sts), &stored); err != nil {
				t.Fatal(err)
			}
			spec, want := stored.Spec.Template.Spec, sent.Spec.Template.Spec
			equal(t, "stored pod securityContext", spec.SecurityContext, want.SecurityContext)
			for i := range want.Containers {
				equal(t, "stored securityContext of "+want.Containers[i].Name, spec.Containers[i].SecurityContext, want.Containers[i].SecurityContext)
				equal(t, "stored args of "+want.Containers[i].Name, spec.Containers[i].Args, want.Containers[i].Args)
				equal(t, "stored env of "+want.Containers[i].Name, spec.Containers[i].Env, want.Containers[i].Env)
				equal(t, "stored resources of "+want.Containers[i].Name, spec.Containers[i].Resources, want.Containers[i].Resources)
			}
			equal(t, "stored init container securityContext", spec.InitContainers[0].SecurityContext, want.InitContainers[0].SecurityContext)
			equal(t, "stored volumes", spec.Volumes, want.Volumes)
			equal(t, "stored tolerations", spec.Tolerations, want.Tolerations)
			equal(t, "stored template annotations", stored.Spec.Template.Annotations, sent.Spec.Template.Annotations)
			equal(t, "stored selector", stored.Spec.Selector, sent.Spec.Selector)

			var storedSvc corev1.Service
			if err := c.Get(ctx, client.ObjectKeyFromObject(svc), &storedSvc); err != nil {
				t.Fatal(err)
			}
			equal(t, "service clusterIP", storedSvc.Spec.ClusterIP, "None")
			equal(t, "service ports", storedSvc.Spec.Ports, svc.Spec.Ports)
			equal(t, "service labels", storedSvc.Labels, svc.Labels)
		})
	}
}

// podSecurityNamespace creates a namespace whose Pod Security admission warns
// about pod templates that break level.
func podSecurityNamespace(t *testing.T, cp *substrate.ControlPlane, level string) string {
	t.Helper()
	name := cp.Namespace(t)
	ctx := context.Background()
	var ns corev1.Namespace
	if err := cp.Client.Get(ctx, client.ObjectKey{Name: name}, &ns); err != nil {
		t.Fatal(err)
	}
	if ns.Labels == nil {
		ns.Labels = map[string]string{}
	}
	ns.Labels["pod-security.kubernetes.io/warn"] = level
	ns.Labels["pod-security.kubernetes.io/warn-version"] = "latest"
	if err := cp.Client.Update(ctx, &ns); err != nil {
		t.Fatal(err)
	}
	return name
}

// checkWarnings fails unless got is empty when want is, and otherwise holds
// every part of want.
func checkWarnings(t *testing.T, got, want []string) {
	t.Helper()
	all := strings.Join(got, "\n")
	if len(want) == 0 {
		if len(got) > 0 {
			t.Errorf("API server warnings:\n%s", all)
		}
		return
	}
	for _, w := range want {
		if !strings.Contains(all, w) {
			t.Errorf("warnings do not mention %q:\n%s", w, all)
		}
	}
}
