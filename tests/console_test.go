package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/api"
	"github.com/supportflow/supportflow/internal/standin"
)

// The console's tests drive the page in headless Chromium (browser_test.go)
// against the API served in-process on the test's stack.

// consoleTokens are apiTokens and two more that can read and act: an
// approver and an operator with the app role, as a deployment gives the
// people who use the console.
const (
	approverAppToken = "test-approver-app-token-0123456789"
	operatorAppToken = "test-operator-app-token-0123456789"
)

func consoleAPI(s *stack) *apiClient { return s.apiWith(consoleTokens) }

// consoleTokens gives the API consoleTokens.
func consoleTokens(cfg *api.Config) {
	cfg.Tokens = append(slices.Clone(apiTokens),
		api.Token{Name: "alice", Roles: []api.Role{api.RoleApp, api.RoleApprover}, Secret: approverAppToken},
		api.Token{Name: "ops", Roles: []api.Role{api.RoleApp, api.RoleOperator}, Secret: operatorAppToken})
}

// restartableAPI is consoleAPI's API served in-process on one address
// that can go away and come back on the same address, as an API process
// restarted behind a fixed host and port does: the console it serves
// keeps its origin.
type restartableAPI struct {
	s    *stack
	cfg  api.Config
	addr string

	mu        sync.Mutex
	srv       *api.Server
	hs        *http.Server
	relayDone chan struct{}
}

// consoleAPIRestartable is consoleAPI on an address of its own, with the
// server that serves it; it is stopped at cleanup.
func consoleAPIRestartable(s *stack) (*apiClient, *restartableAPI) {
	s.t.Helper()
	cfg := s.apiConfig()
	consoleTokens(&cfg)
	ln := listenBelowEphemeral(s.t)
	r := &restartableAPI{s: s, cfg: cfg, addr: ln.Addr().String()}
	r.serve(ln)
	s.t.Cleanup(r.stop)
	return &apiClient{t: s.t, s: s, url: "http://" + r.addr}, r
}

// listenBelowEphemeral listens on a loopback port under Linux's ephemeral
// range (32768 and up by default), so that while the API is down no
// outgoing connection of this busy machine is given its port as a source
// port, and the restart can listen on it again.
func listenBelowEphemeral(t *testing.T) net.Listener {
	t.Helper()
	for range 200 {
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", 20000+rand.IntN(12000)))
		if err == nil {
			return ln
		}
	}
	t.Fatal("no free loopback port between 20000 and 32000")
	return nil
}

// serve starts a new API server (a new process's) on ln.
func (r *restartableAPI) serve(ln net.Listener) {
	r.s.t.Helper()
	srv, err := api.New(r.cfg, r.s.starter, r.s.ledger, r.s.pool, r.s.temporal, nil)
	require.NoError(r.s.t, err)
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	relayDone := make(chan struct{})
	go func() { srv.RunRelay(context.Background()); close(relayDone) }()
	go func() { _ = hs.Serve(ln) }()
	r.mu.Lock()
	r.srv, r.hs, r.relayDone = srv, hs, relayDone
	r.mu.Unlock()
}

// stop takes the API away at once: its listener and every connection,
// the page's event stream too, are closed; then its relay ends. Stopping
// a stopped API does nothing.
func (r *restartableAPI) stop() {
	r.mu.Lock()
	srv, hs, relayDone := r.srv, r.hs, r.relayDone
	r.srv, r.hs, r.relayDone = nil, nil, nil
	r.mu.Unlock()
	if srv == nil {
		return
	}
	_ = hs.Close()
	srv.Close()
	<-relayDone
}

// start serves a new API on the same address, retrying for a while if
// the port is briefly busy.
func (r *restartableAPI) start() {
	r.s.t.Helper()
	var ln net.Listener
	require.Eventually(r.s.t, func() bool {
		var err error
		ln, err = net.Listen("tcp", r.addr)
		return err == nil
	}, 10*time.Second, 100*time.Millisecond, "listen again on %s", r.addr)
	r.serve(ln)
}

