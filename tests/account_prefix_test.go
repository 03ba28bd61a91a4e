package tests

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/standin"
)

// Two accounts share one Temporal namespace, each with its own worker,
// task queue, database and Zendesk, and its own SUPPORTFLOW_ID_PREFIX.
// The same ticket number in both is drafted, approved and answered twice,
// once in each account (without prefixes the second start would join the
// first account's draft), and each account's schedules are its own.
func TestStarter_TwoAccountsWithPrefixesShareANamespace(t *testing.T) {
	t.Parallel()
	acme, globex := newStack(t), newStack(t)
	// Each account's worker polls its own task queue (one test name would
	// give both the same).
	globex.taskQueue += "-globex"
	globex.starter.TaskQueue = globex.taskQueue
	ticket := 10000 + ticketIDs.Add(1)
	for _, a := range []struct {
		s      *stack
		prefix string
	}{{acme, "acme-" + runNonce}, {globex, "globex-" + runNonce}} {
		a.s.starter.IDs = supportflow.IDs{Prefix: a.prefix}
		a.s.extraEnv = []string{"SUPPORTFLOW_ID_PREFIX=" + a.prefix}
		a.s.zd.AddTicket(standin.Ticket{ID: ticket, Subject: "Order", Description: "Where is my order?", RequesterName: "Ada"})
		a.s.startWorker()
	}

	drafts := map[*stack]string{}
	for _, s := range []*stack{acme, globex} {
		d, err := s.starter.StartDraft(ctxT(t), ticket, "click")
		require.NoError(t, err)
		assert.False(t, d.Joined, "%s's draft is its own, not the other account's", s.starter.IDs.Prefix)
		assert.Equal(t, s.starter.IDs.Prefix+"/draft/"+strconv.FormatInt(ticket, 10), d.WorkflowID)
		drafts[s] = d.RunID
	}
	assert.NotEqual(t, drafts[acme], drafts[globex])
	for _, s := range []*stack{acme, globex} {
		st := s.waitState(ticket, supportflow.DraftAwaitingApproval)
		res, err := s.starter.Approve(ctxT(t), ticket, supportflow.ApproveRequest{ProposalID: st.Proposal.ID, ApprovedBy: "tests"})
		require.NoError(t, err)
		assert.Equal(t, s.starter.IDs.Execute(st.Proposal.ID), res.ExecutionWorkflowID)
	}
	for _, s := range []*stack{acme, globex} {
		done := s.waitState(ticket, supportflow.DraftDone)
		assert.Equal(t, s.starter.IDs.Prefix+"/execute/"+done.Proposal.ID, done.ExecutionWorkflowID)
		assert.Equal(t, 1, s.zd.CommentCount(ticket), "%s's ticket got its one reply", s.starter.IDs.Prefix)
		d, err := s.temporal.DescribeWorkflowExecution(ctxT(t), s.starter.IDs.Draft(ticket), "")
		require.NoError(t, err)
		assert.Equal(t, drafts[s], d.GetWorkflowExecutionInfo().GetExecution().GetRunId())
	}

	// Each account's schedules, side by side (an hour apart: none fires
	// during the test).
	for _, s := range []*stack{acme, globex} {
		require.NoError(t, s.starter.EnsureSchedules(ctxT(t), time.Hour, time.Hour))
		for _, id := range []string{s.starter.IDs.ScanSchedule(), s.starter.IDs.ReconcileSchedule(), s.starter.IDs.PruneSchedule()} {
			t.Cleanup(func() {
				_ = s.temporal.ScheduleClient().GetHandle(context.Background(), id).Delete(context.Background())
			})
			desc, err := s.temporal.ScheduleClient().GetHandle(ctxT(t), id).Describe(ctxT(t))
			require.NoError(t, err, id)
			assert.Equal(t, s.taskQueue, desc.Schedule.Action.(*client.ScheduleWorkflowAction).TaskQueue, id)
		}
	}
}
