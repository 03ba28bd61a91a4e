package tests

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/codec"
	"github.com/supportflow/supportflow/internal/api"
	"github.com/supportflow/supportflow/internal/standin"
)

const (
	// apiToken holds every role: most tests drive the whole path with it.
	apiToken = "test-api-token-0123456789"
	// appToken, approverToken and operatorToken hold one role each
	// (TestAPI_RolesAndAttribution).
	appToken      = "test-app-token-0123456789"
	approverToken = "test-approver-token-0123456789"
	operatorToken = "test-operator-token-0123456789"
	codecToken    = "test-codec-token-0123456789"
	webUIOrigin   = "http://127.0.0.1:8233"
	webhookSecret = "test-webhook-signing-secret"
)

// apiTokens are the API's tokens in the tests, named as a deployment
// names them (SUPPORTFLOW_API_TOKENS is apiTokensEnv).
var apiTokens = []api.Token{
	{Name: "test-all", Roles: api.Roles, Secret: apiToken},
	{Name: "test-app", Roles: []api.Role{api.RoleApp}, Secret: appToken},
	{Name: "test-approver", Roles: []api.Role{api.RoleApprover}, Secret: approverToken},
	{Name: "test-operator", Roles: []api.Role{api.RoleOperator}, Secret: operatorToken},
}

// apiTokensEnv is apiTokens in SUPPORTFLOW_API_TOKENS's format.
func apiTokensEnv() string {
	var entries []string
	for _, t := range apiTokens {
		var roles []string
		for _, r := range t.Roles {
			roles = append(roles, string(r))
		}
		entries = append(entries, t.Name+":"+strings.Join(roles, "+")+":"+t.Secret)
	}
	return strings.Join(entries, ",")
}

// apiClient is the HTTP API in front of a stack, served in-process on the
// stack's starter and ledger (the same account as its worker).
type apiClient struct {
	t   *testing.T
	s   *stack
	url string
}

func (s *stack) api() *apiClient { return s.apiWith(nil) }

// apiConfig is the configuration the tests' API servers start from.
func (s *stack) apiConfig() api.Config {
	s.t.Helper()
	keys, err := codec.ParseKeyring(s.payloadKeys, "test keys")
	require.NoError(s.t, err)
	return api.Config{Tokens: apiTokens, WebhookSecret: webhookSecret, PollInterval: 50 * time.Millisecond,
		ZendeskUserID: standin.ZendeskAgentID, WebhookRetryAfter: time.Second, RelayInterval: 200 * time.Millisecond,
		Codec: &codec.Codec{Keys: keys}, CodecTokens: []string{codecToken}, CodecOrigins: []string{webUIOrigin}, Namespace: "default"}
}

// apiWith is api with its configuration changed by mod first.
func (s *stack) apiWith(mod func(*api.Config)) *apiClient {
	s.t.Helper()
	cfg := s.apiConfig()
	if mod != nil {
		mod(&cfg)
	}
	srv, err := api.New(cfg, s.starter, s.ledger, s.pool, s.temporal, nil)
	require.NoError(s.t, err)
	hs := httptest.NewServer(srv)
	relayDone := make(chan struct{})
	go func() { srv.RunRelay(context.Background()); close(relayDone) }()
	// The server first: it ends the event streams a browser may still hold,
	// which hs.Close would otherwise wait for.
	s.t.Cleanup(func() { srv.Close(); hs.CloseClientConnections(); hs.Close(); <-relayDone })
	return &apiClient{t: s.t, s: s, url: hs.URL}
}

// subscribe points the Zendesk stand-in's ticket event webhook at the API,
// as an admin does in Zendesk: every later ticket change is delivered.
func (c *apiClient) subscribe(cfg standin.WebhookConfig) {
	cfg.URL, cfg.Secret = c.url+"/webhooks/zendesk", webhookSecret
	c.s.zd.SetWebhook(cfg)
}

func (c *apiClient) do(method, path, token string, body []byte, header http.Header) (int, []byte) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.url+path, bytes.NewReader(body))
	require.NoError(c.t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// signed returns headers for a webhook body signed at ts.
func signed(ts time.Time, body []byte) http.Header {
	stamp := ts.UTC().Format(time.RFC3339)
	return http.Header{
		api.SignatureHeader:          {api.Sign(webhookSecret, stamp, body)},
		api.SignatureTimestampHeader: {stamp},
		"Content-Type":               {"application/json"},
	}
}

// ticketEvent is a Zendesk ticket event webhook body for ticket, as the
// documented envelope has it (string IDs, upper-case status).
func ticketEvent(t *testing.T, eventType string, ticket standin.Ticket, event map[string]any) []byte {
	t.Helper()
	now := time.Now().UTC()
	if event == nil {
		event = map[string]any{}
	}
	b, err := json.Marshal(map[string]any{
		"account_id": 1, "id": fmt.Sprintf("test-%d-%d", ticket.ID, now.UnixNano()), "time": now.Format(time.RFC3339Nano),
		"type": "zen:event-type:ticket." + eventType, "zendesk_event_version": "2022-11-06",
		"subject": fmt.Sprintf("zen:ticket:%d", ticket.ID),
		"detail": map[string]any{"id": fmt.Sprint(ticket.ID), "actor_id": fmt.Sprint(ticket.RequesterID),
			"requester_id": fmt.Sprint(ticket.RequesterID), "status": strings.ToUpper(ticket.Status), "subject": ticket.Subject,
			"created_at": now.Format(time.RFC3339), "updated_at": now.Format(time.RFC3339), "via": map[string]any{"channel": "web_service"}},
		"event": event,
	})
	require.NoError(t, err)
	return b
}

// sse reads a draft's event stream, sending each status on the channel,
// and closes it when the stream ends.
func (c *apiClient) sse(ticket int64) <-chan supportflow.DraftStatus {
	// A stream that never ends fails the test instead of hanging it.
	ctx, cancel := context.WithTimeout(context.Background(), waitBudget)
	c.t.Cleanup(cancel)
	req, err := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("%s/tickets/%d/draft/events", c.url, ticket), nil)
	require.NoError(c.t, err)
	req.Header.Set("Authorization", "Bearer "+apiToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(c.t, err)
	require.Equal(c.t, http.StatusOK, resp.StatusCode)
	require.Equal(c.t, "text/event-stream", resp.Header.Get("Content-Type"))
	out := make(chan supportflow.DraftStatus, 64)
	go func() {
		defer close(out)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			data, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			var st supportflow.DraftStatus
			if json.Unmarshal([]byte(data), &st) == nil {
				out <- st
			}
		}
	}()
	return out
}

