package workflows_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/activities/activitiestest"
	"github.com/supportflow/supportflow/internal/policy"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/internal/workerapp"
	"github.com/supportflow/supportflow/workflows"
)

// draftWorld is a time-skipping environment whose activities are the real
// ones, on a real database and the stand-ins, with the product's default
// durations. A test replaces single activities with mocks where it needs
// to control an attempt's outcome.
type draftWorld struct {
	t   *testing.T
	env *testsuite.TestWorkflowEnvironment
	h   *activitiestest.Harness
}

func newDraftWorld(t *testing.T) *draftWorld {
	return newDraftWorldWith(t, &workflows.Workflows{})
}

func newDraftWorldWith(t *testing.T, wf *workflows.Workflows, extra ...interceptor.WorkerInterceptor) *draftWorld {
	env := newEnvWith(t, wf, extra...)
	h := activitiestest.New(t, policy.Durations{})
	workerapp.RegisterActivities(env, h.Activities, h.Enrichment, h.Reconciler)
	return &draftWorld{t: t, env: env, h: h}
}

// seedTicket adds a ticket whose customer wrote body; subs become the
// customer's active subscriptions in the ticket's enrichment, and the
// customer's at the subscription service, with the customer the ticket's
// requester (so a cancellation of them may run).
func (w *draftWorld) seedTicket(body string, subs ...string) int64 {
	id := w.h.Zendesk.AddTicket(standin.Ticket{Subject: "My plan", Description: body, RequesterName: "Ada"})
	if len(subs) > 0 {
		w.h.Own(w.t, id, standin.DefaultRequesterID, "cust-1", subs...)
	}
	return id
}

// approve approves proposalID as Starter.Approve does: it records by's
// approval in PostgreSQL (where every leg checks it), then sends the draft
// its approve update.
func (w *draftWorld) approve(updateID, proposalID, by string) *updateOutcome {
	w.t.Helper()
	w.h.ApproveDraft(w.t, proposalID, by)
	return w.update(supportflow.ApproveUpdate, updateID, supportflow.ApproveRequest{ProposalID: proposalID, ApprovedBy: by})
}

func (w *draftWorld) status() supportflow.DraftStatus {
	w.t.Helper()
	v, err := w.env.QueryWorkflow(supportflow.DraftQuery)
	require.NoError(w.t, err)
	var st supportflow.DraftStatus
	require.NoError(w.t, v.Get(&st))
	return st
}

// update sends an update and records how it ended.
type updateOutcome struct {
	rejected error
	result   any
	err      error
	done     bool
}

func (w *draftWorld) update(name, id string, arg any) *updateOutcome {
	o := &updateOutcome{}
	w.env.UpdateWorkflow(name, id, &testsuite.TestUpdateCallback{
		OnAccept:   func() {},
		OnReject:   func(err error) { o.rejected, o.done = err, true },
		OnComplete: func(r any, err error) { o.result, o.err, o.done = r, err, true },
	}, arg)
	return o
}

func (w *draftWorld) result() supportflow.DraftStatus {
	w.t.Helper()
	require.True(w.t, w.env.IsWorkflowCompleted())
	var st supportflow.DraftStatus
	if err := w.env.GetWorkflowError(); err != nil {
		return w.status()
	}
	require.NoError(w.t, w.env.GetWorkflowResult(&st))
	return st
}

