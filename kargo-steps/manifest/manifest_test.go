package manifest

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

var update = flag.Bool("update", false, "rewrite golden files")

const (
	oldSHA = "0123456789abcdef0123456789abcdef01234567"
	newSHA = "89abcdef0123456789abcdef0123456789abcdef"
)

// helm is a Helm template: not YAML, and no Stack in it.
const helm = "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ .Release.Name }}\ndata:\n  {{- toYaml .Values.data | nindent 2 }}\n"

func readTestdata(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeFiles(t testing.TB, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestSetCommit(t *testing.T) {
	cases := []struct {
		name    string // golden file: testdata/<name>.golden.yaml
		input   string // testdata/<input>.yaml, copied to <dir>/env/<input>.yaml
		extra   map[string]string
		target  Target
		sha     string
		want    Result
		wantErr []string // substrings of the error
	}{
		{name: "single", input: "single", target: Target{Name: "app", Namespace: "dev"},
			want: Result{Document: 1, Stack: Target{"app", "dev"}, OldCommit: oldSHA, Changed: true}},
		{name: "single-upper-sha", input: "single", target: Target{Name: "app"}, sha: strings.ToUpper(newSHA),
			want: Result{Document: 1, Stack: Target{"app", "dev"}, OldCommit: oldSHA, Changed: true}},
		{name: "multidoc-middle", input: "multidoc-middle", target: Target{Name: "app", Namespace: "dev"},
			want: Result{Document: 2, Stack: Target{"app", ""}, OldCommit: oldSHA, OldBranch: "main", BranchRemoved: true, Changed: true}},
		{name: "multidoc-last", input: "multidoc-last", target: Target{Name: "app"},
			want: Result{Document: 3, Stack: Target{"app", "prod"}, OldCommit: oldSHA, Changed: true}},
		{name: "branch-tracking", input: "branch-tracking", target: Target{Name: "app"},
			want: Result{Document: 1, Stack: Target{"app", ""}, OldBranch: "main", BranchRemoved: true, Changed: true}},
		{name: "no-commit", input: "no-commit", target: Target{Name: "app"},
			want: Result{Document: 1, Stack: Target{"app", ""}, Changed: true}},
		{name: "namespaces-prod", input: "namespaces", target: Target{Name: "app", Namespace: "prod"},
			want: Result{Document: 2, Stack: Target{"app", "prod"}, OldCommit: oldSHA, Changed: true}},
		{name: "namespaces-ambiguous", input: "namespaces", target: Target{Name: "app"},
			wantErr: []string{"2 Stacks named app", "staging/app (env/namespaces.yaml, document 1)", "prod/app (env/namespaces.yaml, document 2)", "pass the Stack's namespace"}},
		{name: "namespaces-none", input: "namespaces", target: Target{Name: "app", Namespace: "dev"},
			wantErr: []string{"no Stack dev/app", "Stacks found: staging/app (env/namespaces.yaml, document 1), prod/app"}},
		{name: "crlf", input: "crlf", target: Target{Name: "app"},
			want: Result{Document: 1, Stack: Target{"app", ""}, OldBranch: "main", BranchRemoved: true, Changed: true}},
		{name: "crlf-commit", input: "crlf-commit", target: Target{Name: "app"},
			want: Result{Document: 1, Stack: Target{"app", ""}, OldCommit: oldSHA, Changed: true}},
		{name: "multiline-commit", input: "multiline-commit", target: Target{Name: "app"},
			want: Result{Document: 1, Stack: Target{"app", ""}, OldCommit: oldSHA, Changed: true}},
		{name: "crlf-insert", input: "crlf-insert", target: Target{Name: "app"},
			want: Result{Document: 1, Stack: Target{"app", ""}, Changed: true}},
		{name: "indent4", input: "indent4", target: Target{Name: "app"},
			want: Result{Document: 1, Stack: Target{"app", ""}, Changed: true}},
		{name: "quoted-double", input: "quoted-double", target: Target{Name: "app"},
			want: Result{Document: 1, Stack: Target{"app", ""}, OldCommit: oldSHA, Changed: true}},
		{name: "quoted-single", input: "quoted-single", target: Target{Name: "app"},
			want: Result{Document: 1, Stack: Target{"app", ""}, OldCommit: oldSHA, BranchRemoved: true, Changed: true}},
		{name: "v1alpha1", input: "v1alpha1", target: Target{Name: "app"},
			want: Result{Document: 1, Stack: Target{"app", ""}, OldCommit: oldSHA, Changed: true}},
		{name: "other-group", input: "other-group", target: Target{Name: "app"},
			want: Result{Document: 2, Stack: Target{"app", ""}, OldCommit: oldSHA, Changed: true}},
		{name: "unchanged", input: "unchanged", target: Target{Name: "app"},
			want: Result{Document: 1, Stack: Target{"app", ""}, OldCommit: newSHA}},
		{name: "bom", input: "bom", target: Target{Name: "app"},
			want: Result{Document: 1, Stack: Target{"app", ""}, OldCommit: oldSHA, Changed: true}},
		{name: "empty-commit", input: "empty-commit", target: Target{Name: "app"},
			want: Result{Document: 1, Stack: Target{"app", ""}, Changed: true}},
		{name: "no-newline", input: "no-newline", target: Target{Name: "app"},
			want: Result{Document: 1, Stack: Target{"app", ""}, OldBranch: "main", BranchRemoved: true, Changed: true}},
		{name: "numeric-sha", input: "no-commit", target: Target{Name: "app"}, sha: "0123456789012345678901234567890123456789",
			want: Result{Document: 1, Stack: Target{"app", ""}, Changed: true}},
		{name: "helm-template-skipped", input: "single", target: Target{Name: "app"},
			extra: map[string]string{"chart/templates/cm.yaml": helm},
			want:  Result{Document: 1, Stack: Target{"app", "dev"}, OldCommit: oldSHA, Changed: true, Skipped: []Skipped{{File: "chart/templates/cm.yaml"}}}},
		{name: "unparsable-stack-file", input: "single", target: Target{Name: "app"},
			extra:   map[string]string{"broken.yaml": "apiVersion: pulumi.com/v1\nkind: Stack\nmetadata:\n  name: app\n  namespace: [prod\n"},
			wantErr: []string{"broken.yaml does not parse", "may hold a Stack: fix its YAML"}},
		{name: "no-spec", input: "no-spec", target: Target{Name: "app"},
			wantErr: []string{"env/no-spec.yaml: Stack app (document 1): the Stack has no spec: add a spec"}},
		{name: "flow-spec", input: "flow-spec", target: Target{Name: "app"},
			wantErr: []string{"env/flow-spec.yaml", "spec is a flow mapping ({...}): write it as a block mapping"}},
		{name: "alias-commit", input: "alias-commit", target: Target{Name: "app"},
			wantErr: []string{"spec.commit is an alias (*sha): write the commit itself"}},
		{name: "not-found", input: "single", target: Target{Name: "api"},
			wantErr: []string{"no Stack api in", "Stacks found: dev/app (env/single.yaml, document 1)"}},
		{name: "no-stacks", input: "single", target: Target{Name: "app"}, extra: map[string]string{},
			wantErr: []string{"no Stack manifests at all"}},
		{name: "short-sha", input: "single", target: Target{Name: "app"}, sha: "0123456",
			wantErr: []string{`invalid commit "0123456": expected a full 40-character hexadecimal commit SHA`}},
		{name: "branch-name-as-sha", input: "single", target: Target{Name: "app"}, sha: "main",
			wantErr: []string{`invalid commit "main"`}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			in := readTestdata(t, tc.input+".yaml")
			path := filepath.Join(dir, "env", tc.input+".yaml")
			if tc.name != "no-stacks" {
				writeFiles(t, dir, map[string]string{"env/" + tc.input + ".yaml": string(in)})
				if err := os.Chmod(path, 0o640); err != nil {
					t.Fatal(err)
				}
			}
			writeFiles(t, dir, tc.extra)
			sha := tc.sha
			if sha == "" {
				sha = newSHA
			}
			got, err := SetCommit(dir, tc.target, sha)
			if tc.wantErr != nil {
				if err == nil {
					t.Fatalf("SetCommit succeeded (%+v), want an error", got)
				}
				for _, w := range tc.wantErr {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("error %q does not contain %q", err, w)
					}
				}
				if b, _ := os.ReadFile(path); tc.name != "no-stacks" && !bytes.Equal(b, in) {
					t.Errorf("the file changed although SetCommit failed")
				}
				return
			}
			if err != nil {
				t.Fatalf("SetCommit: %v", err)
			}
			tc.want.File = "env/" + tc.input + ".yaml"
			if diff := cmp.Diff(tc.want, got, cmpopts.IgnoreFields(Skipped{}, "Err")); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			out, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi, _ := os.Stat(path); fi.Mode().Perm() != 0o640 {
				t.Errorf("mode %v, want 0640", fi.Mode().Perm())
			}
			golden := filepath.Join("testdata", tc.name+".golden.yaml")
			if *update {
				if err := os.WriteFile(golden, out, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if want := readTestdata(t, tc.name+".golden.yaml"); !bytes.Equal(out, want) {
				t.Errorf("file differs from %s (-want +got):\n%s", golden, cmp.Diff(string(want), string(out)))
			}
			if !got.Changed && !bytes.Equal(out, in) {
				t.Errorf("Changed is false but the file changed")
			}
			// Idempotent: a second run changes nothing.
			again, err := SetCommit(dir, tc.target, sha)
			if err != nil {
				t.Fatalf("second SetCommit: %v", err)
			}
			if again.Changed || again.BranchRemoved || again.OldCommit != strings.ToLower(sha) {
				t.Errorf("second SetCommit = %+v, want unchanged with OldCommit %s", again, sha)
			}
			if b, _ := os.ReadFile(path); !bytes.Equal(b, out) {
				t.Errorf("second SetCommit changed the file")
			}
			entries, _ := os.ReadDir(filepath.Dir(path))
			if len(entries) != 1 {
				t.Errorf("directory holds %d entries after the edit, want 1 (no temporary file left)", len(entries))
			}
		})
	}
}

func TestSetCommitSentinels(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"a.yaml": string(readTestdata(t, "namespaces.yaml"))})
	if _, err := SetCommit(dir, Target{Name: "app"}, newSHA); !errors.Is(err, ErrAmbiguous) {
		t.Errorf("ambiguous: err %v, want ErrAmbiguous", err)
	}
	if _, err := SetCommit(dir, Target{Name: "api"}, newSHA); !errors.Is(err, ErrNoMatch) {
		t.Errorf("missing: err %v, want ErrNoMatch", err)
	}
}

