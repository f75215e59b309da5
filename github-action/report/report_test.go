package report

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stackflow-io/stackflow/github-action/result"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden.md")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden.md")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create)", err)
	}
	if string(want) != got {
		t.Errorf("%s differs from golden (run with -update to accept):\n--- got\n%s", path, got)
	}
}

const runURL = "https://github.com/acme/infra/actions/runs/42"

var now = time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)

func mixed() []result.Result {
	return []result.Result{
		{
			Key: "web/dev", Project: "web", Stack: "dev", Source: "program in infra/web",
			Status:  result.Succeeded,
			Changes: result.Changes{Create: 1, Update: 1, Delete: 1, Replace: 1, Same: 7},
			Resources: []result.Resource{
				{Op: "create", Type: "aws:s3/bucket:Bucket", Name: "logs", URN: "urn:pulumi:dev::web::aws:s3/bucket:Bucket::logs"},
				{Op: "update", Type: "aws:iam/role:Role", Name: "app_role", URN: "urn:pulumi:dev::web::aws:iam/role:Role::app_role"},
				{Op: "delete", Type: "aws:sqs/queue:Queue", Name: "old-queue", URN: "urn:pulumi:dev::web::aws:sqs/queue:Queue::old-queue"},
				{Op: "replace", Type: "aws:ec2/instance:Instance", Name: "<script>alert(1)</script>", URN: "urn:pulumi:dev::web::aws:ec2/instance:Instance::x"},
				{Op: "same", Type: "pulumi:pulumi:Stack", Name: "web-dev"},
			},
			Output: "\x1b[1mPreviewing update (dev):\x1b[0m\n    \x1b[32m+ \x1b[0maws:s3/bucket:Bucket logs \x1b[32mcreate\x1b[0m\n",
		},
		{
			Key: "web/prod", Project: "web", Stack: "prod", Source: "program in infra/web",
			Status: result.Failed,
			Error:  "error: \x1b[31mconfiguration key 'aws:region' not set\x1b[0m\n</details><!-- stackflow:section-end --> @octocat",
			Output: "error: configuration key 'aws:region' not set\n",
		},
		{
			Key: "dev/api", Project: "api", Stack: "dev", Source: "Stack dev/api (stacks/dev.yaml): commit 1a2b3c4 → 5d6e7f8",
			Status: result.Skipped,
			Notes:  []string{"the Stack is in preview mode (spec.preview: true)", "secretsRef `db-creds` cannot be resolved in CI"},
		},
		{
			Key: "net/dev", Project: "net", Stack: "dev", Source: "program in infra/net",
			Status: result.Succeeded, Changes: result.Changes{Same: 12},
		},
	}
}

func sectionsOf(rs []result.Result, o SectionOptions) []string {
	var out []string
	for _, r := range rs {
		out = append(out, Section(r, o))
	}
	return out
}

