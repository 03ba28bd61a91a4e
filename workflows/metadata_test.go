package workflows_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/activities"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/workflows"
)

// What the Web UI shows of a run: its current details, which the SDK's
// built-in metadata query returns, and the summary each activity call is
// scheduled with (the ActivityTaskScheduled event's user metadata). These
// tests read both where the SDK takes them: the query's answer, and the
// activity options each ExecuteActivity call carries into the SDK.

// metadataQuery is the SDK's built-in query for a run's metadata
// (go.temporal.io/sdk/internal.QueryTypeWorkflowMetadata), which the Web UI
// sends for the current details.
const metadataQuery = "__temporal_workflow_metadata"

// currentDetails asks a run for its metadata and returns its current
// details.
func currentDetails(t *testing.T, env *testsuite.TestWorkflowEnvironment) string {
	t.Helper()
	v, err := env.QueryWorkflow(metadataQuery)
	require.NoError(t, err)
	var md sdkpb.WorkflowMetadata
	require.NoError(t, v.Get(&md))
	return md.GetCurrentDetails()
}

// summaries records, per workflow type, each activity call the workflows
// make and the summary it carries.
type summaries struct {
	interceptor.WorkerInterceptorBase
	mu    sync.Mutex
	calls map[string][]activityCall
}

type activityCall struct{ activity, summary string }

func newSummaries() *summaries { return &summaries{calls: map[string][]activityCall{}} }

// of is a workflow type's calls, "ActivityType: summary".
func (s *summaries) of(workflowType string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, c := range s.calls[workflowType] {
		out = append(out, c.activity+": "+c.summary)
	}
	return out
}

// all is every call's summary.
func (s *summaries) all() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, cs := range s.calls {
		for _, c := range cs {
			out = append(out, c.summary)
		}
	}
	return out
}

// assertEverySummarized checks that every call carried a summary of one
// line: the Web UI shows it beside the event
// (https://docs.temporal.io/develop/go/enriching-ui).
func (s *summaries) assertEverySummarized(t *testing.T) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for wt, cs := range s.calls {
		for _, c := range cs {
			assert.NotEmpty(t, c.summary, "%s calls %s without a summary", wt, c.activity)
			assert.False(t, strings.ContainsAny(c.summary, "\r\n"), "%s: %q is one line", wt, c.summary)
			assert.LessOrEqual(t, len(c.summary), 200, "%s: %q is short", wt, c.summary)
		}
	}
}

func (s *summaries) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	in := &summariesInbound{s: s}
	in.Next = next
	return in
}

type summariesInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	s *summaries
}

func (i *summariesInbound) Init(outbound interceptor.WorkflowOutboundInterceptor) error {
	out := &summariesOutbound{s: i.s}
	out.Next = outbound
	return i.Next.Init(out)
}

type summariesOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	s *summaries
}