// consoleInits is each page's init script from openConsole: one at a
// time, so a later call's token is not overwritten by an earlier call's
// script and fetch is wrapped once.
var consoleInits sync.Map // *page → script identifier

// openConsole opens the console at hash (e.g. "#/tickets/7") signed in
// with token (kept where the console keeps it: sessionStorage), in a new
// document, and counts the POSTs the page sends (window.__posts).
func openConsole(p *page, c *apiClient, token, hash string) {
	p.t.Helper()
	if prev, ok := consoleInits.LoadAndDelete(p); ok {
		p.call("Page.removeScriptToEvaluateOnNewDocument", map[string]any{"identifier": prev}, nil)
	}
	var added struct {
		Identifier string `json:"identifier"`
	}
	p.call("Page.addScriptToEvaluateOnNewDocument", map[string]any{"source": fmt.Sprintf(`if (location.protocol.startsWith("http")) sessionStorage.setItem("supportflow.token", %s);
window.__posts = [];
{ const f = window.fetch; window.fetch = function (u, init) { if (init && init.method === "POST") window.__posts.push(String(u)); return f.apply(this, arguments); }; }`,
		jsString(token))}, &added)
	consoleInits.Store(p, added.Identifier)
	p.navigate("about:blank")
	p.navigate(c.url + "/console/" + hash)
	// The page leaves before the API closes: the test server's Close waits
	// for open requests, and the page holds an event stream open.
	p.t.Cleanup(func() { _ = p.b.try(p.session, "Page.navigate", map[string]any{"url": "about:blank"}, nil) })
}

// noConsoleErrors asserts the page threw nothing and logged no error.
func noConsoleErrors(t *testing.T, p *page) {
	t.Helper()
	assert.Empty(t, p.consoleErrors(), "the page's exceptions and console errors")
}

func sel(format string, args ...any) string { return fmt.Sprintf(format, args...) }

const pageWait = 90 * time.Second

