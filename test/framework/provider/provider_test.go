package provider

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	pulumirpc "github.com/pulumi/pulumi/sdk/v3/proto/go"
	"google.golang.org/protobuf/types/known/structpb"
)

func props(t *testing.T, m map[string]any) *structpb.Struct {
	t.Helper()
	s, err := structpb.NewStruct(m)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestDiff(t *testing.T) {
	cases := []struct {
		name         string
		olds, news   map[string]any
		wantChanges  pulumirpc.DiffResponse_DiffChanges
		wantDiffs    []string
		wantReplaces []string
	}{
		{"same", map[string]any{"name": "a", "content": "x"}, map[string]any{"name": "a", "content": "x"}, pulumirpc.DiffResponse_DIFF_NONE, nil, nil},
		{"content", map[string]any{"name": "a", "content": "x"}, map[string]any{"name": "a", "content": "y"}, pulumirpc.DiffResponse_DIFF_SOME, []string{"content"}, nil},
		{"rename replaces", map[string]any{"name": "a", "content": "x"}, map[string]any{"name": "b", "content": "x"}, pulumirpc.DiffResponse_DIFF_SOME, []string{"name"}, []string{"name"}},
		{"knob", map[string]any{"name": "a", "content": "x"}, map[string]any{"name": "a", "content": "x", "failOn": "update"}, pulumirpc.DiffResponse_DIFF_SOME, []string{"failOn"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := New().Diff(context.Background(), &pulumirpc.DiffRequest{OldInputs: props(t, tc.olds), News: props(t, tc.news)})
			if err != nil {
				t.Fatal(err)
			}
			if resp.Changes != tc.wantChanges || !slices.Equal(resp.Diffs, tc.wantDiffs) || !slices.Equal(resp.Replaces, tc.wantReplaces) {
				t.Fatalf("diff = %v %v %v, want %v %v %v", resp.Changes, resp.Diffs, resp.Replaces, tc.wantChanges, tc.wantDiffs, tc.wantReplaces)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	cases := []struct {
		name     string
		news     map[string]any
		wantFail string
		wantName string
	}{
		{"defaults name from URN", map[string]any{"content": "x"}, "", "logical"},
		{"explicit name", map[string]any{"content": "x", "name": "rec-1"}, "", "rec-1"},
		{"bad name", map[string]any{"content": "x", "name": "../escape"}, "name", ""},
		{"bad failOn", map[string]any{"content": "x", "failOn": "sometimes"}, "failOn", ""},
		{"content not a string", map[string]any{"content": 3.0}, "content", ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := New().Check(context.Background(), &pulumirpc.CheckRequest{Name: "logical", News: props(t, tc.news), Olds: props(t, nil)})
			if err != nil {
				t.Fatal(err)
			}
			if tc.wantFail != "" {
				if len(resp.Failures) == 0 || resp.Failures[0].Property != tc.wantFail {
					t.Fatalf("failures = %v, want one on %s", resp.Failures, tc.wantFail)
				}
				return
			}
			if len(resp.Failures) > 0 {
				t.Fatalf("unexpected failures %v", resp.Failures)
			}
			if got := resp.Inputs.AsMap()["name"]; got != tc.wantName {
				t.Fatalf("name = %v, want %s", got, tc.wantName)
			}
		})
	}
}

// TestLifecycle drives create, read (with an out-of-band edit), update, a
// refused operation and delete against a real directory.
func TestLifecycle(t *testing.T) {
	dir := t.TempDir()
	s := New()
	ctx := context.Background()
	if _, err := s.Configure(ctx, &pulumirpc.ConfigureRequest{Args: props(t, map[string]any{"dir": dir})}); err != nil {
		t.Fatal(err)
	}
	in := props(t, map[string]any{"name": "r", "content": "one"})
	if _, err := s.Create(ctx, &pulumirpc.CreateRequest{Properties: in}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "r")
	if b, _ := os.ReadFile(path); string(b) != "one" {
		t.Fatalf("file = %q", b)
	}
	if err := os.WriteFile(path, []byte("edited"), 0o644); err != nil {
		t.Fatal(err)
	}
	read, err := s.Read(ctx, &pulumirpc.ReadRequest{Id: "r", Properties: in, Inputs: props(t, map[string]any{"name": "r", "content": "one"})})
	if err != nil {
		t.Fatal(err)
	}
	if got := read.Properties.AsMap()["content"]; got != "edited" {
		t.Fatalf("read content = %v, want the out-of-band edit", got)
	}
	if _, err := s.Update(ctx, &pulumirpc.UpdateRequest{Id: "r", News: props(t, map[string]any{"name": "r", "content": "two", "failOn": "update"})}); err == nil || !strings.Contains(err.Error(), "failOn=update") {
		t.Fatalf("update with failOn=update: err = %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "edited" {
		t.Fatalf("a refused update changed the file to %q", b)
	}
	if _, err := s.Update(ctx, &pulumirpc.UpdateRequest{Id: "r", News: props(t, map[string]any{"name": "r", "content": "two"})}); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "two" {
		t.Fatalf("file after update = %q", b)
	}
	if _, err := s.Delete(ctx, &pulumirpc.DeleteRequest{Id: "r", Properties: props(t, map[string]any{"name": "r"})}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("file still exists after delete: %v", err)
	}
	gone, err := s.Read(ctx, &pulumirpc.ReadRequest{Id: "r", Properties: in})
	if err != nil || gone.Id != "" {
		t.Fatalf("read of deleted record = %v, %v; want empty id", gone, err)
	}
}

// TestHoldWaitsCreateUpdateAndRead: while the hold file exists, create,
// update and read (refresh) wait until their context ends; once it is gone
// they proceed.
func TestHoldWaitsCreateUpdateAndRead(t *testing.T) {
	dir := t.TempDir()
	hold := filepath.Join(dir, "hold")
	t.Setenv(HoldEnv, hold)
	s := New()
	if _, err := s.Configure(context.Background(), &pulumirpc.ConfigureRequest{Args: props(t, map[string]any{"dir": dir})}); err != nil {
		t.Fatal(err)
	}
	in := props(t, map[string]any{"name": "r", "content": "one"})
	ops := map[string]func(context.Context) error{
		"create": func(ctx context.Context) error {
			_, err := s.Create(ctx, &pulumirpc.CreateRequest{Properties: in})
			return err
		},
		"update": func(ctx context.Context) error {
			_, err := s.Update(ctx, &pulumirpc.UpdateRequest{Id: "r", News: in})
			return err
		},
		"read": func(ctx context.Context) error {
			_, err := s.Read(ctx, &pulumirpc.ReadRequest{Id: "r", Properties: in, Inputs: in})
			return err
		},
	}
	if err := os.WriteFile(hold, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for name, op := range ops {
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- op(ctx) }()
		cancel()
		if err := <-done; err == nil || !strings.Contains(err.Error(), context.Canceled.Error()) {
			t.Errorf("%s while held: %v, want it to wait until its context ends", name, err)
		}
	}
	// Set to fail, an operation fails at once: a hold never keeps a test
	// waiting on an operation that cannot succeed.
	failing := props(t, map[string]any{"name": "r", "content": "one", "failOn": "update"})
	if _, err := s.Update(context.Background(), &pulumirpc.UpdateRequest{Id: "r", News: failing}); err == nil || !strings.Contains(err.Error(), "failOn=update") {
		t.Errorf("a failing update while held: %v, want its failure at once", err)
	}
	if err := os.Remove(hold); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"create", "update", "read"} {
		if err := ops[name](context.Background()); err != nil {
			t.Errorf("%s once released: %v", name, err)
		}
	}
}
