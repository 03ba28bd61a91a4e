package tests

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/ledger"
	"github.com/supportflow/supportflow/starter"
)

func reply(ticket int64, body string, subs ...string) supportflow.Action {
	return supportflow.Action{TicketID: ticket, Comment: &supportflow.Comment{Body: body, Public: true}, CancelSubscriptions: subs}
}

// The worker dies while Zendesk is processing the comment; Zendesk applies
// it anyway. The next attempt (after the heartbeat timeout, once the dead
// claimant's lease lapsed) finds the comment in the ticket's audits instead
// of posting it again.
func TestExecution_WorkerKilledDuringZendeskWrite(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ticket := s.zd.AddTicket(standin.Ticket{Subject: "Please cancel"})
	s.own(ticket, "cust-1", "sub-1")
	hit := arrived()
	s.zd.Inject(standin.Fault{Method: "PUT", Path: "/api/v2/tickets/*", Delay: 700 * time.Millisecond, Arrived: hit})
	s.startWorker()

	s.approve(supportflow.Proposal{ID: "killed-zd", Actions: []supportflow.Action{reply(ticket, "Your plan is cancelled.", "sub-1")}})
	waitArrived(t, hit)
	s.killWorker()
	s.startWorker()

	statuses, err := s.wait("killed-zd")
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplied, statuses[0].State)

	assert.Equal(t, 1, s.zd.CommentCount(ticket), "exactly one comment")
	assert.Equal(t, 1, s.zd.Requests("PUT", "/api/v2/tickets/"), "the comment was never sent twice")
	assert.Equal(t, 1, s.subs.Cancellations("sub-1"))
	a := s.action("killed-zd:0")
	assert.Equal(t, supportflow.StateApplied, a.State)
	assert.Equal(t, s.zd.Comments(ticket)[0].ID, a.CommentID(), "the ledger recorded the comment found on the audit")
	assert.GreaterOrEqual(t, a.Attempts, 2)
}

// The worker dies in the middle of the cancellation leg: sub-1 is done and
// recorded, sub-2 is applied by the service but never recorded. The next
// attempt skips sub-1, sends sub-2's cancel again under the same
// Idempotency-Key (the service answers it with the first request's answer,
// and cancels nothing twice), and cancels sub-3.
func TestExecution_WorkerKilledDuringCancellations(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ticket := s.zd.AddTicket(standin.Ticket{Subject: "Cancel all three"})
	s.own(ticket, "cust-1", "sub-1", "sub-2", "sub-3")
	hit := arrived()
	s.subs.Inject(standin.Fault{Method: "POST", Path: "/v1/subscriptions/sub-2/cancel", Delay: 700 * time.Millisecond, Arrived: hit})
	s.startWorker()

	s.approve(supportflow.Proposal{ID: "killed-subs", Actions: []supportflow.Action{reply(ticket, "All three cancelled.", "sub-1", "sub-2", "sub-3")}})
	waitArrived(t, hit)
	s.killWorker()
	s.startWorker()

	statuses, err := s.wait("killed-subs")
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplied, statuses[0].State)
	assert.Equal(t, []string{"sub-1", "sub-2", "sub-3"}, statuses[0].Cancelled)

	assert.Equal(t, 1, s.zd.CommentCount(ticket), "exactly one comment")
	for _, id := range []string{"sub-1", "sub-2", "sub-3"} {
		assert.Equal(t, 1, s.subs.Cancellations(id), "exactly one successful cancellation of %s", id)
	}
	assert.Equal(t, 1, s.subs.CancelCalls("sub-1"), "a recorded success is not sent again")
	a := s.action("killed-subs:0")
	assert.Equal(t, supportflow.StateApplied, a.State)
	require.Len(t, a.Legs.Of(supportflow.LegCancelSubscription), 3)
	assert.Equal(t, ledger.LegDone, a.Legs.Of(supportflow.LegCancelSubscription)[1].State)
	assert.Equal(t, 2, s.subs.CancelCalls("sub-2"))
	assert.Equal(t, 1, s.subs.IdempotentReplays("sub-2"), "sub-2's lost outcome was recovered from the service's answer to its key")
	keys := s.subs.IdempotencyKeys("sub-2")
	require.Len(t, keys, 2)
	assert.Equal(t, keys[0], keys[1], "the repeated cancel carried the first one's key")
}

