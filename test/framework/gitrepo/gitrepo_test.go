package gitrepo

import (
	"os/exec"
	"strings"
	"testing"
)

// TestHTTPServerAuthorize: with Authorize set, the real git client is
// challenged and gets in only with accepted credentials.
func TestHTTPServerAuthorize(t *testing.T) {
	repo, srv := NewServedHTTP(t, "r.git", func(user, pass string) bool { return user == "x-access-token" && pass == "good" })
	sha := repo.Commit(t, "one", map[string]string{"f": "1"})
	lsRemote := func(userinfo string) (string, error) {
		url := strings.Replace(repo.HTTPURL(srv), "http://", "http://"+userinfo+"@", 1)
		cmd := exec.Command("git", "ls-remote", url, "main")
		cmd.Env = []string{"GIT_TERMINAL_PROMPT=0", "GIT_CONFIG_NOSYSTEM=1", "HOME=" + t.TempDir()}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := lsRemote("x-access-token:good"); err != nil || !strings.HasPrefix(out, sha) {
		t.Fatalf("accepted credentials: %v\n%s", err, out)
	}
	if out, err := lsRemote("x-access-token:bad"); err == nil || !strings.Contains(out, "Authentication failed") {
		t.Fatalf("refused credentials: %v\n%s", err, out)
	}
}
