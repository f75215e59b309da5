package gitauth

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"unicode"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/stackflow-io/stackflow/test/framework/fakegithub"
)

// TestCheckAPIURL: only an https URL of a host, whose path is empty or ends
// in /api/v3, with no user info, query or fragment, is ever sent a JWT, and
// only GitHub.com's API or a host of the allowlist (--github-api-hosts).
// Before, with no allowlist configured (the default), any https host and
// port was accepted: a Stack author could make the operator POST to any
// address and read dial errors from status, an internal port scanner.
func TestCheckAPIURL(t *testing.T) {
	// formHosts allow the hosts of the cases about the URL's form.
	formHosts := []string{"ghe.example.com", "ghe.example.com:8443", "10.0.0.7", "proxy.example.com", "metadata.internal", "[::1]"}
	for _, tc := range []struct {
		url     string
		hosts   []string
		noHosts bool   // the default: no --github-api-hosts
		say     string // "" accepted; else a part of the error
	}{
		{url: "", noHosts: true},
		{url: "https://api.github.com", noHosts: true},
		{url: "https://api.github.com:443/", noHosts: true},
		{url: "https://ghe.example.com/api/v3", noHosts: true, say: "host ghe.example.com is not one Stackflow may reach for GitHub Apps: api.github.com, and the GitHub Enterprise Server hosts of --github-api-hosts (none)"},
		{url: "https://127.0.0.1:6443/api/v3", noHosts: true, say: "host 127.0.0.1:6443 is not one"},
		{url: "https://api.github.com:8443", noHosts: true, say: "host api.github.com:8443 is not one"},
		{url: ""},
		{url: "https://api.github.com"},
		{url: "https://api.github.com/"},
		{url: "https://ghe.example.com/api/v3"},
		{url: "https://ghe.example.com/api/v3/"},
		{url: "https://ghe.example.com:8443/api/v3"},
		{url: "https://10.0.0.7/api/v3"},
		{url: "https://proxy.example.com/github/api/v3"},
		{url: "http://ghe.example.com/api/v3", say: `use https, not "http"`},
		{url: "ftp://ghe.example.com", say: `use https, not "ftp"`},
		{url: "https://ghe.example.com/api/v3?", say: "remove the query or fragment"},
		{url: "https://metadata.internal/computeMetadata/v1/?x=", say: "remove the query or fragment"},
		{url: "https://ghe.example.com/api/v3#", say: "remove the query or fragment"},
		{url: "https://user:secret@ghe.example.com/api/v3", say: "remove the user info"},
		{url: "https://token@ghe.example.com", say: "remove the user info"},
		{url: "https://ghe.example.com/admin", say: `its path is "/admin"`},
		{url: "https://ghe.example.com/api/v3/../../admin/api/v3", say: "githubApp.apiURL must be"},
		{url: "https://ghe.example.com/%2e%2e/api/v3", say: "githubApp.apiURL must be"},
		{url: "https://ghe.example.com/api/v3x", say: "githubApp.apiURL must be"},
		{url: "https://ghe.example.com /api/v3", say: "githubApp.apiURL must be"},
		{url: "https:///api/v3", say: "githubApp.apiURL must be"},
		{url: "https:ghe.example.com", say: "githubApp.apiURL must be"},
		{url: "https://[::1]/api/v3", say: "githubApp.apiURL must be"},
		{url: "https://ghe.example.com/api/v3", hosts: []string{"ghe.example.com"}},
		{url: "https://GHE.example.com/api/v3", hosts: []string{"ghe.example.com"}},
		{url: "https://ghe.example.com:443/api/v3", hosts: []string{"ghe.example.com"}},
		{url: "https://ghe.example.com:8443/api/v3", hosts: []string{"ghe.example.com:8443"}},
		{url: "", hosts: []string{"ghe.example.com"}},
		{url: "https://api.github.com", hosts: []string{"ghe.example.com"}},
		{url: "https://ghe.example.com:8443/api/v3", hosts: []string{"ghe.example.com"}, say: "host ghe.example.com:8443 is not one"},
		{url: "https://kube-apiserver.internal/api/v3", hosts: []string{"ghe.example.com", "api.github.com"}, say: "is not one Stackflow may reach for GitHub Apps: api.github.com, and the GitHub Enterprise Server hosts of --github-api-hosts (ghe.example.com, api.github.com)"},
	} {
		t.Run(tc.url, func(t *testing.T) {
			hosts := tc.hosts
			if hosts == nil && !tc.noHosts {
				hosts = formHosts
			}
			err := CheckAPIURL(tc.url, hosts)
			switch {
			case tc.say == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tc.say != "" && (err == nil || !strings.Contains(err.Error(), tc.say)):
				t.Fatalf("err = %v, want it to say %q", err, tc.say)
			case err != nil && (strings.Contains(err.Error(), "secret") || !IsPermanent(err)):
				t.Fatalf("err = %v: shows the user info, or is not permanent", err)
			}
		})
	}
}

