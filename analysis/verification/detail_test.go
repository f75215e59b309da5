package verification

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"

	autov1alpha1 "github.com/stackflow-io/stackflow/operator/api/auto/v1alpha1"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// Credentials of the shapes Detail masks; none may survive it.
var secretLooking = []string{
	"ghp_R4nd0mT0k3nV4lu3abcdefghijklmnop1234",
	"github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuv",
	"pul-0123456789abcdef0123456789abcdef01234567",
	"AKIAIOSFODNN7EXAMPLE",
	"glpat-abcdefghij0123456789",
	"xoxb-123456789012-abcdefghijkl",
	"eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW0ifQ.c2lnbmF0dXJl",
	"hunter2-the-db-password",
	"wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
	"0123456789abcdef0123456789abcdef0123",
	"s3cr3tInUserInfo",
	"MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7",
}

func TestDetail(t *testing.T) {
	for _, tt := range []struct {
		name, in, want string
	}{
		{"plain message kept", "the update failed 5 times in a row: error: resource web-bucket failed", "the update failed 5 times in a row: error: resource web-bucket failed"},
		{"one line", "error: update failed\n\n  aws:s3:Bucket (web):\n\terror: AccessDenied\r\n", "error: update failed aws:s3:Bucket (web): error: AccessDenied"},
		{"url user info", "git fetch https://x-access-token:s3cr3tInUserInfo@github.com/acme/infra.git failed", "git fetch https://[redacted]@github.com/acme/infra.git failed"},
		{"bearer", "401 with Authorization: Bearer abcdefghijklmnop.qrst", "401 with Authorization: Bearer [redacted]"},
		{"key=value", "connect: password=hunter2-the-db-password host=db", "connect: password=[redacted] host=db"},
		{"key: value", `config: {"dbPassword": "hunter2-the-db-password", "region": "eu-west-1"}`, `config: {"dbPassword": "[redacted]", "region": "eu-west-1"}`},
		{"query parameter", "GET /api?access_token=abc123&x=1 failed", "GET /api?access_token=[redacted]&x=1 failed"},
		{"github token", "auth failed for ghp_R4nd0mT0k3nV4lu3abcdefghijklmnop1234 (401)", "auth failed for [redacted] (401)"},
		{"pulumi token", "PULUMI_ACCESS_TOKEN pul-0123456789abcdef0123456789abcdef01234567 rejected", "PULUMI_ACCESS_TOKEN [redacted] rejected"},
		{"aws key id", "the key AKIAIOSFODNN7EXAMPLE is not valid", "the key [redacted] is not valid"},
		{"jwt", "token eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW0ifQ.c2lnbmF0dXJl expired", "token [redacted] expired"},
		{"opaque base64", "signature wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY does not match", "signature [redacted] does not match"},
		{"long hex", "key 0123456789abcdef0123456789abcdef0123 refused", "key [redacted] refused"},
		{"pem", "bad key -----BEGIN PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7\n-----END PRIVATE KEY----- end", "bad key [redacted] end"},
		{"pem cut before its end", "bad key -----BEGIN RSA PRIVATE KEY-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC", "bad key [redacted]"},
		{"paths and names kept", "open /workspace/programs/web-infrastructure/index.ts: no such file", "open /workspace/programs/web-infrastructure/index.ts: no such file"},
		{"short hex kept", "commit 3f2a9c1 of branch main", "commit 3f2a9c1 of branch main"},
		{"invalid utf-8", "bad \xff byte", "bad \uFFFD byte"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if got := Detail(tt.in); got != tt.want {
				t.Fatalf("Detail(%q)\n got %q\nwant %q", tt.in, got, tt.want)
			}
		})
	}
}

