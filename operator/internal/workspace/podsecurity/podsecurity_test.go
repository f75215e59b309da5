package podsecurity_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/podsecurity"
)

// workspacePod is the pod spec the pod runtime builds for ws.
func workspacePod(t *testing.T, mutate func(*autov1alpha1.Workspace)) (*metav1.ObjectMeta, *corev1.PodSpec) {
	t.Helper()
	ws := &autov1alpha1.Workspace{ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "web"}}
	ws.Spec.Image = "pulumi/pulumi:3.274.1-nonroot"
	if mutate != nil {
		mutate(ws)
	}
	sts, _, err := pod.Build(ws, pod.Options{AgentImage: "stackflow/operator:test", TokenSecretName: "web-agent-token"})
	if err != nil {
		t.Fatal(err)
	}
	return &sts.Spec.Template.ObjectMeta, &sts.Spec.Template.Spec
}

func privilegedTemplate(ws *autov1alpha1.Workspace) {
	ws.Spec.PodTemplate = &autov1alpha1.EmbeddedPodTemplateSpec{Spec: &corev1.PodSpec{
		HostNetwork: true,
		Containers: []corev1.Container{{Name: pod.ContainerName,
			SecurityContext: &corev1.SecurityContext{Privileged: new(true)}}},
	}}
}

func TestCheck(t *testing.T) {
	restricted := map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}
	baseline := map[string]string{"pod-security.kubernetes.io/enforce": "baseline", "pod-security.kubernetes.io/enforce-version": "v1.30"}
	cases := []struct {
		name   string
		mode   podsecurity.Mode
		labels map[string]string
		ws     func(*autov1alpha1.Workspace)
		// want are substrings of the violation; none means admitted.
		want []string
	}{
		{name: "off admits anything", mode: podsecurity.ModeOff, labels: restricted, ws: privilegedTemplate},
		{name: "default pod in a restricted namespace", mode: podsecurity.ModeNamespace, labels: restricted},
		{name: "baseline profile in a restricted namespace", mode: podsecurity.ModeNamespace, labels: restricted,
			ws:   func(ws *autov1alpha1.Workspace) { ws.Spec.SecurityProfile = autov1alpha1.SecurityProfileBaseline },
			want: []string{`PodSecurity "restricted:latest" of namespace team-a`, "runAsNonRoot", "spec.workspaceTemplate"}},
		{name: "baseline profile in a baseline namespace", mode: podsecurity.ModeNamespace, labels: baseline,
			ws: func(ws *autov1alpha1.Workspace) { ws.Spec.SecurityProfile = autov1alpha1.SecurityProfileBaseline }},
		{name: "privileged template in a baseline namespace", mode: podsecurity.ModeNamespace, labels: baseline, ws: privilegedTemplate,
			want: []string{`"baseline:v1.30"`, "host namespaces (hostNetwork=true)", `privileged (container "pulumi" must not set securityContext.privileged=true)`}},
		{name: "unlabelled namespace is privileged", mode: podsecurity.ModeNamespace, ws: privilegedTemplate},
		{name: "baseline floor on an unlabelled namespace", mode: podsecurity.ModeBaseline, ws: privilegedTemplate,
			want: []string{`"baseline:latest"`, "hostNetwork=true"}},
		{name: "restricted floor over a baseline namespace", mode: podsecurity.ModeRestricted, labels: baseline,
			ws:   func(ws *autov1alpha1.Workspace) { ws.Spec.SecurityProfile = autov1alpha1.SecurityProfileBaseline },
			want: []string{`"restricted:v1.30"`}},
		{name: "malformed level is restricted", mode: podsecurity.ModeNamespace,
			labels: map[string]string{"pod-security.kubernetes.io/enforce": "strict"},
			ws:     func(ws *autov1alpha1.Workspace) { ws.Spec.SecurityProfile = autov1alpha1.SecurityProfileBaseline },
			want:   []string{`"restricted:latest"`}},
	}
	for _, tt := range cases {
		t.Run(tt.name, func(t *testing.T) {
			c, err := podsecurity.New(tt.mode)
			if err != nil {
				t.Fatal(err)
			}
			meta, spec := workspacePod(t, tt.ws)
			v := c.Check("team-a", tt.labels, meta, spec)
			if len(tt.want) == 0 {
				if v != nil {
					t.Fatalf("refused: %v", v)
				}
				return
			}
			if v == nil {
				t.Fatal("admitted, want a violation")
			}
			for _, w := range tt.want {
				if !strings.Contains(v.Error(), w) {
					t.Errorf("violation %q lacks %q", v.Error(), w)
				}
			}
		})
	}
}

func TestParseMode(t *testing.T) {
	for in, want := range map[string]podsecurity.Mode{"": podsecurity.ModeOff, "off": podsecurity.ModeOff,
		"namespace": podsecurity.ModeNamespace, "baseline": podsecurity.ModeBaseline, "restricted": podsecurity.ModeRestricted} {
		if got, err := podsecurity.ParseMode(in); err != nil || got != want {
			t.Errorf("ParseMode(%q) = %q, %v", in, got, err)
		}
	}
	if _, err := podsecurity.ParseMode("strict"); err == nil || !strings.Contains(err.Error(), "off, namespace, baseline, restricted") {
		t.Errorf("ParseMode(strict) = %v", err)
	}
}