// FuzzCheckAPIURL: whatever CheckAPIURL accepts is an https URL of a host,
// without user info, query or fragment, whose path is empty or ends in
// /api/v3: the appended token path is always the path requested.
func FuzzCheckAPIURL(f *testing.F) {
	for _, s := range []string{"https://api.github.com", "https://ghe.example.com/api/v3/", "https://a/api/v3?", "https://u@h", "https://h/%2e%2e/api/v3", "https://h:1/x/api/v3#"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		if u, err := apiURLForm(raw); u == nil || err != nil {
			return
		}
		u, err := url.Parse(raw + "/app/installations/1/access_tokens")
		if err != nil {
			t.Fatalf("accepted %q, which does not parse: %v", raw, err)
		}
		path := strings.TrimSuffix(strings.TrimSuffix(raw, "/"), "/api/v3")
		if u.Scheme != "https" || u.User != nil || u.RawQuery != "" || u.Fragment != "" || u.Hostname() == "" ||
			!strings.HasSuffix(u.Path, "/app/installations/1/access_tokens") || strings.Contains(path, "/.") {
			t.Fatalf("accepted %q: %+v", raw, u)
		}
	})
}

// TestAPIURLPatternIsTheCRDs: the CRDs refuse at admission exactly what
// CheckAPIURL refuses, with the same message, wherever an apiURL is.
func TestAPIURLPatternIsTheCRDs(t *testing.T) {
	// go test runs in the package's directory.
	bases := filepath.Join("..", "..", "config", "crd", "bases")
	for _, name := range []string{"pulumi.com_stacks.yaml", "auto.pulumi.com_workspaces.yaml"} {
		b, err := os.ReadFile(filepath.Join(bases, name))
		if err != nil {
			t.Fatal(err)
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.Unmarshal(b, &crd); err != nil {
			t.Fatal(err)
		}
		found := 0
		var walk func(path string, p apiextensionsv1.JSONSchemaProps)
		walk = func(path string, p apiextensionsv1.JSONSchemaProps) {
			for k, sub := range p.Properties {
				if k == "apiURL" {
					found++
					if len(sub.XValidations) != 1 || sub.XValidations[0].Rule != "self.matches('"+APIURLPattern+"')" || sub.XValidations[0].Message != APIURLRule {
						t.Errorf("%s %s.apiURL: validations %+v, want APIURLPattern with APIURLRule (run make generate)", name, path, sub.XValidations)
					}
				}
				walk(path+"."+k, sub)
			}
			if p.Items != nil && p.Items.Schema != nil {
				walk(path+"[]", *p.Items.Schema)
			}
			if p.AdditionalProperties != nil && p.AdditionalProperties.Schema != nil {
				walk(path+"{}", *p.AdditionalProperties.Schema)
			}
		}
		for _, v := range crd.Spec.Versions {
			walk(v.Name, *v.Schema.OpenAPIV3Schema)
		}
		if found == 0 {
			t.Errorf("%s has no apiURL", name)
		}
	}
}

// TestTokenErrorFromHostileAnswer: what an API answers reaches a Stack's
// status only as a bounded line of printable text without the JWT sent, and
// a redirect is not followed.
func TestTokenErrorFromHostileAnswer(t *testing.T) {
	gh := fakegithub.NewApp(t, "4242", "777") // for the App's key
	var elsewhere atomic.Int32
	other := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { elsewhere.Add(1) }))
	t.Cleanup(other.Close)
	var jwt atomic.Value
	hostile := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		bearer := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		jwt.Store(bearer)
		if r.URL.Path == "/redirect/api/v3/app/installations/777/access_tokens" {
			http.Redirect(w, r, other.URL+"/internal", http.StatusTemporaryRedirect)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		msg := "echo " + bearer + "\n\x1b[31mcontrol\x00 characters\r\n" + strings.Repeat("internal data ", 1000)
		_ = json.NewEncoder(w).Encode(map[string]string{"message": msg})
	}))
	t.Cleanup(hostile.Close)
	client := hostile.Client() // trusts httptest's certificate, which both serve
	client.CheckRedirect = defaultAppClient.CheckRedirect

	app := GitHubApp{AppID: "4242", InstallationID: "777", PrivateKey: gh.KeyPEM, APIURL: hostile.URL}
	_, err := (&AppTokens{Client: client, APIHosts: []string{strings.TrimPrefix(hostile.URL, "https://")}}).Token(context.Background(), app)
	if err == nil {
		t.Fatal("no error")
	}
	msg := err.Error()
	sent, _ := jwt.Load().(string)
	if sent == "" || strings.Contains(msg, sent) || !strings.Contains(msg, "echo [redacted]") {
		t.Errorf("the JWT is not masked in %q", msg)
	}
	if strings.ContainsFunc(msg, func(r rune) bool { return !unicode.IsPrint(r) }) {
		t.Errorf("message holds unprintable characters: %q", msg)
	}
	if n := len([]rune(msg)); n > 400 {
		t.Errorf("message of %d characters: the answer is not bounded", n)
	}
	if !strings.Contains(msg, "answered 403") || !strings.Contains(msg, "check the App's permissions") {
		t.Errorf("message %q lacks the status and the hint", msg)
	}

	app.APIURL = hostile.URL + "/redirect/api/v3"
	_, err = (&AppTokens{Client: client, APIHosts: []string{strings.TrimPrefix(hostile.URL, "https://")}}).Token(context.Background(), app)
	if err == nil || !strings.Contains(err.Error(), "answered 307") {
		t.Fatalf("redirect: %v, want the 307 reported", err)
	}
	if elsewhere.Load() != 0 {
		t.Fatal("the redirect was followed")
	}
}
