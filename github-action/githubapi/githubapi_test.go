package githubapi_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stackflow-io/stackflow/github-action/githubapi"
	"github.com/stackflow-io/stackflow/github-action/report"
	"github.com/stackflow-io/stackflow/github-action/result"
	"github.com/stackflow-io/stackflow/test/framework/fakegithub"
)

const runURL = "https://github.test/acme/infra/actions/runs/7"

func client(t *testing.T, apiURL, token string, mod ...func(*githubapi.Options)) *githubapi.Client {
	t.Helper()
	o := githubapi.Options{Token: token, APIURL: apiURL, BaseDelay: 5 * time.Millisecond, Settle: -1}
	for _, m := range mod {
		m(&o)
	}
	c, err := githubapi.New(o)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func res(key string, create int) result.Result {
	r := result.Result{Key: key, Project: "p", Stack: key, Status: result.Succeeded, Changes: result.Changes{Create: create}}
	for i := range create {
		r.Resources = append(r.Resources, result.Resource{Op: "create", Type: "random:index/randomPet:RandomPet", Name: fmt.Sprintf("pet-%d", i)})
	}
	return r
}

func section(r result.Result) string { return report.Section(r, report.SectionOptions{RunURL: runURL}) }

func opts() report.CommentOptions {
	return report.CommentOptions{RunURL: runURL, Now: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)}
}

func marked(cs []fakegithub.Comment) []fakegithub.Comment {
	var out []fakegithub.Comment
	for _, c := range cs {
		if report.IsComment(c.Body) {
			out = append(out, c)
		}
	}
	return out
}

func keys(body string) []string {
	var ks []string
	for _, p := range report.Sections(body) {
		ks = append(ks, p.Key)
	}
	return ks
}

func TestTwoRunsEditOneComment(t *testing.T) {
	srv := fakegithub.New(t, fakegithub.Options{})
	srv.AddToken("tok", "ci-user", false)
	c := client(t, srv.URL, "tok")
	ctx := context.Background()

	u1, err := c.UpsertSection(ctx, "acme/infra", 5, opts(), section(res("web/dev", 1)))
	if err != nil {
		t.Fatal(err)
	}
	first := srv.Comments("acme", "infra", 5)
	o := opts()
	o.Heading = "A new heading" // must not make a second comment
	u2, err := c.UpsertSection(ctx, "acme/infra", 5, o, section(res("web/dev", 3)))
	if err != nil {
		t.Fatal(err)
	}
	got := srv.Comments("acme", "infra", 5)
	if len(first) != 1 || len(got) != 1 || got[0].ID != first[0].ID || u1 != u2 {
		t.Fatalf("want one comment edited in place; got %d then %d comments, urls %s %s", len(first), len(got), u1, u2)
	}
	if !strings.Contains(got[0].Body, "pet-2") || !strings.Contains(got[0].Body, "A new heading") || got[0].UpdatedAt == first[0].UpdatedAt {
		t.Errorf("body not updated:\n%s", got[0].Body)
	}
	if !strings.HasSuffix(u1, fmt.Sprintf("#issuecomment-%d", got[0].ID)) {
		t.Errorf("url %s", u1)
	}
}