// At 1 h the draft awaits approval: a stale browser tab's approval (a
// proposal ID that is not the current one) and an unknown ID are refused by
// the validator; the right one starts the execution, which posts exactly
// one comment and cancels the subscription; a second approval of the same
// proposal joins it; a rejection after approval is refused.
func TestDraftReply_ApproveValidatesAndExecutesOnce(t *testing.T) {
	w := newDraftWorld(t)
	ticket := w.seedTicket("Please cancel my subscription.", "sub-1")
	var stale, unknown, first, second, rejectLate *updateOutcome
	var awaiting supportflow.DraftStatus
	w.env.RegisterDelayedCallback(func() {
		awaiting = w.status()
		require.NotNil(t, awaiting.Proposal)
		id := awaiting.Proposal.ID
		stale = w.update(supportflow.ApproveUpdate, "stale", supportflow.ApproveRequest{ProposalID: id[:len(id)-1] + "9"})
		unknown = w.update(supportflow.ApproveUpdate, "unknown", supportflow.ApproveRequest{ProposalID: "no-such-proposal"})
		first = w.approve("first", id, "ada@acme.test")
		second = w.update(supportflow.ApproveUpdate, "second", supportflow.ApproveRequest{ProposalID: id})
		rejectLate = w.update(supportflow.RejectUpdate, "reject-late", supportflow.RejectRequest{ProposalID: id})
	}, time.Hour)
	w.env.ExecuteWorkflow(supportflow.DraftReplyWorkflow, supportflow.DraftRequest{TicketID: ticket})
	st := w.result()
	require.NoError(t, w.env.GetWorkflowError())

	assert.Equal(t, supportflow.DraftAwaitingApproval, awaiting.State)
	assert.Equal(t, []string{"sub-1"}, awaiting.Proposal.CancelSubscriptions, "the model proposed the customer's subscription")
	for name, o := range map[string]*updateOutcome{"stale": stale, "unknown": unknown, "reject after approval": rejectLate} {
		var app *temporal.ApplicationError
		require.ErrorAs(t, o.rejected, &app, name)
		assert.Equal(t, supportflow.ErrTypeStaleProposal, app.Type(), name)
	}
	assert.Contains(t, stale.rejected.Error(), "the current proposal of ticket")
	require.NoError(t, first.err)
	assert.Equal(t, supportflow.ApproveResult{ProposalID: awaiting.Proposal.ID, ExecutionWorkflowID: "execute/" + awaiting.Proposal.ID}, first.result)
	require.NoError(t, second.rejected)
	assert.True(t, second.result.(supportflow.ApproveResult).AlreadyApproved)

	assert.Equal(t, supportflow.DraftDone, st.State)
	assert.Equal(t, "ada@acme.test", st.ApprovedBy)
	assert.Equal(t, 1, w.h.Zendesk.CommentCount(ticket), "exactly one reply")
	assert.Equal(t, awaiting.Proposal.Reply, w.h.Zendesk.Comments(ticket)[0].Body)
	assert.Equal(t, 1, w.h.Subscriptions.Cancellations("sub-1"))
	p, err := w.h.Proposals.GetProposal(context.Background(), awaiting.Proposal.ID)
	require.NoError(t, err)
	assert.Equal(t, supportflow.DraftDone, p.State)
	assert.Equal(t, "ada@acme.test", p.DecidedBy)
	approval, err := w.h.Proposals.GetApproval(context.Background(), awaiting.Proposal.ID)
	require.NoError(t, err)
	assert.Equal(t, "ada@acme.test", approval.ApprovedBy, "the approval the legs checked is the first approver's")
}

func TestDraftReply_RejectEndsRejected(t *testing.T) {
	w := newDraftWorld(t)
	ticket := w.seedTicket("Where is my order?")
	var rej *updateOutcome
	w.env.RegisterDelayedCallback(func() {
		st := w.status()
		rej = w.update(supportflow.RejectUpdate, "r", supportflow.RejectRequest{ProposalID: st.Proposal.ID, RejectedBy: "bo", Reason: "wrong tone"})
	}, time.Hour)
	w.env.ExecuteWorkflow(supportflow.DraftReplyWorkflow, supportflow.DraftRequest{TicketID: ticket})
	st := w.result()
	require.NoError(t, rej.err)
	assert.Equal(t, supportflow.DraftRejected, st.State)
	assert.Equal(t, 0, w.h.Zendesk.CommentCount(ticket))
	p, err := w.h.Proposals.GetProposal(context.Background(), st.Proposal.ID)
	require.NoError(t, err)
	assert.Equal(t, supportflow.DraftRejected, p.State)
	assert.Equal(t, "wrong tone", p.Error)
}

