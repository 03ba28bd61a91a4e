package tests

// The Zendesk ticket-sidebar app (zendesk-app/, docs/zendesk-app.md):
// its package as zcli expects it, and the app itself in headless Chromium
// on a real stack, under a stand-in for Zendesk's ZAF client and proxy.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/api"
	"github.com/supportflow/supportflow/internal/proposals"
	"github.com/supportflow/supportflow/internal/standin"
)

const (
	zendeskAppDir = "../zendesk-app"
	// zafSDKURL is where Zendesk documents the ZAF SDK v2:
	// https://developer.zendesk.com/documentation/apps/app-developer-guide/using-the-apps-framework/
	zafSDKURL = "https://static.zdassets.com/zendesk_app_framework_sdk/2.0/zaf_sdk.min.js"
)

// zafManifest is what the tests read of manifest.json; the fields are
// those of Zendesk's manifest reference:
// https://developer.zendesk.com/documentation/apps/app-developer-guide/manifest/
type zafManifest struct {
	Name   string `json:"name"`
	Author struct {
		Name  string `json:"name"`
		Email string `json:"email"`
	} `json:"author"`
	DefaultLocale string `json:"defaultLocale"`
	Private       *bool  `json:"private"`
	Location      map[string]map[string]struct {
		URL      string `json:"url"`
		Flexible bool   `json:"flexible"`
	} `json:"location"`
	DomainWhitelist []string `json:"domainWhitelist"`
	Parameters      []struct {
		Name     string `json:"name"`
		Type     string `json:"type"`
		Required bool   `json:"required"`
		Secure   bool   `json:"secure"`
		// Scopes are where Zendesk's proxy may fill a secure setting in
		// (header, body, url); none means anywhere:
		// https://developer.zendesk.com/documentation/apps/getting-started/setting-up-new-apps/#scopes
		Scopes []string `json:"scopes"`
	} `json:"parameters"`
	Version          string `json:"version"`
	FrameworkVersion string `json:"frameworkVersion"`
}

func readZAFManifest(t *testing.T) zafManifest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(zendeskAppDir, "manifest.json"))
	require.NoError(t, err)
	var m zafManifest
	dec := json.NewDecoder(bytes.NewReader(b))
	require.NoError(t, dec.Decode(&m), "manifest.json is JSON")
	return m
}

// The package is what `zcli apps:package` zips (everything in the
// directory) and Zendesk validates: a v2 ticket-sidebar app whose token
// is a secure setting, every file it names present, the logos Zendesk
// asks for, and nothing that is not the app.
func TestZendeskApp_PackageIsWhatZendeskExpects(t *testing.T) {
	t.Parallel()
	m := readZAFManifest(t)
	assert.NotEmpty(t, m.Name)
	assert.NotEmpty(t, m.Author.Name, "author is required")
	assert.Contains(t, m.Author.Email, "@", "author email is required")
	assert.Equal(t, "en", m.DefaultLocale)
	assert.Equal(t, "2.0", m.FrameworkVersion)
	assert.NotEmpty(t, m.Version)
	require.NotNil(t, m.Private)
	assert.True(t, *m.Private, "a private app (uploaded to one account)")

	require.Contains(t, m.Location, "support")
	sidebar, ok := m.Location["support"]["ticket_sidebar"]
	require.True(t, ok, "a ticket sidebar app")
	assert.Equal(t, "assets/iframe.html", sidebar.URL)
	assert.True(t, sidebar.Flexible)
	assert.Len(t, m.Location["support"], 1, "the ticket sidebar only")

	params := map[string]struct{ typ, required, secure string }{}
	for _, p := range m.Parameters {
		params[p.Name] = struct{ typ, required, secure string }{p.Type, strconv.FormatBool(p.Required), strconv.FormatBool(p.Secure)}
	}
	assert.Equal(t, map[string]struct{ typ, required, secure string }{
		"api_url":   {"url", "true", "false"},
		"api_token": {"text", "true", "true"},
	}, params, "api_url plain, api_token secure, both required")
	for _, p := range m.Parameters {
		if p.Name == "api_token" {
			assert.Equal(t, []string{"header"}, p.Scopes, "the token may only be filled into headers (zcli apps:validate warns otherwise)")
		}
	}

	// Secure settings are sent only to the hosts in domainWhitelist: bare
	// host names, which the installer sets to the API's host.
	require.NotEmpty(t, m.DomainWhitelist)
	for _, d := range m.DomainWhitelist {
		assert.Regexp(t, `^[a-z0-9.-]+$`, d, "a host name without scheme, port or path")
	}

	// The translations of the default locale, with the settings' labels.
	b, err := os.ReadFile(filepath.Join(zendeskAppDir, "translations", m.DefaultLocale+".json"))
	require.NoError(t, err)
	var tr struct {
		App struct {
			Name             string `json:"name"`
			ShortDescription string `json:"short_description"`
			Parameters       map[string]struct {
				Label string `json:"label"`
			} `json:"parameters"`
		} `json:"app"`
	}
	require.NoError(t, json.Unmarshal(b, &tr))
	assert.NotEmpty(t, tr.App.Name)
	assert.NotEmpty(t, tr.App.ShortDescription)
	for name := range params {
		assert.NotEmpty(t, tr.App.Parameters[name].Label, "a label for setting %s", name)
	}

	// The page loads the SDK from Zendesk's URL and the rest from assets/,
	// all of which exist.
	page, err := os.ReadFile(filepath.Join(zendeskAppDir, sidebar.URL))
	require.NoError(t, err)
	assert.Equal(t, 1, strings.Count(string(page), `src="`+zafSDKURL+`"`), "the SDK from its documented URL")
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(string(page), -1)
	var local []string
	for _, r := range refs {
		if r[1] != zafSDKURL {
			local = append(local, r[1])
		}
	}
	assert.ElementsMatch(t, []string{"app.css", "app.js"}, local)
	for _, f := range local {
		assert.FileExists(t, filepath.Join(zendeskAppDir, "assets", f))
	}

	// The icons: logo.png 320x320 and logo-small.png 128x128 with
	// transparency: https://developer.zendesk.com/documentation/apps/publish-your-app-or-theme/create_assets
	for name, size := range map[string]int{"logo.png": 320, "logo-small.png": 128} {
		f, err := os.Open(filepath.Join(zendeskAppDir, "assets", name))
		require.NoError(t, err)
		cfg, err := png.DecodeConfig(f)
		f.Close()
		require.NoError(t, err, "%s is a PNG", name)
		assert.Equal(t, size, cfg.Width, name)
		assert.Equal(t, size, cfg.Height, name)
	}
	small, err := os.Open(filepath.Join(zendeskAppDir, "assets", "logo-small.png"))
	require.NoError(t, err)
	img, err := png.Decode(small)
	small.Close()
	require.NoError(t, err)
	_, _, _, a := img.At(0, 0).RGBA()
	assert.Zero(t, a, "logo-small.png has a transparent background")

	// Only the app's own files: zcli packages everything in the directory
	// but tmp/ (its own output) and what .zcliignore lists, which must
	// include zcli.apps.config.json, where zcli reads settings (the token)
	// from.
	ignore, err := os.ReadFile(filepath.Join(zendeskAppDir, ".zcliignore"))
	require.NoError(t, err, "a .zcliignore keeps zcli's settings file out of the package")
	ignored := strings.Fields(string(ignore))
	assert.Contains(t, ignored, "zcli.apps.config.json")
	var files []string
	require.NoError(t, filepath.WalkDir(zendeskAppDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(zendeskAppDir, path)
		if d.IsDir() {
			if rel == "tmp" {
				return filepath.SkipDir // zcli's own output, left out of packages
			}
			return nil
		}
		if slices.Contains(ignored, filepath.ToSlash(rel)) {
			return nil
		}
		files = append(files, filepath.ToSlash(rel))
		return nil
	}))
	assert.ElementsMatch(t, []string{"manifest.json", "translations/en.json", "assets/iframe.html", "assets/app.js",
		"assets/app.css", "assets/logo.png", "assets/logo-small.png", ".zcliignore"}, files)

	// What the code review would check, checked: the token only as the
	// proxy's placeholder in secure requests; data never as HTML; nothing
	// written to the console.
	js, err := os.ReadFile(filepath.Join(zendeskAppDir, "assets", "app.js"))
	require.NoError(t, err)
	assert.Contains(t, string(js), "'Bearer {{setting.api_token}}'")
	assert.Contains(t, string(js), "secure: true")
	assert.Equal(t, strings.Count(string(js), "{{setting.api_token}}"), strings.Count(string(js), "api_token"),
		"the token is named only as the proxy's placeholder")
	for _, banned := range []string{"innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("} {
		assert.NotContains(t, string(js), banned)
	}
	assert.NotRegexp(t, `console\.[a-z]+\(`, string(js))
}

