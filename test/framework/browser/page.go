package browser

import (
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"image/png"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/chromedp/chromedp"
)

// pageJS holds the helpers every query evaluates in the page.
//
//go:embed page.js
var pageJS string

// pollInterval is how often a wait looks at the page again.
const pollInterval = 100 * time.Millisecond

// Navigate loads url and waits for its load event.
func (p *Page) Navigate(url string) {
	p.t.Helper()
	p.check(p.do("navigate to "+url, chromedp.Navigate(url)))
}

// URL is the page's current URL.
func (p *Page) URL() string {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	defer cancel()
	u, err := chromedp.Run(ctx, chromedp.Location())
	p.check(p.failure("read the URL", err))
	return u
}

// WaitVisible waits until an element matching the CSS selector is visible.
func (p *Page) WaitVisible(selector string) {
	p.t.Helper()
	p.check(p.waitVisible(selector))
}

func (p *Page) waitVisible(selector string) error {
	_, err := poll[bool](p, fmt.Sprintf("wait for %s to be visible", selector), call("bySelector", selector, false)+" !== null",
		call("whySelector", selector, false))
	return err
}

// WaitHidden waits until no element matching the CSS selector is visible
// (e.g. a closing panel, once its transition has ended).
func (p *Page) WaitHidden(selector string) {
	p.t.Helper()
	_, err := poll[bool](p, fmt.Sprintf("wait for %s to be hidden", selector), call("bySelector", selector, false)+" === null",
		call("whySelector", selector, false))
	p.check(err)
}

// WaitText waits until the visible text of an element matching the CSS
// selector, or of the whole page when selector is empty, holds text
// (ignoring case and runs of white space).
func (p *Page) WaitText(selector, text string) {
	p.t.Helper()
	p.check(p.waitText(selector, text))
}

func (p *Page) waitText(selector, text string) error {
	where := "the page"
	if selector != "" {
		where = selector
	}
	_, err := poll[bool](p, fmt.Sprintf("wait for %q in %s", text, where), call("hasText", selector, text), "")
	return err
}

// HasText reports whether, now, the visible text of an element matching the
// CSS selector (the whole page when selector is empty) holds text, as
// WaitText means it, without waiting.
func (p *Page) HasText(selector, text string) bool {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	defer cancel()
	ok, err := chromedp.Run(ctx, chromedp.Evaluate[*bool](call("hasText", selector, text)))
	p.check(p.failure(fmt.Sprintf("look for %q in %s", text, selector), err, ""))
	return ok != nil && *ok
}

// Text is the visible text of the first visible element matching the CSS
// selector (white space collapsed), waiting for one with some text.
func (p *Page) Text(selector string) string {
	p.t.Helper()
	s, err := poll[string](p, "read the text of "+selector, call("textOf", selector), call("whySelector", selector, false))
	p.check(err)
	return s
}

// Click clicks, with the mouse, the first element matching the CSS selector
// that is visible, enabled and not covered by another, waiting for one.
func (p *Page) Click(selector string) {
	p.t.Helper()
	p.check(p.click("click "+selector, call("bySelector", selector, true), call("whySelector", selector, true)))
}

// ClickText clicks, with the mouse, the element a person would click to
// press what reads text: among the visible elements whose text (or an
// input button's value, or an icon's aria-label or title) is text, ignoring
// case and runs of white space, each taken as the nearest button, link,
// menu item or other clickable element around it, the first in document
// order that is enabled and not covered, preferring clickable ones, then
// the innermost. It waits for one.
func (p *Page) ClickText(text string) {
	p.t.Helper()
	p.check(p.clickText(text))
}

func (p *Page) clickText(text string) error {
	return p.click(fmt.Sprintf("click %q", text), call("byText", text, true), call("whyText", text, true))
}

func (p *Page) click(what, find, why string) error {
	return p.failure(what, p.run(chromedp.Click(chromedp.JSPath(find))), why)
}

// SendKeys types keys into the first visible, enabled element matching the
// CSS selector, key by key (focusing it first), as a person types; "\n" is
// Enter, and chromedp/kb names other keys.
func (p *Page) SendKeys(selector, keys string) {
	p.t.Helper()
	p.check(p.failure("type into "+selector, p.run(chromedp.SendKeys(chromedp.JSPath(call("bySelector", selector, true)), keys)),
		call("whySelector", selector, true)))
}

// SetValue sets the value of the first visible, enabled input, textarea or
// select matching the CSS selector, as if typed in one go: the input and
// change events follow, so that the page's framework (React) sees it.
func (p *Page) SetValue(selector, value string) {
	p.t.Helper()
	_, err := poll[bool](p, "set the value of "+selector, call("setValue", selector, value), call("whySelector", selector, true))
	p.check(err)
}

// Screenshot writes a PNG of the viewport (Options.Width × Height pixels)
// to path, making its directory.
func (p *Page) Screenshot(path string) {
	p.t.Helper()
	p.check(p.failure("screenshot the viewport", p.screenshot(path, chromedp.CaptureScreenshot())))
}

