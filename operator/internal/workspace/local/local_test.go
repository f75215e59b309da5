package local

import (
	"os"
	"path/filepath"
	"testing"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
)

// TestExitStatus: a stopped agent's status comes from its classified
// termination message, else from its log, with secret values masked.
func TestExitStatus(t *testing.T) {
	tests := []struct {
		name       string
		term, log  string // file contents; "-" for no file
		wantOK     bool
		wantReason string
		wantMsg    string
	}{
		{"classified", "SourceUnavailable: fetch program: commit 0123 not found in file:///r.git\n", "-", true,
			autov1alpha1.WorkspaceReasonSourceUnavailable, "fetch program: commit 0123 not found in file:///r.git"},
		{"install", "InstallationFailed: install dependencies (pulumi install): npm ERR! 404\n", "-", true,
			autov1alpha1.WorkspaceReasonInstallationFailed, "install dependencies (pulumi install): npm ERR! 404"},
		{"unclassified, secret masked", "listen on :1: token hunter2-xyz refused\n", "-", true, "", "agent exited: listen on :1: token [secret] refused"},
		{"no termination message: the log's last error", "-", "starting\nerror: https://u:p4ss@h/r.git unreachable\nbye\n", true, "", "agent exited: error: https://***@h/r.git unreachable"},
		{"empty termination message", "", "-", false, "", ""},
		{"nothing at all", "-", "-", false, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			term, logPath := filepath.Join(dir, terminationFile), ""
			if tt.term != "-" {
				if err := os.WriteFile(term, []byte(tt.term), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if tt.log != "-" {
				logPath = filepath.Join(dir, "agent.log")
				if err := os.WriteFile(logPath, []byte(tt.log), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			st, ok := exitStatus(term, logPath, []string{"hunter2-xyz"})
			if ok != tt.wantOK || (ok && (!st.Failed || st.Reason != tt.wantReason || st.Message != tt.wantMsg)) {
				t.Fatalf("exitStatus = %+v, %v; want failed %q %q, %v", st, ok, tt.wantReason, tt.wantMsg, tt.wantOK)
			}
		})
	}
}