// A drafted proposal is listed waiting for a person, with what it
// proposes; its page shows the conversation the model saw, the reply and
// each cancellation with its plan and the comment that asked; a double
// click on Approve sends one request and makes one execution; the page
// then shows the reply posted (its comment ID) and each cancellation done,
// and who approved.
func TestConsole_ApproveOnceAndSeeTheLegs(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	s := newStack(t)
	s.startWorker()
	c := consoleAPI(s)
	ticket := s.seedOwnedTicket("Please cancel both of my plans, thank you.", "cust-console-1", "sub-c1", "sub-c2")
	s.subs.AddSubscriptionWithPlan("sub-c1", "cust-console-1", "coffee-monthly")
	s.subs.AddSubscriptionWithPlan("sub-c2", "cust-console-1", "tea-weekly")
	prop := s.draftAwaiting(ticket)
	require.Equal(t, []string{"sub-c1", "sub-c2"}, prop.CancelSubscriptions)

	p := b.page
	openConsole(p, c, apiToken, "")
	row := sel(`tr[data-proposal=%s]`, jsString(prop.ID))
	p.waitFor(sel("document.querySelector(%s)", jsString(row)), pageWait)
	text := p.text(row)
	assert.Contains(t, text, fmt.Sprintf("Ticket %d", ticket))
	assert.Contains(t, text, "Waiting for a person")
	assert.Contains(t, text, fmt.Sprintf("A reply of %d characters; 2 cancellations", utf8.RuneCountInString(prop.Reply)))
	assert.Equal(t, "awaiting_approval", p.evalString(`document.getElementById("state-filter").value`))
	p.screenshot("console-drafts")

	p.click(row + " a")
	p.waitFor(`document.getElementById("approve") && document.getElementById("comments") && document.getElementById("proposal-drafted")`, pageWait)
	assert.Equal(t, prop.ID, p.text("#shown-proposal-id"))
	assert.Equal(t, prop.Reply, p.text("#reply"))
	assert.Contains(t, p.text("#comments"), "Please cancel both of my plans")
	assert.Contains(t, p.text(`#comments li[data-role="requester"]`), "Customer (requester)")
	c1 := p.text(`li[data-subscription="sub-c1"]`)
	assert.Contains(t, c1, "coffee-monthly")
	assert.Contains(t, c1, "active")
	assert.Contains(t, c1, "Customer (requester)", "the comment that asked")
	assert.Contains(t, p.text(`li[data-subscription="sub-c2"]`), "tea-weekly")
	p.screenshot("console-draft")

	p.doubleClick("#approve")
	p.waitFor(`document.querySelector('#execution-state[data-state="applied"]')`, pageWait)
	assert.Equal(t, "1", string(p.eval(`window.__posts.filter(u => u.endsWith("/approve")).length`)), "one approval request: %s", p.eval("window.__posts"))
	public, _ := s.splitComments(ticket)
	require.Len(t, public, 1, "one public comment")
	assert.Equal(t, 1, s.subs.Cancellations("sub-c1"))
	assert.Equal(t, 1, s.subs.Cancellations("sub-c2"))
	assert.Equal(t, 2, s.cancelRequests(), "one cancel request a subscription")
	p.waitFor(`document.querySelectorAll('#legs tr[data-state="done"]').length === 3`, pageWait)
	assert.Contains(t, p.text(`#legs tr[data-kind="reply"]`), fmt.Sprintf("Reply posted as comment %d", public[0].ID))
	assert.Contains(t, p.text(`#legs tr[data-kind="cancel_subscription"][data-target="sub-c1"]`), "Subscription sub-c1 cancelled")
	assert.Contains(t, p.text(`#legs tr[data-kind="cancel_subscription"][data-target="sub-c2"]`), "Subscription sub-c2 cancelled")
	p.waitFor(`document.getElementById("decision") && document.getElementById("decision").innerText.includes("Approved by test-all")`, pageWait)
	assert.False(t, p.exists("#approve"), "no approve button once approved")
	// The draft's own state follows: done, in words.
	p.waitFor(`document.getElementById("draft-state").innerText.includes("Done")`, pageWait)
	p.screenshot("console-executed")

	// The conversation the page showed is the one the model was given.
	code, body := c.do("GET", fmt.Sprintf("/tickets/%d/draft/conversation?proposal_id=%s", ticket, prop.ID), appToken, nil, nil)
	require.Equal(t, http.StatusOK, code, "%s", body)
	var conv api.ConversationView
	require.NoError(t, json.Unmarshal(body, &conv))
	assert.True(t, conv.Drafted)
	require.NotEmpty(t, conv.Comments)
	assert.Equal(t, supportflow.RoleRequester, conv.Comments[0].AuthorRole)
	assert.Equal(t, []string{"sub-c1", "sub-c2"}, conv.ActiveSubscriptions)
	require.Len(t, conv.Cancellations, 2)
	require.NotNil(t, conv.Cancellations[0].AskedIn)
	assert.Equal(t, conv.Comments[len(conv.Comments)-1].ID, conv.Cancellations[0].AskedIn.ID)
	noConsoleErrors(t, p)
}

