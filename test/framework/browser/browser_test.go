package browser

import (
	"bytes"
	"fmt"
	"image"
	"image/png"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// appHTML is a small single-page app: a login form whose button is enabled
// once both fields are filled (by input events, as React sees them), which
// reveals a menu sliding in (covered for a moment by a fading overlay); a
// line appearing 500 ms after load; text that is in the DOM but hidden; a
// fixed-size badge; and an error on the console.
const appHTML = `<!doctype html>
<html><head><title>Harness test app</title><link rel="icon" href="data:,">
<style>
  body { font-family: sans-serif; margin: 0; padding: 16px; }
  #menu { display: none; }
  #menu li { cursor: pointer; list-style: none; padding: 4px; }
  .upper { text-transform: uppercase; }
  #overlay { position: fixed; inset: 0; background: rgba(0,0,0,.2); }
  #badge { width: 200px; height: 100px; background: #2a6; color: white; }
</style></head>
<body>
  <h1>Welcome to the harness</h1>
  <form id="login" onsubmit="return false">
    <input id="user" placeholder="user">
    <input id="password" type="password" placeholder="password">
    <button id="submit" disabled><span class="icon">&#9654;</span> <span>Log in</span></button>
  </form>
  <ul id="menu">
    <li role="menuitem" class="upper">Applications</li>
    <li><span>Settings</span></li>
  </ul>
  <p id="status"></p>
  <div id="secret" style="display:none">Hidden but present</div>
  <div id="badge">badge</div>
  <script>
    const user = document.getElementById('user'), password = document.getElementById('password');
    const submit = document.getElementById('submit');
    for (const e of [user, password]) e.addEventListener('input', () => { submit.disabled = !(user.value && password.value); });
    submit.addEventListener('click', () => {
      document.getElementById('login').style.display = 'none';
      document.getElementById('menu').style.display = 'block';
      document.getElementById('status').textContent = 'Signed in as ' + user.value;
      // An overlay covers the menu for 300 ms, as a modal's backdrop fades.
      const o = document.createElement('div'); o.id = 'overlay'; document.body.append(o);
      setTimeout(() => o.remove(), 300);
    });
    for (const li of document.querySelectorAll('#menu li')) li.addEventListener('click', () => {
      document.querySelector('h1').textContent = li.textContent.trim() + ' page';
    });
    setTimeout(() => {
      const late = document.createElement('div'); late.id = 'late'; late.textContent = 'Arrived late';
      document.body.append(late);
    }, 500);
    console.error('boom from the page');
  </script>
</body></html>`

// app serves appHTML.
func app(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, appHTML)
	}))
	t.Cleanup(srv.Close)
	return srv
}

