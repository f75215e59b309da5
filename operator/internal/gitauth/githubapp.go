package gitauth

import (
	"context"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"
	"unicode"

	"github.com/golang-jwt/jwt/v4"
)

// GitHub's token exchange, as documented for "Create an installation access
// token for an app".
const (
	githubAccept     = "application/vnd.github+json"
	githubAPIVersion = "2022-11-28"
	// AppTokenUser is the user name an installation token is sent with.
	AppTokenUser = "x-access-token"
	// RefreshBefore: a cached installation token is exchanged again this
	// long before it expires, so no clone starts with a token about to lapse.
	RefreshBefore = 5 * time.Minute
	// jwtBackdate and jwtLifetime: GitHub recommends an issue time 60 s in
	// the past against clock drift, and accepts at most 10 minutes.
	jwtBackdate = 60 * time.Second
	jwtLifetime = 9 * time.Minute
)

// validate checks what must hold before a request is made: the installation
// ID becomes part of a URL path, and the API URL is where the request goes
// (one of hosts, besides GitHub.com's API).
func (a GitHubApp) validate(hosts []string) error {
	if err := a.validateFields(); err != nil {
		return err
	}
	return CheckAPIURL(a.APIURL, hosts)
}

// validateFields checks the App's fields alone: the IDs, and the apiURL's
// form (its host is checked where the allowed hosts are known, before the
// exchange).
func (a GitHubApp) validateFields() error {
	if a.AppID == "" {
		return &CredentialsError{msg: "githubApp.appID is empty"}
	}
	if a.InstallationID == "" || strings.Trim(a.InstallationID, "0123456789") != "" {
		return &CredentialsError{msg: "githubApp.installationID must be the installation's numeric ID"}
	}
	_, err := apiURLForm(a.APIURL)
	return err
}

// APIURLRule says what CheckAPIURL, and the CRDs' validation of
// githubApp.apiURL, accept.
const APIURLRule = "githubApp.apiURL must be https://<host>[:<port>] with an empty path or a path ending in /api/v3 (GitHub Enterprise Server), and no user info, query or fragment"

// APIURLPattern is the form of an acceptable apiURL (a host name or IPv4
// address, an optional port, a path that is empty or ends in /api/v3 with
// no "." segment and no escapes), the same regular expression as the CRDs'
// validation rule (TestAPIURLPatternIsTheCRDs).
const APIURLPattern = `^https://[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?([.][A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*(:[0-9]{1,5})?((/[A-Za-z0-9_~-][A-Za-z0-9._~-]*)*/api/v3)?/?$`

var apiURLPattern = regexp.MustCompile(APIURLPattern)

// DefaultGitHubAPIHost is GitHub.com's API host, which an apiURL may
// always name.
const DefaultGitHubAPIHost = "api.github.com"

// CheckAPIURL checks a GitHub App's apiURL before anything is sent to it:
// the token exchange POSTs a JWT there and reports part of the answer, so
// whoever writes a Stack must not be able to point it at any URL the
// operator or an agent can reach. It must be https with a host, no user
// info, query or fragment (a "?" or "#" would cut off the path the operator
// appends), and a path that is empty or ends in /api/v3 (APIURLPattern). Its
// host must be GitHub.com's API or one of hosts (the operator's and agents'
// --github-api-hosts, for GitHub Enterprise Server): an entry without a port
// allows the host on port 443 only. An empty apiURL means GitHub.com's API.
// The error names the field and never repeats the URL's user info.
func CheckAPIURL(raw string, hosts []string) error {
	u, err := apiURLForm(raw)
	if err != nil || u == nil {
		return err
	}
	if !hostAllowed(u, append([]string{DefaultGitHubAPIHost}, hosts...)) {
		configured := strings.Join(hosts, ", ")
		if configured == "" {
			configured = "none"
		}
		return &CredentialsError{msg: fmt.Sprintf("githubApp.apiURL: host %s is not one Stackflow may reach for GitHub Apps: %s, and the GitHub Enterprise Server hosts of --github-api-hosts (%s)",
			u.Host, DefaultGitHubAPIHost, configured)}
	}
	return nil
}

// apiURLForm parses an apiURL of the acceptable form (APIURLPattern); nil
// for an empty one.
func apiURLForm(raw string) (*url.URL, error) {
	if raw == "" {
		return nil, nil
	}
	if !apiURLPattern.MatchString(raw) {
		return nil, &CredentialsError{msg: APIURLRule + apiURLHint(raw)}
	}
	u, err := url.Parse(raw)
	if err != nil { // the pattern admits only parsable URLs
		return nil, &CredentialsError{msg: APIURLRule}
	}
	return u, nil
}