func (o *summariesOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...any) workflow.Future {
	wt := workflow.GetInfo(ctx).WorkflowType.Name
	o.s.mu.Lock()
	o.s.calls[wt] = append(o.s.calls[wt], activityCall{activityType, workflow.GetActivityOptions(ctx).Summary})
	o.s.mu.Unlock()
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

// assertNoCustomerData checks that metadata holds none of the given
// customer or reply text, and no email address.
func assertNoCustomerData(t *testing.T, texts []string, private ...string) {
	t.Helper()
	for _, s := range texts {
		assert.NotContains(t, s, "@", "no email in %q", s)
		for _, p := range private {
			assert.NotContains(t, s, p, "metadata %q", s)
		}
	}
}

// A draft names its ticket and its state as it goes: drafting while the
// model writes, awaiting approval with its proposal and the tokens the
// model used, then done once its execution applied. Every activity call
// says which call it is and on which ticket; nothing of the customer's
// words or the reply is in any of it.
func TestMetadata_DraftReplyShowsTicketStateAndTokens(t *testing.T) {
	rec := newSummaries()
	w := newDraftWorldWith(t, &workflows.Workflows{}, rec)
	ticket := w.seedTicket("Please cancel my subscription.")
	w.env.OnActivity("GenerateDraft", mock.Anything, mock.Anything).After(10 * time.Minute).Return(
		func(ctx context.Context, in supportflow.GenerateInput) (supportflow.DraftProposal, error) {
			p := validDraft(in)
			p.PromptTokens, p.CompletionTokens = 812, 164
			return p, nil
		})
	var drafting, awaiting string
	var proposal string
	w.env.RegisterDelayedCallback(func() { drafting = currentDetails(t, w.env) }, 5*time.Minute)
	w.env.RegisterDelayedCallback(func() {
		awaiting = currentDetails(t, w.env)
		st := w.status()
		require.NotNil(t, st.Proposal)
		proposal = st.Proposal.ID
		w.approve("a", proposal, "ada@acme.test")
	}, time.Hour)
	w.env.ExecuteWorkflow(supportflow.DraftReplyWorkflow, supportflow.DraftRequest{TicketID: ticket})
	require.True(t, w.env.IsWorkflowCompleted())
	require.NoError(t, w.env.GetWorkflowError())
	done := currentDetails(t, w.env)

	assert.Equal(t, fmt.Sprintf("ticket %d · drafting", ticket), drafting)
	assert.Equal(t, fmt.Sprintf("ticket %d · awaiting approval · proposal %s · model tokens 812 prompt + 164 completion", ticket, proposal), awaiting)
	assert.Equal(t, fmt.Sprintf("ticket %d · done · proposal %s · model tokens 812 prompt + 164 completion", ticket, proposal), done)
	assert.Equal(t, []string{
		fmt.Sprintf("LoadTicket: load ticket %d", ticket),
		fmt.Sprintf("GenerateDraft: model draft, ticket %d", ticket),
		fmt.Sprintf("SaveProposal: save proposal, ticket %d", ticket),
		fmt.Sprintf("SetProposalState: mark proposal executing, ticket %d", ticket),
		fmt.Sprintf("SetProposalState: mark proposal done, ticket %d", ticket),
	}, rec.of(supportflow.DraftReplyWorkflow))
	assert.Equal(t, []string{
		fmt.Sprintf("PostReply: post reply, ticket %d", ticket),
		"SetProposalState: mark proposal done",
	}, rec.of(supportflow.ExecuteProposalWorkflow))
	assertNoCustomerData(t, append(rec.all(), drafting, awaiting, done), "Please cancel", "Thanks, we are on it", "Ada")
}

// The tokens shown are the ones the model server counted for the draft
// (the stand-in reports usage like the real one), and a rejected draft
// says so.
func TestMetadata_DraftReplyTokensAreTheModelsUsage(t *testing.T) {
	w := newDraftWorld(t)
	ticket := w.seedTicket("Where is my order?")
	var awaiting string
	var st supportflow.DraftStatus
	w.env.RegisterDelayedCallback(func() {
		awaiting = currentDetails(t, w.env)
		st = w.status()
		require.NotNil(t, st.Proposal)
		w.update(supportflow.RejectUpdate, "r", supportflow.RejectRequest{ProposalID: st.Proposal.ID, RejectedBy: "bo", Reason: "wrong tone"})
	}, time.Hour)
	w.env.ExecuteWorkflow(supportflow.DraftReplyWorkflow, supportflow.DraftRequest{TicketID: ticket})
	require.NoError(t, w.env.GetWorkflowError())
	rejected := currentDetails(t, w.env)

	p := st.Proposal
	assert.Positive(t, p.PromptTokens, "the model's usage reaches the workflow")
	assert.Positive(t, p.CompletionTokens)
	tokens := fmt.Sprintf("model tokens %d prompt + %d completion", p.PromptTokens, p.CompletionTokens)
	assert.Equal(t, fmt.Sprintf("ticket %d · awaiting approval · proposal %s · %s", ticket, p.ID, tokens), awaiting)
	assert.Equal(t, fmt.Sprintf("ticket %d · rejected · proposal %s · %s", ticket, p.ID, tokens), rejected)
	assertNoCustomerData(t, []string{awaiting, rejected}, "Where is my order", p.Reply, "wrong tone", "bo")
}

// An execution that held the reply back: the draft says it needs
// attention (and goes on to draft again with the outcome).
func TestMetadata_DraftReplyHeldBackNeedsAttention(t *testing.T) {
	w := newDraftWorld(t)
	ticket := w.seedTicket("Cancel both please.")
	w.env.OnActivity("GenerateDraft", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in supportflow.GenerateInput) (supportflow.DraftProposal, error) {
			p := validDraft(in)
			p.PromptTokens, p.CompletionTokens = 500, 80
			return p, nil
		})
	w.env.OnWorkflow(supportflow.ExecuteProposalWorkflow, mock.Anything, mock.Anything).Return(
		func(ctx workflow.Context, p supportflow.Proposal) ([]supportflow.ActionStatus, error) {
			statuses := []supportflow.ActionStatus{{Key: supportflow.ActionKey(p.ID, 0), TicketID: ticket, State: supportflow.StateNeedsAttention,
				Cancelled: []string{"sub-1"}, NotCancelled: []string{"sub-2"}, Reason: "a service refused it for good"}}
			return statuses, temporal.NewNonRetryableApplicationError("action ended needs_attention", supportflow.ErrTypeActionFailed, nil, statuses)
		})
	var proposal string
	w.env.RegisterDelayedCallback(func() {
		proposal = w.status().Proposal.ID
		w.approve("a", proposal, "ada@acme.test")
	}, time.Hour)
	w.env.ExecuteWorkflow(supportflow.DraftReplyWorkflow, supportflow.DraftRequest{TicketID: ticket})
	var cont *workflow.ContinueAsNewError
	require.ErrorAs(t, w.env.GetWorkflowError(), &cont, "drafts again with the outcome")
	assert.Equal(t, fmt.Sprintf("ticket %d · needs attention: the reply was held back · proposal %s · model tokens 500 prompt + 80 completion",
		ticket, proposal), currentDetails(t, w.env))
}

