package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"syscall"

	"github.com/pulumi/pulumi/sdk/v3/go/auto"
)

// lockHolder is a process holding a stack lock, as the DIY backends report it.
type lockHolder struct {
	User, Host string
	PID        int
	// URL is the lock object's ("file:///…/.pulumi/locks/…/<id>.json"), when
	// the message gives it.
	URL string
}

func (h lockHolder) String() string {
	s := fmt.Sprintf("created by %s@%s (pid %d)", h.User, h.Host, h.PID)
	if h.URL != "" {
		s = h.URL + ": " + s
	}
	return s
}

// lockHolderRE matches a holder line: "  <lock URL>: created by
// <user>@<host> (pid <n>) at <time>".
var lockHolderRE = regexp.MustCompile(`(?:(\S+): )?created by (\S*)@(\S+) \(pid (\d+)\)`)

// lockHolders parses the holders out of a "stack is currently locked" error.
func lockHolders(errText string) []lockHolder {
	var hs []lockHolder
	for _, m := range lockHolderRE.FindAllStringSubmatch(errText, -1) {
		pid, _ := strconv.Atoi(m[4])
		hs = append(hs, lockHolder{URL: m[1], User: m[2], Host: m[3], PID: pid})
	}
	return hs
}

// processAlive reports whether pid is a live pulumi process on this machine.
type processAlive func(pid int) bool

// livePulumiProcess: the pid exists and its command line names pulumi. A pid
// reused by an unrelated process after a crash does not count as the holder.
func livePulumiProcess(pid int) bool {
	if pid <= 0 {
		return false
	}
	if err := syscall.Kill(pid, 0); err != nil && err != syscall.EPERM {
		return false
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return true // cannot tell: assume alive, never break a live lock
	}
	return strings.Contains(string(cmdline), "pulumi")
}

// staleLock decides whether every holder of a lock is gone: the lock was taken
// on this host (this workspace) by a process that no longer runs. Holders on
// other hosts, or a lock whose holders cannot be read (Pulumi Cloud's 409), are
// a real concurrent update and are never broken.
func staleLock(errText, hostname string, alive processAlive) (bool, []lockHolder) {
	hs := lockHolders(errText)
	if len(hs) == 0 {
		return false, nil
	}
	for _, h := range hs {
		if h.Host != hostname || alive(h.PID) {
			return false, hs
		}
	}
	return true, hs
}

// clearPendingOperations removes the pending operations a killed update left in
// the stack's checkpoint, returning the URNs they concerned.
func clearPendingOperations(ctx context.Context, stack auto.Stack) ([]string, error) {
	dep, err := stack.Export(ctx)
	if err != nil {
		return nil, fmt.Errorf("export stack state: %w", err)
	}
	var state map[string]json.RawMessage
	if err := json.Unmarshal(dep.Deployment, &state); err != nil {
		return nil, fmt.Errorf("read stack state: %w", err)
	}
	raw, ok := state["pending_operations"]
	if !ok {
		return nil, nil
	}
	var ops []struct {
		Resource struct {
			URN string `json:"urn"`
		} `json:"resource"`
		Type string `json:"type"`
	}
	if err := json.Unmarshal(raw, &ops); err != nil {
		return nil, fmt.Errorf("read pending operations: %w", err)
	}
	if len(ops) == 0 {
		return nil, nil
	}
	delete(state, "pending_operations")
	dep.Deployment, err = json.Marshal(state)
	if err != nil {
		return nil, err
	}
	if err := stack.Import(ctx, dep); err != nil {
		return nil, fmt.Errorf("import stack state without pending operations: %w", err)
	}
	urns := make([]string, len(ops))
	for i, op := range ops {
		urns[i] = op.Type + " " + op.Resource.URN
	}
	return urns, nil
}
