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
	req, err := http.NewRequest("GET", fmt.Sprintf("%s/tickets/%d/draft/events", c.url, ticket), nil)
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