// An execution names its proposal, the action at hand and how it ended;
// each leg's call says what it does and on which ticket, with counts, never
// the subscriptions' or the reply's content.
func TestMetadata_ExecuteProposalAppliedNamesEachLeg(t *testing.T) {
	rec := newSummaries()
	env := newEnvWith(t, &workflows.Workflows{}, rec)
	r := newReal(t, env)
	t1 := r.Zendesk.AddTicket(standin.Ticket{Subject: "Cancel please"})
	t2 := r.Zendesk.AddTicket(standin.Ticket{Subject: "Thanks"})
	r.Own(t, t1, standin.DefaultRequesterID, "cust-1", "sub-1", "sub-2")
	p := supportflow.Proposal{ID: "p-meta", Actions: []supportflow.Action{
		{TicketID: t1, Comment: &supportflow.Comment{Body: "Done: both plans cancelled.", Public: true}, CancelSubscriptions: []string{"sub-1", "sub-2"}},
		{TicketID: t2, Comment: &supportflow.Comment{Body: "internal: customer churned", Public: false}},
	}}
	r.Approve(t, p)
	env.ExecuteWorkflow(supportflow.ExecuteProposalWorkflow, p)
	require.NoError(t, env.GetWorkflowError())

	details := currentDetails(t, env)
	assert.Equal(t, "proposal p-meta · 2 actions · done", details)
	calls := rec.of(supportflow.ExecuteProposalWorkflow)
	assert.Equal(t, []string{
		fmt.Sprintf("CancelSubscriptions: cancel 2 subscriptions, ticket %d", t1),
		fmt.Sprintf("PostReply: post reply, ticket %d", t1),
		fmt.Sprintf("PostReply: post private note, ticket %d", t2),
		"SetProposalState: mark proposal done",
	}, calls)
	assertNoCustomerData(t, append(calls, details), "sub-1", "sub-2", "cust-1", "Done:", "churned")
}

