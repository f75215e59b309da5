package agent

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestOOMMessage(t *testing.T) {
	dir := t.TempDir()
	events, limit := filepath.Join(dir, "memory.events"), filepath.Join(dir, "memory.max")
	oldEvents, oldLimits := oomEventFiles, memLimitFiles
	t.Cleanup(func() { oomEventFiles, memLimitFiles = oldEvents, oldLimits })
	oomEventFiles, memLimitFiles = []string{events}, []string{limit}

	write := func(f, s string) {
		if err := os.WriteFile(f, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(events, "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n")
	write(limit, "67108864\n")
	before, ok := oomKills()
	if !ok || before != 1 {
		t.Fatalf("oomKills = %d, %v", before, ok)
	}
	if got := oomMessage(before, ok, "signal: killed"); got != "signal: killed" {
		t.Fatalf("no new kill: %q", got)
	}
	write(events, "low 0\nhigh 0\nmax 5\noom 2\noom_kill 2\n")
	got := oomMessage(before, ok, "signal: killed")
	if !strings.HasPrefix(got, "OOMKilled: ") || !strings.Contains(got, "of 64 MiB") || !strings.HasSuffix(got, ": signal: killed") {
		t.Fatalf("after a kill: %q", got)
	}
	write(limit, "max\n")
	if got := oomMessage(before, ok, "x"); strings.Contains(got, "MiB") {
		t.Fatalf("no limit: %q", got)
	}
	os.Remove(events)
	if got := oomMessage(before, ok, "x"); got != "x" {
		t.Fatalf("unreadable: %q", got)
	}
}
