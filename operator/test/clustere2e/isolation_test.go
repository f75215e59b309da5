//go:build cluster

package clustere2e

import (
	"context"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/operator/internal/operator/operatortest"
	"github.com/stackflow-io/stackflow/operator/internal/workspace"
	"github.com/stackflow-io/stackflow/operator/internal/workspace/pod"
	"github.com/stackflow-io/stackflow/test/framework/gitrepo"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestWorkspaceServiceAccountsAreIsolated is the first half of issue 15's
// fifth end-to-end test: two Stacks in two namespaces, each with a running
// workspace pod; a token of either pod's ServiceAccount (requested for that
// pod, as the kubelet does) cannot read the other namespace's Secrets, its
// agent token among them. The second half, that neither pod can reach the
// other's agent, is TestWorkspaceAgentsAreIsolatedByNetworkPolicy.
func TestWorkspaceServiceAccountsAreIsolated(t *testing.T) {
	ctx := context.Background()
	nss, _, _ := twoNamespaces(t)
	for i, ns := range nss {
		other := nss[1-i]
		p, err := testCluster.Client.CoreV1().Pods(ns).Get(ctx, pod.PodName("app"), metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// A token bound to the running pod, as the kubelet projects it.
		tr, err := testCluster.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, p.Spec.ServiceAccountName, &authenticationv1.TokenRequest{
			Spec: authenticationv1.TokenRequestSpec{BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: p.Name, UID: p.UID}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cfg := rest.AnonymousClientConfig(testCluster.Config)
		cfg.BearerToken = tr.Status.Token
		as, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// Authenticated as the pod's ServiceAccount…
		review, err := as.AuthenticationV1().SelfSubjectReviews().Create(ctx, &authenticationv1.SelfSubjectReview{}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if want := "system:serviceaccount:" + ns + ":" + p.Spec.ServiceAccountName; review.Status.UserInfo.Username != want {
			t.Fatalf("token authenticates as %q, want %q", review.Status.UserInfo.Username, want)
		}
		// …denied the other namespace's Secrets, listed or by name.
		if _, err := as.CoreV1().Secrets(other).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("%s's workspace listing %s's Secrets: %v, want Forbidden", ns, other, err)
		}
		var otherWS autov1alpha1.Workspace
		if err := testClient.Get(ctx, clientKey(other, "app"), &otherWS); err != nil {
			t.Fatal(err)
		}
		tokenName := workspace.TokenSecretName(&otherWS)
		if _, err := as.CoreV1().Secrets(other).Get(ctx, tokenName, metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("%s's workspace reading %s's agent token: %v, want Forbidden", ns, other, err)
		}
		var tok corev1.Secret
		substrate.Eventually(t, 10*time.Second, "the agent token Secret", func() (bool, error) {
			return testClient.Get(ctx, clientKey(other, tokenName), &tok) == nil, nil
		})
	}
}

func clientKey(ns, name string) client.ObjectKey { return client.ObjectKey{Namespace: ns, Name: name} }

// twoNamespaces deploys a Stack "app" tracking main of a served repository
// in each of two restricted namespaces through one in-process operator, and
// returns the namespaces, the Ready Stacks and the repository.
func twoNamespaces(t *testing.T) ([]string, []*pulumiv1.Stack, *gitrepo.Repo) {
	t.Helper()
	ctx := context.Background()
	repo, srv := servedRepo(t)
	sha := repo.Commit(t, "v1", map[string]string{"Pulumi.yaml": recordProgram})
	// The namespaces and their volumes first: cleanups run last-registered
	// first, so the operator stops before the workloads are removed (a
	// running operator would recreate them).
	nss := []string{restrictedNamespace(t), restrictedNamespace(t)}
	for _, ns := range nss {
		stateVolume(t, ns)
	}
	operatortest.StartOperator(t, testCluster.Config, podRuntimeOptions(t))
	var stacks []*pulumiv1.Stack
	for _, ns := range nss {
		s := workspaceStack(ns, "app", &pulumiv1.GitSource{ProjectRepo: repo.HTTPURL(srv), Branch: "main"})
		if err := testClient.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		stacks = append(stacks, s)
	}
	for _, s := range stacks {
		waitStack(t, s, 4*time.Minute, "ready", readyAt(sha))
	}
	return nss, stacks, repo
}