// ScreenshotElement writes a PNG of the first visible element matching the
// CSS selector to path, waiting for one.
func (p *Page) ScreenshotElement(selector, path string) {
	p.t.Helper()
	find := chromedp.JSPath(call("bySelector", selector, false))
	p.check(p.failure("screenshot "+selector, p.screenshot(path, chromedp.Screenshot(find)), call("whySelector", selector, false)))
}

func (p *Page) screenshot(path string, shot chromedp.Action[[]byte]) error {
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	defer cancel()
	b, err := chromedp.Run(ctx, shot)
	if err != nil {
		return err
	}
	if _, err := png.DecodeConfig(strings.NewReader(string(b))); err != nil {
		return fmt.Errorf("screenshot is not a PNG: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// do runs actions with the Page's timeout, failing with the page's state.
func (p *Page) do(what string, actions ...chromedp.Action[chromedp.Void]) error {
	return p.failure(what, p.run(actions...), "")
}

// run runs actions with the Page's timeout.
func (p *Page) run(actions ...chromedp.Action[chromedp.Void]) error {
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	defer cancel()
	return chromedp.Do(ctx, actions...)
}

// check fails the test on err.
func (p *Page) check(err error) {
	p.t.Helper()
	if err != nil {
		p.t.Fatal(err)
	}
}

// call is the JavaScript calling the page.js helper fn with args.
func call(fn string, args ...any) string {
	if args == nil {
		args = []any{}
	}
	b, err := json.Marshal(args)
	if err != nil {
		panic(err) // strings and booleans only
	}
	return fmt.Sprintf("(() => {\n%s\nreturn %s(...%s);\n})()", pageJS, fn, b)
}

// poll evaluates expr every pollInterval until it gives a value that is
// neither null nor false, within the Page's timeout. A JavaScript exception
// (an invalid selector) ends it at once; a failed evaluation (the page
// navigating away) is tried again. why, when set, is the page.js call that
// says what the page has instead, for the failure.
func poll[T comparable](p *Page, what, expr, why string) (T, error) {
	ctx, cancel := context.WithTimeout(p.ctx, p.timeout)
	defer cancel()
	var zero T
	var last error
	for {
		v, err := chromedp.Run(ctx, chromedp.Evaluate[*T](expr))
		var exc *chromedp.ExceptionError
		switch {
		case errors.As(err, &exc):
			return zero, p.failure(what, err, "")
		case err == nil && v != nil && *v != zero:
			return *v, nil
		case ctx.Err() == nil:
			last = err // nil: the page answered, not yet
		}
		select {
		case <-ctx.Done():
			if last == nil {
				last = ctx.Err()
			}
			return zero, p.failure(what, last, why)
		case <-time.After(pollInterval):
		}
	}
}

// snippet is how much of the page's visible text a failure shows.
const snippet = 1500

// failure is nil for a nil err, else an error saying what failed, after how
// long, and what the page shows: its URL, title and visible text, why (a
// page.js call's answer), the console's last errors, and a screenshot in
// Options.ArtifactDir.
func (p *Page) failure(what string, err error, why ...string) error {
	if err == nil {
		return nil
	}
	var b strings.Builder
	if errors.Is(err, context.DeadlineExceeded) {
		fmt.Fprintf(&b, "browser: %s: not done within %s", what, p.timeout)
	} else {
		fmt.Fprintf(&b, "browser: %s: %v", what, err)
	}
	// The page is read with a deadline of its own: the action's has passed.
	ctx, cancel := context.WithTimeout(p.ctx, 5*time.Second)
	defer cancel()
	if len(why) > 0 && why[0] != "" {
		if s, err := chromedp.Run(ctx, chromedp.Evaluate[string](why[0])); err == nil {
			fmt.Fprintf(&b, "\n  found: %s", s)
		}
	}
	st, err := chromedp.Run(ctx, chromedp.Evaluate[struct{ URL, Title, Text string }](call("state")))
	if err != nil {
		fmt.Fprintf(&b, "\n  (the page could not be read: %v)", err)
	} else {
		text := st.Text
		if len(text) > snippet {
			text = text[:snippet] + fmt.Sprintf("… (%d characters in all)", len(st.Text))
		}
		fmt.Fprintf(&b, "\n  url: %s\n  title: %q\n  visible text: %s", st.URL, st.Title, text)
	}
	if errs := p.consoleErrors(); len(errs) > 0 {
		if len(errs) > 5 {
			errs = errs[len(errs)-5:]
		}
		fmt.Fprintf(&b, "\n  console errors (last %d):\n    %s", len(errs), strings.Join(errs, "\n    "))
	}
	if dir := p.opts.ArtifactDir; dir != "" {
		p.mu.Lock()
		p.failures++
		n := p.failures
		p.mu.Unlock()
		path := filepath.Join(dir, fmt.Sprintf("%s-%d.png", fileSafe.ReplaceAllString(p.t.Name(), "_"), n))
		if err := p.screenshot(path, chromedp.CaptureScreenshot()); err == nil {
			fmt.Fprintf(&b, "\n  screenshot: %s", path)
		}
	}
	return errors.New(b.String())
}

// fileSafe matches what a test name may hold that a file name should not.
var fileSafe = regexp.MustCompile(`[^A-Za-z0-9._-]+`)