// The whole path through the HTTP API: Zendesk's webhook for a new ticket
// mirrors it and starts its enrichment; the app requests a draft and
// watches its SSE stream through awaiting_approval; the approval executes
// it: exactly one comment, the subscription cancelled, and the action's
// ledger row applied.
func TestAPI_WebhookEnrichDraftApproveEndToEnd(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.extraEnv = []string{"SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY=200ms", "SUPPORTFLOW_ENRICH_UPDATE_DELAY=200ms"}
	s.startWorker()
	c := s.api()
	c.subscribe(standin.WebhookConfig{})

	requester := 40000 + ticketIDs.Add(1)
	ticket := standin.Ticket{ID: 40000 + ticketIDs.Add(1), Subject: "Cancel please", Description: "Please cancel my subscription.",
		RequesterID: requester, RequesterName: "Ada", Status: "new"}
	s.bq.AddCustomer(requester, standin.BQCustomer{CustomerID: "cust-7", Orders: 3, ActiveSubscriptions: []string{"sub-7"}})
	s.subs.AddSubscription("sub-7", "cust-7")
	s.zd.AddTicket(ticket) // Zendesk delivers ticket.created to the webhook

	s.waitEnriched(ticket.ID)

	// The model is mid-answer, holding after a few tokens, until the
	// stream has shown them: on a loaded machine a whole answer can come
	// and go between two of the stream's polls.
	hold, releaseModel := releasableHold(t)
	s.model.Inject(standin.ModelFault{TokenDelay: 40 * time.Millisecond, HoldAfter: 3, Hold: hold})
	code, resp := c.do("POST", fmt.Sprintf("/tickets/%d/drafts", ticket.ID), apiToken, nil, nil)
	require.Equal(t, http.StatusAccepted, code, "%s", resp)
	var started api.DraftStarted
	require.NoError(t, json.Unmarshal(resp, &started))
	assert.Equal(t, fmt.Sprintf("/tickets/%d/draft", ticket.ID), started.StatusURL)

	var states []string
	var awaiting supportflow.DraftStatus
	sawTokens := false
	stream := c.sse(ticket.ID)
	for st := range stream {
		if len(states) == 0 || states[len(states)-1] != st.State {
			states = append(states, st.State)
		}
		if st.Progress != nil && st.Progress.Tokens > 0 {
			sawTokens = true
			releaseModel()
		}
		if st.State == supportflow.DraftAwaitingApproval && awaiting.Proposal == nil {
			awaiting = st
			code, resp := c.do("POST", "/proposals/"+st.Proposal.ID+"/approve", apiToken, []byte(`{"approved_by":"ada@acme.test"}`), nil)
			require.Equal(t, http.StatusOK, code, "%s", resp)
		}
	}
	require.NotNil(t, awaiting.Proposal, "the stream showed the proposal awaiting approval")
	assert.Contains(t, states, supportflow.DraftDrafting)
	assert.True(t, sawTokens, "the stream showed the model's progress")
	assert.Equal(t, supportflow.DraftDone, states[len(states)-1], "the stream ends when the draft settles: %v", states)
	assert.Equal(t, []string{"sub-7"}, awaiting.Proposal.CancelSubscriptions, "the draft used the enrichment")

	assert.Equal(t, 1, s.zd.CommentCount(ticket.ID), "exactly one comment")
	assert.Equal(t, 1, s.subs.Cancellations("sub-7"))
	code, resp = c.do("GET", "/actions/"+supportflow.ActionKey(awaiting.Proposal.ID, 0), apiToken, nil, nil)
	require.Equal(t, http.StatusOK, code, "%s", resp)
	var action api.ActionView
	require.NoError(t, json.Unmarshal(resp, &action))
	assert.Equal(t, supportflow.StateApplied, action.State)
	assert.Equal(t, s.zd.Comments(ticket.ID)[0].ID, action.CommentID)
	require.Len(t, action.Cancellations, 1)
	assert.Equal(t, "cancelled", action.Cancellations[0].State)

	code, _ = c.do("GET", "/healthz", "", nil, nil)
	assert.Equal(t, http.StatusOK, code)
	code, _ = c.do("GET", "/readyz", "", nil, nil)
	assert.Equal(t, http.StatusOK, code)
}

