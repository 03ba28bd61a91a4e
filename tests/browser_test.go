package tests

// A small driver of headless Chromium over the DevTools protocol
// (https://chromedevtools.github.io/devtools-protocol/), for the tests
// of the supervisor console and the Zendesk sidebar app: real clicks and
// key presses, JavaScript evaluated in the page, screenshots on demand.

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/coder/websocket"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// browser is one headless Chromium with one tab (page).
type browser struct {
	t    *testing.T
	conn *websocket.Conn
	page *page

	next    atomic.Int64
	mu      sync.Mutex
	waiting map[int64]chan cdpReply
	events  []func(method, session string, params json.RawMessage)
}

type cdpReply struct {
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	} `json:"error"`
}

// page is a tab of the browser, attached in flat mode.
type page struct {
	b       *browser
	t       *testing.T
	session string

	mu     sync.Mutex
	errors []string
	loaded chan struct{}
}

// startBrowser launches headless Chromium and opens a tab; the test is
// skipped, saying why, when no Chromium is installed. Everything closes
// when the test ends.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	bin, ok := chromium()
	if !ok {
		t.Skip("Chromium is not installed (Debian: apt-get install chromium; .ci/run installs it), or set SUPPORTFLOW_CHROMIUM")
	}
	// The profile is removed after Chromium's whole process group is
	// gone; a helper process that outlives it for a moment must not fail
	// the test, so the removal is retried and its last error ignored.
	profile, err := os.MkdirTemp("", "supportflow-chromium-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for range 20 {
			if os.RemoveAll(profile) == nil {
				return
			}
			time.Sleep(250 * time.Millisecond)
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
		"--window-size=1280,900", "--remote-debugging-port=0", "--remote-debugging-address=127.0.0.1",
		"--user-data-dir="+profile, "about:blank")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	stderr, err := cmd.StderrPipe()
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		cancel()
		t.Fatalf("start Chromium: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
	})
	wsURL := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if u, found := strings.CutPrefix(strings.TrimSpace(sc.Text()), "DevTools listening on "); found {
				wsURL <- u
			}
		}
	}()
	var u string
	select {
	case u = <-wsURL:
	case <-time.After(60 * time.Second):
		t.Fatal("Chromium did not open its DevTools port within 60 s")
	}
	dialCtx, dialCancel := context.WithTimeout(ctx, 30*time.Second)
	defer dialCancel()
	conn, _, err := websocket.Dial(dialCtx, u, nil)
	if err != nil {
		t.Fatalf("connect to Chromium: %v", err)
	}
	conn.SetReadLimit(64 << 20)
	b := &browser{t: t, conn: conn, waiting: map[int64]chan cdpReply{}}
	t.Cleanup(func() { _ = conn.CloseNow() })
	go b.read(ctx)

	var target struct {
		TargetID string `json:"targetId"`
	}
	b.call("", "Target.createTarget", map[string]any{"url": "about:blank"}, &target)
	var attached struct {
		SessionID string `json:"sessionId"`
	}
	b.call("", "Target.attachToTarget", map[string]any{"targetId": target.TargetID, "flatten": true}, &attached)
	p := &page{b: b, t: t, session: attached.SessionID, loaded: make(chan struct{}, 16)}
	b.on(func(method, session string, params json.RawMessage) {
		if session != p.session {
			return
		}
		switch method {
		case "Page.loadEventFired":
			select {
			case p.loaded <- struct{}{}:
			default:
			}
		case "Runtime.exceptionThrown":
			var e struct {
				ExceptionDetails struct {
					Text      string `json:"text"`
					Exception struct {
						Description string `json:"description"`
					} `json:"exception"`
				} `json:"exceptionDetails"`
			}
			_ = json.Unmarshal(params, &e)
			p.addError("exception: " + e.ExceptionDetails.Text + " " + e.ExceptionDetails.Exception.Description)
		case "Runtime.consoleAPICalled":
			var e struct {
				Type string `json:"type"`
				Args []struct {
					Value       any    `json:"value"`
					Description string `json:"description"`
				} `json:"args"`
			}
			_ = json.Unmarshal(params, &e)
			if e.Type == "error" {
				var parts []string
				for _, a := range e.Args {
					if a.Value != nil {
						parts = append(parts, fmt.Sprint(a.Value))
					} else {
						parts = append(parts, a.Description)
					}
				}
				p.addError("console.error: " + strings.Join(parts, " "))
			}
		}
	})
	for _, m := range []string{"Page.enable", "Runtime.enable"} {
		p.call(m, nil, nil)
	}
	b.page = p
	return b
}