// TestSetCommitWalk: hidden directories and symbolic links are not walked,
// .yml files are.
func TestSetCommitWalk(t *testing.T) {
	outside := t.TempDir()
	writeFiles(t, outside, map[string]string{"stack.yaml": string(readTestdata(t, "single.yaml"))})
	dir := t.TempDir()
	single := string(readTestdata(t, "single.yaml"))
	writeFiles(t, dir, map[string]string{
		".git/stack.yaml":        single,
		".hidden/stack.yaml":     single,
		"env/dev/stack.yml":      single,
		"env/dev/README.md":      single,
		"env/dev/stack.yaml.bak": single,
	})
	if err := os.Symlink(outside, filepath.Join(dir, "linked")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(outside, "stack.yaml"), filepath.Join(dir, "env", "link.yaml")); err != nil {
		t.Fatal(err)
	}
	got, err := SetCommit(dir, Target{Name: "app"}, newSHA)
	if err != nil {
		t.Fatal(err)
	}
	if got.File != "env/dev/stack.yml" || !got.Changed {
		t.Errorf("got %+v, want env/dev/stack.yml changed", got)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "stack.yaml")); string(b) != single {
		t.Errorf("the file outside dir changed")
	}
	for _, p := range []string{".git/stack.yaml", ".hidden/stack.yaml", "env/dev/README.md"} {
		if b, _ := os.ReadFile(filepath.Join(dir, p)); string(b) != single {
			t.Errorf("%s changed", p)
		}
	}
	// dir given through a symbolic link is walked.
	link := filepath.Join(t.TempDir(), "repo")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if got, err := SetCommit(link, Target{Name: "app"}, oldSHA); err != nil || got.File != "env/dev/stack.yml" || !got.Changed {
		t.Errorf("through a link: %+v, %v", got, err)
	}
}

