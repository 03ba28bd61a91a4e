package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/codec"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/internal/testenv"
	"github.com/supportflow/supportflow/ledger"
	"github.com/supportflow/supportflow/starter"
)

// seedOwnedTicket adds a ticket (an ID unique in this binary, so its draft
// workflow is its own) whose requester is customer, owning subs (s.own).
func (s *stack) seedOwnedTicket(body, customer string, subs ...string) int64 {
	s.t.Helper()
	id := s.zd.AddTicket(standin.Ticket{ID: 20000 + ticketIDs.Add(1), Subject: "My plan", Description: body, RequesterName: "Ada", Status: "open"})
	s.own(id, customer, subs...)
	return id
}

// uniqueProposalID names a proposal uniquely (per run and per call): its
// execution's workflow ID lives on a Temporal server that may outlive the
// run.
func uniqueProposalID(name string) string {
	return fmt.Sprintf("%s-%s-%d", name, runNonce, ticketIDs.Add(1))
}

// answerCancellingAll makes the model propose cancelling every active
// subscription the prompt lists ("Your plan is cancelled."), and, told
// that an earlier approved reply was held back, a truthful reply that
// cancels nothing.
func answerCancellingAll(req standin.ChatRequest) string {
	var pt struct {
		ActiveSubscriptions []string `json:"active_subscriptions"`
		PreviousAttempt     string   `json:"previous_attempt"`
	}
	_ = json.Unmarshal([]byte(req.Messages[len(req.Messages)-1].Content), &pt)
	if pt.PreviousAttempt != "" {
		return `{"reply": "We could not cancel your plan yet; an agent is on it.", "cancel_subscriptions": []}`
	}
	subs, _ := json.Marshal(pt.ActiveSubscriptions)
	return fmt.Sprintf(`{"reply": "Your plan is cancelled.", "cancel_subscriptions": %s}`, subs)
}

// draftAwaiting drafts the ticket and waits for its proposal.
func (s *stack) draftAwaiting(ticket int64) supportflow.DraftProposal {
	s.t.Helper()
	_, err := s.starter.StartDraft(ctxT(s.t), ticket, "click")
	require.NoError(s.t, err)
	st := s.waitState(ticket, supportflow.DraftAwaitingApproval)
	require.NotNil(s.t, st.Proposal)
	return *st.Proposal
}

// waitProposalState polls the proposal table until the proposal is in state.
func (s *stack) waitProposalState(proposalID, state string) supportflow.ProposalRecord {
	s.t.Helper()
	var (
		p   supportflow.ProposalRecord
		err error
	)
	for deadline := time.Now().Add(waitBudget); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if p, err = s.proposalStore.GetProposal(context.Background(), proposalID); err == nil && p.State == state {
			return p
		}
	}
	s.t.Fatalf("proposal %s never became %s; last state %q, error %v", proposalID, state, p.State, err)
	return p
}

// publicReplies are the public comments posted on a ticket.
func (s *stack) publicReplies(ticket int64) []standin.Comment {
	var out []standin.Comment
	for _, c := range s.zd.Comments(ticket) {
		if c.Public {
			out = append(out, c)
		}
	}
	return out
}

// zendeskWrites counts the writes the Zendesk stand-in received (ticket
// updates, which carry every comment).
func (s *stack) zendeskWrites() int { return s.zd.Requests("PUT", "/api/v2/tickets/") }

// cancelRequests counts the cancel requests the subscription stand-in
// received, for any subscription.
func (s *stack) cancelRequests() int { return s.subs.Requests("POST", "/v1/subscriptions/") }