// Nobody approves: at 72 h (the default window) the draft ends expired.
func TestDraftReply_AwaitingApprovalPast72hEndsExpired(t *testing.T) {
	w := newDraftWorld(t)
	ticket := w.seedTicket("Can I change my delivery day?")
	start := w.env.Now()
	var at71h supportflow.DraftStatus
	w.env.RegisterDelayedCallback(func() { at71h = w.status() }, 71*time.Hour)
	w.env.ExecuteWorkflow(supportflow.DraftReplyWorkflow, supportflow.DraftRequest{TicketID: ticket})
	st := w.result()
	assert.Equal(t, supportflow.DraftAwaitingApproval, at71h.State)
	assert.Equal(t, supportflow.DraftExpired, st.State)
	assert.InDelta(t, float64(72*time.Hour), float64(w.env.Now().Sub(start)), float64(time.Minute))
	p, err := w.h.Proposals.GetProposal(context.Background(), st.Proposal.ID)
	require.NoError(t, err)
	assert.Equal(t, supportflow.DraftExpired, p.State)
	assert.Equal(t, 0, w.h.Zendesk.CommentCount(ticket))
}

// generateCalls records GenerateDraft attempts.
type generateCalls struct {
	attempts
	inputs []supportflow.GenerateInput
}

func validDraft(in supportflow.GenerateInput) supportflow.DraftProposal {
	return supportflow.DraftProposal{ID: in.ProposalID, TicketID: in.Ticket.Conversation.TicketID, Reply: "Thanks, we are on it.",
		ConversationThrough: in.Ticket.Conversation.Through()}
}

// The model never answers: the first attempt ends by its 300 s
// start-to-close deadline (the SDK's time-skipping environment does not
// retry a real activity's timeout, so the mock returns the timeout the
// server would record), and the second attempt drafts.
func TestDraftReply_ModelSilentAttemptTimesOutAndSecondAttemptRuns(t *testing.T) {
	w := newDraftWorld(t)
	ticket := w.seedTicket("Hello?")
	var calls generateCalls
	w.env.OnActivity("GenerateDraft", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in supportflow.GenerateInput) (supportflow.DraftProposal, error) {
			if calls.record(w.env, ctx) == 1 {
				return supportflow.DraftProposal{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_START_TO_CLOSE, nil)
			}
			return validDraft(in), nil
		})
	var st supportflow.DraftStatus
	w.env.RegisterDelayedCallback(func() { st = w.status() }, time.Hour)
	w.env.ExecuteWorkflow(supportflow.DraftReplyWorkflow, supportflow.DraftRequest{TicketID: ticket})

	require.Len(t, calls.infos, 2)
	info := calls.infos[0]
	assert.InDelta(t, float64(300*time.Second), float64(info.Deadline.Sub(info.StartedTime)), float64(time.Second), "start-to-close 300 s, armed per attempt")
	assert.Equal(t, 60*time.Second, info.HeartbeatTimeout)
	assert.Equal(t, int32(2), calls.infos[1].Attempt)
	assert.InDelta(t, float64(5*time.Second), float64(calls.gaps()[0]), float64(time.Second), "the server retries a timeout after the policy's first delay")
	assert.Equal(t, supportflow.DraftAwaitingApproval, st.State)
}

