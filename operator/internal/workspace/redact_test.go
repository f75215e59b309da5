package workspace

import "testing"

func TestRedact(t *testing.T) {
	tests := []struct {
		name    string
		msg     string
		secrets []string
		want    string
	}{
		{"nothing to hide", "fetch failed: connection refused", []string{"hunter22"}, "fetch failed: connection refused"},
		{"secret value", "auth with hunter22 refused", []string{"hunter22"}, "auth with [secret] refused"},
		{"every occurrence", "hunter22/hunter22", []string{"hunter22"}, "[secret]/[secret]"},
		{"longest first", "token abcd-efgh-ijkl", []string{"abcd", "abcd-efgh-ijkl"}, "token [secret]"},
		{"short values left alone", "exit code 1: yes", []string{"1", "yes"}, "exit code 1: yes"},
		{"url userinfo", "clone https://bot:ghp_XYZ@github.com/acme/app.git failed", nil, "clone https://***@github.com/acme/app.git failed"},
		{"url user only", "ssh://git@example.com/app.git", nil, "ssh://***@example.com/app.git"},
		{"url without userinfo", "https://github.com/acme/app.git@v1", nil, "https://github.com/acme/app.git@v1"},
		{"multi-line secret, one line quoted", "key line MIIEpAIBAAKCAQEA7 is bad", []string{"-----BEGIN KEY-----\nMIIEpAIBAAKCAQEA7\n-----END KEY-----\n"}, "key line [secret] is bad"},
		{"secret with surrounding whitespace", "value s3cr3t-x", []string{"  s3cr3t-x\n"}, "value [secret]"},
		{"secret cut by a cap before redaction", "agent exited: password QxWDiudLdqcd…", []string{"QxWDiudLdqcdIuhR4C1o"}, "agent exited: password [secret]…"},
		{"short start before an ellipsis kept", "wait QxWD…", []string{"QxWDiudLdqcdIuhR4C1o"}, "wait QxWD…"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Redact(tt.msg, tt.secrets); got != tt.want {
				t.Fatalf("Redact(%q) = %q, want %q", tt.msg, got, tt.want)
			}
		})
	}
}
