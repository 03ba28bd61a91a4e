package tests

// The settle from the receivers, end to end: what an execution that gave
// up on a leg says was done comes from the subscription service's status
// (and a cancel repeated under the same Idempotency-Key) and from the
// ticket's audits after a fence, never from the error it gave up on.

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/ledger"
)

// quickRetries shrinks the backoff between an activity's attempts, so that
// one that fails on every attempt spends its budget (10) in a few seconds.
var quickRetries = []string{"SUPPORTFLOW_RETRY_BASE=50ms", "SUPPORTFLOW_RETRY_CAP=250ms"}

// settleProposalID names a proposal of this run of the tests: its
// execution's workflow ID lives on a Temporal server that may outlive it.
func settleProposalID(name string) string { return name + "-" + runNonce }

// failedActivities returns the types of the activities that failed for
// good (retries spent, or a non-retryable error) in the workflow's latest
// run.
func (s *stack) failedActivities(workflowID string) []string {
	s.t.Helper()
	scheduled := map[int64]string{}
	var failed []string
	iter := s.temporal.GetWorkflowHistory(ctxT(s.t), workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(s.t, err)
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			scheduled[ev.GetEventId()] = a.GetActivityType().GetName()
		}
		if f := ev.GetActivityTaskFailedEventAttributes(); f != nil {
			failed = append(failed, scheduled[f.GetScheduledEventId()])
		}
	}
	return failed
}

// actionFailure is the ActionFailed error an execution ended with, and the
// statuses it carries.
func actionFailure(t *testing.T, err error) []supportflow.ActionStatus {
	t.Helper()
	var app *temporal.ApplicationError
	require.ErrorAs(t, err, &app)
	require.Equal(t, supportflow.ErrTypeActionFailed, app.Type())
	var statuses []supportflow.ActionStatus
	require.NoError(t, app.Details(&statuses))
	return statuses
}

// One subscription cancels, the other is refused for good (422). The
// reply, which would promise both, is held back; the agents get one
// private note that says, from the ledger, which was cancelled and which
// was not, in classified words rather than the service's error text.
func TestExecution_NeedsAttentionSaysWhatWasCancelled(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ticket := s.zd.AddTicket(standin.Ticket{Subject: "Cancel both of my plans"})
	s.own(ticket, "cust-1", "sub-done", "sub-refused")
	s.subs.Inject(standin.Fault{Method: "POST", Path: "/v1/subscriptions/sub-refused/cancel", Status: 422, Times: -1})
	s.startWorker()

	id := settleProposalID("says-what")
	s.approve(supportflow.Proposal{ID: id, Actions: []supportflow.Action{reply(ticket, "Both of your plans are cancelled.", "sub-done", "sub-refused")}})
	_, err := s.wait(id)
	s.recordHistory(supportflow.ExecuteWorkflowID(id), "", "execute_proposal_settled_needs_attention")
	statuses := actionFailure(t, err)
	require.Len(t, statuses, 1)
	assert.Equal(t, supportflow.StateNeedsAttention, statuses[0].State)
	assert.Equal(t, []string{"sub-done"}, statuses[0].Cancelled)
	assert.Equal(t, []string{"sub-refused"}, statuses[0].NotCancelled)
	assert.Empty(t, statuses[0].Unknown)
	assert.Zero(t, statuses[0].CommentID)

	// The service: one cancelled, once; the other untouched.
	assert.Equal(t, 1, s.subs.Cancellations("sub-done"))
	assert.Equal(t, standin.SubscriptionCancelled, s.subs.Status("sub-done"))
	assert.Zero(t, s.subs.Cancellations("sub-refused"))
	assert.Equal(t, standin.SubscriptionActive, s.subs.Status("sub-refused"))

	// The ticket: nothing public, one note saying what was done.
	public, private := s.splitComments(ticket)
	assert.Empty(t, public, "the reply was held back")
	require.Len(t, private, 1, "exactly one note for the agents")
	note := private[0].Body
	assert.Contains(t, note, "Cancelled: sub-done.")
	assert.Contains(t, note, "Not cancelled: sub-refused.")
	assert.NotContains(t, note, "Outcome unknown", "nothing was left unknown")
	assert.NotContains(t, note, "injected fault", "the service's own error text is not quoted")

	// The ledger says the same.
	a := s.action(supportflow.ActionKey(id, 0))
	assert.Equal(t, supportflow.StateNeedsAttention, a.State)
	require.Len(t, a.Legs, 3)
	assert.Equal(t, []string{"sub-done"}, a.Legs.InState(supportflow.LegCancelSubscription, ledger.LegDone))
	assert.Equal(t, []string{"sub-refused"}, a.Legs.InState(supportflow.LegCancelSubscription, ledger.LegFailed))
	replyLeg := a.Legs.Of(supportflow.LegReply)
	require.Len(t, replyLeg, 1)
	assert.Equal(t, ledger.LegPending, replyLeg[0].State, "the reply never ran")
	assert.Zero(t, a.CommentID())
}