// Heartbeats stop (the worker died mid-stream): after 60 s of silence the
// attempt times out and the second attempt drafts.
func TestDraftReply_HeartbeatSilenceRetries(t *testing.T) {
	w := newDraftWorld(t)
	ticket := w.seedTicket("Hello?")
	var calls generateCalls
	w.env.OnActivity("GenerateDraft", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in supportflow.GenerateInput) (supportflow.DraftProposal, error) {
			if calls.record(w.env, ctx) == 1 {
				return supportflow.DraftProposal{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil)
			}
			return validDraft(in), nil
		})
	var st supportflow.DraftStatus
	w.env.RegisterDelayedCallback(func() { st = w.status() }, time.Hour)
	w.env.ExecuteWorkflow(supportflow.DraftReplyWorkflow, supportflow.DraftRequest{TicketID: ticket})
	require.Len(t, calls.infos, 2)
	assert.Equal(t, 60*time.Second, calls.infos[0].HeartbeatTimeout)
	assert.Equal(t, supportflow.DraftAwaitingApproval, st.State)
}

// Both attempts fail (the model is down): the draft ends failed with the
// model's error, and nothing is saved.
func TestDraftReply_TwoFailedAttemptsEndFailedWithTheError(t *testing.T) {
	w := newDraftWorld(t)
	ticket := w.seedTicket("Hello?")
	w.h.Model.Inject(standin.ModelFault{Status: 503, Times: -1})
	w.env.ExecuteWorkflow(supportflow.DraftReplyWorkflow, supportflow.DraftRequest{TicketID: ticket})
	require.True(t, w.env.IsWorkflowCompleted())
	err := w.env.GetWorkflowError()
	var app *temporal.ApplicationError
	require.ErrorAs(t, err, &app)
	assert.Equal(t, supportflow.ErrTypeDraftFailed, app.Type())
	st := w.status()
	assert.Equal(t, supportflow.DraftFailed, st.State)
	assert.Contains(t, st.Error, "503")
	assert.Equal(t, 2, w.h.Model.Requests(), "two attempts, one request each: no hidden retries")
	n, err := w.h.Proposals.CountProposals(context.Background(), ticket)
	require.NoError(t, err)
	assert.Zero(t, n)
}

// An answer that is not the JSON asked for fails the attempt with a clear
// error; both attempts get it, so the draft ends failed saying why.
func TestDraftReply_InvalidModelAnswerFailsWithAClearError(t *testing.T) {
	w := newDraftWorld(t)
	ticket := w.seedTicket("Hello?")
	w.h.Model.Inject(standin.ModelFault{InvalidJSON: true, Times: -1})
	w.env.ExecuteWorkflow(supportflow.DraftReplyWorkflow, supportflow.DraftRequest{TicketID: ticket})
	require.Error(t, w.env.GetWorkflowError())
	st := w.status()
	assert.Equal(t, supportflow.DraftFailed, st.State)
	assert.Contains(t, st.Error, "not a JSON object")
	assert.Equal(t, 2, w.h.Model.Requests())
}

