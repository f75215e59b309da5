// Package browser drives a real, headless Chromium for tests of web UIs (Argo
// CD's, with Stackflow's health checks and actions), through chromedp and the
// DevTools protocol: no WebDriver, no Node.js.
//
// Chromium is the machine's own: Debian's chromium package, which
// `hack/substrate.sh chromium` installs (part of `hack/substrate.sh all`, so
// make test has it), found by Locate. A Page is one tab of a browser of its
// own, started by Start for one test and closed when the test ends. Its
// methods act as a person does — click a button by the text on it, type
// into a field, wait until the page says something — and fail the test
// when the page does not get there within the Page's timeout, with what it
// showed instead: its URL, title, the start of its visible text, the
// browser console's errors and, with Options.ArtifactDir, a screenshot.
//
// Waits poll the rendered DOM (every 100 ms): visible means rendered and not
// hidden by display, visibility or opacity; text is the page's innerText,
// compared ignoring case and runs of white space (what a person reads, CSS
// text-transform included).
//
// The browser requests nothing but what the page asks for: background
// networking, component and safe-browsing updates, sync, default apps,
// metrics, crash reports and network time are off, Google sign-in's account
// list and on-demand components are pointed at a closed loopback port, and
// the first-run and default-browser dialogs are skipped
// (TestNothingButThePage watches for anything else through a proxy).
//
// It imports chromedp, the standard library and the framework's logbuf.
package browser

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/stackflow-io/stackflow/test/framework/logbuf"
)

// EnvBinary names the variable that overrides where Chromium is (as
// `hack/substrate.sh env` prints it).
const EnvBinary = "STACKFLOW_CHROMIUM"

// Locate finds Chromium: $STACKFLOW_CHROMIUM when set (which must then be an
// executable), else chromium or chromium-browser on PATH. Its error says how
// to install it.
func Locate() (string, error) {
	if bin := os.Getenv(EnvBinary); bin != "" {
		if st, err := os.Stat(bin); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s=%s is not an executable: unset it, or point it at Chromium", EnvBinary, bin)
		}
		return bin, nil
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if bin, err := exec.LookPath(name); err == nil {
			return bin, nil
		}
	}
	return "", errors.New("no Chromium: " + EnvBinary + " is unset and neither chromium nor chromium-browser is on PATH")
}

// LocateOrSkip is Locate for a test. Where Chromium is missing, the test
// fails when apt-get is on the machine (make test's substrate installs
// Chromium there: `hack/substrate.sh chromium` was not run), and is skipped,
// saying how to install Chromium, where there is no apt-get.
func LocateOrSkip(t testing.TB) string {
	t.Helper()
	bin, err := Locate()
	if err == nil {
		return bin
	}
	_, aptErr := exec.LookPath("apt-get")
	skip, msg := missing(err, aptErr == nil)
	if skip {
		t.Skip(msg)
	}
	t.Fatal(msg)
	return ""
}

// missing decides what a test does without Chromium: skip (no apt-get to
// install it with) or fail, and says why and how to install it.
func missing(err error, haveAptGet bool) (skip bool, msg string) {
	if haveAptGet {
		return false, err.Error() + ": run `hack/substrate.sh chromium` (as root: it apt-get installs chromium and fonts-liberation; `make substrate` does it too)"
	}
	return true, err.Error() + ", and no apt-get to install it with: install Chromium with this machine's package manager (or set " + EnvBinary + " to its binary) to run the browser tests"
}

// Options configure Start. The zero Options are a 1400×900 viewport and
// 20 s for every wait.
type Options struct {
	// Binary is Chromium; empty: LocateOrSkip.
	Binary string
	// Width and Height are the viewport's size in CSS pixels (the device
	// scale is 1, so a screenshot has as many pixels); 0: 1400×900.
	Width, Height int
	// Timeout bounds every wait and action of the Page (a navigation, a
	// wait for text, a click waiting for its element); 0: 20 s. Starting the
	// browser has a minute.
	Timeout time.Duration
	// Proxy, when set, is the HTTP proxy for every request but those to
	// loopback addresses: a hostproxy.Proxy's URL, to reach named hosts.
	// It would see whatever the browser sends that Start's flags have not
	// stopped (a later Chromium's new service), so it should serve the
	// test's hosts only, as hostproxy does.
	Proxy string
	// IgnoreCertErrors accepts any TLS certificate (a test server's
	// self-signed one).
	IgnoreCertErrors bool
	// ArtifactDir, when set, receives a screenshot of the viewport when a
	// wait fails (<test name>-<n>.png; the failure names it).
	ArtifactDir string
}

// startTimeout bounds launching Chromium and opening its tab.
const startTimeout = time.Minute

// Page is a tab of a headless Chromium started for one test. Its methods
// fail the test (through the testing.TB it was started with, or given to
// For) and must be called from that test's goroutine; a Page is not for
// concurrent use.
type Page struct {
	*browser
	t testing.TB
	// timeout bounds each wait and action.
	timeout time.Duration
}

// browser is what the Pages of one Start share.
type browser struct {
	// ctx is the tab's chromedp context, without a deadline (each action
	// derives one).
	ctx    context.Context
	opts   Options
	output *logbuf.Buffer

	mu       sync.Mutex
	console  []chromedp.ConsoleMessage
	failures int
}

