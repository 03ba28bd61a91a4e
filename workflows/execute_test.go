package workflows_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/activities"
	"github.com/supportflow/supportflow/activities/activitiestest"
	"github.com/supportflow/supportflow/internal/enrichment"
	"github.com/supportflow/supportflow/internal/ingest"
	"github.com/supportflow/supportflow/internal/policy"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/internal/testenv"
	"github.com/supportflow/supportflow/internal/workerapp"
	"github.com/supportflow/supportflow/internal/zendeskclient"
	"github.com/supportflow/supportflow/ledger"
	"github.com/supportflow/supportflow/workflows"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// newEnv is a time-skipping environment with the product's default
// durations and the one retry interceptor, as the worker has them.
func newEnv(t *testing.T) *testsuite.TestWorkflowEnvironment {
	return newEnvWith(t, &workflows.Workflows{})
}

// newEnvWith is newEnv with the workflows configured as given, and any
// further interceptors a test observes the workflows through. Whatever a
// test runs, every activity call its workflows make must carry a summary
// for the Web UI (metadata_test.go).
func newEnvWith(t *testing.T, wf *workflows.Workflows, extra ...interceptor.WorkerInterceptor) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	every := newSummaries()
	interceptors := append([]interceptor.WorkerInterceptor{policy.NewRetryInterceptor(policy.Defaults()), every}, extra...)
	env.SetWorkerOptions(worker.Options{Interceptors: interceptors})
	wf.Register(env)
	t.Cleanup(func() {
		env.AssertExpectations(t)
		every.assertEverySummarized(t)
	})
	return env
}

func replyProposal(id string) supportflow.Proposal {
	return supportflow.Proposal{ID: id, Actions: []supportflow.Action{{
		TicketID: 42, Comment: &supportflow.Comment{Body: "We have cancelled your plan.", Public: true},
	}}}
}

// attempts records the test clock and attempt info of each call of a
// mocked activity.
type attempts struct {
	mu    sync.Mutex
	at    []time.Time
	infos []activity.Info
}

func (a *attempts) record(env *testsuite.TestWorkflowEnvironment, ctx context.Context) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.at = append(a.at, env.Now())
	a.infos = append(a.infos, activity.GetInfo(ctx))
	return len(a.at)
}

func (a *attempts) gaps() []time.Duration {
	var out []time.Duration
	for i := 1; i < len(a.at); i++ {
		out = append(out, a.at[i].Sub(a.at[i-1]))
	}
	return out
}

// proposalStates mocks SetProposalState, with which an execution records
// its end on its proposal, and returns what it was asked to record.
func proposalStates(env *testsuite.TestWorkflowEnvironment) *[]supportflow.ProposalStateInput {
	var mu sync.Mutex
	var states []supportflow.ProposalStateInput
	env.OnActivity("SetProposalState", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in supportflow.ProposalStateInput) error {
			mu.Lock()
			defer mu.Unlock()
			states = append(states, in)
			return nil
		})
	return &states
}