// apiURLHint says what is wrong with a refused apiURL, when it can tell.
func apiURLHint(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return ""
	case u.User != nil:
		return "; remove the user info"
	case u.Scheme != "https":
		return fmt.Sprintf("; use https, not %q", u.Scheme)
	case u.RawQuery != "" || u.ForceQuery || u.Fragment != "" || strings.ContainsAny(raw, "?#"):
		return "; remove the query or fragment"
	case u.Host != "" && u.EscapedPath() != "" && u.EscapedPath() != "/":
		return fmt.Sprintf("; its path is %q", u.EscapedPath())
	}
	return ""
}

// hostAllowed: u's host is on the list (names compared case-insensitively;
// an entry without a port stands for port 443).
func hostAllowed(u *url.URL, hosts []string) bool {
	port := u.Port()
	if port == "" {
		port = "443"
	}
	for _, h := range hosts {
		name, hport := h, "443"
		if n, p, err := net.SplitHostPort(h); err == nil {
			name, hport = n, p
		}
		if strings.EqualFold(strings.Trim(name, "[]"), u.Hostname()) && hport == port {
			return true
		}
	}
	return false
}

func (a GitHubApp) api() string {
	if a.APIURL == "" {
		return DefaultGitHubAPI
	}
	return strings.TrimSuffix(a.APIURL, "/")
}

// TokenError is GitHub's refusal to issue an installation token. Its
// message is GitHub's (which never echoes the JWT) with a hint naming the
// field to check.
type TokenError struct {
	// Status is the HTTP status GitHub answered.
	Status int
	msg    string
}

func (e *TokenError) Error() string { return e.msg }