// zafHost stands in for Zendesk around the sidebar app: it serves the
// app's assets with the stand-in ZAF client in place of the SDK, and is
// the proxy client.request goes through, filling in secure settings
// server-side for the domainWhitelist's hosts only, as Zendesk documents:
// https://developer.zendesk.com/documentation/apps/app-developer-guide/making-api-requests-from-a-zendesk-app/
type zafHost struct {
	t         *testing.T
	url       string
	settings  map[string]string // every setting, secure ones included
	secure    map[string]bool
	scopes    map[string][]string // a secure setting's scopes; none: anywhere
	whitelist []string            // host:port the installer put in domainWhitelist

	mu       sync.Mutex
	proxied  []proxiedCall
	override func(method, path string) (status int, body string, ok bool)
}

type proxiedCall struct {
	Method, Path string
	Status       int
}

func newZAFHost(t *testing.T, settings map[string]string, whitelist []string) *zafHost {
	t.Helper()
	m := readZAFManifest(t)
	h := &zafHost{t: t, settings: settings, secure: map[string]bool{}, whitelist: whitelist}
	for _, p := range m.Parameters {
		h.secure[p.Name] = p.Secure
		if len(p.Scopes) > 0 {
			if h.scopes == nil {
				h.scopes = map[string][]string{}
			}
			h.scopes[p.Name] = p.Scopes
		}
	}
	standinJS, err := os.ReadFile(filepath.Join("testdata", "zaf", "zaf_standin.js"))
	require.NoError(t, err)
	assets := http.StripPrefix("/app/", http.FileServer(http.Dir(filepath.Join(zendeskAppDir, "assets"))))
	mux := http.NewServeMux()
	mux.HandleFunc("GET /app/iframe.html", func(w http.ResponseWriter, r *http.Request) {
		page, err := os.ReadFile(filepath.Join(zendeskAppDir, "assets", "iframe.html"))
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		sdk := "/zaf/zaf_sdk.min.js?" + r.URL.RawQuery
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = w.Write(bytes.Replace(page, []byte(zafSDKURL), []byte(sdk), 1))
	})
	mux.Handle("GET /app/", assets)
	mux.HandleFunc("GET /zaf/zaf_sdk.min.js", func(w http.ResponseWriter, r *http.Request) {
		ticket, _ := strconv.ParseInt(r.URL.Query().Get("ticket"), 10, 64)
		agent := "Agent Avery"
		if a := r.URL.Query().Get("agent"); a != "" {
			agent = a
		}
		scale, _ := strconv.ParseFloat(r.URL.Query().Get("scale"), 64)
		// What the app's installation shows the browser: the plain
		// settings only (secure ones never reach it).
		visible := map[string]string{}
		for k, v := range h.settings {
			if !h.secure[k] {
				visible[k] = v
			}
		}
		cfg, _ := json.Marshal(map[string]any{
			"data": map[string]any{"ticket.id": ticket, "currentUser.name": agent,
				"ticket.requester": map[string]any{"id": standin.DefaultRequesterID, "name": "Ada"}},
			"metadata": map[string]any{"appId": 1, "installationId": 1, "name": "supportflow", "version": "1.0.0",
				"plan": map[string]any{"name": "standard"}, "settings": visible},
			"proxy":     "/zaf-proxy",
			"timeScale": scale,
		})
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		fmt.Fprintf(w, "window.__zafStandinConfig = %s;\n", cfg)
		_, _ = w.Write(standinJS)
	})
	mux.HandleFunc("POST /zaf-proxy", h.proxy)
	// Two sidebars side by side, as two agents (or one agent's two tabs)
	// see the same ticket: /tabs?ticket=ID&a=AGENT&b=AGENT[&scale=N].
	mux.HandleFunc("GET /tabs", func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, `<!doctype html><meta charset="utf-8"><title>two tabs</title>
<iframe id="tab-a" src="/app/iframe.html?%s" width="320" height="600"></iframe>
<iframe id="tab-b" src="/app/iframe.html?%s" width="320" height="600"></iframe>`,
			url.Values{"ticket": {q.Get("ticket")}, "agent": {q.Get("a")}, "scale": {q.Get("scale")}}.Encode(),
			url.Values{"ticket": {q.Get("ticket")}, "agent": {q.Get("b")}, "scale": {q.Get("scale")}}.Encode())
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	h.url = srv.URL
	return h
}

