package admission

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

var cp *substrate.ControlPlane

func TestMain(m *testing.M) {
	var err error
	cp, err = substrate.StartControlPlane()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	_ = cp.Stop()
	os.Exit(code)
}

// decodeAll reads every document of a YAML stream.
func decodeAll(t *testing.T, data []byte) []*unstructured.Unstructured {
	t.Helper()
	objs, err := substrate.DecodeObjects(data)
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// strict rejects fields the schema does not know, as kubectl does by default,
// so acceptance proves every field of the manifest is part of our API.
var strict = &client.CreateOptions{FieldValidation: "Strict"}

// TestDocumentedManifestsAreAcceptedUnchanged creates each fixture (the
// workflows PKO v2 users write) with strict field validation and checks that
// what the API server stored is exactly what was sent: nothing pruned.
func TestDocumentedManifestsAreAcceptedUnchanged(t *testing.T) {
	files, err := filepath.Glob("testdata/valid/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no fixtures: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			ns := cp.Namespace(t)
			for _, obj := range decodeAll(t, data) {
				sent := obj.DeepCopy()
				obj.SetNamespace(ns)
				if err := cp.Client.Create(context.Background(), obj, strict); err != nil {
					t.Fatalf("%s %s rejected: %v", obj.GetKind(), obj.GetName(), err)
				}
				for _, field := range []string{"spec", "program", "data"} {
					want, hasWant := sent.Object[field]
					if !hasWant {
						continue
					}
					if got := obj.Object[field]; !jsonEqual(want, got) {
						w, _ := yaml.Marshal(want)
						g, _ := yaml.Marshal(got)
						t.Errorf("%s %s: stored %s differs from sent\nsent:\n%s\nstored:\n%s", obj.GetKind(), obj.GetName(), field, w, g)
					}
				}
			}
		})
	}
}

func jsonEqual(a, b any) bool {
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	var va, vb any
	_ = json.Unmarshal(ja, &va)
	_ = json.Unmarshal(jb, &vb)
	return reflect.DeepEqual(va, vb)
}

const validCommit = "2b7c4c4f0f1e7d3b9a8e6f5d4c3b2a1908f7e6d5"

// stack builds a Stack manifest with the given spec fields (YAML) over a
// minimal valid spec.
func stack(name, specYAML string) string {
	return fmt.Sprintf("apiVersion: pulumi.com/v1\nkind: Stack\nmetadata:\n  name: %s\nspec:\n  stack: dev\n%s", name, indent(specYAML))
}