// The customer writes again while the model drafts: the in-flight call is
// cancelled and the draft restarts from gathering, with the new comment.
func TestDraftReply_SupersedeDuringDraftingCancelsAndRedrafts(t *testing.T) {
	w := newDraftWorld(t)
	ticket := w.seedTicket("My box arrived damaged.")
	var mu sync.Mutex
	var inputs []supportflow.GenerateInput
	// The environment delivers a cancellation to an activity's context
	// only with a heartbeat sent after it, and throttles heartbeats to 48 s
	// of wall clock; the workflow's cancel request is what this test
	// checks, through the environment's listener.
	cancelRequested := make(chan struct{})
	w.env.SetOnActivityCanceledListener(func(info *activity.Info) {
		if info.ActivityType.Name == "GenerateDraft" {
			close(cancelRequested)
		}
	})
	cancelled := make(chan error, 1)
	w.env.OnActivity("GenerateDraft", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in supportflow.GenerateInput) (supportflow.DraftProposal, error) {
			mu.Lock()
			inputs = append(inputs, in)
			n := len(inputs)
			mu.Unlock()
			if n > 1 {
				return validDraft(in), nil
			}
			// The customer writes while the model is still streaming.
			// (A second later: Zendesk's times are whole seconds, and
			// activity in the second the draft read is not news.)
			at := time.Now().Add(time.Second)
			w.h.Zendesk.AddComment(ticket, standin.SeedComment{Body: "Also, the lid is missing.", At: at})
			w.env.SignalWorkflow(supportflow.SupersedeSignal, supportflow.TicketActivity{At: at, Source: "test"})
			select {
			case <-cancelRequested:
				cancelled <- context.Canceled
				return supportflow.DraftProposal{}, context.Canceled
			case <-time.After(20 * time.Second):
				cancelled <- errors.New("the first attempt was never cancelled")
				return supportflow.DraftProposal{}, errors.New("not cancelled")
			}
		})
	var st supportflow.DraftStatus
	w.env.RegisterDelayedCallback(func() { st = w.status() }, time.Hour)
	w.env.ExecuteWorkflow(supportflow.DraftReplyWorkflow, supportflow.DraftRequest{TicketID: ticket})

	select {
	case err := <-cancelled:
		require.ErrorIs(t, err, context.Canceled, "the in-flight model call was cancelled")
	case <-time.After(30 * time.Second):
		t.Fatal("the first attempt never ended")
	}
	require.Len(t, inputs, 2)
	bodies := func(in supportflow.GenerateInput) (out []string) {
		for _, c := range in.Ticket.Conversation.Comments {
			out = append(out, c.Body)
		}
		return out
	}
	assert.Equal(t, []string{"My box arrived damaged."}, bodies(inputs[0]))
	assert.Equal(t, []string{"My box arrived damaged.", "Also, the lid is missing."}, bodies(inputs[1]), "the redraft read the new conversation")
	assert.Equal(t, supportflow.DraftAwaitingApproval, st.State)
	assert.Equal(t, 1, st.Redrafts)
	assert.True(t, strings.HasSuffix(st.Proposal.ID, "-2"), "the redraft is the run's second proposal: %s", st.Proposal.ID)
	n, err := w.h.Proposals.CountProposals(context.Background(), ticket)
	require.NoError(t, err)
	assert.Equal(t, 1, n, "only the redraft was saved")
}

// The customer writes again while the proposal awaits approval: it is
// marked superseded and the draft continues as new, redrafting.
func TestDraftReply_SupersedeWhileAwaitingApprovalContinuesAsNew(t *testing.T) {
	w := newDraftWorld(t)
	ticket := w.seedTicket("Cancel please.")
	var before supportflow.DraftStatus
	w.env.RegisterDelayedCallback(func() {
		before = w.status()
		w.env.SignalWorkflow(supportflow.SupersedeSignal, supportflow.TicketActivity{At: w.env.Now()})
	}, time.Hour)
	w.env.ExecuteWorkflow(supportflow.DraftReplyWorkflow, supportflow.DraftRequest{TicketID: ticket})
	require.True(t, w.env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, w.env.GetWorkflowError(), &can)
	var next supportflow.DraftRequest
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	assert.Equal(t, supportflow.DraftRequest{TicketID: ticket, Reason: "supersede", Supersedes: before.Proposal.ID, Generation: 1}, next)
	p, err := w.h.Proposals.GetProposal(context.Background(), before.Proposal.ID)
	require.NoError(t, err)
	assert.Equal(t, supportflow.DraftSuperseded, p.State)
	assert.Equal(t, supportflow.DraftSuperseded, w.status().State)
}