// historyEvents reads a run's whole history, for polling (an error
// instead of a failed test).
func historyEvents(c client.Client, workflowID, runID string) ([]*historypb.HistoryEvent, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	it := c.GetWorkflowHistory(ctx, workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var out []*historypb.HistoryEvent
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

// freeLocalAddr is a loopback address nothing listens on right now.
func freeLocalAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

var refusedNotApproved = regexp.MustCompile(`(?m)^supportflow_legs_refused_total\{[^}]*reason="not_approved"[^}]*\} (\d+)`)

// refusedNotApprovedCount reads supportflow_legs_refused_total{reason=
// "not_approved"} from the worker's /metrics (-1 when it cannot be read).
func refusedNotApprovedCount(addr string) int {
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return -1
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return -1
	}
	m := refusedNotApproved.FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// ExecuteProposal started on Temporal directly, bypassing the API and the
// starter, for a proposal nobody approved: it would cancel another
// customer's subscription from this ticket and tell the customer so. With
// payloads sealed under the real key, every leg checks the approval table
// first and the workflow fails NotApproved before any write. With
// Temporal's default converter (no key at all), the worker refuses the
// unsealed input and the workflow never gets going.
func TestExecution_UnapprovedProposalNeverRuns(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	metrics := freeLocalAddr(t)
	// The worker refuses unsealed payloads (the default, said explicitly).
	s.extraEnv = []string{"SUPPORTFLOW_METRICS_ADDR=" + metrics, codec.EnvAdmitUnsealed + "=false"}
	ticket := s.seedOwnedTicket("How do I change my address?", "cust-a", "sub-a")
	s.subs.AddSubscription("sub-x", "cust-x") // another customer's
	s.startWorker()
	ctx := ctxT(t)

	noWrites := func(what string) {
		t.Helper()
		assert.Zero(t, s.zendeskWrites(), "%s: no update reached Zendesk", what)
		assert.Zero(t, s.cancelRequests(), "%s: no cancel reached the subscription service", what)
		assert.Zero(t, s.subs.CancelCalls("sub-x"), what)
		assert.Equal(t, standin.SubscriptionActive, s.subs.Status("sub-x"), what)
		assert.Equal(t, standin.SubscriptionActive, s.subs.Status("sub-a"), what)
		assert.Zero(t, s.zd.TotalComments(), "%s: no comment", what)
	}

	// (a) Sealed with the real key: the worker reads it, the legs refuse it.
	sealed := supportflow.Proposal{ID: uniqueProposalID("unapproved-sealed"),
		Actions: []supportflow.Action{reply(ticket, "Your plan is cancelled.", "sub-x")}}
	run, err := s.temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID: supportflow.ExecuteWorkflowID(sealed.ID), TaskQueue: s.taskQueue}, supportflow.ExecuteProposalWorkflow, sealed)
	require.NoError(t, err)
	err = run.Get(ctx, nil)
	var app *temporal.ApplicationError
	require.ErrorAs(t, err, &app)
	assert.Equal(t, supportflow.ErrTypeNotApproved, app.Type())
	assert.Contains(t, app.Error(), "no recorded approval")
	var statuses []supportflow.ActionStatus
	require.NoError(t, app.Details(&statuses))
	require.Len(t, statuses, 1)
	assert.Equal(t, supportflow.StateFailed, statuses[0].State)
	noWrites("sealed")
	_, err = s.ledger.Get(ctx, supportflow.ActionKey(sealed.ID, 0))
	assert.ErrorIs(t, err, supportflow.ErrNotFound, "refused before the action was reserved")
	_, err = s.proposalStore.GetApproval(ctx, sealed.ID)
	assert.ErrorIs(t, err, supportflow.ErrNotFound, "starting the workflow approved nothing")
	assert.Eventually(t, func() bool { return refusedNotApprovedCount(metrics) >= 1 }, waitBudget, 100*time.Millisecond,
		"supportflow_legs_refused_total{reason=\"not_approved\"} counts the refusal")

	// (b) Unsealed: a client with Temporal's default data converter.
	plain, err := client.Dial(client.Options{HostPort: testenv.TemporalAddress(t), Logger: quietLogger{}})
	require.NoError(t, err)
	t.Cleanup(plain.Close)
	unsealed := supportflow.Proposal{ID: uniqueProposalID("unapproved-plain"),
		Actions: []supportflow.Action{reply(ticket, "Your plan is cancelled.", "sub-x")}}
	id := supportflow.ExecuteWorkflowID(unsealed.ID)
	prun, err := plain.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: s.taskQueue},
		supportflow.ExecuteProposalWorkflow, unsealed)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = s.temporal.TerminateWorkflow(context.Background(), id, prun.GetRunID(), "test over")
	})

	// The worker fails the workflow task: the input is not sealed.
	var failure string
	require.Eventually(t, func() bool {
		events, err := historyEvents(s.temporal, id, prun.GetRunID())
		if err != nil {
			return false
		}
		for _, e := range events {
			if e.GetEventType() == enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED {
				failure = s.failures.FailureToError(e.GetWorkflowTaskFailedEventAttributes().GetFailure()).Error()
				return true
			}
		}
		return false
	}, waitBudget, 100*time.Millisecond, "the worker fails the unsealed workflow's task")
	assert.Contains(t, failure, codec.ErrUnsealed.Error(), "the failure says the payload is not sealed")
	// The server retries the task; it keeps failing, and the workflow makes
	// no progress: no activity is ever scheduled.
	require.Eventually(t, func() bool {
		d, err := s.temporal.DescribeWorkflowExecution(context.Background(), id, prun.GetRunID())
		return err == nil && d.GetPendingWorkflowTask().GetAttempt() >= 2
	}, waitBudget, 100*time.Millisecond, "the refused task is retried and refused again")
	d, err := s.temporal.DescribeWorkflowExecution(ctx, id, prun.GetRunID())
	require.NoError(t, err)
	assert.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, d.GetWorkflowExecutionInfo().GetStatus())
	for _, e := range s.history(s.temporal, id, prun.GetRunID()).GetEvents() {
		assert.NotEqual(t, enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, e.GetEventType(), "no activity was scheduled")
		assert.NotEqual(t, enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, e.GetEventType(), "no workflow task completed")
	}
	noWrites("unsealed")
	_, err = s.ledger.Get(ctx, supportflow.ActionKey(unsealed.ID, 0))
	assert.ErrorIs(t, err, supportflow.ErrNotFound)

	require.NoError(t, s.temporal.TerminateWorkflow(ctx, id, prun.GetRunID(), "test over"))
	d, err = s.temporal.DescribeWorkflowExecution(ctx, id, prun.GetRunID())
	require.NoError(t, err)
	assert.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED, d.GetWorkflowExecutionInfo().GetStatus())
	noWrites("after the termination")
}