// world is everything a refused request must leave alone.
type world struct {
	rows                            map[string]int
	comments, modelCalls, bqQueries int
	subsCalls                       int
	workflows                       map[string]string // workflow ID -> latest run ID ("" when none)
}

func (s *stack) world(tickets ...int64) world {
	s.t.Helper()
	w := world{rows: map[string]int{}, workflows: map[string]string{}}
	for _, table := range []string{"ticket_mirror", "proposal", "action", "action_leg", "ticket_event", "enrichment_run", "lookup_log"} {
		w.rows[table] = s.count(`SELECT count(*) FROM ` + table)
	}
	w.comments, w.modelCalls, w.bqQueries = s.zd.TotalComments(), s.model.Requests(), s.bq.Queries()
	w.subsCalls = s.subs.Requests("POST", "/")
	for _, id := range tickets {
		for _, wid := range []string{supportflow.DraftWorkflowID(id), supportflow.EnrichWorkflowID(id)} {
			d, err := s.temporal.DescribeWorkflowExecution(context.Background(), wid, "")
			if err == nil {
				w.workflows[wid] = d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
			} else {
				w.workflows[wid] = ""
			}
		}
	}
	return w
}

// Every kind of bad input gets its own clear status, and starts and
// writes nothing: the database, the stand-ins and the tickets' workflows
// are exactly as before the request.
func TestAPI_BadInputGetsAClearErrorAndChangesNothing(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.extraEnv = []string{"SUPPORTFLOW_PROPOSAL_EXPIRY=6s", "SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY=100ms", "SUPPORTFLOW_ENRICH_UPDATE_DELAY=100ms"}
	s.startWorker()
	c := s.api()
	c.subscribe(standin.WebhookConfig{})

	// Three tickets, each drafted: one left to expire, one superseded by a
	// customer reply, one approved and executed.
	newTicket := func() standin.Ticket {
		requester := 50000 + ticketIDs.Add(1)
		tk := standin.Ticket{ID: 50000 + ticketIDs.Add(1), Subject: "Help", Description: "Where is my order?", RequesterID: requester, Status: "open"}
		s.bq.AddCustomer(requester, standin.BQCustomer{CustomerID: "c"})
		s.zd.AddTicket(tk) // ticket.created reaches the webhook
		s.waitMirrored(tk.ID)
		code, resp := c.do("POST", fmt.Sprintf("/tickets/%d/drafts", tk.ID), apiToken, nil, nil)
		require.Equal(t, http.StatusAccepted, code, "%s", resp)
		return tk
	}
	expired, superseded, approved := newTicket(), newTicket(), newTicket()
	first := map[int64]supportflow.DraftStatus{}
	for _, tk := range []standin.Ticket{expired, superseded, approved} {
		first[tk.ID] = s.waitState(tk.ID, supportflow.DraftAwaitingApproval)
	}
	code, resp := c.do("POST", "/proposals/"+first[approved.ID].Proposal.ID+"/approve", apiToken, nil, nil)
	require.Equal(t, http.StatusOK, code, "%s", resp)
	// The customer writes again a second later (Zendesk's times are whole
	// seconds): ticket.comment_added supersedes the draft.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	s.zd.AddComment(superseded.ID, standin.SeedComment{Body: "Hello? Anyone?"})
	s.waitDraft(superseded.ID, "redrafted", func(st supportflow.DraftStatus) bool {
		return st.Proposal != nil && st.Proposal.ID != first[superseded.ID].Proposal.ID
	})
	s.waitState(approved.ID, supportflow.DraftDone)
	s.waitState(expired.ID, supportflow.DraftExpired)
	s.recordHistory(supportflow.DraftWorkflowID(expired.ID), "", "draft_reply_expired")
	s.recordHistory(supportflow.DraftWorkflowID(approved.ID), "", "draft_reply_reply_last_done")
	time.Sleep(500 * time.Millisecond) // let the last proposal-state writes land
	waitCtx, cancelWait := context.WithTimeout(context.Background(), waitBudget)
	defer cancelWait()
	require.NoError(t, s.zd.WaitWebhooks(waitCtx))
	s.zd.SetWebhook(standin.WebhookConfig{}) // from here on only the table's requests arrive

	goodBody := ticketEvent(t, "status_changed", expired, map[string]any{"previous": "OPEN", "current": "OPEN"})
	jsonHeader := func(ct string, body []byte) http.Header {
		h := signed(time.Now(), body)
		h.Set("Content-Type", ct)
		return h
	}
	withSigned := func(body string) ([]byte, http.Header) { return []byte(body), signed(time.Now(), []byte(body)) }
	nulBody, nulHeader := withSigned(strings.Replace(string(goodBody), `"Help"`, `"He\u0000lp"`, 1))
	rawNULBody, rawNULHeader := withSigned(strings.Replace(string(goodBody), `"Help"`, "\"He\x00lp\"", 1))
	utf8Body, utf8Header := withSigned(strings.Replace(string(goodBody), `"Help"`, "\"He\xfflp\"", 1))
	dupBody, dupHeader := withSigned(strings.Replace(string(goodBody), `"status":"OPEN"`, `"status":"OPEN","status":"CLOSED"`, 1))
	oldShape, oldShapeHeader := withSigned(`{"event":"ticket.updated","ticket":{"id":1}}`)
	arrayBody, arrayHeader := withSigned(`[{"type":"zen:event-type:ticket.created"}]`)
	mismatch, mismatchHeader := withSigned(strings.Replace(string(goodBody), fmt.Sprintf(`"subject":"zen:ticket:%d"`, expired.ID), `"subject":"zen:ticket:1"`, 1))
	bigBody := ticketEvent(t, "comment_added", expired, map[string]any{"comment": map[string]any{"id": "1", "is_public": true, "body": strings.Repeat("x", 1<<20)}})
	require.NotContains(t, string(goodBody), "\u0000")
	oversized := []byte(`{"reason":"` + strings.Repeat("x", 70<<10) + `"}`)
	approvePath := func(tk standin.Ticket) string { return "/proposals/" + first[tk.ID].Proposal.ID + "/approve" }
	unknownTicket := int64(987654321)
	for _, tc := range []struct {
		name, method, path, token string
		body                      []byte
		header                    http.Header
		want                      int
		problem                   string
	}{
		{"no token", "POST", fmt.Sprintf("/tickets/%d/drafts", expired.ID), "", nil, nil, 401, "unauthorized"},
		{"wrong token", "POST", fmt.Sprintf("/tickets/%d/drafts", expired.ID), "not-the-token-000000", nil, nil, 401, "unauthorized"},
		{"wrong token on a read", "GET", fmt.Sprintf("/tickets/%d/draft", expired.ID), "Bearer " + apiToken, nil, nil, 401, "unauthorized"},
		{"webhook with a bad signature", "POST", "/webhooks/zendesk", "", goodBody,
			http.Header{api.SignatureHeader: {api.Sign("wrong-secret", time.Now().UTC().Format(time.RFC3339), goodBody)}, api.SignatureTimestampHeader: {time.Now().UTC().Format(time.RFC3339)}}, 401, "bad-signature"},
		{"webhook without a signature", "POST", "/webhooks/zendesk", "", goodBody, nil, 401, "unsigned-webhook"},
		{"webhook with a stale timestamp", "POST", "/webhooks/zendesk", "", goodBody, signed(time.Now().Add(-10*time.Minute), goodBody), 401, "stale-timestamp"},
		{"webhook signed for another body", "POST", "/webhooks/zendesk", "", append(goodBody[:len(goodBody):len(goodBody)], ' '), signed(time.Now(), goodBody), 401, "bad-signature"},
		{"webhook with an escaped NUL", "POST", "/webhooks/zendesk", "", nulBody, nulHeader, 400, "nul-character"},
		{"webhook with a raw NUL", "POST", "/webhooks/zendesk", "", rawNULBody, rawNULHeader, 400, "nul-character"},
		{"webhook with invalid UTF-8", "POST", "/webhooks/zendesk", "", utf8Body, utf8Header, 400, "invalid-utf8"},
		{"webhook with a duplicate key", "POST", "/webhooks/zendesk", "", dupBody, dupHeader, 400, "duplicate-key"},
		{"signed webhook as text/plain", "POST", "/webhooks/zendesk", "", goodBody, jsonHeader("text/plain", goodBody), 415, "unsupported-media-type"},
		{"signed webhook without a content type", "POST", "/webhooks/zendesk", "", goodBody, jsonHeader("", goodBody), 415, "unsupported-media-type"},
		{"webhook in Latin-1", "POST", "/webhooks/zendesk", "", goodBody, jsonHeader("application/json; charset=iso-8859-1", goodBody), 415, "unsupported-media-type"},
		{"webhook in the old trigger shape", "POST", "/webhooks/zendesk", "", oldShape, oldShapeHeader, 422, "unknown-shape"},
		{"webhook that is an array", "POST", "/webhooks/zendesk", "", arrayBody, arrayHeader, 400, "malformed-json"},
		{"webhook whose subject and detail disagree", "POST", "/webhooks/zendesk", "", mismatch, mismatchHeader, 422, "invalid-event"},
		{"webhook over 1 MiB", "POST", "/webhooks/zendesk", "", bigBody, signed(time.Now(), bigBody), 413, "body-too-large"},
		{"malformed JSON", "POST", approvePath(approved), apiToken, []byte(`{"approved_by":`), nil, 400, "malformed-json"},
		{"unknown field", "POST", fmt.Sprintf("/tickets/%d/drafts", expired.ID), apiToken, []byte(`{"reason":"x","priority":"high"}`), nil, 400, "unknown-field"},
		{"oversized body", "POST", fmt.Sprintf("/tickets/%d/drafts", expired.ID), apiToken, oversized, nil, 413, "body-too-large"},
		{"unknown ticket", "POST", fmt.Sprintf("/tickets/%d/drafts", unknownTicket), apiToken, nil, nil, 404, "unknown-ticket"},
		{"ticket without a draft", "GET", fmt.Sprintf("/tickets/%d/draft", unknownTicket), apiToken, nil, nil, 404, "no-draft"},
		{"unknown proposal", "POST", "/proposals/no-such-proposal/approve", apiToken, nil, nil, 404, "unknown-proposal"},
		{"unknown action", "GET", "/actions/no-such-proposal:0", apiToken, nil, nil, 404, "unknown-action"},
		{"ticket id with SQL", "POST", "/tickets/1%3BDROP%20TABLE%20action/drafts", apiToken, nil, nil, 400, "invalid-ticket-id"},
		{"ticket id with a sign", "GET", "/tickets/+12/draft", apiToken, nil, nil, 400, "invalid-ticket-id"},
		{"proposal id with SQL", "POST", "/proposals/x'%20OR%20'1'='1/approve", apiToken, nil, nil, 400, "invalid-proposal-id"},
		{"proposal id with a path", "POST", "/proposals/..%2F..%2Fetc/approve", apiToken, nil, nil, 400, "invalid-proposal-id"},
		{"action key with SQL", "GET", "/actions/p%3B%20DELETE%20FROM%20action", apiToken, nil, nil, 400, "invalid-action-key"},
		{"approving an expired proposal", "POST", approvePath(expired), apiToken, nil, nil, 409, "proposal-not-awaiting-approval"},
		{"approving a superseded proposal", "POST", approvePath(superseded), apiToken, nil, nil, 409, "proposal-not-awaiting-approval"},
		{"rejecting an executed proposal", "POST", "/proposals/" + first[approved.ID].Proposal.ID + "/reject", apiToken, nil, nil, 409, "proposal-not-awaiting-approval"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := s.world(expired.ID, superseded.ID, approved.ID, unknownTicket)
			token := tc.token
			header := tc.header
			if strings.HasPrefix(token, "Bearer ") {
				header, token = http.Header{"Authorization": {"Basic " + strings.TrimPrefix(token, "Bearer ")}}, ""
			}
			code, resp := c.do(tc.method, tc.path, token, tc.body, header)
			assert.Equal(t, tc.want, code, "%s", resp)
			var p api.Problem
			require.NoError(t, json.Unmarshal(resp, &p), "%s", resp)
			assert.Equal(t, "/problems/"+tc.problem, p.Type, "%s", resp)
			assert.Equal(t, tc.want, p.Status)
			assert.NotEmpty(t, p.Detail)
			assert.Equal(t, before, s.world(expired.ID, superseded.ID, approved.ID, unknownTicket), "nothing was started or written")
		})
	}
	// Approving an executed proposal again answers its execution, as the
	// README and `starter approve --help` say, and starts nothing.
	t.Run("approving twice", func(t *testing.T) {
		before := s.world(expired.ID, superseded.ID, approved.ID, unknownTicket)
		code, resp := c.do("POST", approvePath(approved), apiToken, nil, nil)
		require.Equal(t, http.StatusOK, code, "%s", resp)
		var got api.Approved
		require.NoError(t, json.Unmarshal(resp, &got), "%s", resp)
		assert.True(t, got.AlreadyApproved)
		assert.Equal(t, supportflow.ExecuteWorkflowID(first[approved.ID].Proposal.ID), got.ExecutionWorkflowID)
		require.Len(t, got.Actions, 1)
		assert.Equal(t, supportflow.ActionKey(first[approved.ID].Proposal.ID, 0), got.Actions[0].Key)
		assert.Equal(t, before, s.world(expired.ID, superseded.ID, approved.ID, unknownTicket), "nothing was started or written")
	})
	// A repeated delivery and an event type supportflow does not read are
	// answered 200 and change nothing. (The event is supportflow's own
	// write, so its first delivery starts nothing either.)
	ownBody := []byte(strings.Replace(string(goodBody), fmt.Sprintf(`"actor_id":"%d"`, expired.RequesterID), fmt.Sprintf(`"actor_id":"%d"`, standin.ZendeskAgentID), 1))
	require.NotEqual(t, goodBody, ownBody)
	code, resp = c.do("POST", "/webhooks/zendesk", "", ownBody, signed(time.Now(), ownBody))
	require.Equal(t, http.StatusOK, code, "%s", resp)
	assert.Contains(t, string(resp), `"own_write":true`)
	before := s.world(expired.ID, superseded.ID, approved.ID)
	for _, body := range [][]byte{ownBody, []byte(`{"type":"zen:event-type:user.created","id":"u-1","subject":"zen:user:1","detail":{},"event":{}}`)} {
		code, resp = c.do("POST", "/webhooks/zendesk", "", body, signed(time.Now().Add(time.Second), body))
		assert.Equal(t, http.StatusOK, code, "%s", resp)
		assert.Equal(t, before, s.world(expired.ID, superseded.ID, approved.ID), "nothing changed")
	}
	assert.Contains(t, string(resp), `"ignored":true`)
	assert.Equal(t, 1, s.zd.CommentCount(approved.ID), "the approved reply went out once")
	assert.Zero(t, s.zd.CommentCount(expired.ID)+s.zd.CommentCount(superseded.ID))
}

