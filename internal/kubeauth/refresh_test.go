package kubeauth

import (
	"context"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
)

// waitReviews waits until the fake API has seen n reviews of a kind.
func waitReviews(t *testing.T, got func() int64, n int64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for got() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d reviews, want %d", got(), n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// With RefreshAhead a hit in the last half of an answer's life starts a
// review in the background and is answered from the cache; the refreshed
// answer then serves until its own expiry, so no caller waits at the old
// one. Without it, a hit never reviews.
func TestRefreshAhead(t *testing.T) {
	a, f, c := setup(t, Options{TTL: 10 * time.Second, RefreshAhead: true})
	ctx := context.Background()
	u, err := a.Authenticate(ctx, goodToken)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.AuthorizeStack(ctx, u, "dev", "web"); err != nil {
		t.Fatal(err)
	}
	// Before half the TTL: plain hits.
	c.Advance(4 * time.Second)
	if _, err := a.Authenticate(ctx, goodToken); err != nil {
		t.Fatal(err)
	}
	if d, err := a.AuthorizeStack(ctx, u, "dev", "web"); err != nil || !d.Cached {
		t.Fatalf("%+v %v", d, err)
	}
	if f.tokenN.Load() != 1 || f.sarN.Load() != 1 {
		t.Fatalf("reviews before half the TTL: %d token, %d access", f.tokenN.Load(), f.sarN.Load())
	}
	// Past three quarters: the hits are cached answers, and each starts one
	// review in the background.
	c.Advance(4 * time.Second)
	for range 3 {
		if _, err := a.Authenticate(ctx, goodToken); err != nil {
			t.Fatal(err)
		}
		if d, err := a.AuthorizeStack(ctx, u, "dev", "web"); err != nil || !d.Cached {
			t.Fatalf("%+v %v", d, err)
		}
	}
	waitReviews(t, f.tokenN.Load, 2)
	waitReviews(t, f.sarN.Load, 2)
	// The refreshed answers outlive the first ones' expiry (at 10s).
	waitFor := func(cond func() bool) {
		deadline := time.Now().Add(10 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatal("the refresh did not land")
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitFor(func() bool { return a.Stats().Token.Refreshes == 1 && a.Stats().Access.Refreshes == 1 })
	c.Advance(3 * time.Second) // 11s: the first answers expired
	if d, err := a.AuthorizeStack(ctx, u, "dev", "web"); err != nil || !d.Cached {
		t.Fatalf("after the first answer's expiry: %+v %v (the refreshed answer should serve)", d, err)
	}
	if _, err := a.Authenticate(ctx, goodToken); err != nil {
		t.Fatal(err)
	}
	if s := a.Stats(); s.Token.Expired != 0 || s.Access.Expired != 0 {
		t.Fatalf("a caller met an expired entry: %+v", s)
	}
}

// A refresh that finds the access revoked replaces the cached allow.
func TestRefreshAheadSeesRevocation(t *testing.T) {
	a, f, c := setup(t, Options{TTL: 10 * time.Second, RefreshAhead: true})
	ctx := context.Background()
	u, _ := a.Authenticate(ctx, goodToken)
	if _, err := a.AuthorizeStack(ctx, u, "dev", "web"); err != nil {
		t.Fatal(err)
	}
	f.mu.Lock()
	f.allow = func(s authorizationv1.SubjectAccessReviewSpec) bool { return false }
	f.mu.Unlock()
	c.Advance(8 * time.Second)
	if _, err := a.AuthorizeStack(ctx, u, "dev", "web"); err != nil {
		t.Fatalf("the cached allow should serve while the refresh runs: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := a.AuthorizeStack(ctx, u, "dev", "web")
		if err != nil {
			if StatusCode(err) != 403 {
				t.Fatalf("after the refresh: %v", err)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the revocation was not seen after the refresh")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