func indent(s string) string {
	if s == "" {
		return ""
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := range lines {
		lines[i] = "  " + lines[i]
	}
	return strings.Join(lines, "\n") + "\n"
}

// TestAdmissionRules submits one manifest per rule; bad ones must be rejected
// with the rule's message, good ones accepted.
func TestAdmissionRules(t *testing.T) {
	repo := "projectRepo: https://example.com/acme/app\n"
	cases := []struct {
		name     string
		manifest string
		wantErr  string // empty: must be accepted
	}{
		{"name of 42 characters", stack(strings.Repeat("a", 42), repo+"branch: main"), ""},
		{"name of 43 characters", stack(strings.Repeat("a", 43), repo+"branch: main"), "Stack name must be at most 42 characters"},
		{"v1alpha1 name of 43 characters", strings.Replace(stack(strings.Repeat("b", 43), repo+"branch: main"), "pulumi.com/v1", "pulumi.com/v1alpha1", 1), "Stack name must be at most 42 characters"},
		{"branch and commit", stack("both", repo+"branch: main\ncommit: "+validCommit), "spec.branch and spec.commit are mutually exclusive"},
		{"full commit", stack("full-commit", repo+"commit: "+validCommit), ""},
		{"short commit", stack("short-commit", repo+"commit: 2b7c4c4"), "spec.commit must be a full 40-character lowercase hexadecimal commit SHA"},
		{"uppercase commit", stack("upper-commit", repo+"commit: "+strings.ToUpper(validCommit)), "spec.commit must be a full 40-character"},
		{"repo without branch or commit", stack("no-ref", repo), "spec.projectRepo needs spec.branch (to track) or spec.commit (to pin)"},
		{"repo and programRef", stack("two-sources", repo+"branch: main\nprogramRef:\n  name: p"), "set at most one program source"},
		{"programRef and fluxSource", stack("flux-and-program", "programRef:\n  name: p\nfluxSource:\n  sourceRef: {apiVersion: source.toolkit.fluxcd.io/v1, kind: GitRepository, name: r}"), "set at most one program source"},
		{"no source, program in image", stack("no-source", "workspaceTemplate:\n  spec:\n    local:\n      dir: /share/program"), ""},
		{"resync 30s", stack("resync-30", repo+"branch: main\nresyncFrequencySeconds: 30"), "spec.resyncFrequencySeconds must be at least 60"},
		{"resync 60s", stack("resync-60", repo+"branch: main\nresyncFrequencySeconds: 60"), ""},
		{"resync 0 means default", stack("resync-0", repo+"branch: main\nresyncFrequencySeconds: 0"), ""},
		{"empty prerequisite name", stack("empty-prereq", repo+"branch: main\nprerequisites:\n- name: \"\""), "a prerequisite needs the name of a Stack"},
		{"self prerequisite", stack("selfish", repo+"branch: main\nprerequisites:\n- name: selfish"), "a Stack cannot be its own prerequisite"},
		{"other prerequisite", stack("polite", repo+"branch: main\nprerequisites:\n- name: other\n  requirement:\n    succeededWithinDuration: 30m"), ""},
		{"configRef without ConfigMap name", stack("cfgref-name", repo+"branch: main\nconfigRef:\n  app:x:\n    name: \"\"\n    key: k"), "configRef needs the name of a ConfigMap"},
		{"configRef without key", stack("cfgref-key", repo+"branch: main\nconfigRef:\n  app:x:\n    name: cm\n    key: \"\""), "configRef needs the key within the ConfigMap"},
		{"two git auth methods", stack("two-auths", repo+"branch: main\ngitAuth:\n  accessToken: {type: Literal, literal: {value: t}}\n  basicAuth:\n    userName: {type: Literal, literal: {value: u}}\n    password: {type: Literal, literal: {value: p}}"), "spec.gitAuth takes one of accessToken, sshAuth, basicAuth or githubApp"},
		{"Secret ref without secret", stack("ref-no-secret", repo+"branch: main\nenvRefs:\n  TOKEN:\n    type: Secret"), "type Secret needs secret.name and secret.key"},
		{"unknown ref type", stack("ref-bad-type", repo+"branch: main\nenvRefs:\n  TOKEN:\n    type: Vault"), `supported values: "Env", "FS", "Secret", "Literal"`},
		{"approval with preview", stack("gated-preview", repo+"branch: main\npreview: true\napproval:\n  required: true"), "spec.approval.required and spec.preview exclude each other"},
		{"approval required", stack("gated", repo+"branch: main\napproval:\n  required: true\n  expireAfterSeconds: 3600"), ""},
		{"exports", stack("exporting", repo+"branch: main\nexports:\n  deletionPolicy: Retain\n  configMap:\n    name: net-outputs\n    labels: {team: net}\n    keys:\n    - {key: VPC_ID, output: vpcId}\n    - {key: meta.json, output: meta, path: 'subnets[0]'}\n  secret:\n    name: net-secrets\n    keys:\n    - {key: PASSWORD, output: password}"), ""},
		{"exports of nothing", stack("exports-none", repo+"branch: main\nexports:\n  deletionPolicy: Retain"), "spec.exports needs configMap, secret, or both"},
		{"exports without keys", stack("exports-nokeys", repo+"branch: main\nexports:\n  configMap:\n    name: out\n    keys: []"), "spec.exports.configMap.keys"},
		{"exports key twice", stack("exports-dup", repo+"branch: main\nexports:\n  configMap:\n    name: out\n    keys:\n    - {key: A, output: a}\n    - {key: A, output: b}"), "Duplicate value"},
		{"exports key not a data key", stack("exports-badkey", repo+"branch: main\nexports:\n  configMap:\n    name: out\n    keys:\n    - {key: 'a/b', output: a}"), "spec.exports.configMap.keys[0].key"},
		{"exports to a bad name", stack("exports-badname", repo+"branch: main\nexports:\n  secret:\n    name: Not_A_Name\n    keys:\n    - {key: a, output: a}"), "spec.exports.secret.name"},
		{"exports with the operator's annotation", stack("exports-ann", repo+"branch: main\nexports:\n  configMap:\n    name: out\n    annotations: {stackflow.io/content-hash: x}\n    keys:\n    - {key: a, output: a}"), "annotations under stackflow.io/ are set by the operator"},
		{"exports with an unknown policy", stack("exports-policy", repo+"branch: main\nexports:\n  deletionPolicy: Orphan\n  configMap:\n    name: out\n    keys:\n    - {key: a, output: a}"), "spec.exports.deletionPolicy"},
		{"approval expiring too soon", stack("gated-soon", repo+"branch: main\napproval:\n  required: true\n  expireAfterSeconds: 60"), "spec.approval.expireAfterSeconds must be between 300 and 2592000"},
		{"bad reclaim policy", stack("bad-reclaim", repo+"branch: main\nworkspaceReclaimPolicy: Keep"), `supported values: "Retain", "Delete"`},
		{"update type apply", "apiVersion: auto.pulumi.com/v1alpha1\nkind: Update\nmetadata:\n  name: bad-type\nspec:\n  workspaceName: w\n  stackName: dev\n  type: apply\n", "type must be one of preview, up, refresh, destroy"},
		{"update type refresh", "apiVersion: auto.pulumi.com/v1alpha1\nkind: Update\nmetadata:\n  name: good-type\nspec:\n  workspaceName: w\n  stackName: dev\n  type: refresh\n", ""},
		{"workspace with two sources", "apiVersion: auto.pulumi.com/v1alpha1\nkind: Workspace\nmetadata:\n  name: two\nspec:\n  git: {url: https://example.com/r, ref: main}\n  local: {dir: /p}\n", "set at most one program source among spec.git, spec.flux and spec.local"},
	}
	// githubApp.apiURL: the operator POSTs a JWT there and reports part of
	// the answer, so only a GitHub API URL is accepted (the same pattern as
	// gitauth.CheckAPIURL).
	app := func(url string) string {
		ref := "{type: Secret, secret: {name: app, key: k}}"
		return repo + "branch: main\ngitAuth:\n  githubApp:\n    appID: " + ref + "\n    installationID: " + ref + "\n    privateKey: " + ref + "\n    apiURL: \"" + url + "\""
	}
	const apiURLRule = "githubApp.apiURL must be https://<host>[:<port>] with an empty path or a path ending in /api/v3 (GitHub Enterprise Server), and no user info, query or fragment"
	for i, tc := range []struct{ url, wantErr string }{
		{"https://api.github.com", ""},
		{"https://ghe.example.com/api/v3", ""},
		{"https://ghe.example.com:8443/api/v3/", ""},
		{"http://ghe.example.com/api/v3", apiURLRule},
		{"https://metadata.internal/computeMetadata/v1/?x=", apiURLRule},
		{"https://ghe.example.com/api/v3?", apiURLRule},
		{"https://ghe.example.com/api/v3#", apiURLRule},
		{"https://user:secret@ghe.example.com/api/v3", apiURLRule},
		{"https://ghe.example.com/admin", apiURLRule},
		{"https://ghe.example.com/../api/v3", apiURLRule},
	} {
		cases = append(cases, struct {
			name     string
			manifest string
			wantErr  string
		}{"apiURL " + tc.url, stack(fmt.Sprintf("app-url-%d", i), app(tc.url)), tc.wantErr})
	}
	cases = append(cases, struct {
		name     string
		manifest string
		wantErr  string
	}{"workspace apiURL with a query", "apiVersion: auto.pulumi.com/v1alpha1\nkind: Workspace\nmetadata:\n  name: ws-app-url\nspec:\n  git:\n    url: https://example.com/r\n    ref: main\n    auth:\n      githubApp:\n        appID: {name: app, key: k}\n        installationID: {name: app, key: k}\n        privateKey: {name: app, key: k}\n        apiURL: \"https://internal/x?\"\n", apiURLRule})
	ns := cp.Namespace(t)
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := decodeAll(t, []byte(tc.manifest))
			if len(objs) != 1 {
				t.Fatalf("bad test manifest:\n%s", tc.manifest)
			}
			obj := objs[0]
			obj.SetNamespace(ns)
			err := cp.Client.Create(context.Background(), obj, strict)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("rejected: %v\n%s", err, tc.manifest)
			case tc.wantErr != "" && err == nil:
				t.Fatalf("accepted, want rejection %q\n%s", tc.wantErr, tc.manifest)
			case tc.wantErr != "" && !strings.Contains(err.Error(), tc.wantErr):
				t.Fatalf("rejected with %q, want message containing %q", err, tc.wantErr)
			}
		})
	}
}