func TestConcurrentJobs(t *testing.T) {
	for _, existing := range []bool{false, true} {
		t.Run(fmt.Sprintf("existing=%v", existing), func(t *testing.T) {
			srv := fakegithub.New(t, fakegithub.Options{})
			user := srv.AddToken("tok", "ci-user", false)
			if existing {
				body, _ := report.Comment("", []string{section(res("old/stack", 1))}, opts())
				srv.Seed("acme", "infra", 9, user, body)
			}
			srv.SetLatency(15 * time.Millisecond)
			jobs := []string{"web/dev", "web/prod", "api/dev"}
			var wg sync.WaitGroup
			errs := make([]error, len(jobs))
			for i, k := range jobs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					// Separate clients, as separate jobs are.
					c := client(t, srv.URL, "tok", func(o *githubapi.Options) { o.Settle = 150 * time.Millisecond; o.BaseDelay = 20 * time.Millisecond })
					_, errs[i] = c.UpsertSection(context.Background(), "acme/infra", 9, opts(), section(res(k, i+1)))
				}()
			}
			wg.Wait()
			for i, err := range errs {
				if err != nil {
					t.Fatalf("job %s: %v", jobs[i], err)
				}
			}
			reqs := srv.Requests()
			t.Logf("%d requests, %d edits, %d creates, %d deletes", len(reqs), count(reqs, "PATCH "), count(reqs, "POST "), count(reqs, "DELETE "))
			cs := srv.Comments("acme", "infra", 9)
			if len(cs) != 1 {
				t.Fatalf("%d comments, want 1", len(cs))
			}
			want := "api/dev web/dev web/prod"
			if existing {
				want = "api/dev old/stack web/dev web/prod"
			}
			if got := strings.Join(keys(cs[0].Body), " "); got != want {
				t.Fatalf("sections %q, want %q", got, want)
			}
			for _, k := range jobs {
				if !strings.Contains(cs[0].Body, "| "+k+" | ") {
					t.Errorf("table lacks %s", k)
				}
			}
		})
	}
}

func TestPaginationFindsPageThree(t *testing.T) {
	srv := fakegithub.New(t, fakegithub.Options{})
	me := srv.AddToken("tok", "ci-user", false)
	other := srv.AddToken("other", "someone-else", false)
	markedBody, _ := report.Comment("", []string{section(res("web/dev", 1))}, opts())
	for i := range 250 {
		switch i {
		case 10: // the marker, but by someone else: not ours
			srv.Seed("acme", "infra", 3, other, markedBody)
		case 215: // page 3 at per_page=100
			srv.Seed("acme", "infra", 3, me, markedBody)
		default:
			srv.Seed("acme", "infra", 3, other, fmt.Sprintf("comment %d", i))
		}
	}
	c := client(t, srv.URL, "tok")
	if _, err := c.UpsertSection(context.Background(), "acme/infra", 3, opts(), section(res("web/prod", 2))); err != nil {
		t.Fatal(err)
	}
	cs := srv.Comments("acme", "infra", 3)
	if len(cs) != 250 {
		t.Fatalf("%d comments, want 250 (none created)", len(cs))
	}
	if got := strings.Join(keys(cs[215].Body), " "); got != "web/dev web/prod" {
		t.Errorf("page-3 comment has %q", got)
	}
	if cs[10].Body != markedBody {
		t.Error("someone else's marked comment was edited")
	}
	var pages []string
	for _, r := range srv.Requests() {
		if strings.HasPrefix(r, "GET /repos/acme/infra/issues/3/comments") {
			pages = append(pages, r)
		}
	}
	if len(pages) < 3 || !strings.Contains(strings.Join(pages, " "), "page=3") || !strings.Contains(pages[0], "per_page=100") {
		t.Errorf("list requests: %v", pages)
	}
}

func TestOldestOfSeveralMarkedComments(t *testing.T) {
	srv := fakegithub.New(t, fakegithub.Options{})
	me := srv.AddToken("tok", "ci-user", false)
	a, _ := report.Comment("", []string{section(res("a/a", 1))}, opts())
	b, _ := report.Comment("", []string{section(res("b/b", 1))}, opts())
	srv.Seed("acme", "infra", 4, me, a)
	srv.Seed("acme", "infra", 4, me, b)
	c := client(t, srv.URL, "tok")
	if _, err := c.UpsertSection(context.Background(), "acme/infra", 4, opts(), section(res("c/c", 1))); err != nil {
		t.Fatal(err)
	}
	cs := srv.Comments("acme", "infra", 4)
	if len(cs) != 2 || strings.Join(keys(cs[0].Body), " ") != "a/a c/c" || cs[1].Body != b {
		t.Errorf("want the oldest edited and the other left alone; got %d comments: %v / %v", len(cs), keys(cs[0].Body), keys(cs[1].Body))
	}
}