// Start launches headless Chromium with one tab, and closes it when the test
// ends (logging the console's errors, if any, then). Chromium runs with a
// user data directory of its own in the temporary directory (removed at the
// end), without the sandbox when root (which the sandbox refuses), without
// the GPU, and with shared memory in the temporary directory rather than
// /dev/shm (64 MB in a default container).
func Start(t testing.TB, opts Options) *Page {
	t.Helper()
	if opts.Binary == "" {
		opts.Binary = LocateOrSkip(t)
	}
	if opts.Width == 0 || opts.Height == 0 {
		opts.Width, opts.Height = 1400, 900
	}
	if opts.Timeout == 0 {
		opts.Timeout = 20 * time.Second
	}
	b := &browser{opts: opts, output: &logbuf.Buffer{}}
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), allocatorOptions(opts, b.output)...)
	ctx, cancelTab := chromedp.NewContext(allocCtx)
	b.ctx = ctx
	t.Cleanup(func() {
		if errs := b.consoleErrors(); len(errs) > 0 {
			t.Logf("browser console errors:\n  %s", strings.Join(errs, "\n  "))
		}
		cancelTab()
		cancelAlloc()
	})

	// The first action launches the browser, whose life is then bound to
	// the context it ran with: ctx, without a deadline; the wait for it is
	// bounded here instead.
	started := make(chan error, 1)
	go func() { started <- chromedp.Do(ctx) }()
	select {
	case err := <-started:
		if err != nil {
			t.Fatalf("start %s: %v\n%s", opts.Binary, err, tail(b.output.String(), 2000))
		}
	case <-time.After(startTimeout):
		cancelTab()
		t.Fatalf("start %s: no tab after %s\n%s", opts.Binary, startTimeout, tail(b.output.String(), 2000))
	}
	go b.collectConsole(chromedp.Console(ctx))
	p := &Page{browser: b, t: t, timeout: opts.Timeout}
	// The headless window keeps room for a toolbar it does not draw: the
	// viewport is set to the size asked for.
	p.check(p.do("set the viewport", chromedp.EmulateViewport(int64(opts.Width), int64(opts.Height))))
	return p
}

// allocatorOptions are chromedp's defaults (headless; background
// networking, sync, default apps, extensions, crash reports, safe-browsing
// updates off; no first run, no default-browser check; shared memory
// outside /dev/shm) and what Start adds.
func allocatorOptions(opts Options, output *logbuf.Buffer) []chromedp.ExecAllocatorOption {
	o := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(opts.Binary),
		chromedp.WindowSize(opts.Width, opts.Height),
		chromedp.DisableGPU,
		chromedp.CombinedOutput(output),
		// The same pictures on every machine: device scale 1 (and
		// chromedp's sRGB).
		chromedp.Flag("force-device-scale-factor", "1"),

		// Nothing phones home. Chromium 156 still called Google with
		// chromedp's defaults alone (TestNothingButThePage, through a
		// proxy): the network time service (clients2.google.com), the
		// account list of Google sign-in (accounts.google.com/ListAccounts)
		// and an on-demand component, the on-device AI models' manifest
		// (update.googleapis.com), which --disable-component-update does
		// not stop. The first is a feature turned off; the other two are
		// pointed at a closed loopback port.
		chromedp.Flag("disable-features", "Translate,BlinkGenPropertyTrees,NetworkTimeServiceQuerying,"+
			"OptimizationHints,MediaRouter,DialMediaRouteProvider,AutofillServerCommunication,"+
			"CertificateTransparencyComponentUpdater,InterestFeedContentSuggestions"),
		chromedp.Flag("gaia-url", "http://127.0.0.1:9/"),
		chromedp.Flag("component-updater", "url-source=http://127.0.0.1:9/"),
		// The usual quiet set besides (Google's chrome-launcher list):
		// no component updates, domain reliability reports, hyperlink
		// auditing pings, field trials or search engine choice.
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-domain-reliability", true),
		chromedp.Flag("no-pings", true),
		chromedp.Flag("no-service-autorun", true),
		chromedp.Flag("disable-field-trial-config", true),
		chromedp.Flag("disable-search-engine-choice-screen", true),
	)
	if os.Geteuid() == 0 {
		// Chromium's sandbox refuses to run as root (containers, CI).
		o = append(o, chromedp.NoSandbox)
	}
	if opts.Proxy != "" {
		o = append(o, chromedp.ProxyServer(opts.Proxy))
	}
	if opts.IgnoreCertErrors {
		o = append(o, chromedp.IgnoreCertErrors)
	}
	return o
}

// collectConsole keeps the tab's console messages until it closes.
func (b *browser) collectConsole(messages iter.Seq2[chromedp.ConsoleMessage, error]) {
	for m, err := range messages {
		if err != nil {
			return
		}
		b.mu.Lock()
		b.console = append(b.console, m)
		b.mu.Unlock()
	}
}

// consoleErrors formats the console's errors: console.error calls, uncaught
// exceptions and the browser's own errors (a resource that failed to load).
func (b *browser) consoleErrors() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []string
	for _, m := range b.console {
		if m.Type != chromedp.ConsoleError && m.Type != chromedp.ConsoleException {
			continue
		}
		s := m.String()
		if m.URL != "" {
			s += fmt.Sprintf(" (%s:%d)", m.URL, m.Line+1)
		}
		errs = append(errs, s)
	}
	return errs
}

// For is the same tab reporting failures to t (a subtest's).
func (p *Page) For(t testing.TB) *Page {
	q := *p
	q.t = t
	return &q
}

// WithTimeout is the same tab with another timeout for its waits and
// actions.
func (p *Page) WithTimeout(d time.Duration) *Page {
	q := *p
	q.timeout = d
	return &q
}

// Context is the tab's chromedp context (without a deadline), for what the
// Page has no method for: chromedp.Run(p.Context(), …).
func (p *Page) Context() context.Context { return p.ctx }

// ConsoleErrors are the console's errors so far: console.error calls,
// uncaught exceptions and the browser's own (a resource that failed to
// load), each as "type: text (url:line)".
func (p *Page) ConsoleErrors() []string { return p.consoleErrors() }

// tail is the end of s, at most n bytes.
func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}