// Customer activity the draft has already read (a late or repeated
// delivery of the comment it answers, as a relay whose claim lapsed sends)
// leaves the proposal awaiting approval: no supersede, no second proposal.
// Activity newer than it still supersedes.
func TestDraftReply_StaleActivityLeavesTheProposalAlone(t *testing.T) {
	w := newDraftWorld(t)
	ticket := w.seedTicket("Cancel please.")
	var during, after supportflow.DraftStatus
	w.env.RegisterDelayedCallback(func() {
		during = w.status()
		// The comment the draft read, delivered again (envelope times carry
		// sub-second digits, Zendesk's comment times do not).
		w.env.SignalWorkflow(supportflow.SupersedeSignal, supportflow.TicketActivity{
			At: during.Proposal.ConversationThrough.Add(300 * time.Millisecond), Source: "late"})
	}, time.Hour)
	w.env.RegisterDelayedCallback(func() { after = w.status() }, 2*time.Hour)
	w.env.RegisterDelayedCallback(func() {
		w.env.SignalWorkflow(supportflow.SupersedeSignal, supportflow.TicketActivity{
			At: during.Proposal.ConversationThrough.Add(5 * time.Second), Source: "new"})
	}, 3*time.Hour)
	w.env.ExecuteWorkflow(supportflow.DraftReplyWorkflow, supportflow.DraftRequest{TicketID: ticket})
	require.NotNil(t, during.Proposal)
	assert.Equal(t, supportflow.DraftAwaitingApproval, after.State, "the stale activity changed nothing")
	require.NotNil(t, after.Proposal)
	assert.Equal(t, during.Proposal.ID, after.Proposal.ID)
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, w.env.GetWorkflowError(), &can, "newer activity still supersedes")
	n, err := w.h.Proposals.CountProposals(context.Background(), ticket)
	require.NoError(t, err)
	assert.Equal(t, 1, n)
}

// executeWithActivity drafts ticket, approves the proposal at 1 h and,
// while the reply is being posted, signals customer activity at the time
// at returns (given the proposal awaiting approval). It returns the
// proposal that was approved.
func (w *draftWorld) executeWithActivity(ticket int64, at func(p *supportflow.DraftProposal) time.Time) *supportflow.DraftProposal {
	var approved *supportflow.DraftProposal
	w.env.OnActivity("PostReply", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in supportflow.ActionInput) (supportflow.PostReplyResult, error) {
			w.env.SignalWorkflow(supportflow.SupersedeSignal, supportflow.TicketActivity{At: at(approved), Source: "webhook"})
			return w.h.Activities.PostReply(ctx, in)
		})
	w.env.RegisterDelayedCallback(func() {
		st := w.status()
		require.NotNil(w.t, st.Proposal)
		approved = st.Proposal
		w.approve("a", st.Proposal.ID, "")
	}, time.Hour)
	w.env.ExecuteWorkflow(supportflow.DraftReplyWorkflow, supportflow.DraftRequest{TicketID: ticket})
	require.NotNil(w.t, approved, "the draft awaited approval")
	return approved
}

// Activity after approval that the proposal already answered (a late
// delivery of the comment it read) is counted and ignored: the execution
// goes on, and the draft ends done.
func TestDraftReply_StaleActivityWhileExecutingIsIgnored(t *testing.T) {
	w := newDraftWorld(t)
	ticket := w.seedTicket("Please cancel my subscription.", "sub-1")
	w.executeWithActivity(ticket, func(p *supportflow.DraftProposal) time.Time {
		return p.ConversationThrough.Add(300 * time.Millisecond)
	})
	st := w.result()
	require.NoError(t, w.env.GetWorkflowError())
	assert.Equal(t, supportflow.DraftDone, st.State)
	assert.Equal(t, 1, st.IgnoredActivity)
	assert.Equal(t, 1, w.h.Zendesk.CommentCount(ticket))
}

