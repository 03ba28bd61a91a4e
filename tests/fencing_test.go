package tests

import (
	"fmt"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/standin"
)

// Zendesk holds a ticket update past the caller's timeout (1 s) and, for
// half the proposals, past the lease (2 s) too, then applies it. Early or
// late, the write lands at most once: applied before the successor looks,
// it is found on the audits; applied after the successor posted, its
// updated_stamp is stale and Zendesk refuses it (409).
func TestExecution_LateAppliedWriteDoesNotDuplicate(t *testing.T) {
	t.Parallel()
	const proposals = 24
	s := newStack(t)
	s.startWorker()

	tickets := make([]int64, proposals)
	for i := range tickets {
		tickets[i] = s.zd.AddTicket(standin.Ticket{Subject: fmt.Sprint("Late write ", i)})
		// Even: applied between the caller's timeout and the lease's end.
		// Odd: applied well after the lease lapsed and a successor ran.
		hold := 1500 * time.Millisecond
		if i%2 == 1 {
			hold = lease + 3*time.Second
		}
		s.zd.Inject(standin.Fault{Method: "PUT", Path: fmt.Sprintf("/api/v2/tickets/%d.json", tickets[i]), Delay: hold})
	}
	var wg sync.WaitGroup
	for i, ticket := range tickets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := fmt.Sprintf("late-%d-%d", i, ticket)
			s.approve(supportflow.Proposal{ID: id, Actions: []supportflow.Action{reply(ticket, "Your refund is on its way.")}})
			statuses, err := s.wait(id)
			if assert.NoError(t, err, id) {
				assert.Equal(t, supportflow.StateApplied, statuses[0].State, id)
			}
			if i == 1 {
				s.recordHistory(supportflow.ExecuteWorkflowID(id), "", "execute_proposal_late_write_refused")
			}
		}()
	}
	wg.Wait()
	time.Sleep(lease + 4*time.Second) // every held write has been applied or refused by now
	for i, ticket := range tickets {
		assert.Equal(t, 1, s.zd.CommentCount(ticket), "ticket %d (%d): exactly one comment", ticket, i)
	}
	assert.Positive(t, s.zd.Conflicts(), "late writes were refused by Zendesk's safe update")
	t.Logf("%d late writes refused with 409", s.zd.Conflicts())
}

// The worker is frozen (SIGSTOP) as it reads the ticket's stamp, after
// its lease check; a second worker takes the action over and posts; the
// frozen one then resumes (SIGCONT) with its stale stamp. One comment.
func TestExecution_FrozenAttemptCannotDuplicate(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.startWorker()
	ticket := s.zd.AddTicket(standin.Ticket{Subject: "Frozen"})
	reading := arrived()
	s.zd.Inject(standin.Fault{Method: "GET", Path: fmt.Sprintf("/api/v2/tickets/%d.json", ticket), Delay: 300 * time.Millisecond, Arrived: reading})

	s.approve(supportflow.Proposal{ID: "frozen-1", Actions: []supportflow.Action{reply(ticket, "Cancelled as asked.")}})
	waitArrived(t, reading)
	s.mu.Lock()
	frozen := s.worker
	s.mu.Unlock()
	require.NoError(t, frozen.Process.Signal(syscall.SIGSTOP))
	s.startExtraWorker()

	statuses, err := s.wait("frozen-1")
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplied, statuses[0].State)
	require.Equal(t, 1, s.zd.CommentCount(ticket))

	require.NoError(t, frozen.Process.Signal(syscall.SIGCONT))
	time.Sleep(3 * time.Second) // the resumed attempt runs to its end
	assert.Equal(t, 1, s.zd.CommentCount(ticket), "the resumed attempt landed nothing")
	t.Logf("safe updates refused: %d", s.zd.Conflicts())
}