func TestExecuteProposal_RetryDelaysFollowThePolicy(t *testing.T) {
	env := newEnv(t)
	registerActivities(env, &activities.Activities{})
	marked := proposalStates(env)
	var calls attempts
	env.OnActivity("PostReply", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in supportflow.ActionInput) (supportflow.PostReplyResult, error) {
			if calls.record(env, ctx) < 10 {
				return supportflow.PostReplyResult{}, &zendeskclient.Error{Op: "post comment", Status: 500, Err: errors.New("internal error")}
			}
			return supportflow.PostReplyResult{CommentID: 7, State: supportflow.StateApplied}, nil
		})
	env.ExecuteWorkflow(supportflow.ExecuteProposalWorkflow, replyProposal("p-retry"))
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())

	// 5, 10, 20 s ... doubling, capped at 300 s, each within half-to-full
	// jitter; the budget for a Zendesk write is 10 attempts.
	nominal := []time.Duration{5, 10, 20, 40, 80, 160, 300, 300, 300}
	gaps := calls.gaps()
	require.Len(t, gaps, len(nominal))
	distinct := map[time.Duration]bool{}
	for i, n := range nominal {
		n *= time.Second
		assert.GreaterOrEqual(t, gaps[i], n/2, "retry %d", i+1)
		assert.LessOrEqual(t, gaps[i], n, "retry %d", i+1)
		distinct[gaps[i]-n/2] = true
	}
	assert.Greater(t, len(distinct), 1, "jitter varies the delays")

	// The product's deadlines, armed per attempt.
	info := calls.infos[0]
	assert.Equal(t, 60*time.Second, info.HeartbeatTimeout)
	assert.InDelta(t, float64(105*time.Second), float64(info.Deadline.Sub(info.StartedTime)), float64(time.Second),
		"start-to-close: three 30 s Zendesk calls (stamp, audit search, post) + 15 s margin")

	var statuses []supportflow.ActionStatus
	require.NoError(t, env.GetWorkflowResult(&statuses))
	assert.Equal(t, supportflow.StateApplied, statuses[0].State)
	assert.Equal(t, []supportflow.ProposalStateInput{{ProposalID: "p-retry", State: supportflow.DraftDone}}, *marked,
		"the execution records its proposal's end")
}

// The reply's attempt budget runs out on failures that may have landed: the
// settle asks for a fence first (a write of ours may still land), the
// execution writes the fence note to the ticket, and the settle after it
// decides from the audits. The ledger keeps a classified reason, never the
// service's text; the workflow's status keeps the error.
func TestExecuteProposal_AttemptBudgetEndsInSettle(t *testing.T) {
	env := newEnv(t)
	registerActivities(env, &activities.Activities{})
	marked := proposalStates(env)
	var (
		mu    sync.Mutex
		calls attempts
		notes []supportflow.ActionInput
	)
	env.OnActivity("PostReply", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in supportflow.ActionInput) (supportflow.PostReplyResult, error) {
			if strings.HasPrefix(in.Key, supportflow.AttentionPrefix) {
				mu.Lock()
				notes = append(notes, in)
				mu.Unlock()
				return supportflow.PostReplyResult{CommentID: 99, Source: "posted", State: supportflow.StateApplied}, nil
			}
			calls.record(env, ctx)
			return supportflow.PostReplyResult{}, errors.New("connection reset by peer")
		})
	var settled []supportflow.SettleLegsInput
	env.OnActivity("SettleLegs", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in supportflow.SettleLegsInput) (supportflow.SettleLegsResult, error) {
			mu.Lock()
			defer mu.Unlock()
			settled = append(settled, in)
			if !in.Fenced {
				return supportflow.SettleLegsResult{State: supportflow.StateApplying, NeedsFence: true}, nil
			}
			return supportflow.SettleLegsResult{State: supportflow.StateFailed}, nil
		}).Twice()
	env.ExecuteWorkflow(supportflow.ExecuteProposalWorkflow, replyProposal("p-budget"))
	var app *temporal.ApplicationError
	require.ErrorAs(t, env.GetWorkflowError(), &app)
	assert.Equal(t, supportflow.ErrTypeActionFailed, app.Type())
	assert.Len(t, calls.at, 10, "a Zendesk write has a budget of 10 attempts")

	require.Len(t, settled, 2, "settled, fenced, settled again")
	for i, in := range settled {
		assert.Equal(t, "p-budget:0", in.Key, i)
		assert.Equal(t, int64(42), in.TicketID, i)
		assert.Contains(t, in.Error, "connection reset by peer", "the ledger keeps the error for operators")
		assert.True(t, in.ZendeskMayHaveLanded, "a write that kept failing may have landed")
		assert.False(t, in.HeldBack || in.ResolveOnly || in.GiveUp, i)
	}
	assert.False(t, settled[0].Fenced)
	assert.True(t, settled[1].Fenced, "the second settle comes after the fence")
	require.Len(t, notes, 1, "one fence note")
	assert.Equal(t, int64(42), notes[0].Action.TicketID)
	require.NotNil(t, notes[0].Action.Comment)
	assert.False(t, notes[0].Action.Comment.Public, "the fence is a private note")
	assert.Contains(t, notes[0].Action.Comment.Body, "p-budget:0")
	assert.NotContains(t, notes[0].Action.Comment.Body, "connection reset", "never the service's text")

	var statuses []supportflow.ActionStatus
	require.True(t, app.HasDetails())
	require.NoError(t, app.Details(&statuses))
	require.Len(t, statuses, 1)
	assert.Equal(t, supportflow.StateFailed, statuses[0].State)
	assert.Contains(t, statuses[0].Error, "connection reset by peer", "the workflow's status keeps the last error")
	assert.Equal(t, "a service kept failing", statuses[0].Reason)
	assert.Equal(t, []supportflow.ProposalStateInput{{ProposalID: "p-budget", State: supportflow.DraftFailed, Error: "a service kept failing"}}, *marked)
}