// The page is open on proposal P; the customer writes again, so a new
// proposal supersedes P. The page keeps showing P (its buttons act on P
// only) and says a newer one exists; approving P is refused and
// explained; the current proposal is offered, and approving it works.
func TestConsole_StalePageIsRefusedAndExplained(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	s := newStack(t)
	s.startWorker()
	c := consoleAPI(s)
	ticket := s.seedOwnedTicket("Where is my order?", "cust-console-2")
	first := s.draftAwaiting(ticket)

	p := b.page
	openConsole(p, c, approverAppToken, fmt.Sprintf("#/tickets/%d", ticket))
	p.waitFor(sel(`document.getElementById("approve") && document.getElementById("proposal-drafted") && document.getElementById("shown-proposal-id").innerText === %s`, jsString(first.ID)), pageWait)

	// A second later: activity in the second the draft read is not news.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	s.zd.AddComment(ticket, standin.SeedComment{Body: "Also, can I change my address?"})
	ok, err := s.starter.Supersede(ctxT(t), ticket, supportflow.TicketActivity{At: time.Now(), Source: "test"})
	require.NoError(t, err)
	require.True(t, ok)
	second := s.waitDraft(ticket, "redrafted", func(st supportflow.DraftStatus) bool {
		return st.State == supportflow.DraftAwaitingApproval && st.Proposal != nil && st.Proposal.ID != first.ID
	})
	p.waitFor(`document.getElementById("newer-notice") && document.getElementById("newer-notice").innerText.includes("newer proposal")`, pageWait)
	assert.Equal(t, first.ID, p.text("#shown-proposal-id"), "the page still shows the proposal it was opened on")

	p.click("#approve")
	p.waitFor(`document.getElementById("refusal")`, pageWait)
	refusal := p.text("#refusal")
	assert.Contains(t, refusal, "can no longer be approved")
	assert.Contains(t, refusal, "The customer wrote again")
	assert.Equal(t, "refusal", p.evalString("document.activeElement.id"), "the explanation takes the focus")
	p.screenshot("console-stale")
	assert.Zero(t, s.zd.CommentCount(ticket), "nothing was posted")

	p.click("#show-current")
	p.waitFor(sel(`document.getElementById("approve") && document.getElementById("proposal-drafted") && document.getElementById("shown-proposal-id").innerText === %s`, jsString(second.Proposal.ID)), pageWait)
	// The new proposal's conversation has the customer's new comment.
	p.waitFor(`document.getElementById("comments") && document.getElementById("comments").innerText.includes("change my address")`, pageWait)
	p.click("#approve")
	p.waitFor(`document.querySelector('#execution-state[data-state="applied"]')`, pageWait)
	public, _ := s.splitComments(ticket)
	require.Len(t, public, 1)
	assert.Equal(t, second.Proposal.Reply, public[0].Body)
	p.waitFor(`document.getElementById("decision") && document.getElementById("decision").innerText.includes("Approved by alice")`, pageWait)
	old, err := s.proposalStore.GetProposal(context.Background(), first.ID)
	require.NoError(t, err)
	assert.Equal(t, supportflow.DraftSuperseded, old.State)
	noConsoleErrors(t, p)
}

