package tests

import (
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/workflows"
)

// The customer writes again while the approved proposal is executing: the
// subscription service holds the cancellation while the comment goes
// through Zendesk's webhook, the API and the relay to the draft. The
// execution goes on (exactly one reply for the approved proposal); once it
// is done, the ticket is drafted again from a conversation that includes
// the new comment, so the customer's message does not go unanswered.
func TestIngestion_CommentDuringExecutionIsAnswered(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.extraEnv = []string{"SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY=200ms", "SUPPORTFLOW_ENRICH_UPDATE_DELAY=200ms",
		// The held cancellation call may take as long as the comment needs
		// to reach the draft on a loaded machine; the lease must outlive a
		// call. Both are kept under a minute: should a loaded machine time
		// the held attempt out, its successor waits for that lease to
		// lapse. A longer heartbeat timeout makes that unlikely.
		"SUPPORTFLOW_SUBSCRIPTION_CALL_TIMEOUT=45s", "SUPPORTFLOW_LEASE=50s", "SUPPORTFLOW_HEARTBEAT_TIMEOUT=8s"}
	const newComment = "One more thing: please refund last month's charge too."
	var sawNewComment atomic.Int32
	s.model.SetResponder(func(req standin.ChatRequest) string {
		if strings.Contains(req.Messages[len(req.Messages)-1].Content, newComment) {
			sawNewComment.Add(1)
			return `{"reply": "We are looking into the refund.", "cancel_subscriptions": []}`
		}
		return answerCancellingAll(req)
	})
	s.startWorker()
	c := s.api()
	c.subscribe(standin.WebhookConfig{})

	requester := 63000 + ticketIDs.Add(1)
	tk := standin.Ticket{ID: 63000 + ticketIDs.Add(1), Subject: "Cancel", Description: "Cancel my plan, please.", RequesterID: requester}
	s.bq.AddCustomer(requester, standin.BQCustomer{CustomerID: "c-during", Orders: 3, ActiveSubscriptions: []string{"sub-during"}})
	s.subs.AddSubscription("sub-during", "c-during")
	s.zd.AddTicket(tk)
	s.waitEnriched(tk.ID)

	code, resp := c.do("POST", fmt.Sprintf("/tickets/%d/drafts", tk.ID), apiToken, nil, nil)
	require.Equal(t, http.StatusAccepted, code, "%s", resp)
	first := s.waitState(tk.ID, supportflow.DraftAwaitingApproval)
	require.Equal(t, []string{"sub-during"}, first.Proposal.CancelSubscriptions)

	// Hold the cancellation (the execution's first leg) until the
	// customer's comment has reached the draft.
	release, releaseCancel := releasableHold(t)
	held := arrived()
	hold := func(w http.ResponseWriter, r *http.Request) bool {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/cancel") {
			select {
			case held <- r.URL.Path:
			default:
			}
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
		return false // the stand-in answers
	}
	s.subsGate.intercept.Store(&hold)
	t.Cleanup(func() { s.subsGate.intercept.Store(nil) })

	code, resp = c.do("POST", "/proposals/"+first.Proposal.ID+"/approve", apiToken, nil, nil)
	require.Equal(t, http.StatusOK, code, "%s", resp)
	waitArrived(t, held)
	s.waitState(tk.ID, supportflow.DraftExecuting)

	// A second later (Zendesk's times are whole seconds, and activity in
	// the second the draft read is not news to it), the customer writes;
	// Zendesk delivers the comment's webhook.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	s.zd.AddComment(tk.ID, standin.SeedComment{Body: newComment})
	s.waitDraft(tk.ID, "told of the comment while executing", func(st supportflow.DraftStatus) bool {
		return st.State == supportflow.DraftExecuting && st.IgnoredActivity >= 1
	})
	releaseCancel()

	second := s.waitDraft(tk.ID, "drafted again", func(st supportflow.DraftStatus) bool {
		return st.State == supportflow.DraftAwaitingApproval && st.Proposal != nil && st.Proposal.ID != first.Proposal.ID
	})
	assert.Equal(t, first.Proposal.ID, second.Supersedes)
	assert.Equal(t, 1, second.Generation)
	assert.Positive(t, sawNewComment.Load(), "the second draft's conversation includes the new comment")
	assert.Empty(t, second.Proposal.CancelSubscriptions)

	p, err := s.proposalStore.GetProposal(ctxT(t), first.Proposal.ID)
	require.NoError(t, err)
	assert.Equal(t, supportflow.DraftDone, p.State, "the approved proposal was carried out")
	assert.Equal(t, supportflow.StateApplied, s.action(supportflow.ActionKey(first.Proposal.ID, 0)).State)
	public, _ := s.splitComments(tk.ID)
	require.Len(t, public, 1, "exactly one reply, the approved proposal's")
	assert.Equal(t, first.Proposal.Reply, public[0].Body)
	assert.Equal(t, 1, s.subs.Cancellations("sub-during"))
	assert.Equal(t, 2, s.proposals(tk.ID))

	// The run that executed continued as new for that reason.
	runs := s.draftRuns(tk.ID)
	require.GreaterOrEqual(t, len(runs), 2)
	assert.Equal(t, workflows.ReasonActivityDuringExecution, runs[len(runs)-1].Reason)
}

// draftRuns returns the DraftRequest each run of the ticket's draft chain
// started with, oldest first.
func (s *stack) draftRuns(ticket int64) []supportflow.DraftRequest {
	s.t.Helper()
	var out []supportflow.DraftRequest
	id := supportflow.DraftWorkflowID(ticket)
	for run := ""; ; {
		h := s.temporal.GetWorkflowHistory(ctxT(s.t), id, run, false, 0)
		require.True(s.t, h.HasNext())
		first, err := h.Next()
		require.NoError(s.t, err)
		attrs := first.GetWorkflowExecutionStartedEventAttributes()
		require.NotNil(s.t, attrs)
		var req supportflow.DraftRequest
		require.NoError(s.t, s.starter.Converter.FromPayloads(attrs.GetInput(), &req))
		out = append([]supportflow.DraftRequest{req}, out...)
		if run = attrs.GetContinuedExecutionRunId(); run == "" {
			return out
		}
	}
}