func TestExecuteProposal_RetryWaitsAtLeastRetryAfter(t *testing.T) {
	env := newEnv(t)
	registerActivities(env, &activities.Activities{})
	proposalStates(env)
	var calls attempts
	env.OnActivity("PostReply", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in supportflow.ActionInput) (supportflow.PostReplyResult, error) {
			if calls.record(env, ctx) == 1 {
				return supportflow.PostReplyResult{}, &zendeskclient.Error{Op: "post comment", Status: 429, RetryAfter: 120 * time.Second, Err: errors.New("rate limited")}
			}
			return supportflow.PostReplyResult{CommentID: 7}, nil
		})
	env.ExecuteWorkflow(supportflow.ExecuteProposalWorkflow, replyProposal("p-429"))
	require.NoError(t, env.GetWorkflowError())
	gaps := calls.gaps()
	require.Len(t, gaps, 1)
	assert.GreaterOrEqual(t, gaps[0], 120*time.Second, "a 429 waits at least its Retry-After, not the 5 s policy delay")
}

func TestExecuteProposal_HeartbeatTimeoutStartsANewAttempt(t *testing.T) {
	env := newEnv(t)
	registerActivities(env, &activities.Activities{})
	proposalStates(env)
	var calls attempts
	env.OnActivity("PostReply", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in supportflow.ActionInput) (supportflow.PostReplyResult, error) {
			if calls.record(env, ctx) == 1 {
				// What the server reports when the worker went silent for
				// longer than the heartbeat timeout (e.g. it was killed).
				return supportflow.PostReplyResult{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil)
			}
			return supportflow.PostReplyResult{CommentID: 7, Source: "audit"}, nil
		})
	env.ExecuteWorkflow(supportflow.ExecuteProposalWorkflow, replyProposal("p-hb"))
	require.NoError(t, env.GetWorkflowError())
	require.Len(t, calls.infos, 2, "heartbeat silence starts exactly one new attempt")
	assert.Equal(t, 60*time.Second, calls.infos[0].HeartbeatTimeout)
	assert.Equal(t, int32(2), calls.infos[1].Attempt)
	assert.Equal(t, 5*time.Second, calls.gaps()[0], "a timeout is retried by the server's policy: the first delay, unjittered")
}