// Zendesk accepts the comment and the connection drops before the answer.
// Retries must not post again, not even after the action ended without
// knowing and an operator explicitly re-approves.
func TestExecution_ResponseLostAfterZendeskAccepted(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ticket := s.zd.AddTicket(standin.Ticket{Subject: "Lost answer"})
	other := s.zd.AddTicket(standin.Ticket{Subject: "Lost answer, then re-approved"})
	// Part 2 cannot learn whether its reply landed: a short bound on
	// trying ends it in seconds.
	s.extraEnv = []string{"SUPPORTFLOW_UNRESOLVED_LEG_BOUND=5s"}
	s.startWorker()

	// 1. Retried within one execution: the retry finds the audit.
	s.zd.Inject(standin.Fault{Method: "PUT", Path: "/api/v2/tickets/*", DropAfterApply: true})
	s.approve(supportflow.Proposal{ID: "lost-1", Actions: []supportflow.Action{reply(ticket, "Done.")}})
	statuses, err := s.wait("lost-1")
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplied, statuses[0].State)
	assert.Equal(t, 1, s.zd.CommentCount(ticket), "exactly one comment")
	assert.Equal(t, 1, s.zd.Requests("PUT", "/api/v2/tickets/"))
	assert.Equal(t, s.zd.Comments(ticket)[0].ID, s.action("lost-1:0").CommentID())

	// 2. The answer is lost and the audit search is refused, also after
	// the fence (a private note that moves the ticket on, so no write of
	// ours can still land): whether the reply landed cannot be learned, so
	// the action ends needs_attention with the reply unknown, never
	// "failed", though its comment is on the ticket.
	s.zd.Inject(standin.Fault{Method: "PUT", Path: "/api/v2/tickets/*", DropAfterApply: true})
	s.zd.Inject(standin.Fault{Method: "GET", Path: fmt.Sprintf("/api/v2/tickets/%d/audits.json", other), Status: 403, Times: -1})
	s.approve(supportflow.Proposal{ID: "lost-2", Actions: []supportflow.Action{reply(other, "Done.")}})
	_, err = s.wait("lost-2")
	var app *temporal.ApplicationError
	require.ErrorAs(t, err, &app)
	assert.Equal(t, supportflow.ErrTypeActionFailed, app.Type())
	var failed []supportflow.ActionStatus
	require.NoError(t, app.Details(&failed))
	require.Len(t, failed, 1)
	assert.Equal(t, supportflow.StateNeedsAttention, failed[0].State)
	assert.Equal(t, []string{fmt.Sprintf("reply %d", other)}, failed[0].Unknown, "the reply's outcome is unknown, not failed")
	a := s.action("lost-2:0")
	assert.Equal(t, supportflow.StateNeedsAttention, a.State)
	require.Len(t, a.Legs, 1)
	assert.Equal(t, ledger.LegUnknown, a.Legs[0].State)
	public, private := s.splitComments(other)
	require.Len(t, public, 1, "the reply landed once")
	require.Len(t, private, 1, "and the fence note")
	assert.Contains(t, private[0].Body, "lost-2:0")

	// The operator re-approves once Zendesk answers again: the comment is
	// found on the audits, not posted a second time.
	s.zd.ClearFaults()
	e := s.approve(supportflow.Proposal{ID: "lost-2", Actions: []supportflow.Action{reply(other, "Done.")}})
	assert.False(t, e.Joined, "the closed execution is run again")
	statuses, err = s.wait("lost-2")
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplied, statuses[0].State)
	public, private = s.splitComments(other)
	require.Len(t, public, 1, "exactly one reply after re-approval")
	assert.Len(t, private, 1, "the first execution's fence note, nothing more")
	a = s.action("lost-2:0")
	assert.Equal(t, supportflow.StateApplied, a.State)
	assert.Equal(t, public[0].ID, a.CommentID())
	assert.Equal(t, public[0].ID, statuses[0].CommentID)
}