// The token's roles decide which buttons exist: app alone reads (no
// approve, reject or retry); an approver approves and rejects; an operator
// retries an execution that needs attention; a token without app is told
// what it needs.
func TestConsole_RolesDecideTheButtons(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	s := newStack(t)
	s.startWorker()
	c := consoleAPI(s)
	ticket := s.seedOwnedTicket("Please cancel my plan.", "cust-console-3", "sub-r3")
	s.subs.Inject(standin.Fault{Method: "POST", Path: "/v1/subscriptions/sub-r3/cancel", Status: 422, Times: -1})
	first := s.draftAwaiting(ticket)
	p := b.page

	// app alone: reads everything, decides nothing.
	pageOf := func(id string) string { return fmt.Sprintf("#/tickets/%d?proposal=%s", ticket, id) }
	openConsole(p, c, appToken, pageOf(first.ID))
	p.waitFor(`document.getElementById("no-decide")`, pageWait)
	assert.Contains(t, p.text("#no-decide"), "approver role")
	assert.False(t, p.exists("#approve"))
	assert.False(t, p.exists("#reject"))
	assert.False(t, p.exists("#reject-reason"))

	// Another ticket's page named with this proposal says whose it is,
	// links there, and offers no decision, even to an approver.
	elsewhere := ticket + 1_000_000
	openConsole(p, c, approverAppToken, fmt.Sprintf("#/tickets/%d?proposal=%s", elsewhere, first.ID))
	p.waitFor(`document.getElementById("foreign-proposal")`, pageWait)
	assert.Contains(t, p.text("#foreign-proposal"), fmt.Sprintf("Proposal %s belongs to ticket %d", first.ID, ticket))
	assert.Equal(t, pageOf(first.ID), p.evalString(`document.getElementById("foreign-proposal-link").getAttribute("href")`))
	assert.False(t, p.exists("#approve"))
	assert.False(t, p.exists("#reject"))
	assert.False(t, p.exists("#reply"), "the other ticket's reply is not shown")

	// The approver sees both buttons, and approves: the cancellation is
	// refused, so the execution needs attention.
	openConsole(p, c, approverAppToken, pageOf(first.ID))
	p.waitFor(`document.getElementById("approve") && document.getElementById("reject") && document.getElementById("proposal-drafted") && document.querySelector("label[for=reject-reason]")`, pageWait)
	p.click("#approve")
	p.waitFor(`document.querySelector('#execution-state[data-state="needs_attention"]')`, pageWait)
	assert.Contains(t, p.text("#execution"), "Needs attention")
	assert.Contains(t, p.text(`#legs tr[data-kind="cancel_subscription"]`), "What happened")
	assert.False(t, p.exists("#retry"), "an approver does not retry")
	assert.Contains(t, p.text("#no-retry"), "operator role")
	s.waitProposalState(first.ID, supportflow.DraftFailed)

	// The operator sees Retry on the failed execution, and no approve on
	// the ticket's redraft.
	openConsole(p, c, operatorAppToken, pageOf(first.ID))
	p.waitFor(`document.getElementById("retry") && document.querySelector('#execution-state[data-state="needs_attention"]')`, pageWait)
	assert.Contains(t, p.text("#proposal-state"), "Failed")
	p.screenshot("console-needs-attention")
	redraft := s.waitDraft(ticket, "redrafted", func(st supportflow.DraftStatus) bool {
		return st.State == supportflow.DraftAwaitingApproval && st.Proposal != nil && st.Proposal.ID != first.ID
	})
	openConsole(p, c, operatorAppToken, pageOf(redraft.Proposal.ID))
	p.waitFor(`document.getElementById("no-decide")`, pageWait)
	assert.False(t, p.exists("#approve"))
	assert.False(t, p.exists("#retry"), "nothing to retry on a proposal awaiting approval")

	// The approver can reject the redraft, with a reason, and the page
	// says who rejected it and why.
	openConsole(p, c, approverAppToken, pageOf(redraft.Proposal.ID))
	p.waitFor(`document.getElementById("reject") && document.getElementById("proposal-drafted")`, pageWait)
	p.typeInto("#reject-reason", "An agent is handling this by phone.")
	p.click("#reject")
	p.waitFor(`document.getElementById("decision") && document.getElementById("decision").innerText.includes("Rejected by alice")`, pageWait)
	assert.Contains(t, p.text("#decision"), "An agent is handling this by phone.")

	// A token without app is told what it needs.
	openConsole(p, c, approverToken, "")
	p.waitFor(`document.getElementById("needs-role")`, pageWait)
	assert.Contains(t, p.text("#needs-role"), "needs the app role")
	assert.Contains(t, p.text("#signed-in-as"), "test-approver")
	noConsoleErrors(t, p)
}

