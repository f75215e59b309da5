package agent

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// cliError has the shape of the Automation API's error for a failed command:
// the Go error, then the exit code and both streams, each labelled on its
// first line.
func cliError(first, stdout, stderr string) error {
	return errors.New(first + "\ncode: 1\nstdout: " + stdout + "\nstderr: " + stderr + "\n")
}

func TestSummaryLines(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{{
		name: "the error on stderr's first line, behind its label",
		err: cliError("failed to create stack: exit status 1", "",
			"error: could not create stack: the stack is currently locked by 1 lock(s).\n  file:///b/.pulumi/locks/organization/p/dev/x.json: created by u@h (pid 7) at 2026-01-01T00:00:00Z\n"),
		want: "could not create stack: the stack is currently locked by 1 lock(s).",
	}, {
		name: "engine diagnostics on stdout, indented",
		err: cliError("failed to run update: exit status 255", "Updating (dev):\n    error: provider failed: boom\n",
			"error: update failed\n"),
		want: "provider failed: boom",
	}, {
		name: "no error line: the last line of stderr",
		err:  cliError("failed to select stack: exit status 2", "", "panic: runtime error: index out of range\ngoroutine 1 [running]:\nmain.main()\n"),
		want: "failed to select stack: exit status 2: main.main()",
	}, {
		name: "nothing on stderr: the first line",
		err:  cliError("failed to create stack: exit status 1", "", ""),
		want: "failed to create stack: exit status 1",
	}, {
		name: "not a CLI error",
		err:  errors.New("open workspace: no Pulumi.yaml"),
		want: "open workspace: no Pulumi.yaml",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			if got := summaryLines(tc.err); got != tc.want {
				t.Errorf("summaryLines = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestStderrLineIsRedacted: the stderr line that now explains an exit status
// reaches status only redacted.
func TestStderrLineIsRedacted(t *testing.T) {
	r := newRedactor()
	r.add("hunter2-token")
	got := r.summarize(cliError("failed to create stack: exit status 1", "", "warning: none\nlogin to https://u:hunter2-token@backend.example failed\n"))
	if strings.Contains(got, "hunter2") || !strings.Contains(got, "failed to create stack: exit status 1: login to https://u:[secret]@backend.example failed") {
		t.Fatalf("summary %q", got)
	}
}

func TestLockHolders(t *testing.T) {
	text := "error: could not create stack: the stack is currently locked by 2 lock(s). Either wait for the other process(es) to end or delete the lock file with `pulumi cancel`.\n" +
		"  file:///b/.pulumi/locks/organization/p/dev/a.json?no_tmp_dir=true: created by root@ws-0 (pid 42) at 2026-01-01T00:00:00Z\n" +
		"  s3://bucket/.pulumi/locks/organization/p/dev/b.json: created by @other (pid 7) at 2026-01-01T00:00:00Z\n"
	got := lockHolders(text)
	want := []lockHolder{
		{URL: "file:///b/.pulumi/locks/organization/p/dev/a.json?no_tmp_dir=true", User: "root", Host: "ws-0", PID: 42},
		{URL: "s3://bucket/.pulumi/locks/organization/p/dev/b.json", User: "", Host: "other", PID: 7},
	}
	if len(got) != len(want) {
		t.Fatalf("holders = %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("holder %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestRemoveLockFiles: only lock files of a file:// backend are removed; a
// lock of another backend, or a file:// path outside a .pulumi/locks
// directory (also when named through it with ..), is refused and the error
// says which object to delete.
func TestRemoveLockFiles(t *testing.T) {
	dir := t.TempDir()
	lockDir := filepath.Join(dir, ".pulumi", "locks", "organization", "p", "dev")
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(lockDir, "a.json")
	other := filepath.Join(dir, "Pulumi.yaml")
	// A .json file outside the lock directory, named through it.
	outside := filepath.Join(dir, "state.json")
	for _, f := range []string{lock, other, outside} {
		if err := os.WriteFile(f, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := removeLockFiles([]lockHolder{{URL: "file://" + lock + "?no_tmp_dir=true", PID: 42}}); err != nil {
		t.Fatalf("remove a file:// lock: %v", err)
	}
	if _, err := os.Stat(lock); !os.IsNotExist(err) {
		t.Fatalf("the lock is still there (%v)", err)
	}
	for _, url := range []string{"s3://bucket/.pulumi/locks/organization/p/dev/b.json", "file://" + other, "",
		"file://" + dir + "/.pulumi/locks/../../state.json"} {
		h := []lockHolder{{URL: url, PID: 42}}
		err := removeLockFiles(h)
		if err == nil {
			t.Fatalf("removed %q", url)
		}
		msg := errLeftLock{err: errors.New("locked"), holders: h, why: err}.Error()
		if !strings.Contains(msg, "pid 42") || !strings.Contains(msg, "delete "+url) {
			t.Errorf("message %q does not say which lock to delete", msg)
		}
	}
	for _, f := range []string{other, outside} {
		if _, err := os.Stat(f); err != nil {
			t.Fatalf("a file outside the lock directory was removed: %v", err)
		}
	}
}
