package server

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync"
	"testing"

	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// randomName is a valid Stack name nobody created.
func randomName(r *rand.Rand) string {
	const letters = "abcdefghijklmnopqrstuvwxyz0123456789"
	b := make([]byte, 8+r.IntN(40))
	for i := range b {
		b[i] = letters[r.IntN(len(letters))]
	}
	b[0] = 'a' + byte(r.IntN(26))
	return string(b)
}

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestLongPollRegistryIsBounded: the long-poll notifier holds an entry only
// while a request waits on it. 100,000 verifications of random Stacks that
// do not exist, without wait and with a wait their callers leave early,
// leave no entry and no memory behind; while waiters wait, each waited-on
// key holds one entry, and their leaving drops it.
func TestLongPollRegistryIsBounded(t *testing.T) {
	const requests = 100_000
	src := newSource()
	src.put(stackAt(""))
	h := New(Options{Stacks: src, Guard: guard{}})
	r := rand.New(rand.NewPCG(1, 2))
	serve := func(ctx context.Context, name, query string) int {
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/v1/namespaces/dev/stacks/"+name+"/verification?commit="+sha+query, nil)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code
	}
	before := heapAlloc()

	// Without wait: no request registers anything.
	for range requests {
		if code := serve(context.Background(), randomName(r), ""); code != http.StatusOK {
			t.Fatalf("answer %d", code)
		}
	}
	t.Logf("after %d verifications without wait: %d keys held, heap %+d KiB", requests, src.n.Waiting(), int64(heapAlloc()-before)/1024)
	if n := src.n.Waiting(); n != 0 {
		t.Fatalf("%d keys held after %d verifications without wait: only waiters may hold entries", n, requests)
	}

	// With a wait whose caller has gone (its context ended): the entry is
	// dropped when the request returns.
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	for range requests {
		if code := serve(gone, randomName(r), "&wait=25s"); code != http.StatusOK {
			t.Fatalf("answer %d", code)
		}
	}
	if n := src.n.Waiting(); n != 0 {
		t.Fatalf("%d keys held after %d long polls ended: a leaving waiter must drop its entry", n, requests)
	}
	after := heapAlloc()
	t.Logf("heap: %d KiB before, %d KiB after %d short and %d abandoned long polls of random Stacks", before>>10, after>>10, requests, requests)
	if after > before+2<<20 {
		t.Fatalf("the heap grew by %d KiB over %d requests", int64(after-before)/1024, 2*requests)
	}

	// Waiters present: one entry per key waited on, whatever the number of
	// waiters; gone once they leave.
	const waiters = 200
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for i := range waiters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			serve(ctx, fmt.Sprintf("missing-%d", i%50), "&wait=25s")
		}()
	}
	wg.Add(1)
	go func() { defer wg.Done(); serve(ctx, "web", "&wait=25s") }()
	waitFor(t, func() bool { return src.n.Waiting() == 51 })
	stop()
	wg.Wait()
	if n := src.n.Waiting(); n != 0 {
		t.Fatalf("%d keys held once every waiter left", n)
	}
	// A change wakes the waiters of its key and leaves nothing behind.
	src.put(stackAt(pulumiv1.SucceededStackStateMessage))
	if n := src.n.Waiting(); n != 0 {
		t.Fatalf("%d keys held after a change with no waiter", n)
	}
}