// A cancellation is refused for good, the action ends partial_failure;
// once the cause is fixed a re-approval runs only the missing cancellation.
func TestExecution_ReapproveAfterPartialFailure(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ticket := s.zd.AddTicket(standin.Ticket{Subject: "Cancel two"})
	s.own(ticket, "cust-1", "sub-1", "sub-2")
	s.subs.Inject(standin.Fault{Method: "POST", Path: "/v1/subscriptions/sub-2/cancel", Status: 422, Times: -1})
	s.startWorker()

	p := supportflow.Proposal{ID: "partial", Actions: []supportflow.Action{reply(ticket, "Both cancelled.", "sub-1", "sub-2")}}
	s.approve(p)
	_, err := s.wait("partial")
	require.Error(t, err)
	assert.Equal(t, supportflow.StateNeedsAttention, s.action("partial:0").State)
	assert.Equal(t, 1, s.subs.Cancellations("sub-1"))
	assert.Equal(t, 0, s.subs.Cancellations("sub-2"))
	assert.Equal(t, 1, s.subs.CancelCalls("sub-2"), "a 422 is not retried")
	// Nothing public promised what did not happen; the agents were told.
	comments := s.zd.Comments(ticket)
	require.Len(t, comments, 1)
	assert.False(t, comments[0].Public, "a private note, not the reply")

	s.subs.ClearFaults()
	s.approve(p)
	statuses, err := s.wait("partial")
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplied, statuses[0].State)

	comments = s.zd.Comments(ticket)
	require.Len(t, comments, 2, "the note, then the reply once every cancellation succeeded")
	assert.True(t, comments[1].Public)
	assert.Equal(t, "Both cancelled.", comments[1].Body)
	assert.Equal(t, 1, s.subs.CancelCalls("sub-1"), "sub-1 is not called again")
	assert.Equal(t, 1, s.subs.Cancellations("sub-2"))
	a := s.action("partial:0")
	assert.Equal(t, supportflow.StateApplied, a.State)
	assert.Empty(t, a.LastError)
}

// A cancellation refused for good: no public reply (it would promise a
// cancellation that did not happen), one private note for the agents,
// and running the execution again adds no second note.
func TestExecution_ReplyOnlyAfterCancellations(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ticket := s.zd.AddTicket(standin.Ticket{Subject: "Cancel mine"})
	s.startWorker()
	p := supportflow.Proposal{ID: "refused", Actions: []supportflow.Action{reply(ticket, "Your plan is cancelled.", "sub-unknown")}}
	for range 2 {
		s.approve(p)
		_, err := s.wait("refused")
		var app *temporal.ApplicationError
		require.ErrorAs(t, err, &app)
		assert.Equal(t, supportflow.ErrTypeActionFailed, app.Type())
	}
	comments := s.zd.Comments(ticket)
	require.Len(t, comments, 1, "one note, no reply")
	assert.False(t, comments[0].Public)
	assert.Contains(t, comments[0].Body, "did not send the approved reply")
	assert.Contains(t, comments[0].Body, "sub-unknown")
	assert.Equal(t, supportflow.StateNeedsAttention, s.action("refused:0").State)
	s.recordHistory(supportflow.ExecuteWorkflowID("refused"), "", "execute_proposal_cancellation_refused_note")
}

// Many approvals of one proposal at once, plus one while it runs: one
// execution, one comment, one cancellation.
func TestExecution_ConcurrentApprovals(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ticket := s.zd.AddTicket(standin.Ticket{Subject: "Double click"})
	s.own(ticket, "cust-1", "sub-1")
	// Slow Zendesk keeps the execution open while approvals pile up.
	s.zd.Inject(standin.Fault{Method: "PUT", Path: "/api/v2/tickets/*", Delay: 500 * time.Millisecond})
	s.startWorker()

	p := supportflow.Proposal{ID: "double", Actions: []supportflow.Action{reply(ticket, "Cancelled.", "sub-1")}}
	const approvals = 20
	runs := make([]starter.Execution, approvals)
	var wg sync.WaitGroup
	for i := range approvals {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i] = s.approve(p)
		}()
	}
	wg.Wait()
	late := s.approve(p)
	assert.True(t, late.Joined, "an approval while it runs joins the execution")
	for _, r := range runs {
		assert.Equal(t, runs[0].RunID, r.RunID, "every approval joined one execution")
	}
	assert.Equal(t, runs[0].RunID, late.RunID)

	statuses, err := s.wait("double")
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplied, statuses[0].State)
	assert.Equal(t, 1, s.zd.CommentCount(ticket), "exactly one comment")
	assert.Equal(t, 1, s.subs.Cancellations("sub-1"))
	assert.Equal(t, 1, s.subs.CancelCalls("sub-1"))

	states, err := s.starter.ActionStates(context.Background(), "double")
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplied, states[0].State, "the actions query works on the closed execution")
}

// Bad input is refused before anything starts or is written.
func TestExecution_BadInputStartsNothing(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ctx := context.Background()
	for name, p := range map[string]supportflow.Proposal{
		"no actions":    {ID: "bad-1"},
		"empty comment": {ID: "bad-2", Actions: []supportflow.Action{{TicketID: 1, Comment: &supportflow.Comment{Body: ""}}}},
		"malformed id":  {ID: "bad:3", Actions: []supportflow.Action{reply(1, "x")}},
	} {
		_, err := s.starter.ExecuteProposal(ctx, p, "tests")
		assert.ErrorIs(t, err, supportflow.ErrInvalidInput, name)
		_, err = s.temporal.DescribeWorkflowExecution(ctx, supportflow.ExecuteWorkflowID(p.ID), "")
		assert.Error(t, err, "%s: no workflow was started", name)
	}
	var rows int
	require.NoError(t, s.pool.QueryRow(ctx, `SELECT count(*) FROM action`).Scan(&rows))
	assert.Zero(t, rows)
	assert.Zero(t, s.zd.TotalComments())
}