// A proposal approved through the starter cancels sub-a (the requester's)
// and sub-b (another customer's, as the subscription service says) on the
// requester's ticket: sub-a is cancelled once, sub-b is never sent to the
// service, and the reply that would have promised both is held back while
// the agents' note says what was and was not done. After the ticket's
// requester changes, a cancellation of the old requester's subscription is
// refused the same way.
func TestExecution_CancelsOnlyTheRequestersSubscriptions(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ticket := s.seedOwnedTicket("Please cancel my plans.", "cust-a", "sub-a")
	s.subs.AddSubscription("sub-b", "cust-b")
	s.startWorker()

	id := uniqueProposalID("not-theirs")
	s.approve(supportflow.Proposal{ID: id, Actions: []supportflow.Action{reply(ticket, "Both of your plans are cancelled.", "sub-a", "sub-b")}})
	_, err := s.wait(id)
	var app *temporal.ApplicationError
	require.ErrorAs(t, err, &app)
	assert.Equal(t, supportflow.ErrTypeActionFailed, app.Type())
	var statuses []supportflow.ActionStatus
	require.NoError(t, app.Details(&statuses))
	require.Len(t, statuses, 1)
	assert.Equal(t, supportflow.StateNeedsAttention, statuses[0].State)
	assert.Equal(t, []string{"sub-a"}, statuses[0].Cancelled)
	assert.Equal(t, []string{"sub-b"}, statuses[0].NotCancelled)

	assert.Equal(t, 1, s.subs.Cancellations("sub-a"))
	assert.Equal(t, 1, s.subs.CancelCalls("sub-a"))
	assert.Zero(t, s.subs.CancelCalls("sub-b"), "another customer's subscription is never sent to the service")
	assert.Zero(t, s.subs.Requests("POST", "/v1/subscriptions/sub-b/cancel"))
	assert.Equal(t, standin.SubscriptionActive, s.subs.Status("sub-b"))

	a := s.action(supportflow.ActionKey(id, 0))
	assert.Equal(t, supportflow.StateNeedsAttention, a.State)
	legA, ok := a.Legs.Find(supportflow.LegCancelSubscription, "sub-a")
	require.True(t, ok)
	assert.Equal(t, ledger.LegDone, legA.State)
	legB, ok := a.Legs.Find(supportflow.LegCancelSubscription, "sub-b")
	require.True(t, ok, "sub-b's refusal is recorded")
	assert.Equal(t, ledger.LegFailed, legB.State)
	assert.Contains(t, legB.LastError, "belongs to customer cust-b")
	assert.Contains(t, legB.LastError, "not to customer cust-a")
	assert.Zero(t, legB.Calls, "no call was made for sub-b")
	replyLeg, ok := a.Legs.Find(supportflow.LegReply, strconv.FormatInt(ticket, 10))
	require.True(t, ok)
	assert.NotEqual(t, ledger.LegDone, replyLeg.State, "the reply did not go out")

	comments := s.zd.Comments(ticket)
	require.Len(t, comments, 1, "the agents' note, no reply")
	assert.False(t, comments[0].Public)
	assert.Contains(t, comments[0].Body, "did not send the approved reply")
	assert.Contains(t, comments[0].Body, "Cancelled: sub-a.")
	assert.Contains(t, comments[0].Body, "Not cancelled: sub-b.")

	// The requester changes in Zendesk (the mirror has not heard yet): the
	// new requester has no customer data. The old requester's subscription
	// is not cancelled from this ticket any more.
	moved := s.seedOwnedTicket("Cancel my plan.", "cust-c", "sub-c")
	newRequester := 30000 + ticketIDs.Add(1)
	require.True(t, s.zd.SetRequester(moved, newRequester))

	movedID := uniqueProposalID("old-requester")
	s.approve(supportflow.Proposal{ID: movedID, Actions: []supportflow.Action{reply(moved, "Your plan is cancelled.", "sub-c")}})
	_, err = s.wait(movedID)
	require.ErrorAs(t, err, &app)
	assert.Equal(t, supportflow.ErrTypeActionFailed, app.Type())
	assert.Zero(t, s.subs.CancelCalls("sub-c"), "the old requester's subscription is never sent to the service")
	assert.Equal(t, standin.SubscriptionActive, s.subs.Status("sub-c"))
	a = s.action(supportflow.ActionKey(movedID, 0))
	assert.Equal(t, supportflow.StateNeedsAttention, a.State)
	legC, ok := a.Legs.Find(supportflow.LegCancelSubscription, "sub-c")
	require.True(t, ok)
	assert.Equal(t, ledger.LegFailed, legC.State)
	assert.Contains(t, legC.LastError, fmt.Sprintf("no customer data for its current requester %d", newRequester))
	assert.Empty(t, s.publicReplies(moved), "no reply promising the cancellation")
	comments = s.zd.Comments(moved)
	require.Len(t, comments, 1)
	assert.False(t, comments[0].Public)
	assert.Contains(t, comments[0].Body, "Not cancelled: sub-c.")

	assert.Zero(t, s.subs.CancelCalls("sub-b"))
	assert.Equal(t, 1, s.cancelRequests(), "sub-a's was the only cancel request")
}

