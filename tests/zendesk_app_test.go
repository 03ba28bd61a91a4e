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

	// Only the app's own files: zcli packages everything in the directory.
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
		files = append(files, filepath.ToSlash(rel))
		return nil
	}))
	assert.ElementsMatch(t, []string{"manifest.json", "translations/en.json", "assets/iframe.html", "assets/app.js",
		"assets/app.css", "assets/logo.png", "assets/logo-small.png"}, files)

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
	whitelist []string // host:port the installer put in domainWhitelist

	mu      sync.Mutex
	proxied []proxiedCall
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
		// What the app's installation shows the browser: the plain
		// settings only (secure ones never reach it).
		visible := map[string]string{}
		for k, v := range h.settings {
			if !h.secure[k] {
				visible[k] = v
			}
		}
		cfg, _ := json.Marshal(map[string]any{
			"data": map[string]any{"ticket.id": ticket, "currentUser.name": "Agent Avery",
				"ticket.requester": map[string]any{"id": standin.DefaultRequesterID, "name": "Ada"}},
			"metadata": map[string]any{"appId": 1, "installationId": 1, "name": "supportflow", "version": "1.0.0",
				"plan": map[string]any{"name": "standard"}, "settings": visible},
			"proxy": "/zaf-proxy",
		})
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		fmt.Fprintf(w, "window.__zafStandinConfig = %s;\n", cfg)
		_, _ = w.Write(standinJS)
	})
	mux.HandleFunc("POST /zaf-proxy", h.proxy)
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	h.url = srv.URL
	return h
}

// appURL is the sidebar's page for a ticket.
func (h *zafHost) appURL(ticket int64) string {
	return fmt.Sprintf("%s/app/iframe.html?ticket=%d", h.url, ticket)
}

var settingPlaceholder = regexp.MustCompile(`\{\{setting\.([A-Za-z0-9_]+)\}\}`)

// proxy sends a request the app made on its way, as Zendesk's proxy does:
// {{setting.NAME}} is filled in only in a secure request to a whitelisted
// host.
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
	fill := func(s string) string {
		return settingPlaceholder.ReplaceAllStringFunc(s, func(m string) string {
			name := settingPlaceholder.FindStringSubmatch(m)[1]
			if v, ok := h.settings[name]; ok && h.secure[name] {
				return v
			}
			return m
		})
	}
	if req.Secure {
		if !slices.Contains(h.whitelist, u.Host) {
			http.Error(w, "secure settings are only sent to the domainWhitelist", http.StatusForbidden)
			return
		}
	} else {
		fill = func(s string) string { return s }
	}
	out, err := http.NewRequestWithContext(r.Context(), req.Type, req.URL, strings.NewReader(fill(req.Data)))
	if err != nil {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	for k, v := range req.Headers {
		out.Header.Set(k, fill(v))
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
	const replyB = `Use "Forgot password" & check <your> inbox.`
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
	require.Eventually(t, func() bool {
		st, err := s.starter.EnrichmentStatus(context.Background(), tA.ID)
		return err == nil && st.State == supportflow.EnrichEnriched && st.Found
	}, waitBudget, 50*time.Millisecond, "ticket A's requester was enriched")

	// The model holds mid-answer until the page has shown its progress.
	release := make(chan struct{})
	var releaseOnce sync.Once
	releaseModel := func() { releaseOnce.Do(func() { close(release) }) }
	t.Cleanup(releaseModel)
	s.model.Inject(standin.ModelFault{TokenDelay: 40 * time.Millisecond, HoldAfter: 3, Hold: release})

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
	// then inserts its text (as HTML-escaped text) into the editor.
	p.navigate(zaf.appURL(tB.ID))
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
	assert.Equal(t, `["Use &quot;Forgot password&quot; &amp; check &lt;your&gt; inbox."]`, string(p.eval(`window.__zaf.inserted`)),
		"the reply's text, escaped for the editor's HTML, inserted once")
	assert.Contains(t, p.text("#message"), "in the editor")
	assert.False(t, p.evalBool(visible+`('#reply-myself')`))
	// The rejection landed before the insert: the proxy saw it answered
	// 200, and supportflow now refuses to approve the proposal.
	var rejected bool
	for _, call := range zaf.calls() {
		if call.Method == "POST" && call.Path == "/proposals/"+stB.Proposal.ID+"/reject" {
			assert.Equal(t, http.StatusOK, call.Status)
			rejected = true
		}
	}
	assert.True(t, rejected, "the app rejected the proposal through the API")
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
		r.secure === true && r.headers.Authorization === 'Bearer {{setting.api_token}}' && r.url.startsWith(`+jsString(c.url)+`))`),
		"every request secure, with the placeholder: %s", p.eval(`window.__zaf.requests`))
	assert.Empty(t, p.consoleErrors())
}