// namespaceApp finds the metadata.name line of a Stack named app in the
// test data ($1 the line, $2 its line ending).
var namespaceApp = regexp.MustCompile(`(?m)^(  name: ["']?app["']?)(\r?\n)`)

func TestLint(t *testing.T) {
	const (
		docReason    = "the Stack is document %d of the file: Kargo's yaml-update edits only the first document; move it to a file of its own"
		branchReason = "spec.branch is set: a pinned Stack may not have spec.branch (the CRD rejects branch and commit together) and yaml-update cannot remove keys; remove spec.branch"
		commitReason = "spec.commit is missing: yaml-update edits only existing keys; add spec.commit with the current commit"
	)
	cases := []struct {
		input string
		want  []Finding // File is filled in
	}{
		{"single", []Finding{{Document: 1, Name: "app", Namespace: "dev", Editable: true, Warnings: []string{
			"yaml-update drops the comment on spec.commit's line"}}}},
		{"multidoc-middle", []Finding{{Document: 2, Name: "app", Reasons: []string{
			"the Stack is document 2 of the file: Kargo's yaml-update edits only the first document; move it to a file of its own", branchReason}}}},
		{"multidoc-last", []Finding{{Document: 3, Name: "app", Namespace: "prod", Reasons: []string{
			"the Stack is document 3 of the file: Kargo's yaml-update edits only the first document; move it to a file of its own"}}}},
		{"branch-tracking", []Finding{{Document: 1, Name: "app", Reasons: []string{commitReason, branchReason}}}},
		{"no-commit", []Finding{{Document: 1, Name: "app", Reasons: []string{commitReason}}}},
		{"namespaces", []Finding{
			{Document: 1, Name: "app", Namespace: "staging", Editable: true},
			{Document: 2, Name: "app", Namespace: "prod", Reasons: []string{
				"the Stack is document 2 of the file: Kargo's yaml-update edits only the first document; move it to a file of its own"}}}},
		{"crlf", []Finding{{Document: 1, Name: "app", Reasons: []string{commitReason, branchReason}}}},
		{"quoted-double", []Finding{{Document: 1, Name: "app", Editable: true, Warnings: []string{
			"yaml-update drops the comment on spec.commit's line"}}}},
		{"quoted-single", []Finding{{Document: 1, Name: "app", Reasons: []string{branchReason}}}},
		{"v1alpha1", []Finding{{Document: 1, Name: "app", Editable: true}}},
		{"other-group", []Finding{{Document: 2, Name: "app", Reasons: []string{
			"the Stack is document 2 of the file: Kargo's yaml-update edits only the first document; move it to a file of its own"}}}},
		{"bom", []Finding{{Document: 1, Name: "app", Editable: true}}},
		{"no-spec", []Finding{{Document: 1, Name: "app", Reasons: []string{
			"spec is missing: yaml-update edits only existing keys; add spec with spec.commit set to the current commit"}}}},
		{"flow-spec", []Finding{{Document: 1, Name: "app", Reasons: []string{
			"spec is a flow mapping ({...}): yaml-update replaces the rest of spec.commit's line, which would cut the mapping; write spec as a block mapping"}}}},
		{"crlf-commit", []Finding{{Document: 1, Name: "app", Editable: true, Warnings: []string{
			"the file has CRLF line endings: yaml-update rewrites every line ending of the file as LF"}}}},
		{"alias-commit", []Finding{{Document: 1, Name: "app", Reasons: []string{
			"spec.commit is an alias (*sha): yaml-update edits only plain or quoted scalars; write the commit itself"}}}},
		{"empty-commit", []Finding{{Document: 1, Name: "app", Reasons: []string{
			"spec.commit is empty: yaml-update would write the commit over the line of the key that follows it; set spec.commit to the current commit"}}}},
		{"multiline-commit", []Finding{{Document: 1, Name: "app", Reasons: []string{
			"spec.commit spans several lines: yaml-update replaces only the first line's tail; write spec.commit: <sha> on one line"}}}},
	}
	for _, tc := range cases {
		t.Run(tc.input, func(t *testing.T) {
			dir := t.TempDir()
			file := "stacks/" + tc.input + ".yaml"
			data := readTestdata(t, tc.input+".yaml")
			// The tasks refuse a Stack without a namespace (below): give
			// one to the Stacks that have none, so each case tests what it
			// is about.
			if tc.want[0].Namespace == "" {
				data = namespaceApp.ReplaceAll(data, []byte("$1$2  namespace: test$2"))
				for i := range tc.want {
					tc.want[i].Namespace = "test"
				}
			}
			writeFiles(t, dir, map[string]string{file: string(data), "chart/templates/cm.yaml": helm})
			got, err := Lint(dir)
			if err != nil {
				t.Fatal(err)
			}
			for i := range tc.want {
				tc.want[i].File = file
				if tc.want[i].Editable {
					tc.want[i].StackFile = file
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("findings (-want +got):\n%s", diff)
			}
		})
	}
	t.Run("no namespace", func(t *testing.T) {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"web.yaml": string(readTestdata(t, "quoted-double.yaml"))})
		got, err := Lint(dir)
		want := []Finding{{File: "web.yaml", Document: 1, Name: "app", Reasons: []string{NoNamespaceReason}}}
		if err != nil || !cmp.Equal(got, want) {
			t.Errorf("findings %+v, %v; want %+v", got, err, want)
		}
	})
	t.Run("unparsable", func(t *testing.T) {
		dir := t.TempDir()
		writeFiles(t, dir, map[string]string{"a.yaml": "apiVersion: pulumi.com/v1\nkind: Stack\nspec: [\n"})
		if _, err := Lint(dir); err == nil || !strings.Contains(err.Error(), "a.yaml does not parse") {
			t.Errorf("err %v, want a.yaml does not parse", err)
		}
	})
}