// An action whose reply was held back: the execution's details say which
// action, on which ticket, ended needs_attention and why, in classified
// words; the settle, the check and the agents' note are named.
func TestMetadata_ExecuteProposalNeedsAttention(t *testing.T) {
	rec := newSummaries()
	env := newEnvWith(t, &workflows.Workflows{}, rec)
	registerActivities(env, &activities.Activities{})
	proposalStates(env)
	mockLostCancellation(env,
		supportflow.SettleLegsResult{State: supportflow.StateApplying, Cancelled: []string{"sub-1"}, Unknown: []string{"cancel_subscription sub-2"}},
		supportflow.SettleLegsResult{State: supportflow.StateNeedsAttention, Cancelled: []string{"sub-1"}, Unknown: []string{"cancel_subscription sub-2"}})
	env.ExecuteWorkflow(supportflow.ExecuteProposalWorkflow, cancelBothProposal("p-held"))
	require.Error(t, env.GetWorkflowError())

	details := currentDetails(t, env)
	assert.Equal(t, "proposal p-held · action 1 of 1 · ticket 42 · needs attention: a service kept failing", details)
	calls := rec.of(supportflow.ExecuteProposalWorkflow)
	assert.Equal(t, []string{
		"CancelSubscriptions: cancel 2 subscriptions, ticket 42",
		"SettleLegs: check cancellations, ticket 42",
		"SettleLegs: settle action, ticket 42",
		"PostReply: post attention note, ticket 42",
		"SetProposalState: mark proposal failed",
	}, calls)
	assertNoCustomerData(t, append(calls, details), "connection reset", "Both plans", "sub-")
}

// An enrichment run says what it waits for and when it looks up, then
// what it found, in counts; its lookup is named as a BigQuery lookup.
func TestMetadata_EnrichTicketWaitsThenEnriches(t *testing.T) {
	rec := newSummaries()
	w := newDraftWorldWith(t, &workflows.Workflows{}, rec)
	w.seedCustomer("sub-1")
	start := w.env.Now()
	var waiting string
	w.env.RegisterDelayedCallback(func() { waiting = currentDetails(t, w.env) }, 5*time.Minute)
	w.env.ExecuteWorkflow(supportflow.EnrichTicketWorkflow, supportflow.EnrichRequest{TicketID: 7,
		Pending: []supportflow.TicketEvent{event(7, supportflow.TicketCreated, start)}})
	require.NoError(t, w.env.GetWorkflowError())
	enriched := currentDetails(t, w.env)

	due := start.Add(10 * time.Minute).UTC().Format(time.RFC3339)
	assert.Equal(t, "ticket 7 · waiting · 1 event pending · next lookup at "+due+" · 0 lookups", waiting)
	assert.Equal(t, "ticket 7 · enriched · customer found · 1 lookup", enriched)
	assert.Equal(t, []string{"LookupCustomer: BigQuery lookup, ticket 7"}, rec.of(supportflow.EnrichTicketWorkflow))
	assertNoCustomerData(t, append(rec.all(), waiting, enriched), "cust-1", "sub-1")
}

