package manifests

import (
	"fmt"
	"net"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"unicode"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/stackflow-io/stackflow/internal/redact"
	pulumiv1 "github.com/stackflow-io/stackflow/operator/api/pulumi/v1"
)

// What a pull request may make the action do with a Stack manifest. Every
// field of a manifest is the PR author's choice; these checks decide which
// of them the action acts on, before anything runs. A refused Stack is not
// previewed and its result says why, in one line.

// commitRE is the CRD's rule for spec.commit (which CI cannot rely on: the
// manifests never went through the API server).
var commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// IsCommit reports whether s is a full commit SHA as the CRD requires of
// spec.commit: 40 lowercase hexadecimal characters.
func IsCommit(s string) bool { return commitRE.MatchString(s) }

// checkBranch applies git's rules for a branch name (git check-ref-format)
// that matter here: never an option ("-…"), never a refspec (":", "+"
// leading, "*"), no whitespace, control or special characters, no "..",
// "@{", "//", and no component starting with "." or ending ".lock".
func checkBranch(b string) error {
	b = strings.TrimPrefix(b, "refs/heads/")
	bad := b == "" || len(b) > 256 || strings.HasPrefix(b, "-") || strings.HasPrefix(b, "+") || strings.HasPrefix(b, "/") || strings.HasSuffix(b, "/") ||
		strings.HasSuffix(b, ".") || strings.Contains(b, "..") || strings.Contains(b, "@{") || strings.Contains(b, "//") || b == "@" ||
		strings.ContainsFunc(b, func(r rune) bool {
			return unicode.IsSpace(r) || unicode.IsControl(r) || strings.ContainsRune(`~^:?*[\`, r) || r == 0x7f
		})
	for _, part := range strings.Split(b, "/") {
		if strings.HasPrefix(part, ".") || strings.HasSuffix(part, ".lock") {
			bad = true
		}
	}
	if bad {
		return fmt.Errorf("spec.branch %s is not a valid branch name", Quote(b))
	}
	return nil
}

// repoURL parses a Stack's projectRepo and refuses anything but an https://
// URL (http:// only to a loopback address, and only when allowLoopbackHTTP,
// which the action's tests set): no file://, ssh://, scp-like or ext::
// URL, which would let a pull request read the runner's disk or run
// commands through git's transports.
func repoURL(raw string, allowLoopbackHTTP bool) (*url.URL, error) {
	refuse := func(why string) (*url.URL, error) {
		return nil, fmt.Errorf("spec.projectRepo %s %s", Quote(redact.URLCredentials(raw)), why)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" || u.Host == "" || strings.HasPrefix(raw, "-") {
		return refuse("is not an https:// URL: the action clones program repositories over https only")
	}
	switch {
	case u.Scheme == "https":
	case u.Scheme == "http" && allowLoopbackHTTP && isLoopback(u.Hostname()):
	default:
		return refuse("is not an https:// URL: the action clones program repositories over https only")
	}
	if u.Port() != "" {
		if p, err := strconv.Atoi(u.Port()); err != nil || p < 1 || p > 65535 {
			return refuse("has an invalid port")
		}
	}
	return u, nil
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// hostKey is a URL's host as the allowlists hold it: lower case, without
// the scheme's default port.
func hostKey(u *url.URL) string {
	h := strings.ToLower(u.Host)
	switch {
	case u.Scheme == "https" && strings.HasSuffix(h, ":443"):
		h = strings.TrimSuffix(h, ":443")
	case u.Scheme == "http" && strings.HasSuffix(h, ":80"):
		h = strings.TrimSuffix(h, ":80")
	}
	return h
}

// tokenAllowed reports whether the git token may be sent to u: its host is
// on hosts (the git-token-hosts input; "host" matches the scheme's
// default port only, "host:port" that port).
func tokenAllowed(u *url.URL, hosts []string) bool {
	h := hostKey(u)
	for _, a := range hosts {
		a = strings.ToLower(strings.TrimSpace(a))
		if a == h || (u.Scheme == "https" && strings.TrimSuffix(a, ":443") == h) {
			return true
		}
	}
	return false
}

// backendAllowed reports whether a backend URL named by a manifest is one
// of allowed (compared without trailing slashes).
func backendAllowed(b string, allowed []string) bool {
	b = strings.TrimRight(strings.TrimSpace(b), "/")
	for _, a := range allowed {
		if a = strings.TrimRight(strings.TrimSpace(a), "/"); a != "" && a == b {
			return true
		}
	}
	return false
}

// checkBackend refuses a state backend a manifest names (spec.backend, or
// PULUMI_BACKEND_URL among its variables) unless the workflow allowed it:
// the pulumi CLI logs in to its backend with the job's credentials
// (PULUMI_ACCESS_TOKEN), so the backend is where they go.
func checkBackend(what, b string, allowed []string) error {
	if b == "" || backendAllowed(b, allowed) {
		return nil
	}
	return fmt.Errorf("%s %s is not in the action's backends input: the pulumi CLI would send the job's Pulumi credentials there", what, Quote(redact.URLCredentials(b)))
}

// checkVariable refuses an environment variable a manifest sets (literal
// envRefs, envs ConfigMaps) that decides where the CLI and git send the
// job's credentials or what they trust and run: the CLI's own settings
// (PULUMI_*, except PULUMI_BACKEND_URL, which is checked as a backend),
// git's (GIT_*), proxies, TLS roots, PATH, HOME and the dynamic loader's.
func checkVariable(what, name, value string, backends []string) error {
	u := strings.ToUpper(name)
	switch {
	case u == "PULUMI_BACKEND_URL":
		return checkBackend(what+" PULUMI_BACKEND_URL", value, backends)
	case strings.HasPrefix(u, "PULUMI_"), strings.HasPrefix(u, "GIT_"), strings.HasSuffix(u, "_PROXY"),
		strings.HasPrefix(u, "SSL_CERT_"), u == "CURL_CA_BUNDLE", u == "NODE_EXTRA_CA_CERTS", u == "REQUESTS_CA_BUNDLE",
		u == "PATH", u == "HOME", strings.HasPrefix(u, "LD_"), strings.HasPrefix(u, "DYLD_"):
		return fmt.Errorf("%s %s: the action does not take PULUMI_*, GIT_*, proxy, TLS, PATH, HOME or loader variables from a manifest (they decide where the job's credentials go)", what, Quote(name))
	}
	return nil
}

// checkSource refuses a git source the action must not act on: a
// projectRepo other than https, a commit that is not a full SHA, a branch
// that is not a branch name.
func checkSource(g pulumiv1.GitSource, allowLoopbackHTTP bool) (*url.URL, error) {
	u, err := repoURL(g.ProjectRepo, allowLoopbackHTTP)
	if err != nil {
		return nil, err
	}
	switch {
	case g.Commit != "" && !IsCommit(g.Commit):
		return nil, fmt.Errorf("spec.commit %s is not a commit SHA (40 lowercase hexadecimal characters)", Quote(g.Commit))
	case g.Commit != "" && g.Branch != "":
		return nil, fmt.Errorf("spec.branch and spec.commit are both set: the operator refuses such a Stack")
	case g.Commit == "" && g.Branch == "":
		return nil, fmt.Errorf("spec.projectRepo needs spec.commit or spec.branch")
	case g.Commit == "":
		if err := checkBranch(g.Branch); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// Quote quotes a value from a pull request for a one-line message: Go-quoted
// (control characters escaped) and cut to 60 characters.
func Quote(s string) string {
	r := []rune(s)
	if len(r) > 60 {
		return strconv.Quote(string(r[:59])) + "…"
	}
	return strconv.Quote(s)
}

// checkOwner refuses a Stack the pull request adds whose key (its commit
// status context and comment section, "<namespace>/<name>") the base commit
// gives to another job: a Stack with that key in a file outside
// manifestsDir (another manifests-mode job's), or a namespace that is the
// name of a Pulumi project (program mode's keys are "<project>/<stack>").
// A Stack present at the base under manifestsDir is this job's already.
func checkOwner(c Change, manifestsDir string, own *Owners) error {
	if own == nil || !c.Added {
		return nil
	}
	if f, ok := own.Stacks[c.Key]; ok && !within(f, manifestsDir) {
		return fmt.Errorf("Stack %s is new under %s, but the base branch has it in %s: its commit status and comment section belong to the job that previews that file", c.Key, dirName(manifestsDir), f)
	}
	if c.Namespace != "" {
		if dirs := own.ProjectDirs(c.Namespace); len(dirs) > 0 {
			return fmt.Errorf("Stack %s is in namespace %s, the name of the Pulumi project in %s: commit statuses and comment sections %s/<stack> belong to that project's previews", c.Key, Quote(c.Namespace), strings.Join(dirs, ", "), c.Namespace)
		}
	}
	return nil
}

// within reports whether file (relative to the repository root) is under
// dir ("", "." or "/" for the whole repository).
func within(file, dir string) bool {
	dir = strings.Trim(path.Clean("/"+dir), "/")
	return dir == "" || strings.HasPrefix(path.Clean("/"+file), "/"+dir+"/")
}

func dirName(dir string) string {
	if d := strings.Trim(path.Clean("/"+dir), "/"); d != "" {
		return d + "/"
	}
	return "the repository"
}

// checkName refuses a Stack whose metadata.name is not a DNS subdomain or
// whose metadata.namespace is not a DNS label: the API server would never
// take such a manifest, and its key would carry the pull request's
// characters (line breaks, markup) into commit status contexts and logs.
func checkName(s *pulumiv1.Stack) error {
	if errs := validation.IsDNS1123Subdomain(s.Name); len(errs) > 0 {
		return fmt.Errorf("metadata.name %s is not a Kubernetes object name: %s", Quote(s.Name), errs[0])
	}
	if s.Namespace != "" {
		if errs := validation.IsDNS1123Label(s.Namespace); len(errs) > 0 {
			return fmt.Errorf("metadata.namespace %s is not a Kubernetes namespace name: %s", Quote(s.Namespace), errs[0])
		}
	}
	return nil
}