func TestLineIndex(t *testing.T) {
	data := []byte("\xef\xbb\xbfab\r\ncé\rd\ne\u2028f\u0085g")
	li := newLineIndex(data)
	for _, tc := range []struct {
		line, col, want int
	}{
		{1, 1, 3}, {1, 2, 4}, {2, 1, 7}, {2, 2, 8}, {2, 3, 10}, {3, 1, 11}, {4, 1, 13}, {5, 1, 17}, {6, 1, 20},
	} {
		if got, ok := li.offset(tc.line, tc.col); !ok || got != tc.want {
			t.Errorf("offset(%d, %d) = %d, %v; want %d", tc.line, tc.col, got, ok, tc.want)
		}
	}
	if _, ok := li.offset(7, 1); ok {
		t.Errorf("offset past the last line is ok")
	}
}

const stackHead = "apiVersion: pulumi.com/v1\nkind: Stack\nmetadata:\n  name: app\n"

// TestSetCommitShapes covers less common shapes inline: the whole expected
// file, or a substring of the error.
func TestSetCommitShapes(t *testing.T) {
	cases := []struct {
		name, in, want, wantErr string
	}{
		{name: "tagged commit", in: "spec:\n  commit: !!str " + oldSHA + "\n",
			want: "spec:\n  commit: !!str " + newSHA + "\n"},
		{name: "commit on the next line", in: "spec:\n  commit:\n    " + oldSHA + " # c\n  stack: dev\n",
			want: "spec:\n  commit:\n    " + newSHA + " # c\n  stack: dev\n"},
		{name: "quoted key, tab", in: "spec:\n  \"commit\":\t'old' # c\n",
			want: "spec:\n  \"commit\":\t'" + newSHA + "' # c\n"},
		{name: "null commit", in: "spec:\n  commit: ~\n  branch: main\n",
			want: "spec:\n  commit: " + newSHA + "\n"},
		{name: "branch first, commit after", in: "spec:\n  branch: main\n  commit: \"x\"\n",
			want: "spec:\n  commit: \"" + newSHA + "\"\n"},
		{name: "branch value on the next line", in: "spec:\n  branch:\n    main\n  stack: dev\n",
			want: "spec:\n  commit: " + newSHA + "\n  stack: dev\n"},
		{name: "empty branch", in: "spec:\n  branch: # none\n  commit: " + newSHA + "\n",
			want: "spec:\n  commit: " + newSHA + "\n"},
		{name: "commit with tag and anchor aliased elsewhere",
			in:      "spec:\n  commit: &c " + oldSHA + "\n  stack: *c\n",
			wantErr: "spec.commit carries an anchor (&c): remove the anchor"},
		{name: "anchored branch aliased elsewhere", in: "spec:\n  branch: &b main\n  stack: *b\n",
			wantErr: "the edited file would not parse"},
		{name: "block scalar commit", in: "spec:\n  commit: |\n    " + oldSHA + "\n",
			wantErr: "cannot edit spec.commit: the value is a block scalar (| or >): write it as a plain scalar"},
		{name: "multi-line plain commit", in: "spec:\n  commit: abc\n    def\n",
			wantErr: "cannot edit spec.commit: the value spans several lines: write it on one line"},
		{name: "block scalar branch", in: "spec:\n  branch: >\n    main\n",
			wantErr: "cannot remove spec.branch: the value is a block scalar"},
		{name: "mapping branch", in: "spec:\n  branch: {name: main}\n",
			wantErr: "cannot remove spec.branch: its value is not a scalar"},
		{name: "mapping commit", in: "spec:\n  commit: [a]\n",
			wantErr: "spec.commit is not a scalar: write it as commit: <sha>"},
		{name: "empty spec", in: "spec:\n",
			wantErr: "spec is empty: write spec as a block mapping"},
		{name: "scalar spec", in: "spec: x\n",
			wantErr: "spec is not a mapping: write spec as a block mapping"},
		{name: "two commits", in: "spec:\n  commit: a\n  commit: b\n",
			wantErr: "spec has spec.commit or spec.branch more than once: keep one"},
		{name: "two specs", in: "spec:\n  commit: a\nspec:\n  commit: b\n",
			wantErr: "the Stack has spec more than once: keep one"},
		{name: "merge key", in: "spec:\n  <<: {branch: main}\n  stack: dev\n",
			wantErr: "spec uses a merge key (<<)"},
		{name: "alias spec", in: "x: &s\n  commit: a\nspec: *s\n", wantErr: "spec is an alias: write the Stack's spec out in full"},
		{name: "complex key", in: "spec:\n  ? branch\n  : main\n",
			wantErr: "spec's fields are not on lines of their own"},
		{name: "complex key after", in: "spec:\n  stack: dev\n  ? branch\n  : main\n",
			wantErr: "cannot remove spec.branch: the key is not on a line of its own"},
		{name: "tag on its own line", in: "spec:\n  commit: !!str\n    abc\n",
			wantErr: "its tag or anchor is on a line of its own"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			in := stackHead + tc.in
			writeFiles(t, dir, map[string]string{"s.yaml": in})
			_, err := SetCommit(dir, Target{Name: "app"}, newSHA)
			got, _ := os.ReadFile(filepath.Join(dir, "s.yaml"))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.HasPrefix(err.Error(), "s.yaml") {
					t.Errorf("err %v, want one starting s.yaml and containing %q", err, tc.wantErr)
				}
				if string(got) != in {
					t.Errorf("the file changed")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if want := stackHead + tc.want; string(got) != want {
				t.Errorf("got\n%s\nwant\n%s", got, want)
			}
		})
	}
}