// A predecessor whose write may still land keeps its lease; its successor
// waits the lease out inside its own attempt (heartbeating) instead of
// failing with LeaseHeld, so the wait spends no attempt: the reply is
// recorded by attempt 2.
func TestExecution_LeaseWaitDoesNotSpendBudget(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.startWorker()
	ticket := s.zd.AddTicket(standin.Ticket{Subject: "Lease wait"})
	// Past the caller's 1 s timeout, inside the 2 s lease: the first
	// attempt fails unsure whether it posted, and keeps its lease.
	s.zd.Inject(standin.Fault{Method: "PUT", Path: fmt.Sprintf("/api/v2/tickets/%d.json", ticket), Delay: 1500 * time.Millisecond})
	s.approve(supportflow.Proposal{ID: "lease-wait", Actions: []supportflow.Action{reply(ticket, "Done.")}})
	statuses, err := s.wait("lease-wait")
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplied, statuses[0].State)
	assert.Equal(t, 1, s.zd.CommentCount(ticket))

	attempts := 0
	iter := s.temporal.GetWorkflowHistory(ctxT(t), supportflow.ExecuteWorkflowID("lease-wait"), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		require.NoError(t, err)
		if st := ev.GetActivityTaskStartedEventAttributes(); st != nil {
			attempts = max(attempts, int(st.GetAttempt()))
		}
		if f := ev.GetActivityTaskFailedEventAttributes(); f != nil {
			assert.NotContains(t, s.failures.FailureToError(f.GetFailure()).Error(), "held by", "no attempt failed on the lease")
		}
	}
	assert.Equal(t, 2, attempts, "the first attempt, then one that waited for its lease")
	s.recordHistory(supportflow.ExecuteWorkflowID("lease-wait"), "", "execute_proposal_lease_wait")
}

// A cancellation whose answer is lost on every call: the next attempt
// reads the subscription's status instead of recording a failure, so the
// action ends applied, the subscription cancelled once, and nothing says
// "failed".
func TestExecution_LostCancelAnswerIsNotFailed(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.startWorker()
	ticket := s.zd.AddTicket(standin.Ticket{Subject: "Lost cancel answer"})
	s.own(ticket, "c", "sub-lost")
	s.subs.Inject(standin.Fault{Method: "POST", Path: "/v1/subscriptions/sub-lost/cancel", DropAfterApply: true, Times: -1})
	s.approve(supportflow.Proposal{ID: "lost-cancel", Actions: []supportflow.Action{
		{TicketID: ticket, CancelSubscriptions: []string{"sub-lost"}}}})
	statuses, err := s.wait("lost-cancel")
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplied, statuses[0].State)
	a := s.action("lost-cancel:0")
	require.Len(t, a.Legs.Of(supportflow.LegCancelSubscription), 1)
	assert.Equal(t, "done", a.Legs.Of(supportflow.LegCancelSubscription)[0].State)
	assert.Equal(t, 1, s.subs.Cancellations("sub-lost"))
	assert.Equal(t, 1, s.subs.CancelCalls("sub-lost"), "the status was read, not the call repeated")
	s.recordHistory(supportflow.ExecuteWorkflowID("lost-cancel"), "", "execute_proposal_lost_cancel_answer")
}

// Cancelling an execution (an operator, in the Web UI) settles its action:
// the row does not stay 'applying' for ever. The cancelled attempt's write
// may have been in flight, so the settle fences the ticket first (a
// private note, once Zendesk takes writes again) and then finds no reply
// on its audits: failed, and the customer saw nothing.
func TestExecution_CancelledExecutionIsSettled(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.startWorker()
	ticket := s.zd.AddTicket(standin.Ticket{Subject: "Cancelled execution"})
	posting := arrived()
	s.zd.Inject(standin.Fault{Method: "PUT", Path: fmt.Sprintf("/api/v2/tickets/%d.json", ticket), Status: 503, RetryAfter: time.Minute, Arrived: posting, Times: -1})
	s.approve(supportflow.Proposal{ID: "cancelled-exec", Actions: []supportflow.Action{reply(ticket, "Done.")}})
	waitArrived(t, posting)
	require.NoError(t, s.temporal.CancelWorkflow(ctxT(t), supportflow.ExecuteWorkflowID("cancelled-exec"), ""))
	// Zendesk is back before the fence is written (the settle waits 2 s
	// before writing it).
	s.zd.ClearFaults()
	_, err := s.wait("cancelled-exec")
	require.Error(t, err)
	require.Eventually(t, func() bool {
		return s.action("cancelled-exec:0").State == supportflow.StateFailed
	}, waitBudget, 100*time.Millisecond, "the cancelled action was settled")
	public, private := s.splitComments(ticket)
	assert.Empty(t, public, "no reply reached the customer")
	require.Len(t, private, 1, "the fence, nothing else")
	assert.Contains(t, private[0].Body, "cancelled-exec:0")
	assert.Zero(t, s.action("cancelled-exec:0").CommentID())
	s.recordHistory(supportflow.ExecuteWorkflowID("cancelled-exec"), "", "execute_proposal_cancelled_settled")
}