// Each token reaches the routes of its roles and is refused 403 on the
// others (a representative route per role: start a draft, get a draft and
// an action, approve, reject, retry), and a refused request starts and
// writes nothing. A decision is recorded under the name of the token that
// made it, not under what the body says; the body's name is on whose
// behalf.
func TestAPI_RolesAndAttribution(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.extraEnv = []string{"SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY=100ms", "SUPPORTFLOW_ENRICH_UPDATE_DELAY=100ms"}
	s.startWorker()
	c := s.api()
	c.subscribe(standin.WebhookConfig{})

	newTicket := func() standin.Ticket {
		requester := 64000 + ticketIDs.Add(1)
		tk := standin.Ticket{ID: 64000 + ticketIDs.Add(1), Subject: "Help", Description: "Where is my order?", RequesterID: requester, Status: "open"}
		s.bq.AddCustomer(requester, standin.BQCustomer{CustomerID: "c-roles"})
		s.zd.AddTicket(tk)
		require.Eventually(t, func() bool {
			st, err := s.starter.EnrichmentStatus(context.Background(), tk.ID)
			return err == nil && st.State == supportflow.EnrichEnriched
		}, waitBudget, 50*time.Millisecond, "ticket %d mirrored and enriched", tk.ID)
		return tk
	}
	toApprove, toReject := newTicket(), newTicket()
	names := map[string]string{}
	for _, tok := range apiTokens {
		names[tok.Secret] = tok.Name
	}
	// refused checks that each token is refused 403, naming the role and
	// the token, and that nothing changed.
	refused := func(method, path string, body []byte, role api.Role, tokens ...string) {
		t.Helper()
		for _, token := range tokens {
			before := s.world(toApprove.ID, toReject.ID)
			code, resp := c.do(method, path, token, body, nil)
			require.Equal(t, http.StatusForbidden, code, "%s %s as %s: %s", method, path, names[token], resp)
			var p api.Problem
			require.NoError(t, json.Unmarshal(resp, &p), "%s", resp)
			assert.Equal(t, "/problems/forbidden", p.Type)
			assert.Contains(t, p.Detail, "the "+string(role)+" role", "%s", resp)
			assert.Contains(t, p.Detail, names[token], "%s", resp)
			assert.NotContains(t, string(resp), token, "the token is never echoed")
			assert.Equal(t, before, s.world(toApprove.ID, toReject.ID), "%s %s as %s started or wrote something", method, path, names[token])
		}
	}
	drafts := func(tk standin.Ticket) string { return fmt.Sprintf("/tickets/%d/drafts", tk.ID) }
	draft := func(tk standin.Ticket) string { return fmt.Sprintf("/tickets/%d/draft", tk.ID) }

	// app: start a draft.
	refused("POST", drafts(toApprove), nil, api.RoleApp, approverToken, operatorToken)
	for _, tk := range []standin.Ticket{toApprove, toReject} {
		code, resp := c.do("POST", drafts(tk), appToken, nil, nil)
		require.Equal(t, http.StatusAccepted, code, "%s", resp)
	}
	proposals := map[int64]string{}
	for _, tk := range []standin.Ticket{toApprove, toReject} {
		st := s.waitState(tk.ID, supportflow.DraftAwaitingApproval)
		proposals[tk.ID] = st.Proposal.ID
		require.Eventually(t, func() bool {
			_, err := s.proposalStore.GetProposal(context.Background(), st.Proposal.ID)
			return err == nil
		}, waitBudget, 20*time.Millisecond, "the proposal is saved")
	}
	approvePath := "/proposals/" + proposals[toApprove.ID] + "/approve"
	rejectPath := "/proposals/" + proposals[toReject.ID] + "/reject"
	retryPath := "/proposals/" + proposals[toApprove.ID] + "/retry"
	actionKey := supportflow.ActionKey(proposals[toApprove.ID], 0)

	// app: read the draft and its events.
	refused("GET", draft(toApprove), nil, api.RoleApp, approverToken, operatorToken)
	refused("GET", draft(toApprove)+"/events", nil, api.RoleApp, approverToken, operatorToken)
	code, resp := c.do("GET", draft(toApprove), appToken, nil, nil)
	require.Equal(t, http.StatusOK, code, "%s", resp)
	// approver: approve and reject; operator: retry.
	refused("POST", approvePath, []byte(`{"approved_by":"ada@acme.test"}`), api.RoleApprover, appToken, operatorToken)
	refused("POST", rejectPath, nil, api.RoleApprover, appToken, operatorToken)
	refused("POST", retryPath, nil, api.RoleOperator, appToken, approverToken)

	code, resp = c.do("POST", approvePath, approverToken, []byte(`{"approved_by":"ada@acme.test"}`), nil)
	require.Equal(t, http.StatusOK, code, "%s", resp)
	var approved api.Approved
	require.NoError(t, json.Unmarshal(resp, &approved))
	assert.Equal(t, proposals[toApprove.ID], approved.ProposalID)
	assert.Equal(t, supportflow.ExecuteWorkflowID(proposals[toApprove.ID]), approved.ExecutionWorkflowID)
	assert.Equal(t, []api.ActionLink{{Key: actionKey, URL: "/actions/" + actionKey}}, approved.Actions, "the answer names the action and where to read it")
	code, resp = c.do("POST", rejectPath, approverToken, []byte(`{"rejected_by":"bo@acme.test","reason":"not like this"}`), nil)
	require.Equal(t, http.StatusOK, code, "%s", resp)

	// The decisions are the token's, in the ledger and the draft's status.
	done := s.waitState(toApprove.ID, supportflow.DraftDone)
	assert.Equal(t, "test-approver", done.ApprovedBy)
	for _, id := range []string{proposals[toApprove.ID], proposals[toReject.ID]} {
		require.Eventually(t, func() bool {
			p, err := s.proposalStore.GetProposal(context.Background(), id)
			return err == nil && (p.State == supportflow.DraftDone || p.State == supportflow.DraftRejected)
		}, waitBudget, 50*time.Millisecond, "proposal %s settled", id)
		p, err := s.proposalStore.GetProposal(ctxT(t), id)
		require.NoError(t, err)
		assert.Equal(t, "test-approver", p.DecidedBy, "proposal %s (%s) is recorded under the token's name", id, p.State)
	}
	assert.Equal(t, 1, s.zd.CommentCount(toApprove.ID))
	assert.Zero(t, s.zd.CommentCount(toReject.ID))

	// app: read the action (the URL the approval answered).
	for _, token := range []string{approverToken, operatorToken} {
		code, resp = c.do("GET", approved.Actions[0].URL, token, nil, nil)
		assert.Equal(t, http.StatusForbidden, code, "%s", resp)
	}
	code, resp = c.do("GET", approved.Actions[0].URL, appToken, nil, nil)
	require.Equal(t, http.StatusOK, code, "%s", resp)
	var action api.ActionView
	require.NoError(t, json.Unmarshal(resp, &action))
	assert.Equal(t, supportflow.StateApplied, action.State)
	// operator: the retry is allowed, and refused only because the
	// proposal is applied.
	code, resp = c.do("POST", retryPath, operatorToken, nil, nil)
	assert.Equal(t, http.StatusConflict, code, "%s", resp)
	assert.Contains(t, string(resp), "nothing-to-retry")
}