func (b *browser) on(f func(method, session string, params json.RawMessage)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events = append(b.events, f)
}

func (b *browser) read(ctx context.Context) {
	for {
		_, data, err := b.conn.Read(ctx)
		if err != nil {
			b.mu.Lock()
			for id, ch := range b.waiting {
				close(ch)
				delete(b.waiting, id)
			}
			b.mu.Unlock()
			return
		}
		var msg struct {
			ID        int64           `json:"id"`
			Method    string          `json:"method"`
			SessionID string          `json:"sessionId"`
			Params    json.RawMessage `json:"params"`
			cdpReply
		}
		if json.Unmarshal(data, &msg) != nil {
			continue
		}
		b.mu.Lock()
		if msg.ID != 0 {
			if ch, ok := b.waiting[msg.ID]; ok {
				delete(b.waiting, msg.ID)
				ch <- msg.cdpReply
			}
			b.mu.Unlock()
			continue
		}
		handlers := append([]func(string, string, json.RawMessage){}, b.events...)
		b.mu.Unlock()
		for _, h := range handlers {
			h(msg.Method, msg.SessionID, msg.Params)
		}
	}
}

// call sends one DevTools command and decodes its result into out (when
// not nil); an error answer or no answer in 60 s fails the test.
func (b *browser) call(session, method string, params any, out any) {
	b.t.Helper()
	if err := b.try(session, method, params, out); err != nil {
		b.t.Fatalf("%s: %v", method, err)
	}
}

func (b *browser) try(session, method string, params any, out any) error {
	id := b.next.Add(1)
	msg := map[string]any{"id": id, "method": method}
	if params != nil {
		msg["params"] = params
	}
	if session != "" {
		msg["sessionId"] = session
	}
	data, err := json.Marshal(msg)
	if err != nil {
		return err
	}
	ch := make(chan cdpReply, 1)
	b.mu.Lock()
	b.waiting[id] = ch
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := b.conn.Write(ctx, websocket.MessageText, data); err != nil {
		return err
	}
	select {
	case r, ok := <-ch:
		if !ok {
			return fmt.Errorf("the browser closed the connection")
		}
		if r.Error != nil {
			return fmt.Errorf("%d %s", r.Error.Code, r.Error.Message)
		}
		if out != nil {
			return json.Unmarshal(r.Result, out)
		}
		return nil
	case <-ctx.Done():
		b.mu.Lock()
		delete(b.waiting, id)
		b.mu.Unlock()
		return fmt.Errorf("no answer in 60 s")
	}
}

func (p *page) call(method string, params any, out any) {
	p.t.Helper()
	p.b.call(p.session, method, params, out)
}

func (p *page) addError(s string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.errors = append(p.errors, s)
}

// consoleErrors are the page's uncaught exceptions and console.error
// calls so far.
func (p *page) consoleErrors() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.errors...)
}

// onNewDocument runs js in every document the tab loads from now on,
// before the document's own scripts.
func (p *page) onNewDocument(js string) {
	p.t.Helper()
	p.call("Page.addScriptToEvaluateOnNewDocument", map[string]any{"source": js}, nil)
}

// navigate opens url and waits (up to 60 s) for its load event.
func (p *page) navigate(url string) {
	p.t.Helper()
	for {
		select {
		case <-p.loaded:
			continue
		default:
		}
		break
	}
	var res struct {
		ErrorText string `json:"errorText"`
	}
	p.call("Page.navigate", map[string]any{"url": url}, &res)
	if res.ErrorText != "" {
		p.t.Fatalf("navigate to %s: %s", url, res.ErrorText)
	}
	select {
	case <-p.loaded:
	case <-time.After(60 * time.Second):
		p.t.Fatalf("%s did not load within 60 s", url)
	}
}

// eval evaluates a JavaScript expression in the page (awaiting a promise)
// and answers its value as JSON; an exception fails the test.
func (p *page) eval(expr string) json.RawMessage {
	p.t.Helper()
	v, err := p.tryEval(expr)
	if err != nil {
		p.t.Fatalf("eval %q: %v", expr, err)
	}
	return v
}