// Both cancellations land and both answers are lost; every later attempt
// of the cancellation activity fails to read the last one's status (the
// service answers 503 to reads while an attempt is at work), so the
// activity gives up. The execution asks the service itself (the settle
// holds no claim, and is answered), learns that every cancellation landed,
// and posts the reply: applied, one reply, each subscription cancelled
// once and never called twice.
func TestExecution_LostAnswersResolvedThenReplied(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ticket := s.zd.AddTicket(standin.Ticket{Subject: "Cancel both, please"})
	subs := []string{"sub-1", "sub-2"}
	s.own(ticket, "cust-1", subs...)
	for _, sub := range subs {
		s.subs.Inject(standin.Fault{Method: "POST", Path: "/v1/subscriptions/" + sub + "/cancel", DropAfterApply: true, Times: -1})
	}
	id := settleProposalID("lost-answers")
	key := supportflow.ActionKey(id, 0)
	// sub-1's lost answer is learned by the next attempt (it must be, for
	// that attempt to go on to sub-2); sub-2's never by an attempt.
	refused := s.unavailableWhileAttempting(s.subsGate, key, supportflow.Leg{Kind: supportflow.LegCancelSubscription, Target: "sub-2"},
		func(r *http.Request) bool {
			return r.Method == http.MethodGet && r.URL.Path == "/v1/subscriptions/sub-2"
		})
	s.extraEnv = quickRetries
	s.startWorker()

	s.approve(supportflow.Proposal{ID: id, Actions: []supportflow.Action{reply(ticket, "Both of your plans are cancelled.", subs...)}})
	statuses, err := s.wait(id)
	s.recordHistory(supportflow.ExecuteWorkflowID(id), "", "execute_proposal_lost_answers_replied")
	require.NoError(t, err)
	require.Len(t, statuses, 1)
	assert.Equal(t, supportflow.StateApplied, statuses[0].State)
	assert.Equal(t, subs, statuses[0].Cancelled)

	// What the test is about: the activity gave up, the settle resolved.
	assert.Contains(t, s.failedActivities(supportflow.ExecuteWorkflowID(id)), "CancelSubscriptions", "the cancellation activity spent its attempts")
	assert.Positive(t, refused(), "its attempts could not read sub-2's status")

	for _, sub := range subs {
		assert.Equal(t, 1, s.subs.Cancellations(sub), "%s cancelled exactly once", sub)
		assert.Equal(t, 1, s.subs.CancelCalls(sub), "%s: its status said so; the cancel was not sent again", sub)
	}
	public, private := s.splitComments(ticket)
	require.Len(t, public, 1, "exactly one reply")
	assert.Equal(t, "Both of your plans are cancelled.", public[0].Body)
	assert.Empty(t, private, "nothing for the agents: nothing went wrong in the end")

	a := s.action(key)
	assert.Equal(t, supportflow.StateApplied, a.State)
	for _, l := range a.Legs {
		assert.Equal(t, ledger.LegDone, l.State, "%s %s", l.Kind, l.Target)
	}
	assert.Equal(t, public[0].ID, a.CommentID())
	assert.Equal(t, public[0].ID, statuses[0].CommentID)
}

