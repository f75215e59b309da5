package agent

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-git/go-git/v5"
	gitconfig "github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"

	"github.com/stackflow-io/stackflow/internal/redact"
	"github.com/stackflow-io/stackflow/operator/internal/gitauth"
	"github.com/stackflow-io/stackflow/operator/internal/gitremote"
)

// Source says where the program comes from. Exactly one of GitURL, ArtifactURL
// and LocalDir is set.
type Source struct {
	GitURL     string
	GitRef     string // commit SHA, branch or tag
	GitShallow bool
	// GitAuth holds the git credentials (gitauth.FromEnv in the agent).
	// Values are secrets: never logged.
	GitAuth gitauth.Credentials
	// GitLimits bound the fetch besides the preparation's deadline: the
	// idle timeout and the bytes read (--git-idle-timeout,
	// --git-max-fetch-bytes).
	GitLimits gitremote.Limits

	ArtifactURL    string
	ArtifactDigest string // "sha256:<hex>"
	// MaxArtifactBytes caps the download; 0 means DefaultMaxArtifactBytes.
	MaxArtifactBytes int64

	LocalDir string

	// Dir is the program's directory within the repository or artifact.
	Dir string
}

// DefaultMaxArtifactBytes caps artifact downloads.
const DefaultMaxArtifactBytes = 256 << 20

// Artifact download timeouts: connecting, the TLS handshake and waiting for
// the response headers are bounded separately, the whole download (the body
// included) by ArtifactDownloadTimeout, so a stalled server fails the fetch
// instead of hanging the workspace's preparation.
const (
	ArtifactDialTimeout     = 10 * time.Second
	ArtifactTLSTimeout      = 10 * time.Second
	ArtifactHeaderTimeout   = 30 * time.Second
	ArtifactDownloadTimeout = 10 * time.Minute
)

// artifactClient downloads artifacts (a variable so that tests can shorten
// its timeouts).
var artifactClient = newArtifactClient(ArtifactDialTimeout, ArtifactTLSTimeout, ArtifactHeaderTimeout, ArtifactDownloadTimeout)

// newArtifactClient is an HTTP client with the given timeouts, honouring the
// proxy environment variables like http.DefaultTransport.
func newArtifactClient(dial, tlsHandshake, header, total time.Duration) *http.Client {
	return &http.Client{
		Timeout: total,
		Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: dial, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   tlsHandshake,
			ResponseHeaderTimeout: header,
			IdleConnTimeout:       90 * time.Second,
			MaxIdleConns:          4,
			ForceAttemptHTTP2:     true,
		},
	}
}

// Fetched is a program ready on disk.
type Fetched struct {
	// ProgramDir holds Pulumi.yaml.
	ProgramDir string
	// Revision is the commit SHA, or the artifact digest, or "local".
	Revision string
	// Tokens are the secrets the fetch obtained rather than was given (a
	// GitHub App installation token), for redaction; set even when the
	// fetch fails after obtaining them.
	Tokens []string
}

// Fetch puts the program under root (a fresh directory) and returns where it is.
func Fetch(ctx context.Context, src Source, root string) (Fetched, error) {
	switch {
	case src.GitURL != "":
		return fetchGit(ctx, src, root)
	case src.ArtifactURL != "":
		return fetchArtifact(ctx, src, root)
	case src.LocalDir != "":
		dir := filepath.Join(src.LocalDir, src.Dir)
		if err := requireProject(dir); err != nil {
			return Fetched{}, sourceUnavailable(err)
		}
		return Fetched{ProgramDir: dir, Revision: "local"}, nil
	}
	return Fetched{}, sourceUnavailable(errors.New("no program source: give a git URL, an artifact URL or a local directory"))
}

func requireProject(dir string) error {
	for _, name := range []string{"Pulumi.yaml", "Pulumi.yml"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return nil
		}
	}
	return fmt.Errorf("no Pulumi.yaml in program directory %q", dir)
}

// subdir joins dir under root, refusing paths that escape it.
func subdir(root, dir string) (string, error) {
	p := filepath.Join(root, dir)
	if p != root && !strings.HasPrefix(p, root+string(filepath.Separator)) {
		return "", fmt.Errorf("program directory %q escapes the source", dir)
	}
	return p, nil
}

