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
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/api"
	"github.com/supportflow/supportflow/internal/standin"
)

const (
	apiToken      = "test-api-token-0123456789"
	webhookSecret = "test-webhook-signing-secret"
)

// apiClient is the HTTP API in front of a stack, served in-process on the
// stack's starter and ledger (the same account as its worker).
type apiClient struct {
	t   *testing.T
	s   *stack
	url string
}

func (s *stack) api() *apiClient {
	s.t.Helper()
	srv, err := api.New(api.Config{Tokens: []string{apiToken}, WebhookSecret: webhookSecret, PollInterval: 50 * time.Millisecond},
		s.starter, s.ledger, s.pool, s.temporal, nil)
	require.NoError(s.t, err)
	hs := httptest.NewServer(srv)
	s.t.Cleanup(hs.Close)
	return &apiClient{t: s.t, s: s, url: hs.URL}
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

func webhookBody(t *testing.T, event string, ticket standin.Ticket, comment *api.WebhookComment) []byte {
	b, err := json.Marshal(api.WebhookEvent{Event: event, Comment: comment, Ticket: api.WebhookTicket{
		ID: ticket.ID, Subject: ticket.Subject, Status: ticket.Status, RequesterID: ticket.RequesterID, UpdatedAt: time.Now().UTC(),
	}})
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

	requester := 40000 + ticketIDs.Add(1)
	ticket := standin.Ticket{ID: 40000 + ticketIDs.Add(1), Subject: "Cancel please", Description: "Please cancel my subscription.",
		RequesterID: requester, RequesterName: "Ada", Status: "new"}
	s.zd.AddTicket(ticket)
	s.bq.AddCustomer(requester, standin.BQCustomer{CustomerID: "cust-7", Orders: 3, ActiveSubscriptions: []string{"sub-7"}})
	s.subs.AddSubscription("sub-7", "cust-7")

	body := webhookBody(t, "ticket.created", ticket, &api.WebhookComment{AuthorID: requester, Public: true, CreatedAt: time.Now().UTC()})
	code, resp := c.do("POST", "/webhooks/zendesk", "", body, signed(time.Now(), body))
	require.Equal(t, http.StatusAccepted, code, "%s", resp)

	require.Eventually(t, func() bool {
		st, err := s.starter.EnrichmentStatus(context.Background(), ticket.ID)
		return err == nil && st.State == supportflow.EnrichEnriched && st.Found
	}, waitBudget, 50*time.Millisecond, "the webhook's event was enriched")

	s.model.Inject(standin.ModelFault{TokenDelay: 40 * time.Millisecond})
	code, resp = c.do("POST", fmt.Sprintf("/tickets/%d/drafts", ticket.ID), apiToken, nil, nil)
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
	for _, table := range []string{"ticket_mirror", "proposal", "action", "action_cancellation", "webhook_delivery", "enrichment_run", "lookup_log"} {
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

	// Three tickets, each drafted: one left to expire, one superseded by a
	// customer reply, one approved and executed.
	newTicket := func() standin.Ticket {
		requester := 50000 + ticketIDs.Add(1)
		tk := standin.Ticket{ID: 50000 + ticketIDs.Add(1), Subject: "Help", Description: "Where is my order?", RequesterID: requester, Status: "open"}
		s.zd.AddTicket(tk)
		s.bq.AddCustomer(requester, standin.BQCustomer{CustomerID: "c"})
		body := webhookBody(t, "ticket.created", tk, nil)
		code, resp := c.do("POST", "/webhooks/zendesk", "", body, signed(time.Now(), body))
		require.Equal(t, http.StatusAccepted, code, "%s", resp)
		code, resp = c.do("POST", fmt.Sprintf("/tickets/%d/drafts", tk.ID), apiToken, nil, nil)
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
	s.zd.AddComment(superseded.ID, standin.SeedComment{Body: "Hello? Anyone?"})
	body := webhookBody(t, "ticket.updated", superseded, &api.WebhookComment{AuthorID: superseded.RequesterID, Public: true, CreatedAt: time.Now().UTC()})
	replayHeaders := signed(time.Now(), body)
	code, resp = c.do("POST", "/webhooks/zendesk", "", body, replayHeaders)
	require.Equal(t, http.StatusAccepted, code, "%s", resp)
	s.waitDraft(superseded.ID, "redrafted", func(st supportflow.DraftStatus) bool {
		return st.Proposal != nil && st.Proposal.ID != first[superseded.ID].Proposal.ID
	})
	s.waitState(approved.ID, supportflow.DraftDone)
	s.waitState(expired.ID, supportflow.DraftExpired)
	time.Sleep(500 * time.Millisecond) // let the last proposal-state writes land

	goodBody := webhookBody(t, "ticket.updated", expired, nil)
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
		{"replayed webhook", "POST", "/webhooks/zendesk", "", body, replayHeaders, 409, "replayed-webhook"},
		{"malformed JSON", "POST", approvePath(approved), apiToken, []byte(`{"approved_by":`), nil, 400, "malformed-json"},
		{"unknown field", "POST", fmt.Sprintf("/tickets/%d/drafts", expired.ID), apiToken, []byte(`{"reason":"x","priority":"high"}`), nil, 400, "unknown-field"},
		{"unknown webhook field", "POST", "/webhooks/zendesk", "", []byte(`{"event":"ticket.updated","x":1}`), signed(time.Now(), []byte(`{"event":"ticket.updated","x":1}`)), 400, "unknown-field"},
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
		{"approving twice", "POST", approvePath(approved), apiToken, nil, nil, 409, "proposal-not-awaiting-approval"},
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
	assert.Equal(t, 1, s.zd.CommentCount(approved.ID), "the approved reply went out once")
	assert.Zero(t, s.zd.CommentCount(expired.ID)+s.zd.CommentCount(superseded.ID))
}