func TestMixedRun(t *testing.T) {
	body, err := Comment("", sectionsOf(mixed(), SectionOptions{RunURL: runURL}), CommentOptions{RunURL: runURL, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "mixed", body)
	checkWellFormed(t, body, []string{"dev/api", "net/dev", "web/dev", "web/prod"})
	if strings.Contains(body, "<script>") || strings.Contains(body, "@octocat") || strings.Contains(body, "\x1b") {
		t.Error("unescaped input in body")
	}
	if strings.Count(body, SectionEndMarker) != 4 {
		t.Errorf("forged end marker survived: %d end markers", strings.Count(body, SectionEndMarker))
	}
	golden(t, "mixed-summary", Summary(mixed(), SummaryOptions{RunURL: runURL}))
}

func TestCompactAndOutdated(t *testing.T) {
	rs := mixed()
	compact := Section(rs[3], SectionOptions{RunURL: runURL, Compact: true})
	if strings.Contains(compact, "program in infra/net") {
		t.Error("compact section has its source line")
	}
	body, err := Comment("", []string{Section(rs[0], SectionOptions{RunURL: runURL}), compact}, CommentOptions{RunURL: runURL, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	body, err = Comment(body, nil, CommentOptions{RunURL: runURL, Now: now, Outdated: map[string]string{"web/dev": "previewed at 1a2b3c4; the PR is now at 5d6e7f8"}})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "compact-outdated", body)
	p, ok := Find(body, "web/dev")
	if !ok || !p.Info.Outdated || !strings.Contains(body, "⚠️ outdated") {
		t.Errorf("web/dev not marked outdated: %+v", p.Info)
	}
	// Replacing the outdated section with a fresh one clears the mark.
	body, err = Comment(body, []string{Section(rs[0], SectionOptions{RunURL: runURL})}, CommentOptions{RunURL: runURL, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := Find(body, "web/dev"); p.Info.Outdated {
		t.Error("fresh section still outdated")
	}
}

// Another job wrote web/prod and web/dev; this job adds dev/api and
// replaces web/dev.
func TestMergeIntoOtherJobsComment(t *testing.T) {
	rs := mixed()
	otherRun := "https://github.com/acme/infra/actions/runs/41"
	other, err := Comment("", sectionsOf(rs[:2], SectionOptions{RunURL: otherRun}), CommentOptions{RunURL: otherRun, Now: now.Add(-time.Hour), Heading: "Old heading"})
	if err != nil {
		t.Fatal(err)
	}
	prodBefore, _ := Find(other, "web/prod")
	newDev := rs[0]
	newDev.Changes = result.Changes{Create: 1, Same: 10}
	newDev.Resources = newDev.Resources[:1]
	body, err := Comment(other, []string{Section(newDev, SectionOptions{RunURL: runURL}), Section(rs[2], SectionOptions{RunURL: runURL})}, CommentOptions{RunURL: runURL, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "merge", body)
	checkWellFormed(t, body, []string{"dev/api", "web/dev", "web/prod"})
	if prodAfter, _ := Find(body, "web/prod"); prodAfter.Text != prodBefore.Text {
		t.Error("other job's section changed")
	}
	if dev, _ := Find(body, "web/dev"); dev.Info.Changes.Update != 0 || strings.Contains(dev.Text, "old-queue") {
		t.Error("web/dev not replaced")
	}
	if !strings.Contains(body, "| web/prod | ❌ failed |") {
		t.Error("table lacks the other job's row")
	}
}

func bigResult(key string, n int) result.Result {
	r := result.Result{Key: key, Project: "big", Stack: key, Status: result.Succeeded, Changes: result.Changes{Create: n}}
	for i := range n {
		r.Resources = append(r.Resources, result.Resource{Op: "create", Type: "kubernetes:core/v1:ConfigMap", Name: fmt.Sprintf("config-map-number-%05d-ü", i)})
	}
	return r
}

func TestTruncation(t *testing.T) {
	rs := append(mixed(), bigResult("big/five-thousand", 5000))
	body, err := Comment("", sectionsOf(rs, SectionOptions{RunURL: runURL}), CommentOptions{RunURL: runURL, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if n := Len(body); n > MaxCommentLen {
		t.Fatalf("body is %d characters", n)
	}
	checkWellFormed(t, body, []string{"big/five-thousand", "dev/api", "net/dev", "web/dev", "web/prod"})
	if !strings.Contains(body, "This comment was truncated") || !strings.Contains(body, "more resources: see the [job summary]") {
		t.Error("no truncation notice")
	}
	if p, _ := Find(body, "web/dev"); !strings.Contains(p.Text, "old-queue") {
		t.Error("a short resource list was cut while the long one could shrink")
	}
	golden(t, "truncated", truncateMiddle(body))

	// Merging again into the truncated body keeps the hidden count.
	again, err := Comment(body, []string{Section(mixed()[1], SectionOptions{RunURL: runURL})}, CommentOptions{RunURL: runURL, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	p1, _ := Find(body, "big/five-thousand")
	p2, _ := Find(again, "big/five-thousand")
	if p1.Text != p2.Text || Len(again) > MaxCommentLen {
		t.Error("re-merge changed the truncated section")
	}

	// Too many big stacks: details dropped entirely, table kept.
	var many []string
	for i := range 12 {
		many = append(many, Section(bigResult(fmt.Sprintf("big/%02d", i), 300), SectionOptions{RunURL: runURL}))
	}
	many = append(many, Section(result.Result{Key: "err/huge", Status: result.Failed, Error: strings.Repeat("boom ", 20000)}, SectionOptions{RunURL: runURL}))
	body, err = Comment("", many, CommentOptions{RunURL: runURL, Now: now})
	if err != nil {
		t.Fatal(err)
	}
	if Len(body) > MaxCommentLen || !strings.Contains(body, "Details omitted") {
		t.Errorf("len %d, details omitted: %v", Len(body), strings.Contains(body, "Details omitted"))
	}
	if !strings.Contains(body, "| err/huge | ❌ failed |") {
		t.Error("table lost a row")
	}
}

// truncateMiddle keeps the golden file readable: the first and last rows.
func truncateMiddle(s string) string {
	lines := strings.Split(s, "\n")
	var out []string
	rows := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "| + create | kubernetes") {
			rows++
			if rows > 3 {
				if rows == 4 {
					out = append(out, "[…golden file: rows elided…]")
				}
				continue
			}
		}
		out = append(out, l)
	}
	return strings.Join(out, "\n") + fmt.Sprintf("\n[golden file: %d rows kept in the body]\n", rows)
}

func checkWellFormed(t *testing.T, body string, keys []string) {
	t.Helper()
	if !strings.HasPrefix(body, TopMarker+"\n") {
		t.Error("no top marker")
	}
	ps := Sections(body)
	if len(ps) != len(keys) {
		t.Fatalf("%d sections, want %d", len(ps), len(keys))
	}
	for i, p := range ps {
		if p.Key != keys[i] {
			t.Errorf("section %d: key %q, want %q", i, p.Key, keys[i])
		}
		if !strings.Contains(body, "\n| "+Text(p.Key)+" | ") {
			t.Errorf("no table row for %q", p.Key)
		}
	}
	if n := strings.Count(body, sectionPrefix); n != len(keys) {
		t.Errorf("%d start markers, want %d", n, len(keys))
	}
	if n := strings.Count(body, SectionEndMarker); n != len(keys) {
		t.Errorf("%d end markers, want %d", n, len(keys))
	}
}

func TestSummaryCap(t *testing.T) {
	r := bigResult("big/huge", 3000)
	r.Output = strings.Repeat("\x1b[32m+ \x1b[0mkubernetes:core/v1:ConfigMap config-map create & more <stuff>\n", 30000)
	s := Summary([]result.Result{r, mixed()[1]}, SummaryOptions{RunURL: runURL})
	if len(s) > MaxSummaryBytes {
		t.Fatalf("summary is %d bytes", len(s))
	}
	if !strings.Contains(s, "This summary was truncated") || !strings.Contains(s, "configuration key") {
		t.Error("no truncation notice or lost the small stack")
	}
	if strings.Contains(s, "\x1b") || strings.Contains(s, "<stuff>") {
		t.Error("unescaped output")
	}
	small := Summary(mixed(), SummaryOptions{Limit: 2000})
	if len(small) > 2000 {
		t.Errorf("summary %d bytes over a 2000 limit", len(small))
	}
}

func TestStatus(t *testing.T) {
	for _, tc := range []struct {
		r            result.Result
		state, desc  string
		notPreviewed string
	}{
		{r: mixed()[0], state: "success", desc: "changes: +1 ~1 -1 ±1"},
		{r: mixed()[1], state: "failure", desc: "preview failed"},
		{r: mixed()[3], state: "success", desc: "no changes"},
		{r: result.Result{Status: result.Failed, Error: "refused, not previewed: spec.commit \"--upload-pack=x\" is not a commit SHA"}, state: "failure",
			desc: "preview failed: refused, not previewed: spec.commit \"--upload-pack=x\" is not a commit SHA"},
		// Not previewed is not success, unless the workflow says so.
		{r: result.Result{Status: result.Skipped, Notes: []string{strings.Repeat("é", 200)}}, state: "failure", desc: "not previewed: " + strings.Repeat("é", 124) + "…"},
		{r: result.Result{Status: result.Skipped, Notes: []string{"removed"}}, notPreviewed: "failure", state: "failure", desc: "not previewed: removed"},
		{r: result.Result{Status: result.Skipped, Notes: []string{"removed"}}, notPreviewed: "success", state: "success", desc: "not previewed: removed"},
	} {
		s, d := Status(tc.r, tc.notPreviewed)
		if s != tc.state || d != tc.desc {
			t.Errorf("Status(%s) = %q, %q; want %q, %q", tc.r.Key, s, d, tc.state, tc.desc)
		}
	}
}

func TestSectionErrors(t *testing.T) {
	if _, err := Comment("", []string{"not a section"}, CommentOptions{}); err == nil {
		t.Error("a non-section was accepted")
	}
	s := Section(mixed()[0], SectionOptions{})
	if _, err := Comment("", []string{s, s}, CommentOptions{}); err == nil {
		t.Error("a duplicate key was accepted")
	}
}

func FuzzComment(f *testing.F) {
	f.Add("web/dev", "bucket", "aws:s3:Bucket", "error", "note", 3, 0)
	f.Add("a--b\"c", "<!-- stackflow:section-end -->", "</details>", "-->", "<!-- stackflow:preview -->", 2000, 1)
	f.Add("😀/🚀", "😀😀😀", "\x1b[31m|x|\x1b[0m", "\xff\xfe", "`@x`", 4000, 2)
	f.Fuzz(func(t *testing.T, key, name, typ, errText, note string, n, other int) {
		if n < 0 || n > 3000 || other < 0 || other > 5 || len(key) > 200 {
			t.Skip()
		}
		key = strings.ToValidUTF8(key, "\uFFFD")
		r := result.Result{Key: key, Status: result.Failed, Error: errText, Notes: []string{note}}
		for i := range n {
			r.Resources = append(r.Resources, result.Resource{Op: "create", Type: typ, Name: fmt.Sprint(name, i)})
		}
		r.Changes.Create = n
		sections := []string{Section(r, SectionOptions{RunURL: runURL})}
		keys := map[string]bool{key: true}
		for i := range other {
			k := fmt.Sprintf("%s/other-%d", key, i)
			keys[k] = true
			o := r
			o.Key = k
			sections = append(sections, Section(o, SectionOptions{RunURL: runURL}))
		}
		body, err := Comment("", sections, CommentOptions{RunURL: runURL, Now: now})
		if err != nil {
			t.Skipf("Comment: %v", err) // only ErrTooLong can happen here
		}
		if Len(body) > MaxCommentLen {
			t.Fatalf("body is %d characters", Len(body))
		}
		ps := Sections(body)
		if len(ps) != len(keys) || strings.Count(body, SectionEndMarker) != len(keys) {
			t.Fatalf("%d sections parsed, %d end markers, want %d", len(ps), strings.Count(body, SectionEndMarker), len(keys))
		}
		for _, p := range ps {
			if !keys[p.Key] {
				t.Fatalf("unexpected key %q", p.Key)
			}
		}
		// The body merges into itself unchanged (but for truncation notices).
		again, err := Comment(body, nil, CommentOptions{RunURL: runURL, Now: now})
		if err != nil || len(Sections(again)) != len(keys) || Len(again) > MaxCommentLen {
			t.Fatalf("re-merge: %v, %d sections", err, len(Sections(again)))
		}
	})
}

// TestRefusedSection: a Stack refused before its program was read has no
// project; its section names the stack alone and shows what was refused
// and why in one line, outside any collapsed block.
func TestRefusedSection(t *testing.T) {
	r := result.Result{Key: "dev/inject", Stack: "inject-dev", Status: result.Failed,
		Source: `Stack dev/inject (stacks/x.yaml): new, commit "--upload-pack=touch /tmp/pwned"`,
		Error:  `refused, not previewed: spec.commit "--upload-pack=touch /tmp/pwned" is not a commit SHA (40 lowercase hexadecimal characters)`}
	s := Section(r, SectionOptions{})
	for _, want := range []string{
		"\nPulumi stack inject-dev · Stack dev/inject (stacks/x.yaml): new, commit &quot;--upload-pack=touch /tmp/pwned&quot;\n",
		"\n- ❌ refused, not previewed: spec.commit &quot;--upload-pack=touch /tmp/pwned&quot; is not a commit SHA (40 lowercase hexadecimal characters)\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("section lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "<details>") || strings.Contains(s, "Pulumi stack /") {
		t.Errorf("section:\n%s", s)
	}
	sum := Summary([]result.Result{r}, SummaryOptions{})
	if !strings.Contains(sum, "Pulumi stack inject-dev · Stack dev/inject") {
		t.Errorf("summary:\n%s", sum)
	}
}

// TestOutdateScope: program mode's sections of a stack that the latest run
// does not preview (a run with dev and prod, then one with dev only) are
// marked outdated; those another job of the same run wrote (a matrix) are
// not, nor are other scopes'; a job that writes the stack again clears it.
func TestOutdateScope(t *testing.T) {
	const scope = "program:.github/workflows/preview.yml:/infra"
	run := func(n string) string { return "https://github.com/acme/infra/actions/runs/" + n }
	section := func(stack, runURL, sc string) string {
		return Section(result.Result{Key: "web/" + stack, Project: "web", Stack: stack, Status: result.Succeeded}, SectionOptions{RunURL: runURL, Scope: sc})
	}
	outdated := func(body string) string {
		var ks []string
		for _, p := range Sections(body) {
			if p.Info.Outdated {
				ks = append(ks, p.Key)
			}
		}
		return strings.Join(ks, " ")
	}
	merge := func(body, runURL string, sections ...string) string {
		t.Helper()
		b, err := Comment(body, sections, CommentOptions{RunURL: runURL, OutdateScope: scope})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	body := merge("", run("1"), section("dev", run("1"), scope), section("prod", run("1"), scope), section("qa", run("1"), "program:other.yml:/infra"))
	if got := outdated(body); got != "" {
		t.Fatalf("first run: outdated %q", got)
	}
	// Run 2 previews dev only: prod goes outdated, qa (another scope) not.
	body = merge(body, run("2"), section("dev", run("2"), scope))
	if got := outdated(body); got != "web/prod" || !strings.Contains(body, NotPreviewedByThisRun) {
		t.Fatalf("run 2: outdated %q:\n%s", got, body)
	}
	// Run 3 is a matrix: its prod job writes first, then its dev job.
	body = merge(body, run("3"), section("prod", run("3"), scope))
	body = merge(body, run("3"), section("dev", run("3"), scope))
	if got := outdated(body); got != "" {
		t.Fatalf("run 3: outdated %q", got)
	}
	// Without a run URL nothing can be told apart: nothing is marked.
	if b, _ := Comment(body, []string{section("dev", "", scope)}, CommentOptions{OutdateScope: scope}); outdated(b) != "" {
		t.Fatalf("no run URL: outdated %q", outdated(b))
	}
}