func fetchGit(ctx context.Context, src Source, root string) (Fetched, error) {
	auth, err := src.GitAuth.Method(ctx, nil)
	if err != nil {
		err = fmt.Errorf("git credentials for %s: %w", redact.URLCredentials(src.GitURL), err)
		if gitauth.IsPermanent(err) {
			return Fetched{}, sourceUnavailable(err)
		}
		return Fetched{}, err // GitHub unreachable, failing or throttling: may pass
	}
	// out carries, from here on, the installation token GitHub issued.
	var out Fetched
	if basic, ok := auth.(*githttp.BasicAuth); ok && src.GitAuth.GitHubApp != nil {
		out.Tokens = []string{basic.Password}
	}
	if src.GitRef == "" {
		return out, sourceUnavailable(fmt.Errorf("git source %s: no ref (commit or branch) given", redact.URLCredentials(src.GitURL)))
	}
	repo, err := git.PlainInitWithOptions(root, &git.PlainInitOptions{Bare: false})
	if err != nil {
		return out, fmt.Errorf("init checkout: %w", err)
	}
	if _, err := repo.CreateRemote(&gitconfig.RemoteConfig{Name: "origin", URLs: []string{src.GitURL}}); err != nil {
		return out, fmt.Errorf("add remote: %w", err)
	}
	fetch := &git.FetchOptions{RemoteName: "origin", Auth: auth, Tags: git.NoTags}
	if src.GitShallow {
		fetch.Depth = 1
	}
	isSHA := isCommitSHA(src.GitRef)
	branch := strings.TrimPrefix(src.GitRef, "refs/heads/")
	if isSHA {
		fetch.RefSpecs = []gitconfig.RefSpec{gitconfig.RefSpec(src.GitRef + ":refs/remotes/origin/stackflow")}
	} else {
		fetch.RefSpecs = []gitconfig.RefSpec{gitconfig.RefSpec("+refs/heads/" + branch + ":refs/remotes/origin/" + branch)}
	}
	// ctx bounds the fetch in time (the agent's preparation deadline,
	// --prepare-timeout), src.GitLimits its silences and bytes.
	err = gitremote.Fetch(ctx, repo, src.GitURL, fetch, src.GitLimits)
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) && isSHA && !isAuthError(err) && !isLimit(err) {
		// Not every server (or transport) serves a commit by SHA; fetch the
		// branches and find it among them.
		fetch.Depth = 0
		fetch.RefSpecs = []gitconfig.RefSpec{"+refs/heads/*:refs/remotes/origin/*"}
		err = gitremote.Fetch(ctx, repo, src.GitURL, fetch, src.GitLimits)
	}
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		if !isSHA && errors.Is(err, git.NoMatchingRefSpecError{}) {
			return out, sourceUnavailable(fmt.Errorf("branch %q not found in %s", branch, redact.URLCredentials(src.GitURL)))
		}
		err = fmt.Errorf("fetch %s at %s: %w", redact.URLCredentials(src.GitURL), src.GitRef, err)
		if isSourceRefused(err) {
			return out, sourceUnavailable(err)
		}
		return out, err
	}
	var hash plumbing.Hash
	if isSHA {
		hash = plumbing.NewHash(src.GitRef)
		if _, err := repo.CommitObject(hash); err != nil {
			return out, sourceUnavailable(fmt.Errorf("commit %s not found in %s: %w", src.GitRef, redact.URLCredentials(src.GitURL), err))
		}
	} else {
		ref, err := repo.Reference(plumbing.NewRemoteReferenceName("origin", branch), true)
		if err != nil {
			return out, sourceUnavailable(fmt.Errorf("branch %q not found in %s: %w", branch, redact.URLCredentials(src.GitURL), err))
		}
		hash = ref.Hash()
	}
	// Check out on a local branch (named like the tracked one), so the engine
	// records git.head and git.headName in each update's history.
	local := plumbing.NewBranchReferenceName("stackflow")
	if !isSHA {
		local = plumbing.NewBranchReferenceName(branch)
	}
	if err := repo.Storer.SetReference(plumbing.NewHashReference(local, hash)); err != nil {
		return out, err
	}
	wt, err := repo.Worktree()
	if err != nil {
		return out, err
	}
	if err := wt.Checkout(&git.CheckoutOptions{Branch: local, Force: true}); err != nil {
		return out, fmt.Errorf("check out %s: %w", hash, err)
	}
	dir, err := subdir(root, src.Dir)
	if err != nil {
		return out, sourceUnavailable(err)
	}
	if err := requireProject(dir); err != nil {
		return out, sourceUnavailable(fmt.Errorf("%s at %s: %w", redact.URLCredentials(src.GitURL), hash, err))
	}
	out.ProgramDir, out.Revision = dir, hash.String()
	return out, nil
}

// isSourceRefused: the remote answered that the repository does not exist or
// refused the credentials (as opposed to a network failure).
func isSourceRefused(err error) bool {
	return isAuthError(err) || gitauth.IsPermanent(err) || errors.Is(err, transport.ErrRepositoryNotFound) || errors.Is(err, transport.ErrEmptyRemoteRepository) ||
		errors.Is(err, gitremote.ErrInvalidURL) || errors.Is(err, gitremote.ErrUnsupportedScheme)
}

// isLimit: the server ran into a limit (gitremote.LimitError) or the
// preparation's deadline passed — asking again would only wait as long.
func isLimit(err error) bool {
	var le *gitremote.LimitError
	return errors.As(err, &le) || errors.Is(err, context.DeadlineExceeded)
}

func isAuthError(err error) bool {
	return errors.Is(err, transport.ErrAuthenticationRequired) || errors.Is(err, transport.ErrAuthorizationFailed)
}