// The reply lands and its answer is lost; every later attempt fails to
// search the ticket's audits (503 while an attempt is at work), so the
// reply activity gives up unsure. The settle fences the ticket (a private
// note, whose own answer is lost too) and searches the audits: the reply
// is there, so the action is applied with its comment ID, the reply on the
// ticket once, and the execution succeeds.
func TestExecution_LastAttemptLandedSettlesDone(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ticket := s.zd.AddTicket(standin.Ticket{Subject: "Where is my refund?"})
	s.zd.Inject(standin.Fault{Method: "PUT", Path: "/api/v2/tickets/*", DropAfterApply: true, Times: -1})
	id := settleProposalID("last-landed")
	key := supportflow.ActionKey(id, 0)
	audits := fmt.Sprintf("/api/v2/tickets/%d/audits.json", ticket)
	refused := s.unavailableWhileAttempting(s.zdGate, key, supportflow.Leg{Kind: supportflow.LegReply, Target: strconv.FormatInt(ticket, 10)},
		func(r *http.Request) bool { return r.Method == http.MethodGet && r.URL.Path == audits })
	s.extraEnv = quickRetries
	s.startWorker()

	s.approve(supportflow.Proposal{ID: id, Actions: []supportflow.Action{reply(ticket, "Your refund is on its way.")}})
	statuses, err := s.wait(id)
	s.recordHistory(supportflow.ExecuteWorkflowID(id), "", "execute_proposal_fenced_applied")
	require.NoError(t, err, "the settle found the reply on the audits")
	require.Len(t, statuses, 1)
	assert.Equal(t, supportflow.StateApplied, statuses[0].State)

	assert.Contains(t, s.failedActivities(supportflow.ExecuteWorkflowID(id)), "PostReply", "the reply activity spent its attempts")
	assert.Positive(t, refused(), "its attempts could not search the audits")

	public, private := s.splitComments(ticket)
	require.Len(t, public, 1, "the reply, exactly once")
	assert.Equal(t, "Your refund is on its way.", public[0].Body)
	require.Len(t, private, 1, "the fence note, once though its answer was lost too")
	assert.Contains(t, private[0].Body, key)
	assert.Equal(t, 2, s.zd.Requests("PUT", "/api/v2/tickets/"), "the reply was written once, the fence once")

	a := s.action(key)
	assert.Equal(t, supportflow.StateApplied, a.State)
	assert.Empty(t, a.LastError)
	replyLeg := a.Legs.Of(supportflow.LegReply)
	require.Len(t, replyLeg, 1)
	assert.Equal(t, ledger.LegDone, replyLeg[0].State)
	assert.Equal(t, strconv.FormatInt(public[0].ID, 10), replyLeg[0].ExternalID, "the leg records the comment found")
	assert.Equal(t, public[0].ID, a.CommentID())
	assert.Equal(t, public[0].ID, statuses[0].CommentID)
}