// waitMirrored waits until a ticket's webhook has mirrored it.
// waitEnriched waits until the ticket's requester was looked up and found.
func (s *stack) waitEnriched(ticketID int64) {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		st, err := s.starter.EnrichmentStatus(context.Background(), ticketID)
		return err == nil && st.State == supportflow.EnrichEnriched && st.Found
	}, waitBudget, 50*time.Millisecond, "ticket %d's requester was enriched", ticketID)
}

func (s *stack) waitMirrored(ticketID int64) {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		_, err := s.mirror.GetTicketMirror(context.Background(), ticketID)
		return err == nil
	}, waitBudget, 20*time.Millisecond, "ticket %d was mirrored", ticketID)
}

// A proposal whose cancellation was refused (so its reply was held back)
// is retried through the API once the cause is fixed: the cancellation,
// then the reply, each exactly once; the agents' note is not repeated; a
// second retry has nothing to do.
func TestExecution_RetryNeedsAttention(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.extraEnv = []string{"SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY=100ms", "SUPPORTFLOW_ENRICH_UPDATE_DELAY=100ms"}
	s.startWorker()
	c := s.api()
	c.subscribe(standin.WebhookConfig{})

	requester := 63000 + ticketIDs.Add(1)
	tk := standin.Ticket{ID: 63000 + ticketIDs.Add(1), Subject: "Cancel", Description: "Please cancel my plan.", RequesterID: requester}
	s.bq.AddCustomer(requester, standin.BQCustomer{CustomerID: "c-retry-api", ActiveSubscriptions: []string{"sub-r"}})
	s.subs.AddSubscription("sub-r", "c-retry-api")
	s.subs.Inject(standin.Fault{Method: "POST", Path: "/v1/subscriptions/sub-r/cancel", Status: 422, Times: -1})
	s.zd.AddTicket(tk)
	s.waitEnriched(tk.ID)

	// The model proposes the cancellation; told that a previous reply was
	// held back, it writes a truthful one without it.
	var mu sync.Mutex
	var outcomes []string
	s.model.SetResponder(func(req standin.ChatRequest) string {
		user := req.Messages[len(req.Messages)-1].Content
		var pt struct {
			PreviousAttempt string `json:"previous_attempt"`
		}
		_ = json.Unmarshal([]byte(user), &pt)
		if pt.PreviousAttempt != "" {
			mu.Lock()
			outcomes = append(outcomes, pt.PreviousAttempt)
			mu.Unlock()
			return `{"reply": "We could not cancel your plan yet; an agent is on it.", "cancel_subscriptions": []}`
		}
		return `{"reply": "Your plan is cancelled.", "cancel_subscriptions": ["sub-r"]}`
	})
	code, resp := c.do("POST", fmt.Sprintf("/tickets/%d/drafts", tk.ID), apiToken, nil, nil)
	require.Equal(t, http.StatusAccepted, code, "%s", resp)
	st := s.waitState(tk.ID, supportflow.DraftAwaitingApproval)
	require.Equal(t, []string{"sub-r"}, st.Proposal.CancelSubscriptions)
	d, err := s.temporal.DescribeWorkflowExecution(ctxT(t), supportflow.DraftWorkflowID(tk.ID), "")
	require.NoError(t, err)
	firstRun := d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	code, resp = c.do("POST", "/proposals/"+st.Proposal.ID+"/approve", apiToken, nil, nil)
	require.Equal(t, http.StatusOK, code, "%s", resp)
	require.Eventually(t, func() bool {
		p, err := s.proposalStore.GetProposal(context.Background(), st.Proposal.ID)
		return err == nil && p.State == supportflow.DraftFailed
	}, waitBudget, 50*time.Millisecond, "the proposal's execution failed")
	assert.Equal(t, supportflow.StateNeedsAttention, s.action(supportflow.ActionKey(st.Proposal.ID, 0)).State)
	comments := s.zd.Comments(tk.ID)
	require.Len(t, comments, 1, "no reply, one note")
	assert.False(t, comments[0].Public)

	// The ticket is drafted again, knowing what happened.
	redraft := s.waitDraft(tk.ID, "redrafted", func(d supportflow.DraftStatus) bool {
		return d.State == supportflow.DraftAwaitingApproval && d.Proposal != nil && d.Proposal.ID != st.Proposal.ID
	})
	assert.Empty(t, redraft.Proposal.CancelSubscriptions)
	mu.Lock()
	require.NotEmpty(t, outcomes)
	assert.Contains(t, outcomes[0], "NOT sent")
	mu.Unlock()
	s.recordHistory(supportflow.DraftWorkflowID(tk.ID), firstRun, "draft_reply_needs_attention_redrafted")

	// While the redraft awaits approval the old proposal cannot be retried:
	// the customer would get both answers. Once the redraft is rejected, it
	// can.
	code, resp = c.do("POST", "/proposals/"+st.Proposal.ID+"/retry", apiToken, nil, nil)
	require.Equal(t, http.StatusConflict, code, "%s", resp)
	assert.Contains(t, string(resp), redraft.Proposal.ID)
	code, resp = c.do("POST", "/proposals/"+redraft.Proposal.ID+"/reject", apiToken, []byte(`{"reason":"retrying the first"}`), nil)
	require.Equal(t, http.StatusOK, code, "%s", resp)
	s.waitState(tk.ID, supportflow.DraftRejected)
	require.Eventually(t, func() bool {
		p, err := s.proposalStore.GetProposal(context.Background(), redraft.Proposal.ID)
		return err == nil && p.State == supportflow.DraftRejected
	}, waitBudget, 50*time.Millisecond)

	code, resp = c.do("POST", "/proposals/"+st.Proposal.ID+"/retry", apiToken, nil, nil)
	require.Equal(t, http.StatusAccepted, code, "%s", resp)
	var started api.RetryStarted
	require.NoError(t, json.Unmarshal(resp, &started))
	assert.Equal(t, supportflow.ExecuteWorkflowID(st.Proposal.ID), started.WorkflowID)
	_, err = s.wait(st.Proposal.ID)
	require.Error(t, err, "still refused: the retry fails the same way")
	assert.Len(t, s.zd.Comments(tk.ID), 1, "the note is not repeated")

	s.subs.ClearFaults()
	code, resp = c.do("POST", "/proposals/"+st.Proposal.ID+"/retry", apiToken, nil, nil)
	require.Equal(t, http.StatusAccepted, code, "%s", resp)
	statuses, err := s.wait(st.Proposal.ID)
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplied, statuses[0].State)
	comments = s.zd.Comments(tk.ID)
	require.Len(t, comments, 2, "the note, then the reply")
	assert.True(t, comments[1].Public)
	assert.Equal(t, 1, s.subs.Cancellations("sub-r"))
	s.recordHistory(supportflow.ExecuteWorkflowID(st.Proposal.ID), "", "execute_proposal_retried_applied")

	code, resp = c.do("POST", "/proposals/"+st.Proposal.ID+"/retry", apiToken, nil, nil)
	assert.Equal(t, http.StatusConflict, code, "%s", resp)
	assert.Contains(t, string(resp), "nothing-to-retry")
	code, _ = c.do("POST", "/proposals/no-such/retry", apiToken, nil, nil)
	assert.Equal(t, http.StatusNotFound, code)
}