// The schedules' workflows (scan, prune, reconcile) and the evaluation
// say what they did in counts, and name each call.
func TestMetadata_ScheduledWorkflowsReportCounts(t *testing.T) {
	newMocked := func(t *testing.T) (*testsuite.TestWorkflowEnvironment, *summaries) {
		rec := newSummaries()
		env := newEnvWith(t, &workflows.Workflows{}, rec)
		registerActivities(env, &activities.Activities{})
		return env, rec
	}
	t.Run("scan", func(t *testing.T) {
		env, rec := newMocked(t)
		env.OnActivity("FindDraftCandidates", mock.Anything, mock.Anything).Return([]int64{11, 12}, nil)
		env.OnWorkflow(supportflow.DraftReplyWorkflow, mock.Anything, mock.Anything).Return(supportflow.DraftStatus{}, nil)
		env.ExecuteWorkflow(supportflow.ScanTicketsWorkflow, supportflow.ScanRequest{})
		require.NoError(t, env.GetWorkflowError())
		assert.Equal(t, "scan · done · 2 candidates · 2 started · 0 already running · 0 failed to start", currentDetails(t, env))
		assert.Equal(t, []string{"FindDraftCandidates: find draft candidates, limit 200"}, rec.of(supportflow.ScanTicketsWorkflow))
	})
	t.Run("prune", func(t *testing.T) {
		env, rec := newMocked(t)
		env.OnActivity("PruneLedger", mock.Anything).Return(map[string]int64{"actions": 2, "proposals": 1}, nil)
		env.OnActivity("PruneEnrichment", mock.Anything).Return(map[string]int64{"lookup_logs": 2}, nil)
		env.OnActivity("PruneTicketEvents", mock.Anything).Return(map[string]int64{"ticket_events": 1}, nil)
		env.ExecuteWorkflow(supportflow.PruneRetentionWorkflow)
		require.NoError(t, env.GetWorkflowError())
		assert.Equal(t, "prune · done · 6 rows deleted", currentDetails(t, env))
		assert.Equal(t, []string{"PruneLedger: prune ledger", "PruneEnrichment: prune enrichment", "PruneTicketEvents: prune ticket events"},
			rec.of(supportflow.PruneRetentionWorkflow))
	})
	t.Run("reconcile", func(t *testing.T) {
		env, rec := newMocked(t)
		env.OnActivity("ReconcileTickets", mock.Anything, mock.Anything).Return(
			supportflow.ReconcileResult{TicketsRead: 3, EventsRead: 5, Requests: 2, Repaired: 1, RepairedTickets: []int64{9}, CaughtUp: true}, nil)
		env.ExecuteWorkflow(supportflow.ReconcileTicketsWorkflow, supportflow.ReconcileRequest{})
		require.NoError(t, env.GetWorkflowError())
		assert.Equal(t, "reconcile · done · 3 tickets and 5 events read · 1 repaired · caught up", currentDetails(t, env))
		assert.Equal(t, []string{"ReconcileTickets: reconcile from Zendesk's incremental exports"}, rec.of(supportflow.ReconcileTicketsWorkflow))
	})
	t.Run("evaluate", func(t *testing.T) {
		env, rec := newMocked(t)
		env.OnActivity("LoadTicket", mock.Anything, mock.Anything).Return(supportflow.TicketContext{ActualReply: "Hi Ada, it shipped."}, nil)
		env.OnActivity("GenerateDraft", mock.Anything, mock.Anything).Return(
			supportflow.DraftProposal{Reply: "Hi Ada, it is on its way.", PromptTokens: 100, CompletionTokens: 20}, nil)
		env.OnActivity("RecordEvalResult", mock.Anything, mock.Anything).Return(0.5, nil)
		env.OnActivity("RecordEvalSummary", mock.Anything, mock.Anything).Return(nil)
		env.ExecuteWorkflow(supportflow.EvaluateDraftsWorkflow,
			supportflow.EvaluationRequest{RunID: "run-1", Set: "golden", TicketIDs: []int64{11, 12}, Concurrency: 1})
		require.NoError(t, env.GetWorkflowError())
		details := currentDetails(t, env)
		assert.Equal(t, "evaluation run-1 of set golden · 2 of 2 tickets done · mean score 0.500 · model tokens 200 prompt + 40 completion · done", details)
		calls := rec.of(supportflow.EvaluateDraftsWorkflow)
		assert.Equal(t, []string{
			"LoadTicket: load ticket 11 for evaluation", "GenerateDraft: model draft for evaluation, ticket 11", "RecordEvalResult: record evaluation result, ticket 11",
			"LoadTicket: load ticket 12 for evaluation", "GenerateDraft: model draft for evaluation, ticket 12", "RecordEvalResult: record evaluation result, ticket 12",
			"RecordEvalSummary: record evaluation summary, 2 tickets",
		}, calls)
		assertNoCustomerData(t, append(calls, details), "Ada", "shipped", "on its way")
	})
}