func TestAppTokenAndEnterprise(t *testing.T) {
	srv := fakegithub.New(t, fakegithub.Options{})
	bot := srv.AddAppToken("app", "stackflow-preview[bot]", false)
	human := srv.AddToken("human", "octocat", false)
	body, _ := report.Comment("", []string{section(res("web/dev", 1))}, opts())
	srv.Seed("acme", "infra", 8, human, body) // marker but a User: not ours
	for i := range 120 {
		srv.Seed("acme", "infra", 8, human, fmt.Sprint("hi ", i))
	}
	srv.Seed("acme", "infra", 8, bot, body)
	c := client(t, srv.EnterpriseURL(), "app", func(o *githubapi.Options) { o.AppSlug = "stackflow-preview" })
	if _, err := c.UpsertSection(context.Background(), "acme/infra", 8, opts(), section(res("web/prod", 1))); err != nil {
		t.Fatal(err)
	}
	cs := srv.Comments("acme", "infra", 8)
	if len(cs) != 122 || cs[0].Body != body || strings.Join(keys(cs[121].Body), " ") != "web/dev web/prod" {
		t.Errorf("bot comment not the one edited (%d comments)", len(cs))
	}
	for _, r := range srv.Requests() {
		if !strings.Contains(r, "/api/v3/") {
			t.Errorf("request outside /api/v3/: %s", r)
		}
	}
	// Without the slug, a bot other than github-actions[bot] is not ours.
	c2 := client(t, srv.EnterpriseURL(), "app")
	if _, err := c2.UpsertSection(context.Background(), "acme/infra", 8, opts(), section(res("web/prod", 1))); err != nil {
		t.Fatal(err)
	}
	if n := len(marked(srv.Comments("acme", "infra", 8))); n != 3 {
		t.Errorf("%d marked comments, want 3 (a new one)", n)
	}
}

func TestReadOnlyToken(t *testing.T) {
	srv := fakegithub.New(t, fakegithub.Options{})
	srv.AddToken("ro", "fork-user", true)
	c := client(t, srv.URL, "ro")
	ctx := context.Background()
	_, err := c.UpsertSection(ctx, "acme/infra", 1, opts(), section(res("web/dev", 1)))
	var ro *githubapi.ReadOnlyError
	if !errors.As(err, &ro) || ro.StatusCode != 403 {
		t.Errorf("UpsertSection: %v, want ReadOnlyError 403", err)
	}
	err = c.SetStatus(ctx, "acme/infra", "abc123", "stackflow/web/dev", "success", "ok", runURL)
	if !errors.As(err, &ro) || ro.Op != "set status" {
		t.Errorf("SetStatus: %v, want ReadOnlyError", err)
	}
	if len(srv.Comments("acme", "infra", 1)) != 0 || len(srv.Statuses("acme", "infra", "abc123")) != 0 {
		t.Error("a read-only token wrote")
	}
	// A bad token is not a ReadOnlyError.
	bad := client(t, srv.URL, "nope")
	if _, err := bad.UpsertSection(ctx, "acme/infra", 1, opts(), section(res("web/dev", 1))); err == nil || errors.As(err, &ro) {
		t.Errorf("bad token: %v", err)
	}
}