// The ticket_update leg: the ticket's status and tags are set in the same
// Zendesk update as the reply, after the cancellation. The update's answer
// is lost after Zendesk applied it; the retry finds the update in the
// audits (the leg's replay rule) and writes nothing again. Tags are added
// to the ticket's own, never replacing them, even though Zendesk's update
// replaces the list.
func TestExecution_TicketUpdateRidesWithTheReply(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ticket := s.zd.AddTicket(standin.Ticket{Subject: "Cancel please", Status: "open", Tags: []string{"vip"}})
	s.own(ticket, "cust-1", "sub-1")
	s.zd.Inject(standin.Fault{Method: "PUT", Path: "/api/v2/tickets/*", DropAfterApply: true, Times: 1})
	s.startWorker()

	act := reply(ticket, "Your plan is cancelled.", "sub-1")
	act.UpdateTicket = &supportflow.TicketUpdate{Status: "pending", Tags: []string{"supportflow", "vip"}}
	s.approve(supportflow.Proposal{ID: "with-status", Actions: []supportflow.Action{act}})
	statuses, err := s.wait("with-status")
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplied, statuses[0].State)

	assert.Equal(t, 1, s.zd.CommentCount(ticket), "exactly one comment")
	assert.Equal(t, 1, s.zd.Requests("PUT", "/api/v2/tickets/"), "the lost answer's update was found, not sent again")
	assert.Equal(t, 1, s.subs.Cancellations("sub-1"))
	tk, ok := s.zd.Ticket(ticket)
	require.True(t, ok)
	assert.Equal(t, "pending", tk.Status)
	assert.Equal(t, []string{"vip", "supportflow"}, tk.Tags, "ours added to the ticket's, none dropped, none twice")

	a := s.action("with-status:0")
	require.Len(t, a.Legs, 3)
	kinds := []supportflow.LegKind{a.Legs[0].Kind, a.Legs[1].Kind, a.Legs[2].Kind}
	assert.Equal(t, []supportflow.LegKind{supportflow.LegCancelSubscription, supportflow.LegTicketUpdate, supportflow.LegReply}, kinds)
	for _, l := range a.Legs {
		assert.Equal(t, ledger.LegDone, l.State, "%s %s", l.Kind, l.Target)
	}
	assert.Equal(t, a.Legs[2].RequestID, a.Legs[1].ExternalID, "the status and the reply landed in one audit")
	assert.Equal(t, s.zd.Comments(ticket)[0].ID, a.CommentID())
	s.recordHistory(supportflow.ExecuteWorkflowID("with-status"), "", "execute_proposal_ticket_update_found")
}

// A ticket update alone (no reply): one that the ticket already shows is
// recorded done without a write (Zendesk would make no audit of it, so
// there would be nothing to find on a retry); the other is one update.
func TestExecution_TicketUpdateAlone(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	already := s.zd.AddTicket(standin.Ticket{Subject: "Done", Status: "pending", Tags: []string{"supportflow"}})
	moved := s.zd.AddTicket(standin.Ticket{Subject: "Waiting", Status: "open"})
	s.startWorker()
	upd := &supportflow.TicketUpdate{Status: "pending", Tags: []string{"supportflow"}}
	s.approve(supportflow.Proposal{ID: "status-only", Actions: []supportflow.Action{
		{TicketID: already, UpdateTicket: upd}, {TicketID: moved, UpdateTicket: upd}}})
	statuses, err := s.wait("status-only")
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplied, statuses[0].State)
	assert.Equal(t, supportflow.StateApplied, statuses[1].State)
	assert.Equal(t, 1, s.zd.Requests("PUT", "/api/v2/tickets/"), "only the ticket that needed it was written")
	tk, _ := s.zd.Ticket(moved)
	assert.Equal(t, "pending", tk.Status)
	assert.Equal(t, []string{"supportflow"}, tk.Tags)
	assert.Zero(t, s.zd.CommentCount(moved), "no comment without a reply")
	first := s.action("status-only:0").Legs
	require.Len(t, first, 1)
	assert.True(t, first[0].AlreadyDone, "recorded as already so")
}