// The page asks for a draft and shows its progress while the model
// streams; the worker is SIGKILLed mid-answer and started again; the same
// page, never reloaded, ends on the proposal.
func TestConsole_DraftSurvivesWorkerRestart(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	s := newStack(t)
	ticket := s.seedOwnedTicket("Please cancel my subscription.", "cust-console-4", "sub-w4")
	hit := make(chan struct{}, 4)
	// The first answer holds after a few tokens until the test ends, so
	// the worker is killed mid-answer however loaded the machine is.
	s.model.Inject(standin.ModelFault{TokenDelay: 150 * time.Millisecond, Arrived: hit, HoldAfter: 3, Hold: heldUntilCleanup(t)})
	s.startWorker()
	c := consoleAPI(s)

	p := b.page
	openConsole(p, c, apiToken, fmt.Sprintf("#/tickets/%d", ticket))
	p.waitFor(`document.getElementById("request-draft")`, pageWait)
	p.eval(`window.__sameDocument = "yes"`)
	p.click("#request-draft")
	select {
	case <-hit:
	case <-time.After(waitBudget):
		t.Fatal("the model was never called")
	}
	p.waitFor(`/Streaming: [0-9]+ tokens? so far/.test(document.getElementById("draft-progress").innerText)`, pageWait)
	assert.Contains(t, p.text("#draft-state"), "Drafting a reply")
	p.screenshot("console-progress")

	s.killWorker()
	p.waitFor(`document.getElementById("draft-progress").innerText.includes("No worker is answering")`, pageWait)
	s.startWorker()
	p.waitFor(`document.getElementById("approve") && document.getElementById("shown-proposal-id")`, pageWait)
	assert.Equal(t, "yes", p.evalString("window.__sameDocument"), "the page was not reloaded")
	assert.Contains(t, p.text("#draft-state"), "Waiting for a person")
	st := s.waitState(ticket, supportflow.DraftAwaitingApproval)
	assert.Equal(t, st.Proposal.ID, p.text("#shown-proposal-id"))
	assert.Equal(t, 1, s.proposals(ticket), "exactly one proposal")
	assert.Equal(t, "1", string(p.eval(`window.__posts.filter(u => u.endsWith("/drafts")).length`)), "one draft request")

	// The worker dies while the draft awaits approval: nothing changes but
	// that no worker answers, and the page is told; it comes back, and the
	// page is told that too.
	s.killWorker()
	p.waitFor(`document.getElementById("draft-progress").innerText.includes("No worker is answering")`, pageWait)
	assert.True(t, p.exists("#approve"), "the proposal can still be approved")
	assert.Equal(t, st.Proposal.ID, p.text("#shown-proposal-id"))
	s.startWorker()
	p.waitFor(`!document.getElementById("draft-progress").innerText.includes("No worker is answering")`, pageWait)
	assert.Contains(t, p.text("#draft-state"), "Waiting for a person")
	assert.Equal(t, "yes", p.evalString("window.__sameDocument"), "the page was not reloaded")
	noConsoleErrors(t, p)
}

// The page follows a draft while the model streams; the API serving it
// goes away (its connections closed) and comes back on the same address.
// The same page, never reloaded, says in words that the API cannot be
// reached while it is away, reconnects by itself and ends on the proposal.
func TestConsole_DraftSurvivesAPIRestart(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	s := newStack(t)
	ticket := s.seedOwnedTicket("Please cancel my subscription.", "cust-console-5", "sub-a5")
	hit := make(chan struct{}, 4)
	// The answer holds after a few tokens until the API is back, so the
	// draft is mid-answer for the whole restart however loaded the
	// machine is.
	hold, release := releasableHold(t)
	s.model.Inject(standin.ModelFault{TokenDelay: 150 * time.Millisecond, Arrived: hit, HoldAfter: 3, Hold: hold})
	s.startWorker()
	c, srv := consoleAPIRestartable(s)

	p := b.page
	openConsole(p, c, apiToken, fmt.Sprintf("#/tickets/%d", ticket))
	p.waitFor(`document.getElementById("request-draft")`, pageWait)
	p.eval(`window.__sameDocument = "yes"`)
	p.click("#request-draft")
	select {
	case <-hit:
	case <-time.After(waitBudget):
		t.Fatal("the model was never called")
	}
	p.waitFor(`/Streaming: [0-9]+ tokens? so far/.test(document.getElementById("draft-progress").innerText) && document.getElementById("connection").dataset.kind === "live"`, pageWait)

	srv.stop()
	_, err := http.Get(c.url + "/console/")
	var opErr *net.OpError
	require.ErrorAs(t, err, &opErr, "the API is away")
	p.waitFor(`document.getElementById("connection").dataset.kind === "reconnecting" && document.getElementById("connection").innerText.includes("The API cannot be reached")`, pageWait)
	assert.Contains(t, p.text("#draft-state"), "Drafting a reply", "the last status known stays")
	p.screenshot("console-reconnecting")

	// Back on the same address, the page reconnects by itself; only then
	// is the answer let go, so the proposal reaches the page through the
	// new server. (The progress is not asserted again: a loaded machine
	// may pass the held attempt's 20 s deadline, and the retry is not
	// held.)
	srv.start()
	p.waitFor(`document.getElementById("connection").dataset.kind === "live"`, pageWait)
	release()
	p.waitFor(`document.getElementById("approve") && document.getElementById("shown-proposal-id")`, pageWait)
	assert.Equal(t, "yes", p.evalString("window.__sameDocument"), "the page was not reloaded")
	assert.Equal(t, c.url+"/console/", p.evalString(`location.origin + location.pathname`), "the page kept its address")
	assert.Contains(t, p.text("#draft-state"), "Waiting for a person")
	st := s.waitState(ticket, supportflow.DraftAwaitingApproval)
	assert.Equal(t, st.Proposal.ID, p.text("#shown-proposal-id"))
	assert.Equal(t, 1, s.proposals(ticket), "exactly one proposal")
	assert.Equal(t, "1", string(p.eval(`window.__posts.filter(u => u.endsWith("/drafts")).length`)), "one draft request")
	// The page logs nothing for the failed calls (the browser's own
	// "Failed to load resource" lines are not console.error calls).
	noConsoleErrors(t, p)
}