func TestExecuteProposal_BadInputFailsAtOnceAndRunsNothing(t *testing.T) {
	long := strings.Repeat("x", supportflow.MaxCommentBytes+1)
	for name, p := range map[string]supportflow.Proposal{
		"no actions":        {ID: "p1"},
		"empty comment":     {ID: "p1", Actions: []supportflow.Action{{TicketID: 42, Comment: &supportflow.Comment{Body: "  "}}}},
		"oversized comment": {ID: "p1", Actions: []supportflow.Action{{TicketID: 42, Comment: &supportflow.Comment{Body: long}}}},
		"no legs":           {ID: "p1", Actions: []supportflow.Action{{TicketID: 42}}},
		"bad ticket":        {ID: "p1", Actions: []supportflow.Action{{TicketID: 0, Comment: &supportflow.Comment{Body: "hi"}}}},
		"bad proposal id":   {ID: "p1/../x", Actions: []supportflow.Action{{TicketID: 42, Comment: &supportflow.Comment{Body: "hi"}}}},
		"duplicate sub":     {ID: "p1", Actions: []supportflow.Action{{TicketID: 42, CancelSubscriptions: []string{"s1", "s1"}}}},
	} {
		t.Run(name, func(t *testing.T) {
			env := newEnv(t)
			registerActivities(env, &activities.Activities{})
			env.OnActivity("PostReply", mock.Anything, mock.Anything).Return(supportflow.PostReplyResult{}, nil).Never()
			env.OnActivity("CancelSubscriptions", mock.Anything, mock.Anything).Return(supportflow.CancelResult{}, nil).Never()
			env.OnActivity("SettleLegs", mock.Anything, mock.Anything).Return(supportflow.SettleLegsResult{}, nil).Never()
			env.OnActivity("SetProposalState", mock.Anything, mock.Anything).Return(nil).Never()
			env.ExecuteWorkflow(supportflow.ExecuteProposalWorkflow, p)
			err := env.GetWorkflowError()
			var app *temporal.ApplicationError
			require.ErrorAs(t, err, &app)
			assert.Equal(t, supportflow.ErrTypeInvalidInput, app.Type())
			assert.True(t, app.NonRetryable())
		})
	}
}

// registerActivities registers a's activities (and stubs of the rest)
// from the worker's one table, by their contract names.
func registerActivities(env *testsuite.TestWorkflowEnvironment, a *activities.Activities) {
	workerapp.RegisterActivities(env, a, &enrichment.Activities{}, &ingest.Reconciler{})
}

// newReal registers the real activities on a real ledger and the
// stand-ins.
func newReal(t *testing.T, env *testsuite.TestWorkflowEnvironment) *activitiestest.Harness {
	h := activitiestest.New(t, policy.Defaults())
	registerActivities(env, h.Activities)
	return h
}

func TestExecuteProposal_AppliesEveryActionExactlyOnce(t *testing.T) {
	env := newEnv(t)
	r := newReal(t, env)
	t1 := r.Zendesk.AddTicket(standin.Ticket{Subject: "Cancel please"})
	t2 := r.Zendesk.AddTicket(standin.Ticket{Subject: "Thanks"})
	r.Own(t, t1, standin.DefaultRequesterID, "cust-1", "sub-1", "sub-2")
	p := supportflow.Proposal{ID: "p-ok", Actions: []supportflow.Action{
		{TicketID: t1, Comment: &supportflow.Comment{Body: "Done: both plans cancelled.", Public: true}, CancelSubscriptions: []string{"sub-1", "sub-2"}},
		{TicketID: t2, Comment: &supportflow.Comment{Body: "internal: customer churned", Public: false}},
	}}
	r.Approve(t, p)
	env.ExecuteWorkflow(supportflow.ExecuteProposalWorkflow, p)
	require.NoError(t, env.GetWorkflowError())

	assert.Equal(t, 1, r.Zendesk.CommentCount(t1))
	assert.Equal(t, 1, r.Zendesk.CommentCount(t2))
	assert.False(t, r.Zendesk.Comments(t2)[0].Public, "an internal note stays internal")
	assert.Equal(t, 1, r.Subscriptions.Cancellations("sub-1"))
	assert.Equal(t, 1, r.Subscriptions.Cancellations("sub-2"))
	for _, key := range []string{"p-ok:0", "p-ok:1"} {
		a, err := r.Ledger.Get(context.Background(), key)
		require.NoError(t, err)
		assert.Equal(t, supportflow.StateApplied, a.State, key)
		assert.NotZero(t, a.CommentID(), key)
	}
	res, err := env.QueryWorkflow(supportflow.ActionsQuery)
	require.NoError(t, err)
	var statuses []supportflow.ActionStatus
	require.NoError(t, res.Get(&statuses))
	require.Len(t, statuses, 2)
	assert.Equal(t, supportflow.StateApplied, statuses[0].State)
	assert.Equal(t, []string{"sub-1", "sub-2"}, statuses[0].Cancelled)
	assert.Equal(t, r.Zendesk.Comments(t1)[0].ID, statuses[0].CommentID)
}