func isCommitSHA(ref string) bool {
	if len(ref) != 40 {
		return false
	}
	_, err := hex.DecodeString(ref)
	return err == nil
}

// artifactRetryDelays are the waits between download attempts (a variable so
// that tests can shorten them).
var artifactRetryDelays = []time.Duration{time.Second, 2 * time.Second, 4 * time.Second}

// getArtifact GETs an artifact, retrying (after each of artifactRetryDelays)
// what may pass: a failed connection or timeout, 404 (with several operator
// replicas, one whose cache has not seen the Program's new generation yet),
// 429 and 5xx (503: its cache is not readable yet). The response is 200.
// artifactStatusError is an artifact server's answer other than 200.
type artifactStatusError struct {
	code int
	err  error
}

func (e *artifactStatusError) Error() string { return e.err.Error() }
func (e *artifactStatusError) Unwrap() error { return e.err }

func getArtifact(ctx context.Context, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, &artifactStatusError{code: http.StatusNotFound, err: fmt.Errorf("artifact URL: %w", err)}
	}
	for attempt := 0; ; attempt++ {
		resp, err := artifactClient.Do(req)
		if err == nil && resp.StatusCode == http.StatusOK {
			return resp, nil
		}
		retry := true
		if err == nil {
			resp.Body.Close()
			code := resp.StatusCode
			retry = code == http.StatusNotFound || code == http.StatusTooManyRequests || code >= 500
			err = &artifactStatusError{code: code, err: fmt.Errorf("HTTP %s", resp.Status)}
		}
		if !retry || attempt == len(artifactRetryDelays) || ctx.Err() != nil {
			return nil, fmt.Errorf("download artifact %s (%d attempts): %w", redact.URLCredentials(url), attempt+1, err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("download artifact %s: %w", redact.URLCredentials(url), ctx.Err())
		case <-time.After(artifactRetryDelays[attempt]):
		}
	}
}

func fetchArtifact(ctx context.Context, src Source, root string) (Fetched, error) {
	algo, want, ok := strings.Cut(src.ArtifactDigest, ":")
	if !ok || algo != "sha256" || len(want) != 64 {
		return Fetched{}, sourceUnavailable(fmt.Errorf("artifact %s: digest %q is not of the form sha256:<64 hex digits>", redact.URLCredentials(src.ArtifactURL), src.ArtifactDigest))
	}
	limit := src.MaxArtifactBytes
	if limit <= 0 {
		limit = DefaultMaxArtifactBytes
	}
	resp, err := getArtifact(ctx, src.ArtifactURL)
	if err != nil {
		var status *artifactStatusError
		if errors.As(err, &status) {
			switch status.code {
			case http.StatusNotFound, http.StatusGone, http.StatusUnauthorized, http.StatusForbidden:
				// Not there (after the retries a lagging replica gets), or
				// refused: a server error or throttling may pass.
				return Fetched{}, sourceUnavailable(err)
			}
		}
		return Fetched{}, err
	}
	defer resp.Body.Close()
	tmp, err := os.CreateTemp("", "artifact-*.tar.gz")
	if err != nil {
		return Fetched{}, err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return Fetched{}, fmt.Errorf("download artifact %s: %w", redact.URLCredentials(src.ArtifactURL), err)
	}
	if n > limit {
		return Fetched{}, sourceUnavailable(fmt.Errorf("artifact %s is larger than the %d-byte limit", redact.URLCredentials(src.ArtifactURL), limit))
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != strings.ToLower(want) {
		return Fetched{}, sourceUnavailable(fmt.Errorf("artifact %s: digest mismatch: want sha256:%s, got sha256:%s", redact.URLCredentials(src.ArtifactURL), want, got))
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return Fetched{}, err
	}
	if err := untar(tmp, root, limit); err != nil {
		return Fetched{}, sourceUnavailable(fmt.Errorf("unpack artifact %s: %w", redact.URLCredentials(src.ArtifactURL), err))
	}
	dir, err := subdir(root, src.Dir)
	if err != nil {
		return Fetched{}, sourceUnavailable(err)
	}
	if err := requireProject(dir); err != nil {
		return Fetched{}, sourceUnavailable(err)
	}
	return Fetched{ProgramDir: dir, Revision: src.ArtifactDigest}, nil
}

// untar unpacks a gzipped tarball under root, refusing entries that escape it,
// links, and more than limit bytes in total.
func untar(r io.Reader, root string, limit int64) error {
	gz, err := gzip.NewReader(r)
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	var total int64
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		path, err := subdir(root, hdr.Name)
		if err != nil {
			return err
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(path, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			total += hdr.Size
			if total > limit {
				return fmt.Errorf("unpacked size exceeds %d bytes", limit)
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(f, io.LimitReader(tr, hdr.Size))
			f.Close()
			if err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q: unsupported type %c (only files and directories)", hdr.Name, hdr.Typeflag)
		}
	}
}