// appURL is the sidebar's page for a ticket.
func (h *zafHost) appURL(ticket int64) string {
	return fmt.Sprintf("%s/app/iframe.html?ticket=%d", h.url, ticket)
}

// appURLAs is the sidebar's page for a ticket, seen by agent (the
// currentUser.name the app reads), with the app's timers scaled by scale
// (0: real time).
func (h *zafHost) appURLAs(ticket int64, agent string, scale float64) string {
	return h.url + "/app/iframe.html?" + url.Values{"ticket": {strconv.FormatInt(ticket, 10)}, "agent": {agent},
		"scale": {strconv.FormatFloat(scale, 'f', -1, 64)}}.Encode()
}

// tabsURL is a page with two sidebars of one ticket, for agents a and b.
func (h *zafHost) tabsURL(ticket int64, a, b string) string {
	return h.url + "/tabs?" + url.Values{"ticket": {strconv.FormatInt(ticket, 10)}, "a": {a}, "b": {b}}.Encode()
}

// setOverride makes the proxy answer the requests f accepts itself
// (status, JSON body) instead of forwarding them; nil forwards all.
func (h *zafHost) setOverride(f func(method, path string) (int, string, bool)) {
	h.mu.Lock()
	h.override = f
	h.mu.Unlock()
}

var settingPlaceholder = regexp.MustCompile(`\{\{setting\.([A-Za-z0-9_]+)\}\}`)