func TestSetCommitUTF16(t *testing.T) {
	dir := t.TempDir()
	s := stackHead + "spec:\n  commit: x\n"
	b := []byte{0xFF, 0xFE}
	for _, r := range s {
		b = append(b, byte(r), 0)
	}
	writeFiles(t, dir, map[string]string{"s.yaml": string(b)})
	if _, err := SetCommit(dir, Target{Name: "app"}, newSHA); err == nil || !strings.Contains(err.Error(), "s.yaml holds a Stack but is UTF-16: re-encode it as UTF-8") {
		t.Errorf("err %v", err)
	}
}

func TestSetCommitNotADirectory(t *testing.T) {
	dir := t.TempDir()
	writeFiles(t, dir, map[string]string{"s.yaml": stackHead})
	if _, err := SetCommit(filepath.Join(dir, "s.yaml"), Target{Name: "app"}, newSHA); err == nil || !strings.Contains(err.Error(), "is not a directory") {
		t.Errorf("err %v", err)
	}
	if _, err := SetCommit(filepath.Join(dir, "nope"), Target{Name: "app"}, newSHA); err == nil {
		t.Errorf("missing directory: no error")
	}
	if _, err := SetCommit(dir, Target{}, newSHA); err == nil || !strings.Contains(err.Error(), "no Stack name given") {
		t.Errorf("err %v", err)
	}
}
