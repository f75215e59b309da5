package server

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stackflow-io/stackflow/analysis/pulumicloud"
	"github.com/stackflow-io/stackflow/analysis/pulumicloud/cloudtest"
	"github.com/stackflow-io/stackflow/analysis/verification"
)

type cloudAdapter struct{ *pulumicloud.Client }

func (cloudAdapter) ValidName(s string) bool     { return pulumicloud.ValidName(s) }
func (cloudAdapter) PollInterval() time.Duration { return 10 * time.Millisecond }

// The Pulumi Cloud route: names validated (400), the query parsed (400), the
// Guard asked about the path, and the answer from the cloud client; a long
// poll asks again until the phase changes.
func TestCloudRoute(t *testing.T) {
	fake := cloudtest.NewTB(t, "tok")
	now := time.Now().Unix()
	u := fake.AddUpdate("acme", "web", "prod", cloudtest.Update{Kind: cloudtest.KindUpdate, Result: cloudtest.ResultInProgress, StartTime: now - 5,
		Environment: map[string]string{"git.head": sha}})
	c := pulumicloud.New(pulumicloud.Options{BaseURL: fake.URL, Token: func(context.Context) (string, error) { return "tok", nil }, CacheTTL: time.Millisecond})
	var asked string
	g := pathGuard{seen: &asked}
	reg := newSource()
	srv := httptestServer(t, Options{Stacks: reg, Cloud: cloudAdapter{c}, Guard: g})

	code, body := get(t, srv+"/v1/pulumi/acme/web/prod/verification?commit="+sha)
	if code != 200 || body["phase"] != string(verification.PhaseRunning) || asked != "/v1/pulumi/acme/web/prod/verification" {
		t.Fatalf("%d %v (guard asked %q)", code, body, asked)
	}
	if code, body := get(t, srv+"/v1/pulumi/ac%20me/web/prod/verification?commit="+sha); code != 400 {
		t.Fatalf("bad org: %d %v", code, body)
	}
	if code, body := get(t, srv+"/v1/pulumi/acme/web/prod/verification?commit=nope"); code != 400 {
		t.Fatalf("bad commit: %d %v", code, body)
	}
	before := fake.Requests()
	done := make(chan map[string]any, 1)
	go func() {
		_, body := get(t, srv+"/v1/pulumi/acme/web/prod/verification?commit="+sha+"&wait=20s")
		done <- body
	}()
	// The poll is parked once it has asked the cloud again after its first
	// answer (it asks every 10ms while the phase stays Running).
	deadline := time.Now().Add(15 * time.Second)
	for fake.Requests() < before+2 {
		if time.Now().After(deadline) {
			t.Fatal("the long poll did not ask the cloud again")
		}
		time.Sleep(5 * time.Millisecond)
	}
	fake.SetResult("acme", "web", "prod", u.UpdateID, cloudtest.ResultSucceeded, now)
	select {
	case body := <-done:
		if body["phase"] != string(verification.PhaseSucceeded) {
			t.Fatalf("long poll answered %v", body)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the long poll did not return at the change")
	}
}

type pathGuard struct{ seen *string }

func (pathGuard) Stack(*http.Request, string, string) error { return nil }
func (g pathGuard) Path(_ *http.Request, p string) error    { *g.seen = p; return nil }