// The customer writes while the approved reply is being posted: the
// execution goes on (one reply), and once it is done the ticket is drafted
// again, superseding the executed proposal, so the new message is answered.
func TestDraftReply_NewActivityWhileExecutingRedraftsAfterIt(t *testing.T) {
	w := newDraftWorld(t)
	ticket := w.seedTicket("Please cancel my subscription.", "sub-1")
	p := w.executeWithActivity(ticket, func(p *supportflow.DraftProposal) time.Time {
		return p.ConversationThrough.Add(5 * time.Second)
	})
	require.True(t, w.env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, w.env.GetWorkflowError(), &can, "the draft continues as new once the execution is done")
	var next supportflow.DraftRequest
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	assert.Equal(t, supportflow.DraftRequest{TicketID: ticket, Reason: workflows.ReasonActivityDuringExecution, Supersedes: p.ID, Generation: 1}, next)
	st := w.status()
	assert.Equal(t, supportflow.DraftDone, st.State, "the execution itself completed")
	assert.Equal(t, 1, st.IgnoredActivity, "the activity did not stop the execution")
	assert.Equal(t, 1, w.h.Zendesk.CommentCount(ticket), "exactly one reply for the executed proposal")
	assert.Equal(t, 1, w.h.Subscriptions.Cancellations("sub-1"))
	row, err := w.h.Proposals.GetProposal(context.Background(), p.ID)
	require.NoError(t, err)
	assert.Equal(t, supportflow.DraftDone, row.State, "the executed proposal stays done, not superseded")
}

// The customer writes while the approved reply is being posted, and the
// execution fails (Zendesk refuses the reply for good): the draft does not
// end failed with the customer's message unread; it drafts again.
func TestDraftReply_NewActivityWhileAFailedExecutionRanRedrafts(t *testing.T) {
	w := newDraftWorld(t)
	ticket := w.seedTicket("Where is my order?")
	w.env.RegisterDelayedCallback(func() {
		w.h.Zendesk.Inject(standin.Fault{Method: "PUT", Path: "/api/v2/tickets/*", Status: 404, Times: -1})
	}, 30*time.Minute)
	p := w.executeWithActivity(ticket, func(p *supportflow.DraftProposal) time.Time {
		return p.ConversationThrough.Add(5 * time.Second)
	})
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, w.env.GetWorkflowError(), &can)
	var next supportflow.DraftRequest
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	assert.Equal(t, supportflow.DraftRequest{TicketID: ticket, Reason: workflows.ReasonActivityDuringExecution, Supersedes: p.ID, Generation: 1}, next)
	assert.Equal(t, supportflow.DraftFailed, w.status().State, "the execution failed")
	assert.Zero(t, w.h.Zendesk.CommentCount(ticket))
	row, err := w.h.Proposals.GetProposal(context.Background(), p.ID)
	require.NoError(t, err)
	assert.Equal(t, supportflow.DraftFailed, row.State)
}

// Bad input gets a clear, final error and starts nothing.
func TestDraftReply_BadTicketIDFailsAtOnce(t *testing.T) {
	w := newDraftWorld(t)
	w.env.ExecuteWorkflow(supportflow.DraftReplyWorkflow, supportflow.DraftRequest{TicketID: -3})
	var app *temporal.ApplicationError
	require.ErrorAs(t, w.env.GetWorkflowError(), &app)
	assert.Equal(t, supportflow.ErrTypeInvalidInput, app.Type())
	assert.Zero(t, w.h.Model.Requests())
}

// A ticket Zendesk does not know fails the draft at once (404 is final).
func TestDraftReply_UnknownTicketFailsWithoutRetrying(t *testing.T) {
	w := newDraftWorld(t)
	w.env.ExecuteWorkflow(supportflow.DraftReplyWorkflow, supportflow.DraftRequest{TicketID: 987654})
	require.Error(t, w.env.GetWorkflowError())
	st := w.status()
	assert.Equal(t, supportflow.DraftFailed, st.State)
	assert.Contains(t, st.Error, "404")
	assert.Equal(t, 1, w.h.Zendesk.Requests("GET", "/api/v2/tickets/987654"), "a 404 is not retried")
	assert.Zero(t, w.h.Model.Requests())
}