func TestExecuteProposal_NonRetryable4xxEndsFailed(t *testing.T) {
	env := newEnv(t)
	r := newReal(t, env)
	p := supportflow.Proposal{ID: "p-404", Actions: []supportflow.Action{
		{TicketID: 404404, Comment: &supportflow.Comment{Body: "hello", Public: true}, CancelSubscriptions: []string{"sub-1"}},
		{TicketID: 404404, Comment: &supportflow.Comment{Body: "never reached", Public: true}},
	}}
	r.Own(t, 404404, standin.DefaultRequesterID, "cust-1", "sub-1")
	r.Approve(t, p)
	// The ticket is gone by the time the reply is written (deleted in
	// Zendesk after the cancellation was checked against its requester).
	r.Zendesk.Inject(standin.Fault{Method: "PUT", Path: "/api/v2/tickets/*", Status: 404, Times: -1})
	env.ExecuteWorkflow(supportflow.ExecuteProposalWorkflow, p)

	var app *temporal.ApplicationError
	require.ErrorAs(t, env.GetWorkflowError(), &app)
	assert.Equal(t, supportflow.ErrTypeActionFailed, app.Type())
	assert.Equal(t, 1, r.Zendesk.Requests("PUT", "/api/v2/tickets/"), "a 404 is not retried")
	assert.Equal(t, 0, r.Zendesk.TotalComments())
	assert.Equal(t, 1, r.Subscriptions.Cancellations("sub-1"), "the cancellation runs first, the reply last")

	a, err := r.Ledger.Get(context.Background(), "p-404:0")
	require.NoError(t, err)
	assert.Equal(t, supportflow.StatePartialFailure, a.State, "cancelled, but the reply could not be posted")
	assert.Contains(t, a.LastError, "404", "the ledger keeps the receiver's refusal for operators")
	sub, ok := a.Legs.Find(supportflow.LegCancelSubscription, "sub-1")
	require.True(t, ok)
	assert.Equal(t, ledger.LegDone, sub.State)
	assert.Zero(t, a.CommentID(), "no reply landed")
	_, err = r.Ledger.Get(context.Background(), "p-404:1")
	assert.ErrorIs(t, err, supportflow.ErrNotFound, "later actions are not started")

	res, err := env.QueryWorkflow(supportflow.ActionsQuery)
	require.NoError(t, err)
	var statuses []supportflow.ActionStatus
	require.NoError(t, res.Get(&statuses))
	assert.Equal(t, supportflow.StatePartialFailure, statuses[0].State)
	assert.Contains(t, statuses[0].Error, "404", "the workflow's status keeps the refusal")
	assert.Equal(t, "a service refused it for good", statuses[0].Reason)
	assert.Equal(t, []string{"sub-1"}, statuses[0].Cancelled)
	assert.Equal(t, supportflow.StatePending, statuses[1].State)
}