// proxy sends a request the app made on its way, as Zendesk's proxy does:
// {{setting.NAME}} is filled in only in a secure request to a whitelisted
// host, and only where the setting's scopes allow (header, body, url; a
// setting without scopes anywhere). A placeholder anywhere else is sent as
// it is.
func (h *zafHost) proxy(w http.ResponseWriter, r *http.Request) {
	var req struct {
		URL         string            `json:"url"`
		Type        string            `json:"type"`
		Headers     map[string]string `json:"headers"`
		ContentType string            `json:"contentType"`
		Data        string            `json:"data"`
		Secure      bool              `json:"secure"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "bad proxy request", http.StatusBadRequest)
		return
	}
	u, err := url.Parse(req.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		http.Error(w, "bad url", http.StatusBadRequest)
		return
	}
	fill := func(scope, s string) string {
		if !req.Secure {
			return s
		}
		return settingPlaceholder.ReplaceAllStringFunc(s, func(m string) string {
			name := settingPlaceholder.FindStringSubmatch(m)[1]
			v, ok := h.settings[name]
			if !ok || !h.secure[name] {
				return m
			}
			if scopes, scoped := h.scopes[name]; scoped && !slices.Contains(scopes, scope) {
				return m
			}
			return v
		})
	}
	if req.Secure && !slices.Contains(h.whitelist, u.Host) {
		http.Error(w, "secure settings are only sent to the domainWhitelist", http.StatusForbidden)
		return
	}
	h.mu.Lock()
	override := h.override
	h.mu.Unlock()
	if override != nil {
		if status, body, ok := override(req.Type, u.Path); ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(status)
			_, _ = io.WriteString(w, body)
			return
		}
	}
	out, err := http.NewRequestWithContext(r.Context(), req.Type, fill("url", req.URL), strings.NewReader(fill("body", req.Data)))
	if err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	for k, v := range req.Headers {
		out.Header.Set(k, fill("header", v))
	}
	if req.ContentType != "" {
		out.Header.Set("Content-Type", req.ContentType)
	}
	resp, err := http.DefaultClient.Do(out)
	if err != nil {
		http.Error(w, "upstream unreachable", http.StatusBadGateway)
		return
	}
	defer resp.Body.Close()
	h.mu.Lock()
	h.proxied = append(h.proxied, proxiedCall{Method: req.Type, Path: u.Path, Status: resp.StatusCode})
	h.mu.Unlock()
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

func (h *zafHost) calls() []proxiedCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]proxiedCall(nil), h.proxied...)
}

// The sidebar on a real stack: for a ticket without a draft it offers to
// request one, shows it drafting with the model's progress, then the
// proposal; a proposal that cancels a subscription is never offered for
// the editor, and once approved it shows who approved it. For a
// reply-only proposal, "Reply myself" rejects it through the API and only
// then puts its text into the editor: supportflow never posts it. The
// API token never reaches the page.
func TestZendeskApp_SidebarShowsTheTicketsDraft(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	s := newStack(t)
	s.extraEnv = []string{"SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY=100ms", "SUPPORTFLOW_ENRICH_UPDATE_DELAY=100ms"}
	s.startWorker()
	c := s.api()
	c.subscribe(standin.WebhookConfig{})

	// Ticket A asks to cancel its plan; ticket B asks a question.
	requesterA := 71000 + ticketIDs.Add(1)
	tA := standin.Ticket{ID: 71000 + ticketIDs.Add(1), Subject: "Cancel", Description: "Please cancel my plan.",
		RequesterID: requesterA, RequesterName: "Ada", Status: "new"}
	tB := standin.Ticket{ID: 71000 + ticketIDs.Add(1), Subject: "Password", Description: "How do I reset my password?",
		RequesterID: 71000 + ticketIDs.Add(1), RequesterName: "Bo", Status: "new"}
	s.bq.AddCustomer(requesterA, standin.BQCustomer{CustomerID: "cust-zd-a", ActiveSubscriptions: []string{"sub-zd-a"}})
	s.subs.AddSubscription("sub-zd-a", "cust-zd-a")
	const replyB = "Use \"Forgot password\" & check <your> inbox.\n\n  Then   sign in."
	s.model.SetResponder(func(req standin.ChatRequest) string {
		if strings.Contains(req.Messages[len(req.Messages)-1].Content, "cancel my plan") {
			return `{"reply": "Your plan is cancelled.", "cancel_subscriptions": ["sub-zd-a"]}`
		}
		b, _ := json.Marshal(map[string]any{"reply": replyB, "cancel_subscriptions": []string{}})
		return string(b)
	})
	s.zd.AddTicket(tA)
	s.zd.AddTicket(tB)
	s.waitMirrored(tA.ID)
	s.waitMirrored(tB.ID)
	s.waitEnriched(tA.ID)

	// The model holds mid-answer until the page has shown its progress.
	hold, releaseModel := releasableHold(t)
	s.model.Inject(standin.ModelFault{TokenDelay: 40 * time.Millisecond, HoldAfter: 3, Hold: hold})

	api, err := url.Parse(c.url)
	require.NoError(t, err)
	zaf := newZAFHost(t, map[string]string{"api_url": c.url, "api_token": apiToken}, []string{api.Host})
	p := b.page
	// As wide as Zendesk's ticket sidebar.
	p.call("Emulation.setDeviceMetricsOverride", map[string]any{"width": 340, "height": 520, "deviceScaleFactor": 1, "mobile": false}, nil)
	const (
		status        = `document.querySelector('#status').textContent`
		visible       = `(s => { const e = document.querySelector(s); return !!e && !e.hidden; })`
		waitUI        = 60 * time.Second
		waitExecution = 90 * time.Second
	)

	// Ticket A: no draft yet; request one.
	p.navigate(zaf.appURL(tA.ID))
	p.waitFor(visible+`('#request-draft')`, waitUI)
	assert.Equal(t, "No draft for this ticket yet", p.evalString(status))
	assert.Equal(t, fmt.Sprintf("%s/console/#/tickets/%d", c.url, tA.ID), p.evalString(`document.querySelector('#open-console').href`))
	assert.Equal(t, "_blank", p.evalString(`document.querySelector('#open-console').target`), "the console forbids framing: a new window")
	assert.Contains(t, p.evalString(`document.querySelector('#open-console').rel`), "noopener")
	p.click("#request-draft")
	p.waitFor(status+` === 'Drafting a reply' && /[1-9][0-9]* tokens? so far/.test(document.querySelector('#progress').textContent)`, waitUI)
	releaseModel()
	p.waitFor(status+` === 'Waiting for approval'`, waitExecution)
	assert.Equal(t, "Your plan is cancelled.", p.text("#reply"))
	assert.Equal(t, "1 subscription", p.text("#cancellations"))
	assert.False(t, p.evalBool(visible+`('#reply-myself')`), "no insert offered for a proposal that cancels")
	assert.False(t, p.evalBool(visible+`('#request-draft')`), "no new draft while one awaits approval")

	// Approved elsewhere (the console): the page follows it to done, says
	// who approved, and never offers the text for the editor.
	st := s.waitState(tA.ID, supportflow.DraftAwaitingApproval)
	code, resp := c.do("POST", "/proposals/"+st.Proposal.ID+"/approve", apiToken, []byte(`{"approved_by":"alice"}`), nil)
	require.Equal(t, http.StatusOK, code, "%s", resp)
	p.waitFor(status+` === 'Done: supportflow posted it'`, waitExecution)
	assert.Equal(t, "test-all", p.text("#approved-by"), "the approving token's name")
	assert.False(t, p.evalBool(visible+`('#reply-myself')`))
	assert.True(t, p.evalBool(visible+`('#request-draft')`), "a settled draft may be drafted again")
	assert.Equal(t, 1, s.zd.CommentCount(tA.ID), "supportflow posted the approved reply once")

	// Ticket B: a reply-only proposal. "Reply myself" rejects it, and only
	// then inserts its text (as HTML-escaped text) into the editor. The
	// agent's name is a placeholder of the token: the proxy must never fill
	// it in where the app sends the name (the body).
	const sneaky = "{{setting.api_token}}"
	p.navigate(zaf.appURLAs(tB.ID, sneaky, 0))
	p.waitFor(visible+`('#request-draft')`, waitUI)
	p.click("#request-draft")
	p.waitFor(status+` === 'Waiting for approval'`, waitExecution)
	assert.Equal(t, replyB, p.text("#reply"))
	assert.Equal(t, "No subscription", p.text("#cancellations"))
	require.True(t, p.evalBool(visible+`('#reply-myself')`), "offered for a reply-only proposal awaiting approval")
	assert.Equal(t, "0", p.evalString(`String(window.__zaf.inserted.length)`))
	p.screenshot("zendesk-sidebar")
	stB := s.waitState(tB.ID, supportflow.DraftAwaitingApproval)
	p.click("#reply-myself")
	p.waitFor(`window.__zaf.inserted.length > 0`, waitUI)
	p.waitFor(status+` === 'Rejected'`, waitUI)
	assert.Equal(t, `["Use &quot;Forgot password&quot; &amp; check &lt;your&gt; inbox.<br><br>&nbsp;&nbsp;Then&nbsp;&nbsp;&nbsp;sign in."]`,
		string(p.eval(`window.__zaf.inserted`)),
		"the reply's text, escaped for the editor's HTML with its line breaks and spaces kept, inserted once")
	assert.Contains(t, p.text("#message"), "in the editor")
	assert.False(t, p.evalBool(visible+`('#reply-myself')`))
	assert.False(t, p.evalBool(visible+`('#request-draft')`), "no new draft once the agent took the reply: it could answer twice")
	// The takeover was answered 200 before the insert (by the stand-in's
	// sequence numbers), and supportflow now refuses to approve the
	// proposal.
	var taken bool
	for _, call := range zaf.calls() {
		if call.Method == "POST" && call.Path == "/proposals/"+stB.Proposal.ID+"/reply-myself" {
			assert.Equal(t, http.StatusOK, call.Status)
			taken = true
		}
	}
	assert.True(t, taken, "the app took the reply through the API")
	assert.True(t, p.evalBool(`(() => {
		const ev = window.__zaf.events;
		const took = ev.find(e => e.kind === 'response' && e.type === 'POST' && /\/reply-myself$/.test(e.url) && e.status === 200);
		const ins = ev.filter(e => e.kind === 'insert');
		return !!took && ins.length === 1 && took.seq < ins[0].seq;
	})()`), "the takeover's 200 came before the insert: %s", p.eval(`window.__zaf.events`))
	// The agent's name went to supportflow as text, never as the token:
	// the proxy fills the placeholder into headers only, and the app
	// strips the braces anyway.
	tk, err := proposals.New(s.pool, s.ledger.Account()).GetTakeover(context.Background(), stB.Proposal.ID)
	require.NoError(t, err)
	assert.Equal(t, "test-all", tk.TakenBy)
	assert.Equal(t, "setting.api_token", tk.OnBehalfOf, "the agent's name without the placeholder's braces")
	assert.NotContains(t, tk.OnBehalfOf, apiToken)
	assert.NotContains(t, p.evalString(`JSON.stringify(window.__zaf.requests)`), apiToken)
	code, resp = c.do("GET", fmt.Sprintf("/tickets/%d/draft", tB.ID), apiToken, nil, nil)
	require.Equal(t, http.StatusOK, code, "%s", resp)
	var draftB supportflow.DraftStatus
	require.NoError(t, json.Unmarshal(resp, &draftB))
	assert.Equal(t, supportflow.DraftRejected, draftB.State)
	code, resp = c.do("POST", "/proposals/"+stB.Proposal.ID+"/approve", apiToken, nil, nil)
	assert.Equal(t, http.StatusConflict, code, "a rejected proposal can never be posted: %s", resp)
	assert.Zero(t, s.zd.CommentCount(tB.ID), "supportflow posted nothing on ticket B")

	// The token never reached the page: not in the DOM, the settings the
	// app can read, what it recorded or stored; every request carried the
	// placeholder, marked secure, for the proxy to fill in.
	for _, expr := range []string{
		`document.documentElement.outerHTML`,
		`ZAFClient.init().metadata().then(m => JSON.stringify(m))`,
		`JSON.stringify(window.__zaf)`,
		`JSON.stringify(window.__zafStandinConfig)`,
		`JSON.stringify(Object.assign({}, sessionStorage, localStorage))`,
		`document.cookie`,
	} {
		assert.NotContains(t, p.evalString(expr), apiToken, expr)
	}
	assert.NotContains(t, p.evalString(`ZAFClient.init().metadata().then(m => JSON.stringify(m))`), "api_token")
	assert.True(t, p.evalBool(`window.__zaf.requests.length > 0 && window.__zaf.requests.every(r =>
		r.secure === true && r.headers.Authorization === 'Bearer {{setting.api_token}}' && r.url.startsWith(`+jsString(c.url)+`) &&
		r.timeout === 20000)`),
		"every request secure, with the placeholder and a timeout: %s", p.eval(`window.__zaf.requests`))
	assert.Empty(t, p.consoleErrors())
}

// replyOnlyStack is a stack whose model answers every ticket with reply
// (no cancellation), its API subscribed to the Zendesk stand-in's webhook.
func replyOnlyStack(t *testing.T, reply string) (*stack, *apiClient) {
	t.Helper()
	s := newStack(t)
	s.extraEnv = []string{"SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY=100ms", "SUPPORTFLOW_ENRICH_UPDATE_DELAY=100ms"}
	s.startWorker()
	c := s.api()
	c.subscribe(standin.WebhookConfig{})
	s.model.SetResponder(func(req standin.ChatRequest) string {
		b, _ := json.Marshal(map[string]any{"reply": reply, "cancel_subscriptions": []string{}})
		return string(b)
	})
	return s, c
}

// POST /proposals/{id}/reply-myself hands a reply out exactly once:
// of concurrent calls for one proposal exactly one gets 200 with the
// reply, every other 409 and no reply; later calls are told who took it
// and when. The proposal is rejected, so supportflow never posts it. A
// proposal that cancels a subscription is refused and stays awaiting
// approval.
func TestReplyMyself_ExactlyOneTakerAcrossConcurrentCalls(t *testing.T) {
	t.Parallel()
	const reply = "Reset it from the sign-in page."
	s, c := replyOnlyStack(t, reply)
	tk := standin.Ticket{ID: 73000 + ticketIDs.Add(1), Subject: "Password", Description: "How do I reset my password?",
		RequesterID: 73000 + ticketIDs.Add(1), RequesterName: "Bo", Status: "new"}
	s.zd.AddTicket(tk)
	s.waitMirrored(tk.ID)
	code, resp := c.do("POST", fmt.Sprintf("/tickets/%d/drafts", tk.ID), apiToken, nil, nil)
	require.Equal(t, http.StatusAccepted, code, "%s", resp)
	st := s.waitState(tk.ID, supportflow.DraftAwaitingApproval)
	path := "/proposals/" + st.Proposal.ID + "/reply-myself"

	code, resp = c.do("POST", path, appToken, []byte(`{"on_behalf_of":"Ada"}`), nil)
	assert.Equal(t, http.StatusForbidden, code, "the app role alone may not take a reply: %s", resp)

	type answer struct {
		code int
		body []byte
	}
	agents := []string{"Ada", "Bo", "Cy", "Di"}
	answers := make([]answer, len(agents))
	start := make(chan struct{})
	var wg sync.WaitGroup
	for i, agent := range agents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			b, _ := json.Marshal(map[string]string{"on_behalf_of": agent})
			code, resp := c.do("POST", path, apiToken, b, nil)
			answers[i] = answer{code, resp}
		}()
	}
	close(start)
	wg.Wait()
	var winner string
	var won api.ReplyTaken
	for i, a := range answers {
		switch a.code {
		case http.StatusOK:
			require.Empty(t, winner, "a second 200: %s", a.body)
			winner = agents[i]
			require.NoError(t, json.Unmarshal(a.body, &won))
		case http.StatusConflict:
			var p api.Problem
			require.NoError(t, json.Unmarshal(a.body, &p))
			assert.Contains(t, []string{"/problems/reply-already-taken", "/problems/proposal-not-awaiting-approval"}, p.Type, "%s", a.body)
			assert.NotContains(t, string(a.body), reply, "a refusal never carries the reply")
		default:
			t.Errorf("%s: %d %s", agents[i], a.code, a.body)
		}
	}
	require.NotEmpty(t, winner, "exactly one call took the reply: %v", answers)
	assert.Equal(t, api.ReplyTaken{ProposalID: st.Proposal.ID, State: supportflow.DraftRejected, Reply: reply, TakenBy: "test-all",
		OnBehalfOf: winner, TakenAt: won.TakenAt}, won)

	// Later: told who took it and when, never the reply.
	code, resp = c.do("POST", path, apiToken, []byte(`{"on_behalf_of":"Late"}`), nil)
	require.Equal(t, http.StatusConflict, code, "%s", resp)
	var taken api.TakenProblem
	require.NoError(t, json.Unmarshal(resp, &taken))
	assert.Equal(t, "/problems/reply-already-taken", taken.Type)
	assert.Equal(t, winner, taken.OnBehalfOf)
	assert.Equal(t, "test-all", taken.TakenBy)
	assert.True(t, taken.TakenAt.Equal(won.TakenAt))
	assert.Contains(t, taken.Detail, winner)
	assert.NotContains(t, string(resp), reply)

	s.waitState(tk.ID, supportflow.DraftRejected)
	code, resp = c.do("POST", "/proposals/"+st.Proposal.ID+"/approve", apiToken, nil, nil)
	assert.Equal(t, http.StatusConflict, code, "a taken proposal is rejected: never posted: %s", resp)
	assert.Zero(t, s.zd.CommentCount(tk.ID))
	held, err := proposals.New(s.pool, s.ledger.Account()).GetTakeover(context.Background(), st.Proposal.ID)
	require.NoError(t, err)
	assert.Equal(t, winner, held.OnBehalfOf)

	// A proposal that cancels a subscription is refused before anything is
	// rejected.
	requester := 73000 + ticketIDs.Add(1)
	tc := standin.Ticket{ID: 73000 + ticketIDs.Add(1), Subject: "Cancel", Description: "Please cancel my plan.",
		RequesterID: requester, RequesterName: "Ada", Status: "new"}
	s.bq.AddCustomer(requester, standin.BQCustomer{CustomerID: "cust-rm-c", ActiveSubscriptions: []string{"sub-rm-c"}})
	s.subs.AddSubscription("sub-rm-c", "cust-rm-c")
	s.model.SetResponder(func(standin.ChatRequest) string {
		return `{"reply": "Your plan is cancelled.", "cancel_subscriptions": ["sub-rm-c"]}`
	})
	s.zd.AddTicket(tc)
	s.waitMirrored(tc.ID)
	s.waitEnriched(tc.ID)
	code, resp = c.do("POST", fmt.Sprintf("/tickets/%d/drafts", tc.ID), apiToken, nil, nil)
	require.Equal(t, http.StatusAccepted, code, "%s", resp)
	stc := s.waitState(tc.ID, supportflow.DraftAwaitingApproval)
	require.NotEmpty(t, stc.Proposal.CancelSubscriptions)
	code, resp = c.do("POST", "/proposals/"+stc.Proposal.ID+"/reply-myself", apiToken, nil, nil)
	require.Equal(t, http.StatusConflict, code, "%s", resp)
	var refused api.Problem
	require.NoError(t, json.Unmarshal(resp, &refused))
	assert.Equal(t, "/problems/proposal-cancels", refused.Type)
	assert.Contains(t, refused.Detail, "cancels 1 subscription")
	assert.NotContains(t, string(resp), "Your plan is cancelled.")
	time.Sleep(500 * time.Millisecond)
	assert.Equal(t, supportflow.DraftAwaitingApproval, s.waitState(tc.ID, supportflow.DraftAwaitingApproval).State, "nothing was rejected")

	// A supervisor rejects a reply-only proposal ("wrong answer") and a
	// takeover follows at once, likely before the draft has recorded the
	// rejection: the draft accepts the repeated rejection, but the reply
	// is not handed out and nothing stays claimed.
	s.model.SetResponder(func(standin.ChatRequest) string {
		b, _ := json.Marshal(map[string]any{"reply": reply, "cancel_subscriptions": []string{}})
		return string(b)
	})
	tr := standin.Ticket{ID: 73000 + ticketIDs.Add(1), Subject: "Password", Description: "How do I reset my password?",
		RequesterID: 73000 + ticketIDs.Add(1), RequesterName: "Cy", Status: "new"}
	s.zd.AddTicket(tr)
	s.waitMirrored(tr.ID)
	code, resp = c.do("POST", fmt.Sprintf("/tickets/%d/drafts", tr.ID), apiToken, nil, nil)
	require.Equal(t, http.StatusAccepted, code, "%s", resp)
	str := s.waitState(tr.ID, supportflow.DraftAwaitingApproval)
	// The takeover's reason is reserved: a plain rejection cannot pass
	// for one.
	code, resp = c.do("POST", "/proposals/"+str.Proposal.ID+"/reject", apiToken, []byte(`{"reason":"agent replies from the editor"}`), nil)
	require.Equal(t, http.StatusBadRequest, code, "%s", resp)
	assert.Contains(t, string(resp), "reserved")
	code, resp = c.do("POST", "/proposals/"+str.Proposal.ID+"/reject", apiToken, []byte(`{"reason":"wrong answer"}`), nil)
	require.Equal(t, http.StatusOK, code, "%s", resp)
	code, resp = c.do("POST", "/proposals/"+str.Proposal.ID+"/reply-myself", apiToken, []byte(`{"on_behalf_of":"Cy"}`), nil)
	require.Equal(t, http.StatusConflict, code, "a reply a supervisor rejected is never handed out: %s", resp)
	require.NoError(t, json.Unmarshal(resp, &refused))
	assert.Equal(t, "/problems/proposal-not-awaiting-approval", refused.Type, "%s", resp)
	assert.NotContains(t, string(resp), reply)
	_, err = proposals.New(s.pool, s.ledger.Account()).GetTakeover(context.Background(), str.Proposal.ID)
	assert.ErrorIs(t, err, supportflow.ErrNotFound, "the claim was released")
}

// The sidebar polls politely and safely: it refuses a plain-HTTP api_url
// and explains a host missing from domainWhitelist; a draft requested for
// a ticket supportflow does not know yet is asked for again with backoff
// capped at 2 minutes until the webhook reports the ticket; failed reads
// back off the same way and their message goes once a read succeeds; a
// superseded draft is followed into its redraft; nothing is read while
// the app is hidden and polling resumes when it shows. Across two tabs,
// the reply goes to one agent only: the second is told who took it and
// inserts nothing. (The app's timers run 100 times faster here; the
// delays are checked as the app asked for them.)
func TestZendeskApp_PollsPolitelyAndHandsTheReplyOutOnce(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	const reply = "Reset it from the sign-in page."
	s, c := replyOnlyStack(t, reply)
	apiURL, err := url.Parse(c.url)
	require.NoError(t, err)
	p := b.page
	const (
		status  = `document.querySelector('#status').textContent`
		visible = `(s => { const e = document.querySelector(s); return !!e && !e.hidden; })`
		waitUI  = 60 * time.Second
		scale   = 0.01
	)
	requests := func() int {
		n, err := strconv.Atoi(p.evalString(`String(window.__zaf.requests.length)`))
		require.NoError(t, err)
		return n
	}

	// A plain-HTTP API URL other than this machine's is refused, with no
	// request made.
	plain := newZAFHost(t, map[string]string{"api_url": "http://supportflow.example.com", "api_token": apiToken}, []string{"supportflow.example.com"})
	p.navigate(plain.appURL(1))
	p.waitFor(visible+`('#message')`, waitUI)
	assert.Contains(t, p.text("#message"), "must be an https:// URL")
	assert.Equal(t, 0, requests())

	// The API's host missing from domainWhitelist: Zendesk's proxy refuses
	// to send the token, and the app says what to fix.
	unlisted := newZAFHost(t, map[string]string{"api_url": c.url, "api_token": apiToken}, []string{"supportflow.example.com"})
	p.navigate(unlisted.appURL(1))
	p.waitFor(visible+`('#message')`, waitUI)
	assert.Contains(t, p.text("#message"), "domainWhitelist")

	zaf := newZAFHost(t, map[string]string{"api_url": c.url, "api_token": apiToken}, []string{apiURL.Host})

	// A ticket supportflow does not know yet: the request is made again at
	// 15 s, 30 s, 1 min, then every 2 minutes.
	tk := standin.Ticket{ID: 74000 + ticketIDs.Add(1), Subject: "Password", Description: "How do I reset my password?",
		RequesterID: 74000 + ticketIDs.Add(1), RequesterName: "Bo", Status: "new"}
	p.navigate(zaf.appURLAs(tk.ID, "Ada", scale))
	p.waitFor(visible+`('#request-draft')`, waitUI)
	before := p.evalString(`String(window.__zaf.timeouts.length)`)
	p.click("#request-draft")
	p.waitFor(`window.__zaf.timeouts.slice(`+before+`).filter(ms => ms === 120000).length >= 2`, waitUI)
	assert.Equal(t, "[15000,30000,60000,120000,120000]", string(p.eval(`window.__zaf.timeouts.slice(`+before+`, `+before+`+5)`)),
		"the retries back off, capped at 2 minutes")
	assert.Contains(t, p.text("#message"), "does not know this ticket yet")
	s.zd.AddTicket(tk)
	s.waitMirrored(tk.ID)
	p.waitFor(status+` === 'Waiting for approval'`, waitUI)
	assert.Equal(t, reply, p.text("#reply"))

	// Failed reads back off too; their message goes with the next read.
	draftPath := fmt.Sprintf("/tickets/%d/draft", tk.ID)
	zaf.setOverride(func(method, path string) (int, string, bool) {
		return http.StatusServiceUnavailable, `{"type":"/problems/unavailable","title":"Service unavailable","status":503}`,
			method == "GET" && path == draftPath
	})
	before = p.evalString(`String(window.__zaf.timeouts.length)`)
	p.waitFor(`window.__zaf.timeouts.slice(`+before+`).includes(30000)`, waitUI)
	assert.Contains(t, p.text("#message"), "unavailable (503)")
	zaf.setOverride(nil)
	p.waitFor(`document.querySelector('#message').hidden && `+status+` === 'Waiting for approval'`, waitUI)

	// Superseded is not the end: the page keeps reading and follows the
	// redraft (here, the draft the proxy stops pretending about).
	zaf.setOverride(func(method, path string) (int, string, bool) {
		return http.StatusOK, fmt.Sprintf(`{"ticket_id":%d,"state":"superseded"}`, tk.ID), method == "GET" && path == draftPath
	})
	p.waitFor(status+`.startsWith('Superseded')`, waitUI)
	assert.False(t, p.evalBool(visible+`('#request-draft')`), "a redraft is running: nothing to request")
	zaf.setOverride(nil)
	p.waitFor(status+` === 'Waiting for approval'`, waitUI)

	// Hidden: no request for many poll intervals (150 ms here); shown
	// again: a read at once, and polling resumes.
	p.eval(`window.__zaf.fire('app.deactivated')`)
	time.Sleep(300 * time.Millisecond) // a read under way may still land
	n := requests()
	time.Sleep(3 * time.Second)
	assert.Equal(t, n, requests(), "no request while hidden")
	p.eval(`window.__zaf.fire('app.activated')`)
	p.waitFor(fmt.Sprintf(`window.__zaf.requests.length >= %d`, n+3), waitUI)

	// Two tabs on the ticket, for Ada and Bo, neither polling during the
	// clicks (their timers run 1000 times slower). Zendesk refuses Ada's
	// insert: she is told to copy the reply. Bo's click then gets 409: he
	// is told Ada took it, and nothing is inserted for him.
	p.navigate(zaf.tabsURL(tk.ID, "Ada", "Bo") + "&scale=1000")
	tab := func(name, expr string) string {
		return `(() => { const w = document.querySelector('#tab-` + name + `').contentWindow; return ` + expr + `; })()`
	}
	for _, name := range []string{"a", "b"} {
		p.waitFor(tab(name, `!!w.document.querySelector('#reply-myself') && !w.document.querySelector('#reply-myself').hidden`), waitUI)
	}
	p.eval(tab("a", `(w.__zaf.failInsert = true, w.document.querySelector('#reply-myself').click(), true)`))
	p.waitFor(tab("a", `/did not insert/.test(w.document.querySelector('#message').textContent)`), waitUI)
	assert.Equal(t, "0", p.evalString(tab("a", `String(w.__zaf.inserted.length)`)))
	assert.True(t, p.evalBool(tab("a", `w.__zaf.events.some(e => e.kind === 'insert-refused')`)), "Ada's insert was tried and refused")
	p.eval(tab("b", `(w.document.querySelector('#reply-myself').click(), true)`))
	p.waitFor(tab("b", `/Already taken/.test(w.document.querySelector('#message').textContent)`), waitUI)
	msgB := p.evalString(tab("b", `w.document.querySelector('#message').textContent`))
	assert.Contains(t, msgB, "Ada (through test-all)")
	assert.Contains(t, msgB, "Nothing was inserted")
	assert.Equal(t, "[]", string(p.eval(tab("b", `w.__zaf.inserted`))))
	assert.False(t, p.evalBool(tab("b", `w.__zaf.invoked.some(i => i.name === 'ticket.editor.insert')`)), "no insert tried for Bo")
	for _, name := range []string{"a", "b"} {
		p.waitFor(tab(name, `w.document.querySelector('#status').textContent === 'Rejected'`), waitUI)
		assert.False(t, p.evalBool(tab(name, `!w.document.querySelector('#request-draft').hidden`)), "tab %s offers no new draft", name)
	}
	held, err := proposals.New(s.pool, s.ledger.Account()).GetTakeover(context.Background(), s.waitState(tk.ID, supportflow.DraftRejected).Proposal.ID)
	require.NoError(t, err)
	assert.Equal(t, "Ada", held.OnBehalfOf)
	assert.Zero(t, s.zd.CommentCount(tk.ID), "supportflow posted nothing")
	assert.Empty(t, p.consoleErrors())
}