// TestPage drives one browser through the app, a subtest each (as a UI
// suite shares a browser: Page.For).
func TestPage(t *testing.T) {
	srv := app(t)
	art := t.TempDir()
	shared := Start(t, Options{Width: 1280, Height: 800, Timeout: 5 * time.Second, ArtifactDir: art})

	// Logging in and picking a menu item as a person does: typing, then
	// clicking by the visible text (the login button enabled only once both
	// fields are filled; the menu under an overlay at first).
	t.Run("LoginByText", func(t *testing.T) {
		p := shared.For(t)
		p.Navigate(srv.URL)
		p.WaitText("h1", "welcome")
		if !p.HasText("h1", "WELCOME") || p.HasText("h1", "Signed in") {
			t.Error("HasText does not say what the heading holds")
		}
		p.SendKeys("#user", "ada")
		p.SetValue("#password", "secret")
		p.ClickText("log in")
		p.WaitText("", "Signed in as ada")
		// Rendered upper-case: a person reads APPLICATIONS.
		if got := p.Text("#menu li[role=menuitem]"); got != "APPLICATIONS" {
			t.Errorf("menu item reads %q, want APPLICATIONS", got)
		}
		p.ClickText("Settings")
		p.WaitText("h1", "Settings page")
		p.ClickText("APPLICATIONS")
		if got := p.Text("h1"); got != "Applications page" {
			t.Errorf("heading %q after clicking APPLICATIONS", got)
		}
		if got := p.URL(); got != srv.URL+"/" {
			t.Errorf("URL = %s, want %s/", got, srv.URL)
		}
		errs := p.ConsoleErrors()
		for _, e := range errs {
			if !strings.Contains(e, "boom from the page") {
				t.Errorf("console error %q is not the page's", e)
			}
		}
		if len(errs) == 0 {
			t.Error("the page's console error was not collected")
		}
	})

	// Waits see an element added 500 ms after load.
	t.Run("WaitsForDelayedText", func(t *testing.T) {
		p := shared.For(t)
		p.Navigate(srv.URL)
		start := time.Now()
		p.WaitText("", "arrived LATE")
		if d := time.Since(start); d < 300*time.Millisecond {
			t.Errorf("the late text was found after %s, before it was added", d)
		}
		p.WaitVisible("#late")
	})

	// A wait for text that never appears (or is in the DOM but hidden) fails
	// within its deadline, saying what the page showed; clicking what is
	// disabled fails the test saying so.
	t.Run("WaitFailsWithWhatThePageShows", func(t *testing.T) {
		p := shared.For(t).WithTimeout(1500 * time.Millisecond)
		p.Navigate(srv.URL)
		start := time.Now()
		err := p.waitText("", "Hidden but present")
		took := time.Since(start)
		if err == nil {
			t.Fatal("waitText found text that is not visible")
		}
		if took < 1500*time.Millisecond || took > 8*time.Second {
			t.Errorf("the wait failed after %s, want its 1.5 s deadline (and the failure's report)", took)
		}
		shot := filepath.Join(art, "TestPage_WaitFailsWithWhatThePageShows-1.png")
		for _, want := range []string{
			`wait for "Hidden but present" in the page: not done within 1.5s`,
			"url: " + srv.URL + "/",
			`title: "Harness test app"`,
			"visible text: Welcome to the harness",
			"error: boom from the page",
			"screenshot: " + shot,
		} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("the failure lacks %q:\n%v", want, err)
			}
		}
		if _, shown, _ := strings.Cut(err.Error(), "visible text:"); strings.Contains(shown, "Hidden but present") {
			t.Errorf("the failure shows hidden text as visible:\n%v", err)
		}
		if _, err := os.Stat(shot); err != nil {
			t.Errorf("no screenshot of the failure: %v", err)
		}

		// Through the test: the login button stays disabled.
		msg := fatalOf(t, func(tb testing.TB) { p.For(tb).WithTimeout(500 * time.Millisecond).ClickText("Log in") })
		for _, want := range []string{`click "Log in": not done within 500ms`, `button#submit "▶ Log in" is disabled`} {
			if !strings.Contains(msg, want) {
				t.Errorf("ClickText of a disabled button failed the test with a message lacking %q:\n%s", want, msg)
			}
		}
		// An invalid selector fails at once.
		start = time.Now()
		if err := p.waitVisible("#3"); err == nil || !strings.Contains(err.Error(), "not a valid selector") || time.Since(start) > time.Second {
			t.Errorf("waitVisible(#3) = %v after %s, want an invalid selector's error at once", err, time.Since(start))
		}
	})

	// The viewport's and an element's PNGs are of their sizes in pixels (the
	// viewport the size asked for, whatever room the headless window keeps
	// for a toolbar) and show the page (not one colour).
	t.Run("Screenshots", func(t *testing.T) {
		p := shared.For(t)
		p.Navigate(srv.URL)
		dir := t.TempDir()
		for _, c := range []struct {
			name string
			take func(path string)
			w, h int
		}{
			{"viewport", p.Screenshot, 1280, 800},
			{"badge", func(path string) { p.ScreenshotElement("#badge", path) }, 200, 100},
		} {
			path := filepath.Join(dir, "shots", c.name+".png")
			c.take(path)
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			img, err := png.Decode(bytes.NewReader(b))
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
			if got := img.Bounds().Size(); got != image.Pt(c.w, c.h) {
				t.Errorf("%s screenshot is %v, want %dx%d", c.name, got, c.w, c.h)
			}
			if n := colours(img); n < 2 {
				t.Errorf("%s screenshot has %d colour(s): a blank page", c.name, n)
			}
		}
	})
}

// TestNothingButThePage: the browser requests what the page asks for and
// nothing else (no update checks, no Google services), seen by a proxy that
// every request goes through.
func TestNothingButThePage(t *testing.T) {
	var mu sync.Mutex
	var requests []string
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests = append(requests, r.Method+" "+r.Host+r.URL.Path)
		mu.Unlock()
		if r.Host != "app.test" || r.URL.Path != "/" {
			http.Error(w, "not served in this test", http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<title>t</title><p>served through the proxy</p>`)
	}))
	t.Cleanup(proxy.Close)
	p := Start(t, Options{Proxy: proxy.URL, Timeout: 5 * time.Second})
	p.Navigate("http://app.test/")
	p.WaitText("", "served through the proxy")
	// Every request of the browser's life: it is closed (its process
	// ended) before they are read, and the calls home it was caught making
	// go out as it starts, before the page loads.
	if err := chromedp.Cancel(p.Context()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, r := range requests {
		if !strings.HasPrefix(r, "GET app.test/") {
			t.Errorf("the browser requested %s", r)
		}
	}
	if len(requests) == 0 {
		t.Error("no request reached the proxy")
	}
}

// colours counts an image's distinct colours, up to 3.
func colours(img image.Image) int {
	seen := map[[4]uint32]bool{}
	b := img.Bounds()
	for y := b.Min.Y; y < b.Max.Y; y += 3 {
		for x := b.Min.X; x < b.Max.X; x += 3 {
			r, g, bl, a := img.At(x, y).RGBA()
			seen[[4]uint32{r, g, bl, a}] = true
			if len(seen) > 2 {
				return len(seen)
			}
		}
	}
	return len(seen)
}

// fatalRecorder is a testing.TB whose Fatal records the message and ends
// its goroutine, as testing's does.
type fatalRecorder struct {
	testing.TB
	msg string
}

func (r *fatalRecorder) Helper() {}
func (r *fatalRecorder) Fatal(args ...any) {
	r.msg = fmt.Sprint(args...)
	runtime.Goexit()
}
func (r *fatalRecorder) Fatalf(format string, args ...any) {
	r.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// fatalOf runs f with a recorder in a goroutine of its own, and returns what
// it failed with; a run that does not fail fails t.
func fatalOf(t *testing.T, f func(testing.TB)) string {
	t.Helper()
	r := &fatalRecorder{TB: t}
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(r)
	}()
	<-done
	if r.msg == "" {
		t.Error("the call did not fail the test")
	}
	return r.msg
}