func TestStatuses(t *testing.T) {
	srv := fakegithub.New(t, fakegithub.Options{})
	srv.AddToken("tok", "ci-user", false)
	c := client(t, srv.URL, "tok")
	ctx := context.Background()
	sha := "5d6e7f8aa1b2c3d4e5f60718293a4b5c6d7e8f90"
	long := strings.Repeat("ü", 200)
	for _, st := range []struct{ ctx, state, desc string }{
		{"stackflow/web/dev", "pending", "previewing"},
		{"stackflow/web/dev", "success", "changes: +1 ~0 -0 ±0"},
		{"stackflow/web/prod", "failure", long},
	} {
		if err := c.SetStatus(ctx, "acme/infra", sha, st.ctx, st.state, st.desc, runURL); err != nil {
			t.Fatal(err)
		}
	}
	got := srv.Statuses("acme", "infra", sha)
	if len(got) != 3 {
		t.Fatalf("%d statuses", len(got))
	}
	if got[1].Context != "stackflow/web/dev" || got[1].State != "success" || got[1].Description != "changes: +1 ~0 -0 ±0" || got[1].TargetURL != runURL {
		t.Errorf("status %+v", got[1])
	}
	if d := []rune(got[2].Description); len(d) != 140 || got[2].State != "failure" {
		t.Errorf("long description: %d characters", len(d))
	}
	if err := c.SetStatus(ctx, "acme/infra", sha, "x", "done", "", ""); err == nil {
		t.Error("bad state accepted")
	}
	if len(srv.Statuses("acme", "infra", "other")) != 0 {
		t.Error("status on the wrong SHA")
	}
}

func TestBodyLimits(t *testing.T) {
	srv := fakegithub.New(t, fakegithub.Options{})
	srv.AddToken("tok", "ci-user", false)
	c := client(t, srv.URL, "tok")
	ctx := context.Background()
	big := res("big/stack", 5000)
	for i := range big.Resources {
		big.Resources[i].Name += "-🚀-ünïcödé"
	}
	if _, err := c.UpsertSection(ctx, "acme/infra", 2, opts(), section(big), section(res("small/stack", 2))); err != nil {
		t.Fatal(err)
	}
	for _, n := range srv.BodyLengths() {
		if n > fakegithub.MaxBody {
			t.Errorf("a body of %d characters reached the server", n)
		}
	}
	cs := srv.Comments("acme", "infra", 2)
	if len(cs) != 1 || strings.Join(keys(cs[0].Body), " ") != "big/stack small/stack" || !strings.Contains(cs[0].Body, "truncated") {
		t.Fatal("truncated comment not as expected")
	}
	srv.SetMaxBody(1000)
	_, err := c.UpsertSection(ctx, "acme/infra", 2, opts(), section(res("small/stack", 3)))
	var tl *githubapi.BodyTooLongError
	if !errors.As(err, &tl) || !strings.Contains(tl.Message, "too long") {
		t.Errorf("got %v, want BodyTooLongError", err)
	}
}

func TestNoSecretAdded(t *testing.T) {
	srv := fakegithub.New(t, fakegithub.Options{})
	srv.AddToken("tok", "ci-user", false)
	c := client(t, srv.URL, "tok")
	const secret = "hunter2-s3cr3t"
	// The caller masked Notes and Error; Output (unmasked here on purpose)
	// must not reach the comment at all.
	r := result.Result{Key: "web/dev", Status: result.Failed,
		Error:  "authenticating with token *** failed",
		Notes:  []string{"secretsRef db-creds (value ***) cannot be resolved in CI"},
		Output: "debug: token=" + secret,
	}
	if _, err := c.UpsertSection(context.Background(), "acme/infra", 6, opts(), section(r)); err != nil {
		t.Fatal(err)
	}
	for _, cm := range srv.Comments("acme", "infra", 6) {
		if strings.Contains(cm.Body, secret) {
			t.Error("the secret reached the comment")
		}
		if !strings.Contains(cm.Body, "token *** failed") && !strings.Contains(cm.Body, "token &#42;&#42;&#42; failed") {
			t.Errorf("masked error missing:\n%s", cm.Body)
		}
	}
}