// Permanent: the App's credentials or installation are wrong (401, 403,
// 404, 422); a server error or throttling may pass.
func (e *TokenError) Permanent() bool {
	switch e.Status {
	case http.StatusUnauthorized, http.StatusForbidden, http.StatusNotFound, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

// AppTokens exchanges GitHub App credentials for installation tokens and
// caches each until RefreshBefore its expiry. The zero value is ready; one
// AppTokens serves a process (DefaultAppTokens).
type AppTokens struct {
	// Client makes the exchange; default a client with a 30 s timeout that
	// honours the proxy environment variables.
	Client *http.Client
	// APIHosts are the hosts besides GitHub.com's API an App's apiURL may
	// name (CheckAPIURL): the operator's and agents' --github-api-hosts.
	APIHosts []string
	// Now is the clock; default time.Now.
	Now func() time.Time

	mu    sync.Mutex
	cache map[string]appToken
}

// DefaultAppTokens serves Credentials.Method when given no AppTokens.
var DefaultAppTokens = &AppTokens{}

type appToken struct {
	token   string
	expires time.Time
}

// reusable decides whether a cached token still serves at now: it must
// outlive now by more than RefreshBefore.
func reusable(t appToken, now time.Time) bool {
	return t.token != "" && t.expires.Sub(now) > RefreshBefore
}

func (a *AppTokens) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

// Token returns an installation token for app, from the cache or a new
// exchange. Concurrent first calls may both exchange (harmless: GitHub
// issues several tokens); the lock is not held across the request.
func (a *AppTokens) Token(ctx context.Context, app GitHubApp) (string, error) {
	if err := app.validate(a.APIHosts); err != nil {
		return "", err
	}
	key := Credentials{GitHubApp: &app}.Fingerprint()
	a.mu.Lock()
	cached, ok := a.cache[key]
	if ok && reusable(cached, a.now()) {
		a.mu.Unlock()
		return cached.token, nil
	}
	a.mu.Unlock()

	tok, err := a.exchange(ctx, app)
	if err != nil {
		return "", err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cache == nil {
		a.cache = map[string]appToken{}
	}
	now := a.now()
	for k, t := range a.cache { // rotated keys and removed Stacks
		if !reusable(t, now) {
			delete(a.cache, k)
		}
	}
	a.cache[key] = tok
	return tok.token, nil
}

// jwtFor is the App's JWT at now: RS256, issuer the App ID, issued 60 s ago,
// expiring within 10 minutes.
func jwtFor(app GitHubApp, now time.Time) (string, error) {
	key, err := parseRSAKey(app.PrivateKey)
	if err != nil {
		return "", err
	}
	claims := jwt.RegisteredClaims{
		Issuer:    app.AppID,
		IssuedAt:  jwt.NewNumericDate(now.Add(-jwtBackdate)),
		ExpiresAt: jwt.NewNumericDate(now.Add(jwtLifetime)),
	}
	signed, err := jwt.NewWithClaims(jwt.SigningMethodRS256, claims).SignedString(key)
	if err != nil {
		return "", &CredentialsError{msg: "sign the GitHub App JWT with githubApp.privateKey failed"}
	}
	return signed, nil
}

func parseRSAKey(pem string) (*rsa.PrivateKey, error) {
	key, err := jwt.ParseRSAPrivateKeyFromPEM([]byte(pem))
	if err != nil {
		// The parser's message is generic, but say it in our words so that
		// nothing of the key can ever reach a status.
		return nil, &CredentialsError{msg: "githubApp.privateKey is not a PEM-encoded RSA private key (download one from the App's settings)"}
	}
	return key, nil
}

// defaultAppClient follows no redirect: the exchange goes to the URL
// CheckAPIURL accepted and nowhere else (GitHub does not redirect it).
var defaultAppClient = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: http.ProxyFromEnvironment},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func (a *AppTokens) exchange(ctx context.Context, app GitHubApp) (appToken, error) {
	signed, err := jwtFor(app, a.now())
	if err != nil {
		return appToken{}, err
	}
	endpoint := app.api() + "/app/installations/" + app.InstallationID + "/access_tokens"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, endpoint, nil)
	if err != nil {
		return appToken{}, &CredentialsError{msg: fmt.Sprintf("githubApp.apiURL %q: %v", app.APIURL, err)}
	}
	req.Header.Set("Authorization", "Bearer "+signed)
	req.Header.Set("Accept", githubAccept)
	req.Header.Set("X-GitHub-Api-Version", githubAPIVersion)
	client := a.Client
	if client == nil {
		client = defaultAppClient
	}
	resp, err := client.Do(req)
	if err != nil {
		return appToken{}, unreachable(ctx, app)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	if err != nil {
		return appToken{}, unreachable(ctx, app)
	}
	if resp.StatusCode != http.StatusCreated {
		return appToken{}, tokenError(resp.StatusCode, body, app, signed)
	}
	var out struct {
		Token     string    `json:"token"`
		ExpiresAt time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal(body, &out); err != nil || out.Token == "" || out.ExpiresAt.IsZero() {
		return appToken{}, fmt.Errorf("GitHub App installation token from %s: the response has no token and expires_at", app.api())
	}
	return appToken{token: out.Token, expires: out.ExpiresAt}, nil
}

// unreachable is the one error of an exchange that got no whole answer,
// whatever happened on the way (no route, refused, reset, timed out, a bad
// certificate): a Stack author who picks the apiURL learns nothing more
// from it about what listens where. The caller's own context ending is
// said as such.
func unreachable(ctx context.Context, app GitHubApp) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("GitHub App installation token: %w", err)
	}
	return fmt.Errorf("GitHub App installation token: no answer from %s", app.api())
}

// maxRemoteMessage bounds the part of the API's answer a TokenError
// repeats.
const maxRemoteMessage = 200

// tokenError explains the API's refusal: the "message" of its JSON answer,
// made fit for a status (remoteMessage), and what to check. Nothing else of
// the answer is repeated: the apiURL is the Stack author's to choose, within
// CheckAPIURL's limits, and the answer is theirs too.
func tokenError(status int, body []byte, app GitHubApp, jwt string) error {
	var gh struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(body, &gh)
	msg := remoteMessage(gh.Message, jwt)
	if msg == "" {
		msg = http.StatusText(status)
	}
	hint := ""
	switch status {
	case http.StatusUnauthorized:
		hint = "; check githubApp.appID and githubApp.privateKey (the App's ID and a current key of it)"
	case http.StatusNotFound:
		hint = fmt.Sprintf("; installation %s is not an installation of App %s: check githubApp.installationID", app.InstallationID, app.AppID)
	case http.StatusForbidden, http.StatusUnprocessableEntity:
		hint = "; check the App's permissions and that the installation is not suspended"
	}
	return &TokenError{Status: status, msg: fmt.Sprintf("GitHub App installation token: %s answered %d: %s%s", app.api(), status, msg, hint)}
}

// remoteMessage makes a message from a remote answer fit for a status: the
// secrets (the JWT sent) masked, one line of printable characters, at most
// maxRemoteMessage of them.
func remoteMessage(msg string, secrets ...string) string {
	for _, s := range secrets {
		if s != "" {
			msg = strings.ReplaceAll(msg, s, "[redacted]")
		}
	}
	msg = strings.Join(strings.FieldsFunc(msg, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }), " ")
	if r := []rune(msg); len(r) > maxRemoteMessage {
		msg = string(r[:maxRemoteMessage]) + "…"
	}
	return msg
}

// IsPermanent reports an authentication error that retrying will not fix:
// credentials that cannot be used (CredentialsError), SSH host key
// verification failing or unconfigured (HostKeyError, ErrNoKnownHosts), an
// SSH server refusing the key, or GitHub refusing the App
// (TokenError.Permanent).
func IsPermanent(err error) bool {
	var cred *CredentialsError
	var host *HostKeyError
	var tok *TokenError
	return errors.As(err, &cred) || errors.As(err, &host) || errors.Is(err, ErrNoKnownHosts) ||
		(errors.As(err, &tok) && tok.Permanent()) ||
		// x/crypto/ssh has no error type for it, only this message.
		(err != nil && strings.Contains(err.Error(), "ssh: unable to authenticate"))
}