// An approval that arrives while the draft is already ending (its expiry
// or supersede is being recorded) is refused: it must never be accepted
// and then dropped.
func TestDraftReply_ApprovalWhileEndingIsRefused(t *testing.T) {
	for _, end := range []string{supportflow.DraftExpired, supportflow.DraftSuperseded} {
		t.Run(end, func(t *testing.T) {
			w := newDraftWorld(t)
			ticket := w.seedTicket("Please cancel my subscription.", "sub-1")
			var late *updateOutcome
			w.env.OnActivity("SetProposalState", mock.Anything, mock.Anything).Return(
				func(ctx context.Context, in supportflow.ProposalStateInput) error {
					if in.State == end && late == nil {
						late = w.update(supportflow.ApproveUpdate, "late", supportflow.ApproveRequest{ProposalID: in.ProposalID})
					}
					return w.h.Activities.SetProposalState(ctx, in)
				})
			if end == supportflow.DraftSuperseded {
				w.env.RegisterDelayedCallback(func() {
					w.env.SignalWorkflow(supportflow.SupersedeSignal, supportflow.TicketActivity{At: w.env.Now()})
				}, time.Hour)
			}
			w.env.ExecuteWorkflow(supportflow.DraftReplyWorkflow, supportflow.DraftRequest{TicketID: ticket})
			require.True(t, w.env.IsWorkflowCompleted())
			require.NotNil(t, late, "the approval was sent while the draft was ending")
			require.True(t, late.done)
			var app *temporal.ApplicationError
			require.ErrorAs(t, late.rejected, &app, "the late approval was refused, not accepted and dropped")
			assert.Equal(t, supportflow.ErrTypeStaleProposal, app.Type())
			assert.Equal(t, 0, w.h.Zendesk.CommentCount(ticket))
		})
	}
}

// Cancelling the draft while its approved proposal executes does not stop
// the execution: the reply and the cancellation both happen.
func TestDraftReply_CancellingTheDraftDoesNotStopAnApprovedExecution(t *testing.T) {
	w := newDraftWorld(t)
	ticket := w.seedTicket("Please cancel my subscription.", "sub-1")
	w.env.OnActivity("PostReply", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in supportflow.ActionInput) (supportflow.PostReplyResult, error) {
			w.env.CancelWorkflow()
			return w.h.Activities.PostReply(ctx, in)
		})
	w.env.RegisterDelayedCallback(func() {
		w.approve("a", w.status().Proposal.ID, "")
	}, time.Hour)
	w.env.ExecuteWorkflow(supportflow.DraftReplyWorkflow, supportflow.DraftRequest{TicketID: ticket})
	require.True(t, w.env.IsWorkflowCompleted())
	assert.Equal(t, 1, w.h.Zendesk.CommentCount(ticket))
	assert.Equal(t, 1, w.h.Subscriptions.Cancellations("sub-1"), "the cancellation leg still ran")
	assert.Equal(t, supportflow.DraftDone, w.status().State)
}

// Cancelling the draft while it awaits approval ends it rejected, and the
// proposal row says so (it does not wait for approval forever).
func TestDraftReply_CancelWhileAwaitingApprovalSettlesTheProposal(t *testing.T) {
	w := newDraftWorld(t)
	ticket := w.seedTicket("Hello?")
	var id string
	w.env.RegisterDelayedCallback(func() {
		id = w.status().Proposal.ID
		w.env.CancelWorkflow()
	}, time.Hour)
	w.env.ExecuteWorkflow(supportflow.DraftReplyWorkflow, supportflow.DraftRequest{TicketID: ticket})
	require.True(t, w.env.IsWorkflowCompleted())
	require.Error(t, w.env.GetWorkflowError())
	assert.Equal(t, supportflow.DraftRejected, w.status().State)
	p, err := w.h.Proposals.GetProposal(context.Background(), id)
	require.NoError(t, err)
	assert.Equal(t, supportflow.DraftRejected, p.State)
}