// A drafted proposal's execution failed and its ledger row is then pruned
// (the retention prune, 30 days later). What landed is no longer known,
// so a retry could send the reply twice: it is refused, and nothing is
// written. Twice: once where the cancellation landed and Zendesk refused
// the reply (the prune takes the partial_failure row), and once where the
// reply DID land but could not be confirmed (needs_attention, which the
// prune keeps; the row is deleted by hand): the reply is not posted again.
func TestExecution_RetryAfterPruneDoesNotRepost(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	// A leg whose outcome cannot be learned gives up within seconds.
	s.extraEnv = []string{"SUPPORTFLOW_UNRESOLVED_LEG_BOUND=3s"}
	s.model.SetResponder(answerCancellingAll)
	s.startWorker()
	c := s.api()
	ctx := ctxT(t)

	retryRefusedAsPruned := func(p supportflow.DraftProposal) {
		t.Helper()
		_, err := s.starter.Retry(ctx, s.proposalStore, p.ID, "operator")
		require.ErrorIs(t, err, starter.ErrNotRetryable)
		assert.Contains(t, err.Error(), "has no ledger record")
		assert.Contains(t, err.Error(), "pruned")
		code, resp := c.do("POST", "/proposals/"+p.ID+"/retry", apiToken, nil, nil)
		assert.Equal(t, http.StatusConflict, code, "%s", resp)
		assert.Contains(t, string(resp), "nothing-to-retry")
		_, err = s.ledger.Get(ctx, supportflow.ActionKey(p.ID, 0))
		assert.ErrorIs(t, err, supportflow.ErrNotFound, "the refused retry reserved nothing")
		assert.Equal(t, supportflow.DraftFailed, s.waitProposalState(p.ID, supportflow.DraftFailed).State, "still failed, not executing")
	}

	// 1. The cancellation lands; Zendesk refuses the reply for good.
	refused := s.seedOwnedTicket("Please cancel my plan.", "cust-p", "sub-p")
	s.zd.Inject(standin.Fault{Method: "PUT", Path: fmt.Sprintf("/api/v2/tickets/%d.json", refused), Status: 403, Times: -1})
	p := s.draftAwaiting(refused)
	require.Equal(t, []string{"sub-p"}, p.CancelSubscriptions)
	_, err := s.starter.Approve(ctx, refused, supportflow.ApproveRequest{ProposalID: p.ID, ApprovedBy: "agent"})
	require.NoError(t, err)
	s.waitState(refused, supportflow.DraftFailed)
	s.waitProposalState(p.ID, supportflow.DraftFailed)
	a := s.action(supportflow.ActionKey(p.ID, 0))
	assert.Equal(t, supportflow.StatePartialFailure, a.State)
	assert.Equal(t, 1, s.subs.Cancellations("sub-p"))
	require.Zero(t, s.zd.CommentCount(refused))
	run := mustDescribeRun(t, s, supportflow.ExecuteWorkflowID(p.ID))

	// The prune, as if 30 days had passed: the action goes, the ticket's
	// newest proposal stays. (The actions first, then the proposals and
	// approvals, as the PruneLedger activity runs them.)
	pruned, err := s.ledger.Prune(ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	assert.GreaterOrEqual(t, pruned["action"], int64(1))
	_, err = s.proposalStore.Prune(ctx, time.Now().Add(time.Hour))
	require.NoError(t, err)
	_, err = s.ledger.Get(ctx, supportflow.ActionKey(p.ID, 0))
	require.ErrorIs(t, err, supportflow.ErrNotFound, "the prune took the action's row")
	_, err = s.proposalStore.GetProposal(ctx, p.ID)
	require.NoError(t, err, "the ticket's newest proposal is kept")

	// Zendesk would take the reply now: only the refusal keeps it out.
	s.zd.ClearFaults()
	writes := s.zendeskWrites()
	retryRefusedAsPruned(p)
	assert.Equal(t, run, mustDescribeRun(t, s, supportflow.ExecuteWorkflowID(p.ID)), "no execution was started")
	assert.Zero(t, s.zd.CommentCount(refused), "no reply")
	assert.Equal(t, writes, s.zendeskWrites(), "nothing was written to Zendesk")
	assert.Equal(t, 1, s.subs.CancelCalls("sub-p"), "the landed cancellation is not sent again")

	// 2. The reply (no cancellation: the requester has no subscription)
	// lands but its answer is lost, and the audits cannot be read to
	// confirm it: it stays unknown (after the fence note).
	landed := s.seedOwnedTicket("Where is my order?", "cust-q")
	s.zd.Inject(standin.Fault{Method: "PUT", Path: fmt.Sprintf("/api/v2/tickets/%d.json", landed), DropAfterApply: true})
	s.zd.Inject(standin.Fault{Method: "GET", Path: fmt.Sprintf("/api/v2/tickets/%d/audits.json", landed), Status: 403, Times: -1})
	q := s.draftAwaiting(landed)
	require.Empty(t, q.CancelSubscriptions)
	_, err = s.starter.Approve(ctx, landed, supportflow.ApproveRequest{ProposalID: q.ID, ApprovedBy: "agent"})
	require.NoError(t, err)
	s.waitState(landed, supportflow.DraftFailed)
	s.waitProposalState(q.ID, supportflow.DraftFailed)
	require.Len(t, s.publicReplies(landed), 1, "the reply is on the ticket")
	assert.Equal(t, q.Reply, s.publicReplies(landed)[0].Body)
	a = s.action(supportflow.ActionKey(q.ID, 0))
	assert.Equal(t, supportflow.StateNeedsAttention, a.State, "the ledger could not confirm the reply")
	replyLeg, ok := a.Legs.Find(supportflow.LegReply, strconv.FormatInt(landed, 10))
	require.True(t, ok)
	assert.Equal(t, ledger.LegUnknown, replyLeg.State)
	comments := s.zd.CommentCount(landed)
	assert.Equal(t, 2, comments, "the reply and the fence note")
	run = mustDescribeRun(t, s, supportflow.ExecuteWorkflowID(q.ID))

	// Its row is deleted by hand (Prune keeps needs_attention rows; an
	// operator's cleanup takes it), then the retry is asked for with
	// Zendesk healthy again.
	_, err = s.pool.Exec(ctx, `DELETE FROM action WHERE account = $1 AND key = $2`, zdHost(s.zdSrv.URL()), supportflow.ActionKey(q.ID, 0))
	require.NoError(t, err)
	s.zd.ClearFaults()
	writes = s.zendeskWrites()
	retryRefusedAsPruned(q)
	assert.Equal(t, run, mustDescribeRun(t, s, supportflow.ExecuteWorkflowID(q.ID)), "no execution was started")
	assert.Len(t, s.publicReplies(landed), 1, "the reply that landed is not posted again")
	assert.Equal(t, comments, s.zd.CommentCount(landed), "no comment at all")
	assert.Equal(t, writes, s.zendeskWrites(), "nothing was written to Zendesk")
}

// A draft whose execution ends needs_attention (its cancellation refused
// for good) is drafted again. While the redraft is drafting, and while it
// awaits approval, the old proposal cannot be retried; the redraft is the
// one answer. The converse: once the redraft is rejected, the old proposal
// is retried, and a new redraft drafted while that retry runs cannot be
// approved, neither while the retry executes nor after it went out. A
// retried proposal that succeeds ends done.
func TestExecution_RetryAndRedraftGiveOneAnswer(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	// A longer retry cap keeps a failing retry executing for a while (its
	// ten attempts), long enough to draft the ticket meanwhile.
	s.extraEnv = []string{"SUPPORTFLOW_RETRY_CAP=5s"}
	s.model.SetResponder(answerCancellingAll)
	s.startWorker()
	c := s.api()
	ctx := ctxT(t)

	// heldBack drafts the ticket, approves it with its cancellation refused
	// for good, and returns the proposal once the execution failed.
	heldBack := func(ticket int64, sub string, redraftArrived chan struct{}) supportflow.DraftProposal {
		t.Helper()
		s.subs.Inject(standin.Fault{Method: "POST", Path: "/v1/subscriptions/" + sub + "/cancel", Status: 422, Times: -1})
		p := s.draftAwaiting(ticket)
		require.Equal(t, []string{sub}, p.CancelSubscriptions)
		if redraftArrived != nil {
			// The redraft's model call is slow, so it is seen drafting.
			s.model.Inject(standin.ModelFault{Delay: 8 * time.Second, Arrived: redraftArrived})
		}
		code, resp := c.do("POST", "/proposals/"+p.ID+"/approve", apiToken, nil, nil)
		require.Equal(t, http.StatusOK, code, "%s", resp)
		s.waitProposalState(p.ID, supportflow.DraftFailed)
		assert.Equal(t, supportflow.StateNeedsAttention, s.action(supportflow.ActionKey(p.ID, 0)).State)
		assert.Empty(t, s.publicReplies(ticket), "the reply was held back")
		return p
	}
	redraftOf := func(ticket int64, old string) supportflow.DraftProposal {
		t.Helper()
		st := s.waitDraft(ticket, "redrafted", func(d supportflow.DraftStatus) bool {
			return d.State == supportflow.DraftAwaitingApproval && d.Proposal != nil && d.Proposal.ID != old
		})
		return *st.Proposal
	}

	// 1. The redraft answers.
	one := s.seedOwnedTicket("Please cancel my plan.", "cust-1", "sub-1")
	drafting := make(chan struct{}, 4)
	p := heldBack(one, "sub-1", drafting)
	select {
	case <-drafting:
	case <-time.After(waitBudget):
		t.Fatal("the ticket was never drafted again")
	}
	code, resp := c.do("POST", "/proposals/"+p.ID+"/retry", apiToken, nil, nil)
	assert.Equal(t, http.StatusConflict, code, "%s", resp)
	assert.Contains(t, string(resp), "nothing-to-retry")
	assert.Contains(t, string(resp), "is being drafted again", "refused while the redraft is drafting")
	redraft := redraftOf(one, p.ID)
	assert.Empty(t, redraft.CancelSubscriptions, "the redraft knows the cancellation failed")
	_, err := s.starter.Retry(ctx, s.proposalStore, p.ID, "operator")
	require.ErrorIs(t, err, starter.ErrNotRetryable)
	assert.Contains(t, err.Error(), redraft.ID, "the refusal names the redraft")
	assert.Empty(t, s.publicReplies(one), "the refused retries posted nothing")
	assert.Equal(t, supportflow.DraftFailed, s.waitProposalState(p.ID, supportflow.DraftFailed).State)

	_, err = s.starter.Approve(ctx, one, supportflow.ApproveRequest{ProposalID: redraft.ID, ApprovedBy: "agent"})
	require.NoError(t, err)
	s.waitState(one, supportflow.DraftDone)
	s.waitProposalState(redraft.ID, supportflow.DraftDone)
	// Once the redraft went out, the old proposal has nothing left to say.
	_, err = s.starter.Retry(ctx, s.proposalStore, p.ID, "operator")
	require.ErrorIs(t, err, starter.ErrNotRetryable)
	replies := s.publicReplies(one)
	require.Len(t, replies, 1, "exactly one answer")
	assert.Equal(t, redraft.Reply, replies[0].Body)
	assert.Len(t, s.zd.Comments(one), 2, "the agents' note and the redraft's reply")
	assert.Equal(t, 1, s.subs.CancelCalls("sub-1"), "the refused cancellation was asked once")
	assert.Equal(t, supportflow.DraftFailed, s.waitProposalState(p.ID, supportflow.DraftFailed).State)

	// 2. The retry answers: the redraft is rejected, the old proposal is
	// retried once the service would cancel, and a redraft drafted while
	// that retry runs cannot be approved.
	two := s.seedOwnedTicket("Please cancel my plan.", "cust-2", "sub-2")
	old := heldBack(two, "sub-2", nil)
	first := redraftOf(two, old.ID)
	code, resp = c.do("POST", "/proposals/"+first.ID+"/reject", apiToken, []byte(`{"reason":"retrying the first"}`), nil)
	require.Equal(t, http.StatusOK, code, "%s", resp)
	s.waitState(two, supportflow.DraftRejected)
	s.waitProposalState(first.ID, supportflow.DraftRejected)
	// Until the rejected draft's workflow has closed, a retry is refused as
	// if the ticket were being drafted (its run is still open).
	s.waitClosed(supportflow.DraftWorkflowID(two))

	s.subs.ClearFaults()
	// Zendesk fails the reply until the test lets it through: the retry
	// stays executing meanwhile.
	s.zd.Inject(standin.Fault{Method: "PUT", Path: fmt.Sprintf("/api/v2/tickets/%d.json", two), Status: 500, Times: -1})
	e, err := s.starter.Retry(ctx, s.proposalStore, old.ID, "operator")
	require.NoError(t, err)
	assert.Equal(t, supportflow.ExecuteWorkflowID(old.ID), e.WorkflowID)
	assert.Equal(t, supportflow.DraftExecuting, s.waitProposalState(old.ID, supportflow.DraftExecuting).State)
	require.Eventually(t, func() bool { return s.subs.Cancellations("sub-2") == 1 }, waitBudget, 50*time.Millisecond,
		"the retry cancels sub-2")

	second := s.draftAwaiting(two)
	require.NotEqual(t, first.ID, second.ID)
	code, resp = c.do("POST", "/proposals/"+second.ID+"/approve", apiToken, nil, nil)
	assert.Equal(t, http.StatusConflict, code, "%s", resp)
	assert.Contains(t, string(resp), "ticket-answered-elsewhere")
	assert.Contains(t, string(resp), old.ID)
	require.Equal(t, supportflow.DraftExecuting, s.waitProposalState(old.ID, supportflow.DraftExecuting).State,
		"the retry was still executing when the approval was refused")

	s.zd.ClearFaults()
	statuses, err := s.wait(old.ID)
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplied, statuses[0].State)
	s.waitProposalState(old.ID, supportflow.DraftDone)

	// Afterwards too: the retry answered the ticket after the redraft was
	// drafted.
	_, err = s.starter.Approve(ctx, two, supportflow.ApproveRequest{ProposalID: second.ID, ApprovedBy: "agent"})
	require.ErrorIs(t, err, starter.ErrAnswerConflict)
	_, err = s.proposalStore.GetApproval(ctx, second.ID)
	assert.ErrorIs(t, err, supportflow.ErrNotFound, "the refused approval was not recorded")
	p2, err := s.proposalStore.GetProposal(ctx, second.ID)
	require.NoError(t, err)
	assert.Equal(t, supportflow.DraftAwaitingApproval, p2.State)

	replies = s.publicReplies(two)
	require.Len(t, replies, 1, "exactly one answer")
	assert.Equal(t, old.Reply, replies[0].Body)
	assert.Equal(t, 1, s.subs.Cancellations("sub-2"))
	assert.Equal(t, supportflow.StateApplied, s.action(supportflow.ActionKey(old.ID, 0)).State)
	assert.Equal(t, supportflow.DraftDone, s.waitProposalState(old.ID, supportflow.DraftDone).State, "the retried proposal ends done")
}