func count(reqs []string, prefix string) int {
	n := 0
	for _, r := range reqs {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

// TestDefaultTokenNeverAsksWhoItIs: the workflow's GITHUB_TOKEN is an
// installation token ("ghs_…", comments by github-actions[bot]); GET /user
// answers it 403, so the client never calls it. It still finds its own
// comment (by marker and bot author) and never adopts a marked comment by
// someone else.
func TestDefaultTokenNeverAsksWhoItIs(t *testing.T) {
	srv := fakegithub.New(t, fakegithub.Options{})
	srv.AddAppToken("ghs_defaultWorkflowToken", "github-actions[bot]", false)
	human := srv.AddToken("ghp_human", "mallory", false)
	forged, _ := report.Comment("", []string{section(res("web/dev", 9))}, opts())
	srv.Seed("acme", "infra", 12, human, forged)
	c := client(t, srv.URL, "ghs_defaultWorkflowToken")
	ctx := context.Background()
	for _, n := range []int{1, 2} {
		if _, err := c.UpsertSection(ctx, "acme/infra", 12, opts(), section(res("web/dev", n))); err != nil {
			t.Fatal(err)
		}
		if has, err := c.HasComment(ctx, "acme/infra", 12); err != nil || !has {
			t.Fatalf("HasComment = %v, %v", has, err)
		}
	}
	cs := srv.Comments("acme", "infra", 12)
	if len(cs) != 2 || cs[0].Body != forged || cs[1].User.Login != "github-actions[bot]" || !strings.Contains(cs[1].Body, "pet-1") {
		t.Fatalf("want the forged comment untouched and one bot comment edited; got %d comments", len(cs))
	}
	for _, r := range srv.Requests() {
		if strings.HasPrefix(r, "GET /user") {
			t.Errorf("the client asked %s, which GitHub refuses for the default token", r)
		}
	}
}

// TestScopeRemovesStaleSections: sections of a scope (manifests mode) that
// the new write lacks are removed, other scopes' (and unscoped) sections
// kept; a write with no sections leaves a comment saying nothing changes.
func TestScopeRemovesStaleSections(t *testing.T) {
	srv := fakegithub.New(t, fakegithub.Options{})
	srv.AddAppToken("ghs_tok", "github-actions[bot]", false)
	c := client(t, srv.URL, "ghs_tok")
	ctx := context.Background()
	scoped := func(key string) string {
		return report.Section(res(key, 1), report.SectionOptions{RunURL: runURL, Scope: "manifests:/stacks"})
	}
	other := report.Section(res("web/dev", 1), report.SectionOptions{RunURL: runURL, Scope: "manifests:/other"})
	o := opts()
	o.Scope = "manifests:/stacks"
	if _, err := c.UpsertSection(ctx, "acme/infra", 13, opts(), other, section(res("api/dev", 1))); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpsertSection(ctx, "acme/infra", 13, o, scoped("dev/a"), scoped("dev/b")); err != nil {
		t.Fatal(err)
	}
	body := func() string { return srv.Comments("acme", "infra", 13)[0].Body }
	if got := strings.Join(keys(body()), " "); got != "api/dev dev/a dev/b web/dev" {
		t.Fatalf("sections %q", got)
	}
	if _, err := c.UpsertSection(ctx, "acme/infra", 13, o, scoped("dev/a")); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(keys(body()), " "); got != "api/dev dev/a web/dev" {
		t.Fatalf("after dev/b is no longer changed: sections %q", got)
	}
	if _, err := c.UpsertSection(ctx, "acme/infra", 13, o); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(keys(body()), " "); got != "api/dev web/dev" || strings.Contains(body(), "| dev/a |") {
		t.Fatalf("after every change is reverted: sections %q\n%s", got, body())
	}

	// Alone in its comment, the scope's revert says nothing changes.
	if _, err := c.UpsertSection(ctx, "acme/infra", 14, o, scoped("dev/a")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.UpsertSection(ctx, "acme/infra", 14, o); err != nil {
		t.Fatal(err)
	}
	cs := srv.Comments("acme", "infra", 14)
	if len(cs) != 1 || len(keys(cs[0].Body)) != 0 || !strings.Contains(cs[0].Body, "Nothing changes") {
		t.Fatalf("%d comments:\n%s", len(cs), cs[0].Body)
	}
}