// A cancellation refused for good: the other is still cancelled, the reply
// (which would promise both) is held back, one private note tells the
// agents, and the action ends needs_attention.
func TestExecuteProposal_PermanentlyFailingCancellationNeedsAttention(t *testing.T) {
	env := newEnv(t)
	r := newReal(t, env)
	ticket := r.Zendesk.AddTicket(standin.Ticket{Subject: "Cancel both"})
	r.Own(t, ticket, standin.DefaultRequesterID, "cust-1", "sub-ok")
	// sub-gone is unknown to the service: a 404, which cannot succeed later.
	// The requester's customer data still lists it, so it is theirs to
	// cancel, and the cancellation is sent.
	require.NoError(t, r.Enrichment.Store.PutEnrichment(context.Background(), ticket, standin.DefaultRequesterID,
		supportflow.Enrichment{CustomerID: "cust-1", ActiveSubscriptions: []string{"sub-gone", "sub-ok"}}))
	p := supportflow.Proposal{ID: "p-partial", Actions: []supportflow.Action{
		{TicketID: ticket, Comment: &supportflow.Comment{Body: "Both cancelled.", Public: true}, CancelSubscriptions: []string{"sub-gone", "sub-ok"}},
	}}
	r.Approve(t, p)
	env.ExecuteWorkflow(supportflow.ExecuteProposalWorkflow, p)

	var app *temporal.ApplicationError
	require.ErrorAs(t, env.GetWorkflowError(), &app)
	assert.Equal(t, supportflow.ErrTypeActionFailed, app.Type())
	comments := r.Zendesk.Comments(ticket)
	require.Len(t, comments, 1, "no reply; one note")
	assert.False(t, comments[0].Public)
	assert.Contains(t, comments[0].Body, "Cancelled: sub-ok. Not cancelled: sub-gone.", "the note says what was cancelled and what was not")
	assert.NotContains(t, comments[0].Body, "not_found", "the note carries a classified reason, never the service's text")
	assert.Equal(t, 1, r.Subscriptions.Cancellations("sub-ok"), "the other subscription was still cancelled")
	assert.Equal(t, 1, r.Subscriptions.CancelCalls("sub-gone"), "a permanent refusal is not retried")

	a, err := r.Ledger.Get(context.Background(), "p-partial:0")
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateNeedsAttention, a.State)
	require.Len(t, a.Legs.Of(supportflow.LegCancelSubscription), 2)
	assert.Equal(t, "failed", a.Legs.Of(supportflow.LegCancelSubscription)[0].State)
	assert.Contains(t, a.Legs.Of(supportflow.LegCancelSubscription)[0].LastError, "404")
	assert.Equal(t, "done", a.Legs.Of(supportflow.LegCancelSubscription)[1].State)
}

// lostCancellation mocks a cancellation leg whose every attempt lost its
// answer after sub-1 was recorded cancelled, and records the settles and
// the Zendesk writes the execution asks for; look is what the quick look
// (SettleLegs with ResolveOnly) finds, final what the final settle does.
type lostCancellation struct {
	mu      sync.Mutex
	settles []supportflow.SettleLegsInput
	writes  []supportflow.ActionInput
}

func mockLostCancellation(env *testsuite.TestWorkflowEnvironment, look, final supportflow.SettleLegsResult) *lostCancellation {
	m := &lostCancellation{}
	env.OnActivity("CancelSubscriptions", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in supportflow.ActionInput) (supportflow.CancelResult, error) {
			return supportflow.CancelResult{Cancelled: []string{"sub-1"}}, errors.New("subscription sub-2: connection reset by peer")
		})
	env.OnActivity("SettleLegs", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in supportflow.SettleLegsInput) (supportflow.SettleLegsResult, error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.settles = append(m.settles, in)
			if in.ResolveOnly {
				return look, nil
			}
			return final, nil
		})
	env.OnActivity("PostReply", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in supportflow.ActionInput) (supportflow.PostReplyResult, error) {
			m.mu.Lock()
			defer m.mu.Unlock()
			m.writes = append(m.writes, in)
			return supportflow.PostReplyResult{CommentID: int64(70 + len(m.writes)), Source: "posted", State: supportflow.StateApplied}, nil
		})
	return m
}

func cancelBothProposal(id string) supportflow.Proposal {
	return supportflow.Proposal{ID: id, Actions: []supportflow.Action{{TicketID: 42,
		Comment: &supportflow.Comment{Body: "Both plans are cancelled.", Public: true}, CancelSubscriptions: []string{"sub-1", "sub-2"}}}}
}

