package kubeauth_test

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/go-logr/logr"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/stackflow-io/stackflow/internal/httperror"
	"github.com/stackflow-io/stackflow/internal/kubeauth"
)

// A handler checks the caller, then answers the error with internal/httperror:
// 401 with a WWW-Authenticate challenge, 403, or 503 with a fixed message and
// a request ID (the error itself, client-go's text, goes to the log).
func ExampleAuthorizer_Check() {
	client := fake.NewClientset()
	client.PrependReactor("create", "tokenreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		tr := a.(k8stesting.CreateAction).GetObject().(*authenticationv1.TokenReview)
		if tr.Spec.Token == "verifier-token" {
			tr.Status = authenticationv1.TokenReviewStatus{Authenticated: true,
				User: authenticationv1.UserInfo{Username: "system:serviceaccount:kargo-demo:verifier"}}
		}
		return true, tr, nil
	})
	client.PrependReactor("create", "subjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		sar := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SubjectAccessReview)
		sar.Status.Allowed = sar.Spec.ResourceAttributes.Namespace == "staging"
		return true, sar, nil
	})
	az := kubeauth.New(kubeauth.Options{Client: client})

	handler := func(w http.ResponseWriter, r *http.Request) {
		u, err := az.Check(r, kubeauth.StackTarget(r.URL.Query().Get("namespace"), r.URL.Query().Get("name")))
		if err != nil {
			var ue *kubeauth.UnauthenticatedError
			if errors.As(err, &ue) {
				w.Header().Set("WWW-Authenticate", ue.Challenge())
			}
			httperror.Error(w, r, logr.Discard(), err)
			return
		}
		fmt.Fprintf(w, "hello %s", u)
	}
	for _, c := range []struct{ header, query string }{
		{"", "namespace=staging&name=web"},
		{"Bearer garbage", "namespace=staging&name=web"},
		{"Bearer verifier-token", "namespace=dev&name=web"},
		{"Bearer verifier-token", "namespace=staging&name=web"},
	} {
		r := httptest.NewRequest("GET", "/v1/stacks/verify?"+c.query, nil)
		if c.header != "" {
			r.Header.Set("Authorization", c.header)
		}
		w := httptest.NewRecorder()
		handler(w, r)
		fmt.Printf("%d %s\n", w.Code, strings.TrimSpace(w.Body.String()))
	}
	// Output:
	// 401 {"code":401,"reason":"Unauthorized","message":"missing Authorization header: send `Authorization: Bearer \u003ctoken\u003e` with a Kubernetes ServiceAccount token"}
	// 401 {"code":401,"reason":"Unauthorized","message":"the bearer token was rejected by a Kubernetes TokenReview"}
	// 403 {"code":403,"reason":"Forbidden","message":"\"system:serviceaccount:kargo-demo:verifier\" cannot get stacks.pulumi.com \"web\" in namespace \"dev\": grant it get on stacks.pulumi.com (see analysis/config/kargo-project)"}
	// 200 hello system:serviceaccount:kargo-demo:verifier
}