// A write held in flight on the last attempt (longer than the call
// timeout) reaches its receiver after the execution gave up. Whatever the
// timing, what the execution and the ledger say is what the receiver did.
func TestExecution_HeldWriteAfterGiveUpNeverLies(t *testing.T) {
	t.Parallel()
	// Attempts 1 to 9 are refused (503: nothing applied); the 10th, the
	// last, is held this long before it is applied.
	const refusedAttempts = 9
	const hold = 4 * time.Second

	// The fence (a note 2 s after the give-up) moves the ticket on, so the
	// held reply, stamped before it, is refused when it applies (409); had
	// it applied before the fence, the audit search found it. Either way
	// the reply is on the ticket iff the action is applied.
	t.Run("zendesk", func(t *testing.T) {
		t.Parallel()
		s := newStack(t)
		ticket := s.zd.AddTicket(standin.Ticket{Subject: "Held reply"})
		path := fmt.Sprintf("/api/v2/tickets/%d.json", ticket)
		held := arrived()
		s.zd.Inject(standin.Fault{Method: "PUT", Path: path, Status: 503, Times: refusedAttempts})
		s.zd.Inject(standin.Fault{Method: "PUT", Path: path, Delay: hold, Arrived: held})
		s.extraEnv = quickRetries
		s.startWorker()

		id := settleProposalID("held-reply")
		key := supportflow.ActionKey(id, 0)
		s.approve(supportflow.Proposal{ID: id, Actions: []supportflow.Action{reply(ticket, "Your refund is on its way.")}})
		waitArrived(t, held)
		statuses, err := s.wait(id)

		// The held write has been handled: it landed, or was refused.
		require.Eventually(t, func() bool {
			public, _ := s.splitComments(ticket)
			return len(public) > 0 || s.zd.Conflicts() > 0
		}, waitBudget, 50*time.Millisecond, "the held write is applied or refused")
		public, private := s.splitComments(ticket)
		require.LessOrEqual(t, len(public), 1, "never two replies")
		require.Len(t, private, 1, "the fence note")
		assert.Contains(t, private[0].Body, key)
		landed := len(public) == 1

		a := s.action(key)
		replyLeg := a.Legs.Of(supportflow.LegReply)
		require.Len(t, replyLeg, 1)
		assert.Equal(t, landed, a.State == supportflow.StateApplied, "the ledger says applied iff the reply is on the ticket")
		assert.Equal(t, landed, replyLeg[0].State == ledger.LegDone)
		if landed {
			t.Log("the held reply applied before the fence; the audit search found it")
			require.NoError(t, err)
			assert.Equal(t, supportflow.StateApplied, statuses[0].State)
			assert.Equal(t, public[0].ID, statuses[0].CommentID)
			assert.Equal(t, public[0].ID, a.CommentID())
			return
		}
		t.Logf("the held reply was refused when it applied (409s: %d)", s.zd.Conflicts())
		assert.Positive(t, s.zd.Conflicts(), "the held write was refused by its stale stamp")
		failed := actionFailure(t, err)
		require.Len(t, failed, 1)
		assert.Equal(t, supportflow.StateFailed, failed[0].State)
		assert.Zero(t, failed[0].CommentID)
		assert.Equal(t, supportflow.StateFailed, a.State)
		assert.Equal(t, ledger.LegFailed, replyLeg[0].State)
		assert.Zero(t, a.CommentID())
	})

	// The settle reads the subscription's status and, while it still says
	// active, sends the cancel again under the held one's Idempotency-Key:
	// whichever the service handles first cancels, the other gets its
	// answer and changes nothing. The ledger says done iff the service
	// says cancelled, and a reply promising the cancellation is posted
	// only if it happened.
	t.Run("cancellation", func(t *testing.T) {
		t.Parallel()
		s := newStack(t)
		ticket := s.zd.AddTicket(standin.Ticket{Subject: "Held cancel"})
		const sub = "sub-held"
		s.own(ticket, "cust-1", sub)
		path := "/v1/subscriptions/" + sub + "/cancel"
		held := arrived()
		s.subs.Inject(standin.Fault{Method: "POST", Path: path, Status: 503, Times: refusedAttempts})
		s.subs.Inject(standin.Fault{Method: "POST", Path: path, Delay: hold, Arrived: held})
		// The retry cap stays at the lease (2 s): the execution's quick
		// look after the give-up (three tries) outlasts the lease its last
		// attempt keeps, a write of it being in flight.
		s.extraEnv = []string{"SUPPORTFLOW_RETRY_BASE=100ms"}
		s.startWorker()

		id := settleProposalID("held-cancel")
		key := supportflow.ActionKey(id, 0)
		s.approve(supportflow.Proposal{ID: id, Actions: []supportflow.Action{reply(ticket, "Your plan is cancelled.", sub)}})
		waitArrived(t, held)
		statuses, err := s.wait(id)

		// The held cancel has been handled: every call past the refused
		// ones made the cancellation or got its answer again.
		require.Eventually(t, func() bool {
			return s.subs.Cancellations(sub)+s.subs.IdempotentReplays(sub) == s.subs.CancelCalls(sub)-refusedAttempts
		}, waitBudget, 50*time.Millisecond, "the held cancel is applied")
		t.Logf("cancel calls %d, replays %d", s.subs.CancelCalls(sub), s.subs.IdempotentReplays(sub))
		assert.Equal(t, 1, s.subs.Cancellations(sub), "one cancellation at the service")
		keys := s.subs.IdempotencyKeys(sub)
		require.NotEmpty(t, keys)
		for _, k := range keys {
			assert.Equal(t, keys[0], k, "every cancel of the action, the held one and any repeat, under one key")
		}
		cancelled := s.subs.Status(sub) == standin.SubscriptionCancelled

		a := s.action(key)
		legs := a.Legs.Of(supportflow.LegCancelSubscription)
		require.Len(t, legs, 1)
		assert.Equal(t, cancelled, legs[0].State == ledger.LegDone, "the ledger says done iff the service says cancelled")
		public, _ := s.splitComments(ticket)
		require.LessOrEqual(t, len(public), 1, "never two replies")
		if len(public) == 1 {
			assert.True(t, cancelled, "the reply promised a cancellation: it happened")
		}
		assert.Equal(t, len(public) == 1, a.State == supportflow.StateApplied, "applied iff the reply is on the ticket")
		if err == nil {
			assert.Equal(t, supportflow.StateApplied, statuses[0].State)
			assert.Equal(t, []string{sub}, statuses[0].Cancelled)
			require.Len(t, public, 1)
			assert.Equal(t, public[0].ID, statuses[0].CommentID)
			return
		}
		t.Logf("the execution ended without the reply: %v", err)
		failed := actionFailure(t, err)
		require.Len(t, failed, 1)
		assert.Equal(t, a.State, failed[0].State)
		assert.Equal(t, cancelled, len(failed[0].Cancelled) == 1, "what the execution says was cancelled is what was")
	})
}