// The console's assets carry a strict Content-Security-Policy and load
// nothing from elsewhere; /console redirects to /console/; the console's
// reads need a token and the app role, and bad filters are refused with a
// clear detail; a person signs in with the keyboard and signs out.
func TestConsole_AssetsAndRoutes(t *testing.T) {
	t.Parallel()
	b := startBrowser(t)
	s := newStack(t)
	c := consoleAPI(s)

	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Get(c.url + "/console")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusMovedPermanently, resp.StatusCode)
	assert.Equal(t, "console/", resp.Header.Get("Location"), "relative, so a path prefix in front of the API is kept")

	for _, asset := range []struct{ path, typ string }{{"/console/", "text/html"}, {"/console/app.js", "text/javascript"}, {"/console/style.css", "text/css"}} {
		resp, err := http.Get(c.url + asset.path)
		require.NoError(t, err)
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		assert.Equal(t, http.StatusOK, resp.StatusCode, asset.path)
		assert.Contains(t, resp.Header.Get("Content-Type"), asset.typ, asset.path)
		csp := resp.Header.Get("Content-Security-Policy")
		assert.Contains(t, csp, "default-src 'self'", asset.path)
		assert.Contains(t, csp, "script-src 'self'", asset.path)
		assert.Contains(t, csp, "frame-ancestors 'self'", asset.path)
		assert.NotContains(t, csp, "unsafe-inline", asset.path)
		assert.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"), asset.path)
		assert.Equal(t, "no-cache", resp.Header.Get("Cache-Control"), asset.path)
		body := string(raw)
		assert.NotContains(t, body, "http://", "%s loads nothing from elsewhere", asset.path)
		assert.NotContains(t, body, "https://", "%s loads nothing from elsewhere", asset.path)
		if asset.typ == "text/html" {
			for _, tag := range strings.Split(body, "<script")[1:] {
				assert.Contains(t, tag[:strings.Index(tag, ">")], "src=", "no inline script")
			}
		}
	}
	code, _ := c.do("GET", "/console/nothing-here.js", "", nil, nil)
	assert.Equal(t, http.StatusNotFound, code)

	// Unauthenticated reads are 401; without app, 403.
	for _, path := range []string{"/whoami", "/proposals", "/proposals/p-1", "/tickets/1/draft/conversation"} {
		code, body := c.do("GET", path, "", nil, nil)
		assert.Equal(t, http.StatusUnauthorized, code, "%s: %s", path, body)
		code, _ = c.do("GET", path, "not-a-valid-token-at-all", nil, nil)
		assert.Equal(t, http.StatusUnauthorized, code, path)
	}
	code, body := c.do("GET", "/proposals", approverToken, nil, nil)
	assert.Equal(t, http.StatusForbidden, code, "%s", body)
	assert.Contains(t, string(body), "needs the app role")
	code, body = c.do("GET", "/whoami", approverToken, nil, nil)
	require.Equal(t, http.StatusOK, code, "%s", body)
	assert.JSONEq(t, `{"name":"test-approver","roles":["approver"]}`, string(body))

	// Bad filters: 400 with what would be right.
	before := s.world()
	for q, want := range map[string]string{
		"state=pending":        "state must be one of awaiting_approval",
		"limit=0":              "limit must be a whole number from 1 to 200",
		"limit=201":            "limit must be a whole number from 1 to 200",
		"limit=ten":            "limit must be a whole number from 1 to 200",
		"ticket_id=-4":         "ticket_id",
		"sort=oldest":          "unknown query parameter",
		"state=done&state=new": "more than once",
	} {
		code, body := c.do("GET", "/proposals?"+q, appToken, nil, nil)
		assert.Equal(t, http.StatusBadRequest, code, "%s: %s", q, body)
		assert.Contains(t, string(body), "invalid-filter", q)
		assert.Contains(t, string(body), want, q)
	}
	code, body = c.do("GET", "/proposals?state=done&limit=200", appToken, nil, nil)
	assert.Equal(t, http.StatusOK, code, "%s", body)
	assert.JSONEq(t, `{"proposals":[],"limit":200}`, string(body))
	code, _ = c.do("GET", "/proposals/no-such-proposal", appToken, nil, nil)
	assert.Equal(t, http.StatusNotFound, code)
	code, _ = c.do("GET", "/proposals/bad%20id", appToken, nil, nil)
	assert.Equal(t, http.StatusBadRequest, code)
	code, body = c.do("GET", "/tickets/99999999/draft/conversation", appToken, nil, nil)
	assert.Equal(t, http.StatusNotFound, code, "%s", body)
	assert.Contains(t, string(body), "conversation-gone")
	assert.Equal(t, before, s.world(), "reads change nothing")

	// Sign in with the keyboard; sign out clears the token.
	p := b.page
	p.navigate(c.url + "/console/")
	p.waitFor(`document.activeElement && document.activeElement.id === "token"`, pageWait)
	assert.NotEmpty(t, p.evalString(`document.querySelector("label[for=token]").innerText`))
	p.screenshot("console-sign-in")
	p.typeInto("#token", "not-a-valid-token-at-all")
	p.press("Enter")
	p.waitFor(`document.getElementById("sign-in-error").innerText.includes("does not accept")`, pageWait)
	assert.Equal(t, "", p.evalString(`sessionStorage.getItem("supportflow.token") || ""`))
	p.eval(`document.getElementById("token").value = ""`)
	p.typeInto("#token", appToken)
	p.press("Enter")
	p.waitFor(`document.getElementById("signed-in-as")`, pageWait)
	assert.Contains(t, p.text("#signed-in-as"), "test-app")
	assert.Equal(t, appToken, p.evalString(`sessionStorage.getItem("supportflow.token")`))
	p.waitFor(`document.getElementById("no-drafts")`, pageWait)

	// The skip link focuses the content; a hash that is not a page ("#main")
	// changes nothing on the page.
	p.eval(`document.getElementById("skip-link").click()`)
	assert.Equal(t, "main", p.evalString("document.activeElement.id"), "the skip link focuses the content")
	p.eval(`location.hash = "#main"; new Promise((r) => setTimeout(r, 500))`)
	assert.True(t, p.exists("#no-drafts"), "the drafts list stays: %s", p.text("#main"))
	assert.True(t, p.exists("#state-filter"), "the filter is still there")
	// The filter applies in place and keeps the focus.
	p.eval(`(() => { const s = document.getElementById("state-filter"); s.focus(); s.value = "done"; s.dispatchEvent(new Event("change")); })()`)
	p.waitFor(`document.getElementById("no-drafts") && document.getElementById("no-drafts").innerText.includes("No drafts in this state") && location.hash === "#/?state=done"`, pageWait)
	assert.Equal(t, "state-filter", p.evalString("document.activeElement.id"), "the filter keeps the focus")
	p.click("#sign-out")
	p.waitFor(`document.getElementById("sign-in")`, pageWait)
	assert.Equal(t, "", p.evalString(`sessionStorage.getItem("supportflow.token") || ""`))
	noConsoleErrors(t, p)
}
