package argocd

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/crypto/bcrypt"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// ServerServiceAccount is the API server's identity (where the build has
// its RBAC), as Argo CD's own manifests run it.
const ServerServiceAccount = "system:serviceaccount:" + Namespace + ":argocd-server"

// apiTimeout bounds each request to the API server.
const apiTimeout = 30 * time.Second

// addAccounts stores each local user's password in argocd-secret as Argo CD
// keeps it (accounts.<name>.password, a bcrypt hash, and its mtime).
func addAccounts(sec *corev1.Secret, accounts map[string]string) error {
	for name, password := range accounts {
		hash, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
		if err != nil {
			return err
		}
		sec.Data["accounts."+name+".password"] = hash
		sec.Data["accounts."+name+".passwordMtime"] = []byte(time.Now().UTC().Format(time.RFC3339))
	}
	return nil
}

// serverServiceAccount creates the ServiceAccount argocd-server with the
// RBAC of the build's install manifests and argocd-health's, and writes a
// kubeconfig authenticating as it (a bound token of 24 h).
func serverServiceAccount(ctx context.Context, o Options) (string, error) {
	c := o.Client
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "argocd-server", Namespace: Namespace}}
	if err := c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	files, err := filepath.Glob(filepath.Join(o.Build.ServerRBAC, "*.yaml"))
	if err != nil {
		return "", err
	}
	files = append(files, filepath.Join(o.RepoRoot, "argocd-health", "install", "kustomize", "argocd-server-plan-approvals.yaml"))
	for _, f := range files {
		if err := applyFile(ctx, o, f); err != nil {
			return "", err
		}
	}
	cs, err := kubernetes.NewForConfig(o.Env.Config)
	if err != nil {
		return "", err
	}
	exp := int64((24 * time.Hour).Seconds())
	tr, err := cs.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, "argocd-server",
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of ServiceAccount argocd-server: %w", err)
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["local"] = &clientcmdapi.Cluster{Server: o.Env.Config.Host, CertificateAuthorityData: o.Env.Config.CAData}
	cfg.AuthInfos["argocd-server"] = &clientcmdapi.AuthInfo{Token: tr.Status.Token}
	cfg.Contexts["argocd-server"] = &clientcmdapi.Context{Cluster: "local", AuthInfo: "argocd-server", Namespace: Namespace}
	cfg.CurrentContext = "argocd-server"
	path := filepath.Join(o.Dir, "server-kubeconfig")
	return path, clientcmd.WriteToFile(*cfg, path)
}

// applyFile creates the objects of a YAML file, namespaced ones without a
// namespace in Argo CD's (as its kustomization sets it).
func applyFile(ctx context.Context, o Options, path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	objs, err := substrate.DecodeObjects(b)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	for _, u := range objs {
		if k := u.GetKind(); (k == "Role" || k == "RoleBinding") && u.GetNamespace() == "" {
			u.SetNamespace(Namespace)
		}
		if u.GetKind() == "RoleBinding" {
			subjects, _, _ := unstructured.NestedSlice(u.Object, "subjects")
			for _, s := range subjects {
				if m, ok := s.(map[string]any); ok && m["namespace"] == nil {
					m["namespace"] = Namespace
				}
			}
			_ = unstructured.SetNestedSlice(u.Object, subjects, "subjects")
		}
		if err := o.Client.Create(ctx, u); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("%s: create %s %s: %w", path, u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

// Login opens a session of a local user (Options.Accounts) as the UI's
// login form does, and returns the Instance acting as that user.
func (in *Instance) Login(ctx context.Context, user, password string) (*Instance, error) {
	body, _ := json.Marshal(map[string]string{"username": user, "password": password})
	var out struct {
		Token string `json:"token"`
	}
	if err := in.call(ctx, http.MethodPost, "/api/v1/session", body, &out); err != nil {
		return nil, fmt.Errorf("log in as %s: %w", user, err)
	}
	return in.As(out.Token), nil
}

// As is the Instance sending API requests with token (a session's). It
// shares the processes but cannot stop them.
func (in *Instance) As(token string) *Instance {
	return &Instance{APIURL: in.APIURL, CACert: in.CACert, RedisAddr: in.RedisAddr, Kubeconfig: in.Kubeconfig, ServerKubeconfig: in.ServerKubeconfig, token: token}
}

// do sends an API request, authenticated when the Instance has a session.
func (in *Instance) do(req *http.Request) (*http.Response, error) {
	if in.token != "" {
		req.Header.Set("Authorization", "Bearer "+in.token)
	}
	return in.httpClient().Do(req)
}

// APIError is an API server's refusal: its HTTP status and message.
type APIError struct {
	Status  int
	Message string
}

func (e *APIError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Status, e.Message) }

// call sends a JSON request to path and decodes the answer into out (when
// not nil); a non-200 answer is an *APIError.
func (in *Instance) call(ctx context.Context, method, path string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, in.APIURL+path, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := in.do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Message string `json:"message"`
		}
		if json.Unmarshal(b, &e) != nil || e.Message == "" {
			e.Message = tailBytes(b, 1000)
		}
		return &APIError{Status: resp.StatusCode, Message: e.Message}
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(b, out)
}

// Action is a resource action as the Actions menu lists it.
type Action struct {
	Name        string `json:"name"`
	DisplayName string `json:"displayName"`
	Disabled    bool   `json:"disabled"`
}

// Actions lists a resource's actions as the UI's Actions menu does (GET
// …/resource/actions).
func (in *Instance) Actions(ctx context.Context, app string, gvk schema.GroupVersionKind, namespace, name string) ([]Action, error) {
	q := fmt.Sprintf("namespace=%s&resourceName=%s&group=%s&version=%s&kind=%s&appNamespace=%s",
		namespace, name, gvk.Group, gvk.Version, gvk.Kind, Namespace)
	var out struct {
		Actions []Action `json:"actions"`
	}
	err := in.call(ctx, http.MethodGet, fmt.Sprintf("/api/v1/applications/%s/resource/actions?%s", app, q), nil, &out)
	return out.Actions, err
}

// RunActionV2 runs a resource action with parameters as Argo CD v3's UI
// does (POST …/resource/actions/v2); a refusal is an *APIError.
func (in *Instance) RunActionV2(ctx context.Context, app string, gvk schema.GroupVersionKind, namespace, name, action string, params map[string]string) error {
	type param struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	}
	req := map[string]any{
		"name": app, "appNamespace": Namespace, "namespace": namespace, "resourceName": name,
		"group": gvk.Group, "version": gvk.Version, "kind": gvk.Kind, "action": action,
	}
	var ps []param
	for k, v := range params {
		ps = append(ps, param{Name: k, Value: v})
	}
	if ps != nil {
		req["resourceActionParameters"] = ps
	}
	body, _ := json.Marshal(req)
	return in.call(ctx, http.MethodPost, fmt.Sprintf("/api/v1/applications/%s/resource/actions/v2", app), body, nil)
}