func TestDetailBounds(t *testing.T) {
	long := strings.Repeat("error: resource web-é failed; ", 1000)
	got := Detail(long)
	if len(got) > MaxDetail || !strings.HasSuffix(got, "…") || !utf8.ValidString(got) {
		t.Fatalf("Detail of %d bytes: %d bytes, valid UTF-8 %v: %q", len(long), len(got), utf8.ValidString(got), got)
	}
	// A secret across the cut is masked before the cut: no prefix of it
	// survives.
	at := strings.Repeat("x ", (MaxDetail-10)/2) + "token=" + secretLooking[0]
	if got := Detail(at); strings.Contains(got, secretLooking[0][:8]) {
		t.Fatalf("the start of a secret survived the cut: %q", got)
	}
}

// The Stalled message is quoted masked and bounded, with the typed Stalled
// reason beside it: an engine error holding credentials and pages of
// output does not reach the answer.
func TestVerifyStalledMessageIsMaskedAndBounded(t *testing.T) {
	engine := "the update failed 5 times in a row: error: update failed: " +
		"aws:rds:Instance (db): error: creating RDS instance with password=" + secretLooking[7] + " and master key " + secretLooking[8] + ": " +
		"git https://oauth2:" + secretLooking[10] + "@gitlab.example.com/infra.git; token " + secretLooking[0] + "; " +
		strings.Repeat("    at provider.go:42 in a very long stack trace\n", 2000)
	s := stack(lastUpdate(pulumiv1.FailedStackStateMessage, autov1alpha1.UpType, shaA, 3, func(lu *pulumiv1.StackUpdateState) { lu.Failures = 5; lu.Message = engine }),
		stalled(pulumiv1.StalledUpdateFailedReason, 3), func(s *pulumiv1.Stack) { s.Status.Conditions[0].Message = engine })
	got := Verify(Input{Namespace: "dev", Name: "web", Stack: s, Query: Query{Commit: shaA, Operation: OperationUp}, Now: now, Update: func(string) *autov1alpha1.Update { return nil }})
	if got.Phase != PhaseFailed || got.Reason != ReasonStackStalled || got.StalledReason != pulumiv1.StalledUpdateFailedReason {
		t.Fatalf("got %s/%s stalled %q", got.Phase, got.Reason, got.StalledReason)
	}
	b, err := json.Marshal(got)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{secretLooking[0], secretLooking[7], secretLooking[8], secretLooking[10]} {
		if strings.Contains(string(b), secret) {
			t.Errorf("the answer holds %q: %s", secret, b)
		}
	}
	if len(got.Message) > 100+MaxDetail || strings.Contains(got.Message, "\n") {
		t.Errorf("message of %d bytes (or on several lines): %q", len(got.Message), got.Message)
	}
	if !strings.Contains(got.Message, "the Stack is stalled (UpdateFailed): the update failed 5 times in a row: error: update failed: aws:rds:Instance (db)") {
		t.Errorf("message %q lost what is safe to say", got.Message)
	}
	t.Logf("%d bytes of Stalled message answered as: %s", len(engine), got.Message)
}

// FuzzDetail: whatever the message, the excerpt is bounded, on one line,
// valid UTF-8, and masks a planted credential.
func FuzzDetail(f *testing.F) {
	f.Add("error: update failed", 0)
	f.Add("https://u:p@h/x\n-----BEGIN KEY-----", 3)
	f.Add(strings.Repeat("é", 400), 1)
	f.Fuzz(func(t *testing.T, msg string, which int) {
		got := Detail(msg)
		if len(got) > MaxDetail || !utf8.ValidString(got) || strings.ContainsAny(got, "\n\r\t") {
			t.Fatalf("Detail(%q) = %q (%d bytes)", msg, got, len(got))
		}
		secret := secretLooking[uint(which)%uint(len(secretLooking))]
		if strings.Contains(secret, "-") && !strings.HasPrefix(secret, "glpat-") && !strings.HasPrefix(secret, "xoxb-") && !strings.HasPrefix(secret, "github_pat_") {
			secret = "password=" + secret // dashed words are masked by their key
		}
		planted := msg + " " + secret + " "
		if out := Detail(planted); strings.Contains(out, strings.TrimPrefix(secret, "password=")) {
			t.Fatalf("Detail(%q) = %q keeps the credential", planted, out)
		}
	})
}