// The cancellation's retries ran out on lost answers, but the service says
// every cancellation landed: the reply still goes out, and the action and
// its proposal end done.
func TestExecuteProposal_LostAnswersThatLandedStillSendTheReply(t *testing.T) {
	env := newEnv(t)
	registerActivities(env, &activities.Activities{})
	marked := proposalStates(env)
	m := mockLostCancellation(env,
		supportflow.SettleLegsResult{State: supportflow.StateApplying, Cancelled: []string{"sub-1", "sub-2"}, AllCancelled: true},
		supportflow.SettleLegsResult{})
	env.ExecuteWorkflow(supportflow.ExecuteProposalWorkflow, cancelBothProposal("p-lost"))
	require.NoError(t, env.GetWorkflowError())

	require.Len(t, m.settles, 1, "one quick look, no final settle")
	assert.Equal(t, supportflow.SettleLegsInput{Key: "p-lost:0", TicketID: 42, ResolveOnly: true}, m.settles[0])
	require.Len(t, m.writes, 1, "the reply, and no note")
	assert.Equal(t, "p-lost:0", m.writes[0].Key)
	assert.True(t, m.writes[0].ReplyLast)
	assert.True(t, m.writes[0].Action.Comment.Public)

	var statuses []supportflow.ActionStatus
	require.NoError(t, env.GetWorkflowResult(&statuses))
	require.Len(t, statuses, 1)
	assert.Equal(t, supportflow.StateApplied, statuses[0].State)
	assert.Equal(t, []string{"sub-1", "sub-2"}, statuses[0].Cancelled)
	assert.Equal(t, int64(71), statuses[0].CommentID)
	assert.Empty(t, statuses[0].Reason)
	assert.Equal(t, []supportflow.ProposalStateInput{{ProposalID: "p-lost", State: supportflow.DraftDone}}, *marked)
}

// The service cannot say whether sub-2 was cancelled: the reply is held
// back, the final settle ends the action needs_attention, and the agents'
// note says what the ledger recorded (cancelled, not cancelled, unknown)
// with a classified reason, never the service's text.
func TestExecuteProposal_UnresolvedCancellationHoldsTheReplyBack(t *testing.T) {
	env := newEnv(t)
	registerActivities(env, &activities.Activities{})
	marked := proposalStates(env)
	m := mockLostCancellation(env,
		supportflow.SettleLegsResult{State: supportflow.StateApplying, Cancelled: []string{"sub-1"}, Unknown: []string{"cancel_subscription sub-2"}},
		supportflow.SettleLegsResult{State: supportflow.StateNeedsAttention, Cancelled: []string{"sub-1"}, Unknown: []string{"cancel_subscription sub-2"}})
	env.ExecuteWorkflow(supportflow.ExecuteProposalWorkflow, cancelBothProposal("p-held"))
	var app *temporal.ApplicationError
	require.ErrorAs(t, env.GetWorkflowError(), &app)
	assert.Equal(t, supportflow.ErrTypeActionFailed, app.Type())

	require.Len(t, m.settles, 2, "the quick look, then the final settle")
	assert.True(t, m.settles[0].ResolveOnly)
	final := m.settles[1]
	assert.False(t, final.ResolveOnly)
	assert.True(t, final.HeldBack, "the reply was held back")
	assert.False(t, final.ZendeskMayHaveLanded, "the reply was never sent")
	assert.NotEmpty(t, final.Error, "the error is kept for operators")

	require.Len(t, m.writes, 1, "no reply; one note")
	note := m.writes[0]
	assert.True(t, strings.HasPrefix(note.Key, supportflow.AttentionPrefix))
	assert.False(t, note.Action.Comment.Public)
	assert.Equal(t, "supportflow did not send the approved reply (action p-held:0): a cancellation could not be done "+
		"(a service kept failing), so the reply would have promised what did not happen. Cancelled: sub-1. Not cancelled: none. "+
		"Outcome unknown (check the subscription service): cancel_subscription sub-2. "+
		"The customer has not been answered; a new draft follows.", note.Action.Comment.Body)
	assert.NotContains(t, note.Action.Comment.Body, "connection reset")

	var statuses []supportflow.ActionStatus
	require.NoError(t, app.Details(&statuses))
	require.Len(t, statuses, 1)
	assert.Equal(t, supportflow.StateNeedsAttention, statuses[0].State)
	assert.Equal(t, []string{"sub-1"}, statuses[0].Cancelled)
	assert.Equal(t, []string{"cancel_subscription sub-2"}, statuses[0].Unknown)
	assert.Equal(t, []supportflow.ProposalStateInput{{ProposalID: "p-held", State: supportflow.DraftFailed, Error: "a service kept failing"}}, *marked)
}