// No worker is running: the draft's query has no one to answer it, so the
// status comes from PostgreSQL and Temporal's visibility within the
// query's bound, and says the worker is unavailable.
func TestAPI_DraftStatusWithoutWorker(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	c := s.api()
	ticket := s.seedTicket("Where is my order?")
	never := s.seedTicket("Hello?")
	s.startWorker()
	_, err := s.starter.StartDraft(ctxT(t), ticket, "click")
	require.NoError(t, err)
	st := s.waitState(ticket, supportflow.DraftAwaitingApproval)
	s.stopWorker()
	_, err = s.starter.StartDraft(ctxT(t), never, "click") // started while no worker runs
	require.NoError(t, err)

	get := func(id int64) (supportflow.DraftStatus, time.Duration) {
		start := time.Now()
		code, body := c.do("GET", fmt.Sprintf("/tickets/%d/draft", id), apiToken, nil, nil)
		took := time.Since(start)
		require.Equal(t, http.StatusOK, code, string(body))
		var got supportflow.DraftStatus
		require.NoError(t, json.Unmarshal(body, &got))
		return got, took
	}
	got, took := get(ticket)
	assert.Less(t, took, 2*time.Second)
	assert.True(t, got.WorkerUnavailable)
	assert.Equal(t, supportflow.DraftAwaitingApproval, got.State)
	require.NotNil(t, got.Proposal)
	assert.Equal(t, st.Proposal.ID, got.Proposal.ID)
	assert.Equal(t, st.Proposal.Reply, got.Proposal.Reply)

	got, took = get(never)
	assert.Less(t, took, 2*time.Second)
	assert.True(t, got.WorkerUnavailable)
	assert.Equal(t, supportflow.DraftGathering, got.State, "a run with no proposal yet")
	assert.Nil(t, got.Proposal)

	s.startWorker()
	require.Eventually(t, func() bool {
		st, err := s.starter.DraftStatus(context.Background(), ticket)
		return err == nil && !st.WorkerUnavailable && st.State == supportflow.DraftAwaitingApproval
	}, waitBudget, 100*time.Millisecond, "with a worker back, the workflow answers again")
}
