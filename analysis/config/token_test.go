package config

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	rolloutsv1alpha1 "github.com/argoproj/argo-rollouts/pkg/apis/rollouts/v1alpha1"
	"github.com/go-logr/logr"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/stackflow-io/stackflow/analysis/service"
	"github.com/stackflow-io/stackflow/analysis/tokensecret"
	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// containerArgs returns the args of the first container of a Deployment or
// CronJob as shipped.
func containerArgs(t *testing.T, o *unstructured.Unstructured) []string {
	t.Helper()
	path := []string{"spec", "template", "spec", "containers"}
	if o.GetKind() == "CronJob" {
		path = append([]string{"spec", "jobTemplate"}, path...)
	}
	cs, _, err := unstructured.NestedSlice(o.Object, path...)
	if err != nil || len(cs) == 0 {
		t.Fatalf("%s %s: no containers (%v)", o.GetKind(), o.GetName(), err)
	}
	args, _, _ := unstructured.NestedStringSlice(cs[0].(map[string]any), "args")
	return args
}

// TestKargoProjectTokenUnderTheRolloutsController: a Kargo project set up
// with analysis/config/kargo-project verifies a Stack with the shipped
// template, run by the real Argo Rollouts controller, against the real
// service started with the shipped Deployment's args (so --audiences
// defaults to stackflow-analysis):
//   - the refresh the CronJob runs, with the CronJob's args and as the
//     CronJob's ServiceAccount (only the RBAC kargo-project grants), fills
//     the token Secret with a token of stackflow-verifier for the audience
//     stackflow-analysis;
//   - the template reads it from the Secret (its token arg's default) and
//     the run ends Successful;
//   - stackflow-verifier's token for the API server's audience (what a pod
//     of it would mount by default) is refused with 401;
//   - deleting the Secret revokes the token it held (bound to it).
func TestKargoProjectTokenUnderTheRolloutsController(t *testing.T) {
	ctx := context.Background()
	project, stacks := generatedNamespace(t, "project-"), generatedNamespace(t, "stacks-")

	// kargo-project with its placeholder namespaces set, as
	// examples/kargo does.
	objs := build(t, "kargo-project")
	for _, o := range objs {
		switch o.GetNamespace() {
		case "my-project":
			o.SetNamespace(project)
		case "my-stacks":
			o.SetNamespace(stacks)
		}
		if o.GetKind() == "RoleBinding" {
			subjects, _, _ := unstructured.NestedSlice(o.Object, "subjects")
			for _, s := range subjects {
				if s.(map[string]any)["namespace"] == "my-project" {
					s.(map[string]any)["namespace"] = project
				}
			}
			_ = unstructured.SetNestedSlice(o.Object, subjects, "subjects")
		}
	}
	apply(t, objs)
	apply(t, build(t, "default")) // the ClusterRole stackflow-stack-verifier

	// The service, with the shipped Deployment's args.
	var so service.Options
	fs := flag.NewFlagSet("stackflow-analysis", flag.ContinueOnError)
	so.BindFlags(fs)
	if err := fs.Parse(containerArgs(t, find(t, build(t, "default"), "Deployment", "stackflow-analysis"))); err != nil {
		t.Fatal(err)
	}
	url := startService(t, so, stacks)

	// The refresh, as the CronJob runs it: its args, its ServiceAccount's
	// token (for the API server's audience, as its pod mounts), the pod's
	// namespace.
	var ro tokensecret.Options
	rfs := flag.NewFlagSet("refresh-token", flag.ContinueOnError)
	ro.BindFlags(rfs)
	args := containerArgs(t, find(t, objs, "CronJob", "stackflow-verifier-token"))
	if len(args) == 0 || args[0] != "refresh-token" {
		t.Fatalf("the CronJob runs %q, want refresh-token", args)
	}
	if err := rfs.Parse(args[1:]); err != nil {
		t.Fatal(err)
	}
	admin := kubernetes.NewForConfigOrDie(env.Config)
	ro.Namespace, ro.Client = project, asServiceAccount(t, admin, project, "stackflow-verifier-token-refresher")
	expires, err := tokensecret.Refresh(ctx, ro)
	if err != nil {
		t.Fatalf("refresh as the CronJob: %v", err)
	}
	t.Logf("the token expires at %s", expires.UTC().Format(time.RFC3339))
	if life := time.Until(expires); life < 23*time.Hour || life > 25*time.Hour {
		t.Errorf("the token lives %s, want the CronJob's 24h", life)
	}
	sec := &corev1.Secret{}
	if err := k8s.Get(ctx, client.ObjectKey{Namespace: project, Name: TokenSecret}, sec); err != nil {
		t.Fatal(err)
	}
	tok := string(sec.Data[TokenSecretKey])
	if tok == "" || sec.Annotations[tokensecret.AudienceAnnotation] != service.DefaultAudience || sec.Annotations[tokensecret.ExpiresAnnotation] == "" {
		t.Fatalf("Secret after the refresh: annotations %v, %d bytes of token", sec.Annotations, len(tok))
	}

	// A Stack that applied the commit.
	const commit = "0123456789abcdef0123456789abcdef01234567"
	st := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: stacks, Name: "web"}, Spec: pulumiv1.StackSpec{
		Stack: "web", GitSource: &pulumiv1.GitSource{ProjectRepo: "https://example.com/infra.git", Commit: commit}}}
	if err := k8s.Create(ctx, st); err != nil {
		t.Fatal(err)
	}
	st.Status.ObservedGeneration = st.Generation
	st.Status.LastUpdate = &pulumiv1.StackUpdateState{Generation: st.Generation, Name: "web-1", Type: autov1alpha1.UpType,
		State: pulumiv1.SucceededStackStateMessage, LastAttemptedCommit: commit, LastSuccessfulCommit: commit, LastResyncTime: metav1.Now()}
	if err := k8s.Status().Update(ctx, st); err != nil {
		t.Fatal(err)
	}

	ask := func(tok string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, url+"/v1/namespaces/"+stacks+"/stacks/web/verification?commit="+commit, nil)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct{ Phase, Reason, Message string }
		_ = json.NewDecoder(resp.Body).Decode(&body)
		return resp.StatusCode, body.Phase + " " + body.Reason + " " + body.Message
	}
	// The RBAC authoriser sees the new binding through its informers.
	substrate.Eventually(t, 30*time.Second, "the refreshed token answered", func() (bool, error) {
		code, body := ask(tok)
		return code == http.StatusOK && strings.HasPrefix(body, "Succeeded"), fmt.Errorf("the refreshed token: %d %s", code, body)
	})
	tr, err := admin.CoreV1().ServiceAccounts(project).CreateToken(ctx, "stackflow-verifier", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if code, body := ask(tr.Status.Token); code != http.StatusUnauthorized {
		t.Fatalf("stackflow-verifier's token for the API server's audience: %d %s, want 401", code, body)
	} else {
		t.Logf("the API server's audience: 401 %s", body)
	}

	// The shipped template, token from the Secret by default, run by the
	// real Argo Rollouts controller.
	startRolloutsController(t)
	ats, err := AnalysisTemplates()
	if err != nil {
		t.Fatal(err)
	}
	var applied *rolloutsv1alpha1.AnalysisTemplate
	for _, at := range ats {
		if at.Name == AppliedTemplate {
			applied = at
		}
	}
	run := newRun(project, "verify-web", applied.Spec, map[string]string{ArgNamespace: stacks, ArgStack: "web", ArgCommit: commit, ArgServer: url})
	if err := k8s.Create(ctx, run, &client.CreateOptions{FieldValidation: metav1.FieldValidationStrict}); err != nil {
		t.Fatal(err)
	}
	done := waitCompleted(t, run, 2*time.Minute)
	if done.Status.Phase != rolloutsv1alpha1.AnalysisPhaseSuccessful {
		t.Fatalf("AnalysisRun %s: %s (%s): %+v", run.Name, done.Status.Phase, done.Status.Message, done.Status.MetricResults)
	}
	for _, m := range done.Status.MetricResults {
		if m.Error > 0 {
			t.Errorf("metric %s: %d measurement errors (a refused token is one): %+v", m.Name, m.Error, m.Measurements)
		}
	}

	// Bound to the Secret: deleting it revokes the token.
	if err := k8s.Delete(ctx, sec); err != nil {
		t.Fatal(err)
	}
	substrate.Eventually(t, 30*time.Second, "the token refused after its Secret's deletion", func() (bool, error) {
		rev, err := admin.AuthenticationV1().TokenReviews().Create(ctx, &authenticationv1.TokenReview{Spec: authenticationv1.TokenReviewSpec{
			Token: tok, Audiences: []string{service.DefaultAudience}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if !rev.Status.Authenticated {
			t.Logf("after the Secret's deletion: %s", rev.Status.Error)
		}
		return !rev.Status.Authenticated, errors.New("the token still authenticates")
	})
}

// TestRefreshRefusesAServiceAccountTokenSecret: the Secret the older
// kargo-project shipped (type kubernetes.io/service-account-token, whose
// token carries no audience) is refused with the fix to make, and the
// refresh fails without a Secret to bind to.
func TestRefreshRefusesAServiceAccountTokenSecret(t *testing.T) {
	ctx := context.Background()
	ns := generatedNamespace(t, "legacy-")
	admin := kubernetes.NewForConfigOrDie(env.Config)
	if _, err := admin.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "stackflow-verifier"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	o := tokensecret.Options{Client: admin, Namespace: ns, ServiceAccount: "stackflow-verifier", Secret: TokenSecret, Key: TokenSecretKey,
		Audience: service.DefaultAudience, Expiration: time.Hour}
	if _, err := tokensecret.Refresh(ctx, o); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Fatalf("no Secret: %v", err)
	}
	legacy := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: TokenSecret,
		Annotations: map[string]string{corev1.ServiceAccountNameKey: "stackflow-verifier"}}, Type: corev1.SecretTypeServiceAccountToken}
	if err := k8s.Create(ctx, legacy); err != nil {
		t.Fatal(err)
	}
	_, err := tokensecret.Refresh(ctx, o)
	if err == nil || !strings.Contains(err.Error(), "kubernetes.io/service-account-token") || !strings.Contains(err.Error(), "Opaque") {
		t.Fatalf("a service-account-token Secret: %v", err)
	}
	t.Logf("refused: %v", err)
}

func generatedNamespace(t *testing.T, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := k8s.Create(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	return ns.Name
}

// asServiceAccount is a client with the identity of a ServiceAccount: its
// token for the API server's audience, as its pods mount.
func asServiceAccount(t *testing.T, admin kubernetes.Interface, ns, name string) kubernetes.Interface {
	t.Helper()
	tr, err := admin.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := rest.AnonymousClientConfig(env.Config)
	cfg.BearerToken = tr.Status.Token
	return kubernetes.NewForConfigOrDie(cfg)
}

// startService runs stackflow-analysis with o (Kubernetes authentication)
// on loopback, serving the Stacks of namespace, until the test ends.
func startService(t *testing.T, o service.Options, namespace string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o.BindAddress = ""
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	o.Config, o.Listener, o.Log, o.Ready, o.WatchNamespaces = env.Config, ln, logr.Discard(), ready, []string{namespace}
	go func() { done <- service.Run(ctx, o) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("analysis service: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("analysis service: %v", err)
	case <-time.After(time.Minute):
		t.Fatal("analysis service not ready in a minute")
	}
	return "http://" + ln.Addr().String()
}