func (p *page) tryEval(expr string) (json.RawMessage, error) {
	var res struct {
		Result struct {
			Type  string          `json:"type"`
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := p.b.try(p.session, "Runtime.evaluate", map[string]any{
		"expression": expr, "awaitPromise": true, "returnByValue": true, "userGesture": true,
	}, &res); err != nil {
		return nil, err
	}
	if res.ExceptionDetails != nil {
		return nil, fmt.Errorf("%s %s", res.ExceptionDetails.Text, res.ExceptionDetails.Exception.Description)
	}
	if res.Result.Type == "undefined" || len(res.Result.Value) == 0 {
		return json.RawMessage("null"), nil
	}
	return res.Result.Value, nil
}

func (p *page) evalString(expr string) string {
	p.t.Helper()
	var s string
	v := p.eval(expr)
	if string(v) == "null" {
		return ""
	}
	if err := json.Unmarshal(v, &s); err != nil {
		p.t.Fatalf("eval %q: not a string: %s", expr, v)
	}
	return s
}

func (p *page) evalBool(expr string) bool {
	p.t.Helper()
	return p.evalString("String(Boolean("+expr+"))") == "true"
}

// waitFor polls expr (every 100 ms) until it is truthy; after timeout the
// test fails with the page's text. An exception while polling counts as
// false (the page may be between documents).
func (p *page) waitFor(expr string, timeout time.Duration) {
	p.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		v, err := p.tryEval("String(Boolean(" + expr + "))")
		if err == nil && string(v) == `"true"` {
			return
		}
		if time.Now().After(deadline) {
			body, _ := p.tryEval("document.body ? document.body.innerText : ''")
			p.t.Fatalf("waited %s for %s; the page shows:\n%s\nerrors: %v", timeout, expr, body, p.consoleErrors())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// text is the innerText of the first element matching selector, "" when
// none does.
func (p *page) text(selector string) string {
	p.t.Helper()
	return p.evalString(fmt.Sprintf("(document.querySelector(%s) || {innerText: ''}).innerText", jsString(selector)))
}

// exists says whether an element matches selector.
func (p *page) exists(selector string) bool {
	p.t.Helper()
	return p.evalBool(fmt.Sprintf("document.querySelector(%s) !== null", jsString(selector)))
}

// centre scrolls the first match of selector into view and answers the
// centre of its box in CSS pixels.
func (p *page) centre(selector string) (float64, float64) {
	p.t.Helper()
	var box struct{ X, Y float64 }
	v := p.eval(fmt.Sprintf(`(() => { const e = document.querySelector(%s); if (!e) throw new Error("no element matches " + %s);
		e.scrollIntoView({block: "center", inline: "center"}); const r = e.getBoundingClientRect();
		return {X: r.left + r.width / 2, Y: r.top + r.height / 2}; })()`, jsString(selector), jsString(selector)))
	if err := json.Unmarshal(v, &box); err != nil {
		p.t.Fatal(err)
	}
	return box.X, box.Y
}

func (p *page) mouse(typ string, x, y float64, count int) {
	p.t.Helper()
	p.call("Input.dispatchMouseEvent", map[string]any{"type": typ, "x": x, "y": y, "button": "left", "buttons": 1, "clickCount": count}, nil)
}

// click presses and releases the mouse at the centre of the first match
// of selector, as a person would.
func (p *page) click(selector string) {
	p.t.Helper()
	x, y := p.centre(selector)
	p.call("Input.dispatchMouseEvent", map[string]any{"type": "mouseMoved", "x": x, "y": y}, nil)
	p.mouse("mousePressed", x, y, 1)
	p.mouse("mouseReleased", x, y, 1)
}

// doubleClick clicks twice at once (clickCount 1, then 2), as a double
// click does: both presses reach the page before anything it starts
// can answer.
func (p *page) doubleClick(selector string) {
	p.t.Helper()
	x, y := p.centre(selector)
	p.call("Input.dispatchMouseEvent", map[string]any{"type": "mouseMoved", "x": x, "y": y}, nil)
	p.mouse("mousePressed", x, y, 1)
	p.mouse("mouseReleased", x, y, 1)
	p.mouse("mousePressed", x, y, 2)
	p.mouse("mouseReleased", x, y, 2)
}

// typeInto focuses the first match of selector and types text into it.
func (p *page) typeInto(selector, text string) {
	p.t.Helper()
	p.eval(fmt.Sprintf(`(() => { const e = document.querySelector(%s); if (!e) throw new Error("no element matches " + %s); e.focus(); })()`,
		jsString(selector), jsString(selector)))
	p.call("Input.insertText", map[string]any{"text": text}, nil)
}

// keys the page may be sent by press: DOM key, code and Windows virtual
// key code (what Chromium needs to act on it, as a Tab's focus move).
var keys = map[string]struct {
	code string
	vk   int
	text string
}{
	"Enter":  {"Enter", 13, "\r"},
	"Tab":    {"Tab", 9, ""},
	"Escape": {"Escape", 27, ""},
	" ":      {"Space", 32, " "},
}

// press sends one key press (Enter, Tab, Escape or space) to the focused
// element.
func (p *page) press(key string) {
	p.t.Helper()
	k, ok := keys[key]
	if !ok {
		p.t.Fatalf("press: unknown key %q", key)
	}
	down := map[string]any{"type": "keyDown", "key": key, "code": k.code, "windowsVirtualKeyCode": k.vk, "nativeVirtualKeyCode": k.vk}
	if k.text != "" {
		down["text"] = k.text
		down["unmodifiedText"] = k.text
	} else {
		down["type"] = "rawKeyDown"
	}
	p.call("Input.dispatchKeyEvent", down, nil)
	p.call("Input.dispatchKeyEvent", map[string]any{"type": "keyUp", "key": key, "code": k.code, "windowsVirtualKeyCode": k.vk, "nativeVirtualKeyCode": k.vk}, nil)
}

// screenshot writes the page as docs/screenshots/<name>.png, only when
// SUPPORTFLOW_SCREENSHOTS=1 (the docs' pictures are taken by the tests;
// an ordinary run writes nothing into the tree).
func (p *page) screenshot(name string) {
	p.t.Helper()
	if os.Getenv("SUPPORTFLOW_SCREENSHOTS") != "1" {
		return
	}
	var res struct {
		Data string `json:"data"`
	}
	p.call("Page.captureScreenshot", map[string]any{"format": "png", "captureBeyondViewport": false}, &res)
	png, err := base64.StdEncoding.DecodeString(res.Data)
	if err != nil {
		p.t.Fatal(err)
	}
	dir := filepath.Join("..", "docs", "screenshots")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		p.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

// jsString quotes s as a JavaScript string literal.
func jsString(s string) string {
	b, _ := json.Marshal(s)
	return string(b)
}

// The driver itself: a click is one click, a double click two presses,
// typed text lands in the focused field, Tab moves the focus, and a page's
// exception is reported.
func TestBrowser_DriverActsAsAPerson(t *testing.T) {
	b := startBrowser(t)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, `<!doctype html><title>t</title>
<button id="b">press</button><input id="i" aria-label="i"><input id="j" aria-label="j">
<script>window.clicks = 0; document.getElementById("b").addEventListener("click", () => window.clicks++);
setTimeout(() => { throw new Error("boom"); }, 0);</script>`)
	}))
	t.Cleanup(srv.Close)
	p := b.page
	p.onNewDocument(`window.seeded = "yes";`)
	p.navigate(srv.URL)
	assert.Equal(t, "yes", p.evalString("window.seeded"))
	p.click("#b")
	p.waitFor("window.clicks === 1", 10*time.Second)
	p.doubleClick("#b")
	p.waitFor("window.clicks === 3", 10*time.Second)
	p.typeInto("#i", "hello")
	assert.Equal(t, "hello", p.evalString(`document.getElementById("i").value`))
	p.press("Tab")
	assert.Equal(t, "j", p.evalString("document.activeElement.id"))
	assert.True(t, p.exists("#b"))
	assert.False(t, p.exists("#nope"))
	assert.Equal(t, "press", p.text("#b"))
	p.waitFor("true", time.Second)
	require.Eventually(t, func() bool { return len(p.consoleErrors()) > 0 }, 10*time.Second, 50*time.Millisecond)
	assert.Contains(t, strings.Join(p.consoleErrors(), "\n"), "boom")
}
