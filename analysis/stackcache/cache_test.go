package stackcache

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
	"github.com/stackflow-io/stackflow/test/framework/substrate"
)

// TestCache: Stacks and Updates are served from the informers, stripped of
// configuration and secrets, and a change of a Stack or of one of its
// Updates wakes the Stack's waiters.
func TestCache(t *testing.T) {
	cp := substrate.StartControlPlaneT(t)
	ns := cp.Namespace(t)
	c, err := New(cp.Config, Options{Namespaces: []string{ns}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := c.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !c.WaitForSync(ctx) || !c.Synced() {
		t.Fatal("not synced")
	}
	key := types.NamespacedName{Namespace: ns, Name: "web"}
	changed, stop := c.Watch(key)
	defer stop()
	s := &pulumiv1.Stack{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web"}, Spec: pulumiv1.StackSpec{
		Stack: "web", GitSource: &pulumiv1.GitSource{ProjectRepo: "https://example.com/r.git", Commit: "0123456789abcdef0123456789abcdef01234567"},
		Config: map[string]apiextensionsv1.JSON{"password": {Raw: []byte(`"hunter2"`)}}, Secrets: map[string]string{"token": "s3cret"}}}
	if err := cp.Client.Create(ctx, s); err != nil {
		t.Fatal(err)
	}
	wait(t, changed, "the Stack's creation")
	var got *pulumiv1.Stack
	eventuallyTrue(t, func() bool { got, _ = c.Stack(ctx, key); return got != nil })
	if got.Spec.Config != nil || got.Spec.Secrets != nil || got.ManagedFields != nil {
		t.Fatalf("the cached Stack keeps configuration or secrets: %+v", got.Spec)
	}
	if got.Spec.GitSource == nil || got.Spec.GitSource.Commit != s.Spec.GitSource.Commit {
		t.Fatalf("the cached Stack lost its commit: %+v", got.Spec.GitSource)
	}

	changed, stop = c.Watch(key)
	defer stop()
	u := &autov1alpha1.Update{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "web-1", Labels: map[string]string{StackNameLabel: "web"}},
		Spec: autov1alpha1.UpdateSpec{WorkspaceName: "web", StackName: "web", Type: autov1alpha1.UpType}}
	if err := cp.Client.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	wait(t, changed, "the Update's creation")
	eventuallyTrue(t, func() bool { return c.Update(ctx, types.NamespacedName{Namespace: ns, Name: "web-1"}) != nil })

	// Another Stack's Update does not wake this Stack's waiters: the
	// channel is still open once the other key's channel has fired.
	changed, stop = c.Watch(key)
	defer stop()
	otherKey := types.NamespacedName{Namespace: ns, Name: "other"}
	otherChanged, stopOther := c.Watch(otherKey)
	defer stopOther()
	other := &autov1alpha1.Update{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "other-1", Labels: map[string]string{StackNameLabel: "other"}},
		Spec: autov1alpha1.UpdateSpec{WorkspaceName: "other", StackName: "other", Type: autov1alpha1.UpType}}
	if err := cp.Client.Create(ctx, other); err != nil {
		t.Fatal(err)
	}
	wait(t, otherChanged, "the other Update's creation")
	select {
	case <-changed:
		t.Fatal("another Stack's Update woke this Stack's waiters")
	default:
	}
	if s, _ := c.Stack(ctx, types.NamespacedName{Namespace: ns, Name: "missing"}); s != nil {
		t.Fatal("a missing Stack was found")
	}
}

func wait(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatalf("no notification for %s", what)
	}
}

func eventuallyTrue(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNotifier(t *testing.T) {
	n := NewNotifier()
	a, b := types.NamespacedName{Name: "a"}, types.NamespacedName{Name: "b"}
	ca, stopA := n.Watch(a)
	cb, stopB := n.Watch(b)
	ca2, stopA2 := n.Watch(a)
	if ca != ca2 {
		t.Fatal("two waiters on a key get different channels")
	}
	n.Notify(a)
	select {
	case <-ca:
	default:
		t.Fatal("a not woken")
	}
	select {
	case <-cb:
		t.Fatal("b woken")
	default:
	}
	if n.Waiting() != 1 {
		t.Fatalf("waiting = %d", n.Waiting())
	}
	// The woken waiters leave after their key was dropped: a new waiter
	// of a is not unregistered by them.
	_, stopA3 := n.Watch(a)
	stopA()
	stopA2()
	stopA2()
	if n.Waiting() != 2 {
		t.Fatalf("waiting = %d: the woken waiters' leaving dropped the new waiter's key", n.Waiting())
	}
	stopA3()
	n.Notify(types.NamespacedName{Name: "nobody"}) // no waiter: nothing kept
	if n.Waiting() != 1 {
		t.Fatalf("waiting = %d after notifying a key nobody waits on", n.Waiting())
	}
	// Two waiters on b: the key stays until both have left.
	_, stopB2 := n.Watch(b)
	stopB()
	stopB() // a second call is a no-op
	if n.Waiting() != 1 {
		t.Fatalf("waiting = %d with one waiter left on b", n.Waiting())
	}
	stopB2()
	if n.Waiting() != 0 {
		t.Fatalf("waiting = %d once every waiter left", n.Waiting())
	}
}

// TestNotifierGivesMemoryBack: 100,000 waiters on random keys hold 100,000
// entries; once they have left, nothing is held and the memory is back (Go
// maps never shrink, so the emptied map is replaced).
func TestNotifierGivesMemoryBack(t *testing.T) {
	const waiters = 100_000
	n := NewNotifier()
	r := rand.New(rand.NewPCG(3, 4))
	before := heapAlloc()
	stops := make([]func(), 0, waiters)
	for i := range waiters {
		stops = append(stops, nil)
		_, stops[i] = n.Watch(types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("s-%016x", r.Uint64())})
	}
	held := heapAlloc()
	if got := n.Waiting(); got != waiters {
		t.Fatalf("waiting = %d, want %d", got, waiters)
	}
	for _, stop := range stops {
		stop()
	}
	stops = nil
	after := heapAlloc()
	t.Logf("heap: %d KiB before, %d KiB with %d waiters, %d KiB after they left", before>>10, held>>10, waiters, after>>10)
	if got := n.Waiting(); got != 0 {
		t.Fatalf("waiting = %d once every waiter left", got)
	}
	if after > before+1<<20 {
		t.Fatalf("the heap kept %d KiB once every waiter left", int64(after-before)/1024)
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestStripKeepsExports: the verdict of a Stack with spec.exports waits for
// its export, so the cache keeps spec.exports and status.exports (names,
// hashes, the refusal; no values).
func TestStripKeepsExports(t *testing.T) {
	s := &pulumiv1.Stack{Spec: pulumiv1.StackSpec{Exports: &pulumiv1.StackExports{Secret: &pulumiv1.ExportObject{Name: "web-secrets"}}}}
	s.Status.Exports = &pulumiv1.StackExportsStatus{Update: "web-7", Reason: pulumiv1.ExportRefusedReason}
	got, err := strip(s)
	if err != nil {
		t.Fatal(err)
	}
	if o := got.(*pulumiv1.Stack); o.Spec.Exports == nil || o.Spec.Exports.Secret.Name != "web-secrets" || o.Status.Exports == nil || o.Status.Exports.Reason == "" {
		t.Fatalf("the cached Stack lost its exports: %+v %+v", o.Spec.Exports, o.Status.Exports)
	}
}
