package tests

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/ingest"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/starter"
)

// ticketIDs hands out ticket IDs unique across the tests of this binary:
// they share one Temporal namespace, and a draft's workflow ID is derived
// from its ticket.
var ticketIDs atomic.Int64

// seedTicket adds a ticket whose customer wrote body; subs become the
// customer's active subscriptions (in the enrichment and the service).
func (s *stack) seedTicket(body string, subs ...string) int64 {
	s.t.Helper()
	id := s.zd.AddTicket(standin.Ticket{ID: 10000 + ticketIDs.Add(1), Subject: "My plan", Description: body, RequesterName: "Ada"})
	if len(subs) > 0 {
		require.NoError(s.t, s.enrichment.PutEnrichment(context.Background(), id, standin.DefaultRequesterID, supportflow.Enrichment{CustomerID: "cust-1", ActiveSubscriptions: subs}))
		for _, sub := range subs {
			s.subs.AddSubscription(sub, "cust-1")
		}
	}
	return id
}

// waitDraft polls the draft until cond holds and returns its status.
func (s *stack) waitDraft(ticket int64, what string, cond func(supportflow.DraftStatus) bool) supportflow.DraftStatus {
	s.t.Helper()
	deadline := time.Now().Add(waitBudget)
	var last supportflow.DraftStatus
	var lastErr error
	for time.Now().Before(deadline) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		last, lastErr = s.starter.DraftStatus(ctx, ticket)
		cancel()
		if lastErr == nil && cond(last) {
			return last
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("draft of ticket %d never became %s; last status %+v, error %v", ticket, what, last, lastErr)
	return last
}

func (s *stack) waitState(ticket int64, state string) supportflow.DraftStatus {
	s.t.Helper()
	return s.waitDraft(ticket, state, func(st supportflow.DraftStatus) bool { return st.State == state })
}

func (s *stack) proposals(ticket int64) int {
	s.t.Helper()
	n, err := s.proposalStore.CountProposals(context.Background(), ticket)
	require.NoError(s.t, err)
	return n
}

// recordHistory writes a closed workflow's history to
// workflows/testdata/{name}.json when SUPPORTFLOW_RECORD_HISTORIES=1, for
// the replay test that guards determinism. Recorded files are committed;
// without the variable this does nothing.
func (s *stack) recordHistory(workflowID, runID, name string) {
	s.t.Helper()
	if os.Getenv("SUPPORTFLOW_RECORD_HISTORIES") != "1" {
		return
	}
	path := filepath.Join("..", "workflows", "testdata", name+".json")
	if _, err := os.Stat(path); err == nil {
		// Committed histories are the deployed world: never re-recorded.
		s.t.Logf("%s is committed; not recording it again", path)
		return
	}
	ctx := ctxT(s.t)
	// A closed run's history is whole; give the run a moment to close.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		d, err := s.temporal.DescribeWorkflowExecution(ctx, workflowID, runID)
		if err != nil || d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			break
		}
	}
	b, err := protojson.MarshalOptions{Indent: "  "}.Marshal(s.history(s.temporal, workflowID, runID))
	require.NoError(s.t, err)
	require.NoError(s.t, os.WriteFile(path, append(b, '\n'), 0o644))
}

// history reads a run's raw history ("" runID: the latest run) as the
// server stores it: events whose payloads the client has not decoded.
func (s *stack) history(c client.Client, workflowID, runID string) *historypb.History {
	s.t.Helper()
	it := c.GetWorkflowHistory(ctxT(s.t), workflowID, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var h historypb.History
	for it.HasNext() {
		e, err := it.Next()
		require.NoError(s.t, err)
		h.Events = append(h.Events, e)
	}
	require.NotEmpty(s.t, h.Events, "%s has a history", workflowID)
	return &h
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// The worker is killed while the model streams the draft. Its attempt
// stops heartbeating; after the heartbeat timeout a new worker's attempt
// drafts again and the draft reaches awaiting_approval with exactly one
// proposal. Before the kill, the draft's progress shows the tokens
// streamed so far.
func TestDraft_SurvivesWorkerRestart(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ticket := s.seedTicket("Please cancel my subscription.", "sub-1")
	hit := make(chan struct{}, 4)
	// The first answer holds after a few tokens (until the test ends), so
	// the worker is killed mid-answer however loaded the machine is.
	s.model.Inject(standin.ModelFault{TokenDelay: 150 * time.Millisecond, Arrived: hit, HoldAfter: 3, Hold: heldUntilCleanup(t)})
	s.startWorker()

	d, err := s.starter.StartDraft(ctxT(t), ticket, "click")
	require.NoError(t, err)
	assert.False(t, d.Joined)
	select {
	case <-hit:
	case <-time.After(waitBudget):
		t.Fatal("the model was never called")
	}
	st := s.waitDraft(ticket, "streaming", func(st supportflow.DraftStatus) bool {
		return st.State == supportflow.DraftDrafting && st.Progress != nil && st.Progress.Tokens > 0
	})
	assert.Equal(t, "streaming", st.Progress.Step)
	s.killWorker()
	s.startWorker()

	st = s.waitState(ticket, supportflow.DraftAwaitingApproval)
	require.NotNil(t, st.Proposal)
	assert.Equal(t, []string{"sub-1"}, st.Proposal.CancelSubscriptions)
	assert.Equal(t, 1, s.proposals(ticket), "exactly one proposal")
	assert.Equal(t, 2, s.model.Requests(), "the killed attempt, then the one that finished")
	assert.Equal(t, 1, s.model.Completions())
	p, err := s.proposalStore.GetProposal(context.Background(), st.Proposal.ID)
	require.NoError(t, err)
	assert.Equal(t, st.Proposal.Reply, p.Reply)
	assert.Equal(t, supportflow.DraftAwaitingApproval, p.State)
}

// Two clicks at once make one draft: both starts land on the same run,
// the model is asked once, one proposal is saved, and the Web UI's search
// attributes find one workflow for the ticket, awaiting approval.
func TestDraft_DoubleClickStartsOneDraft(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ticket := s.seedTicket("Where is my order?")
	s.model.Inject(standin.ModelFault{Delay: 300 * time.Millisecond})
	s.startWorker()

	var wg sync.WaitGroup
	runs := make([]starter.Draft, 2)
	errs := make([]error, 2)
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i], errs[i] = s.starter.StartDraft(ctxT(t), ticket, "click")
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	assert.Equal(t, runs[0].RunID, runs[1].RunID, "both clicks joined one run")
	again, err := s.starter.StartDraft(ctxT(t), ticket, "click")
	require.NoError(t, err)
	assert.Equal(t, runs[0].RunID, again.RunID)
	assert.True(t, again.Joined, "a later click reports that it joined")

	st := s.waitState(ticket, supportflow.DraftAwaitingApproval)
	assert.Equal(t, 1, s.model.Requests(), "the model was asked once")
	assert.Equal(t, 1, s.proposals(ticket))

	query := fmt.Sprintf("%s = '%d' AND %s = '%s' AND %s = '%s'",
		supportflow.SearchAttrTicketID, ticket, supportflow.SearchAttrState, supportflow.DraftAwaitingApproval,
		supportflow.SearchAttrProposalID, st.Proposal.ID)
	require.Eventually(t, func() bool {
		res, err := s.temporal.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		return err == nil && len(res.GetExecutions()) == 1 && res.GetExecutions()[0].GetExecution().GetRunId() == runs[0].RunID
	}, 20*time.Second, 100*time.Millisecond, "the Web UI filter %q finds the draft", query)
}

// Two approvals at once: one execution, one comment, one cancellation.
func TestDraft_ApproveExecutesOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ticket := s.seedTicket("Please cancel my subscription.", "sub-1")
	s.startWorker()
	_, err := s.starter.StartDraft(ctxT(t), ticket, "click")
	require.NoError(t, err)
	st := s.waitState(ticket, supportflow.DraftAwaitingApproval)

	var wg sync.WaitGroup
	results := make([]supportflow.ApproveResult, 2)
	errs := make([]error, 2)
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = s.starter.Approve(ctxT(t), ticket, supportflow.ApproveRequest{ProposalID: st.Proposal.ID, ApprovedBy: "agent-" + strconv.Itoa(i)})
		}()
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	assert.Equal(t, results[0].ExecutionWorkflowID, results[1].ExecutionWorkflowID)
	assert.NotEqual(t, results[0].AlreadyApproved, results[1].AlreadyApproved, "one approval started it, the other joined")

	final := s.waitState(ticket, supportflow.DraftDone)
	assert.Equal(t, 1, s.zd.CommentCount(ticket), "exactly one comment")
	assert.Equal(t, st.Proposal.Reply, s.zd.Comments(ticket)[0].Body)
	assert.Equal(t, 1, s.subs.Cancellations("sub-1"))
	assert.Equal(t, supportflow.StateApplied, s.action(supportflow.ActionKey(st.Proposal.ID, 0)).State)
	assert.Equal(t, supportflow.ExecuteWorkflowID(st.Proposal.ID), final.ExecutionWorkflowID)
	s.recordHistory(supportflow.DraftWorkflowID(ticket), "", "draft_reply_approved_done")

	// Approving once more, after the draft closed, answers the same
	// execution and runs nothing again.
	again, err := s.starter.Approve(ctxT(t), ticket, supportflow.ApproveRequest{ProposalID: st.Proposal.ID, ApprovedBy: "tests"})
	require.NoError(t, err)
	assert.True(t, again.AlreadyApproved)
	assert.Equal(t, supportflow.ExecuteWorkflowID(st.Proposal.ID), again.ExecutionWorkflowID)
	assert.Equal(t, 1, s.zd.CommentCount(ticket))
}

// The model is down: both attempts fail, the draft ends failed with the
// model's error, the workflow is Failed in the Web UI, and nothing was
// saved.
func TestDraft_ModelOutageEndsFailedWithError(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ticket := s.seedTicket("Hello?")
	s.model.Inject(standin.ModelFault{Status: 503, Times: -1})
	s.startWorker()
	_, err := s.starter.StartDraft(ctxT(t), ticket, "click")
	require.NoError(t, err)

	st := s.waitState(ticket, supportflow.DraftFailed)
	assert.Contains(t, st.Error, "HTTP 503")
	assert.Equal(t, 2, s.model.Requests(), "two attempts, no hidden retries")
	assert.Zero(t, s.proposals(ticket))
	d, err := s.temporal.DescribeWorkflowExecution(ctxT(t), supportflow.DraftWorkflowID(ticket), "")
	require.NoError(t, err)
	assert.Equal(t, enumspb.WORKFLOW_EXECUTION_STATUS_FAILED, d.GetWorkflowExecutionInfo().GetStatus())
	s.recordHistory(supportflow.DraftWorkflowID(ticket), "", "draft_reply_model_outage_failed")

	// Once the model is back, a new click drafts again.
	s.model.ClearFaults()
	_, err = s.starter.StartDraft(ctxT(t), ticket, "click")
	require.NoError(t, err)
	s.waitState(ticket, supportflow.DraftAwaitingApproval)
}

// The customer writes while the proposal awaits approval: the proposal is
// superseded and a fresh draft (the next run of the same workflow ID)
// drafts from the new conversation; the old proposal can no longer be
// approved.
func TestDraft_SupersedeWhileAwaitingApprovalRedrafts(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ticket := s.seedTicket("Where is my order?")
	s.startWorker()
	firstRun, err := s.starter.StartDraft(ctxT(t), ticket, "click")
	require.NoError(t, err)
	first := s.waitState(ticket, supportflow.DraftAwaitingApproval)

	// A second later: Zendesk's times are whole seconds, and activity in
	// the second the draft read is not news to it.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	s.zd.AddComment(ticket, standin.SeedComment{Body: "Actually, please cancel everything."})
	ok, err := s.starter.Supersede(ctxT(t), ticket, supportflow.TicketActivity{At: time.Now(), Source: "test"})
	require.NoError(t, err)
	assert.True(t, ok)
	second := s.waitDraft(ticket, "redrafted", func(st supportflow.DraftStatus) bool {
		return st.State == supportflow.DraftAwaitingApproval && st.Proposal != nil && st.Proposal.ID != first.Proposal.ID
	})
	assert.Equal(t, first.Proposal.ID, second.Supersedes)
	s.recordHistory(supportflow.DraftWorkflowID(ticket), firstRun.RunID, "draft_reply_superseded_continued_as_new")
	assert.Equal(t, 1, second.Generation)
	p, err := s.proposalStore.GetProposal(context.Background(), first.Proposal.ID)
	require.NoError(t, err)
	assert.Equal(t, supportflow.DraftSuperseded, p.State)

	_, err = s.starter.Approve(ctxT(t), ticket, supportflow.ApproveRequest{ProposalID: first.Proposal.ID, ApprovedBy: "tests"})
	require.ErrorIs(t, err, starter.ErrStaleProposal, "a stale tab cannot approve the superseded proposal")
	assert.Zero(t, s.zd.CommentCount(ticket))
}

// The scan schedule is created once and updated in place; a scan starts
// a draft for each ticket that needs one, and a second scan while those
// drafts run starts nothing.
func TestScan_StartsEachDraftOnce(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.startWorker()
	ctx := ctxT(t)
	now := time.Now().UTC().Truncate(time.Second)
	var eligible []int64
	for range 3 {
		id := s.seedTicket("Hello?")
		eligible = append(eligible, id)
		require.NoError(t, s.enrichment.PutEnrichment(ctx, id, standin.DefaultRequesterID, supportflow.Enrichment{CustomerID: "c"}))
		_, err := s.mirror.UpsertTicketMirror(ctx, ingest.TicketMirror{TicketID: id, Status: "open", UpdatedAt: now, LastCustomerCommentAt: now})
		require.NoError(t, err)
	}
	answered := s.seedTicket("Thanks!")
	_, err := s.mirror.UpsertTicketMirror(ctx, ingest.TicketMirror{TicketID: answered, Status: "open", UpdatedAt: now,
		LastCustomerCommentAt: now.Add(-time.Hour), LastAgentCommentAt: now})
	require.NoError(t, err)
	// Keep drafts in flight so the second scan finds them running.
	s.model.Inject(standin.ModelFault{Delay: 3 * time.Second, Times: 3})

	scan := func(id string) supportflow.ScanResult {
		run, err := s.temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: s.taskQueue},
			supportflow.ScanTicketsWorkflow, supportflow.ScanRequest{})
		require.NoError(t, err)
		var res supportflow.ScanResult
		require.NoError(t, run.Get(ctx, &res))
		return res
	}
	first := scan("scan-1-" + t.Name())
	assert.ElementsMatch(t, eligible, first.Started)
	second := scan("scan-2-" + t.Name())
	assert.Empty(t, second.Started, "running it twice starts nothing twice")
	assert.ElementsMatch(t, eligible, second.Running)

	for _, id := range eligible {
		s.waitState(id, supportflow.DraftAwaitingApproval)
		assert.Equal(t, 1, s.proposals(id))
	}
	assert.Equal(t, 3, s.model.Requests(), "one model call per eligible ticket")
	third := scan("scan-3-" + t.Name())
	assert.Empty(t, third.Candidates, "a ticket whose proposal has seen the customer's comment needs no draft")
}

// The schedule that runs the scan: every 5 minutes by default, overlap
// skip; ensuring it twice updates it in place.
func TestScan_ScheduleIsCreatedOnceAndUpdated(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ctx := ctxT(t)
	t.Cleanup(func() {
		_ = s.temporal.ScheduleClient().GetHandle(context.Background(), supportflow.ScanScheduleID).Delete(context.Background())
	})
	require.NoError(t, s.starter.EnsureScanSchedule(ctx, 5*time.Minute))
	require.NoError(t, s.starter.EnsureScanSchedule(ctx, 7*time.Minute))
	d, err := s.temporal.ScheduleClient().GetHandle(ctx, supportflow.ScanScheduleID).Describe(ctx)
	require.NoError(t, err)
	require.Len(t, d.Schedule.Spec.Intervals, 1)
	assert.Equal(t, 7*time.Minute, d.Schedule.Spec.Intervals[0].Every)
	assert.Equal(t, enumspb.SCHEDULE_OVERLAP_POLICY_SKIP, d.Schedule.Policy.Overlap)
	action, ok := d.Schedule.Action.(*client.ScheduleWorkflowAction)
	require.True(t, ok)
	assert.Equal(t, supportflow.ScanTicketsWorkflow, action.Workflow)
	assert.Equal(t, s.taskQueue, action.TaskQueue)
	require.Error(t, s.starter.EnsureScanSchedule(ctx, 0), "a zero interval is refused")
}

// An evaluation run on the dev server: its progress is queryable while it
// runs and its per-ticket results and summary are stored.
func TestEvaluation_DraftsScoresAndStoresASummary(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.startWorker()
	var tickets []int64
	for range 4 {
		id := s.seedTicket("Where is my order?")
		s.zd.AddComment(id, standin.SeedComment{Body: "Hi Ada, it ships tomorrow.", Agent: true})
		tickets = append(tickets, id)
	}
	s.model.Inject(standin.ModelFault{Delay: 500 * time.Millisecond, Times: -1})
	ctx := ctxT(t)
	runID := "eval-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	_, err := s.starter.StartEvaluation(ctx, supportflow.EvaluationRequest{RunID: runID, Set: "golden", TicketIDs: tickets, Concurrency: 2})
	require.NoError(t, err)

	var seenPartial bool
	require.Eventually(t, func() bool {
		st, err := s.starter.EvaluationStatus(ctx, runID)
		if err != nil {
			return false
		}
		if st.Done > 0 && st.Done < st.Total {
			seenPartial = true
		}
		return st.Finished
	}, waitBudget, 50*time.Millisecond)
	assert.True(t, seenPartial, "progress was visible while the run went on")

	st, err := s.starter.EvaluationStatus(ctx, runID)
	require.NoError(t, err)
	assert.Equal(t, 4, st.Done)
	assert.Zero(t, st.Failed)
	assert.Greater(t, st.MeanScore, 0.0)
	summary, err := s.evals.GetSummary(ctx, runID)
	require.NoError(t, err)
	assert.InDelta(t, st.MeanScore, summary.MeanScore, 1e-9)
	results, err := s.evals.Results(ctx, runID)
	require.NoError(t, err)
	assert.Len(t, results, 4)
	assert.Equal(t, 4, s.model.Requests())
	assert.Zero(t, s.zd.TotalComments(), "an evaluation never posts")

	_, err = s.starter.StartEvaluation(ctx, supportflow.EvaluationRequest{RunID: "bad id", Set: "golden", TicketIDs: tickets})
	require.ErrorIs(t, err, supportflow.ErrInvalidInput)
}

// A worker configured to answer with a status and tags drafts proposals
// that carry them (the approver sees them), and the approved reply lands
// with them in one update; the customer's next message reopens the ticket.
func TestDraft_ReplySetsTheConfiguredStatusAndTags(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.extraEnv = []string{"SUPPORTFLOW_REPLY_STATUS=pending", "SUPPORTFLOW_REPLY_TAGS=supportflow,ai_replied"}
	ticket := s.seedTicket("Please cancel my subscription.", "sub-1")
	s.startWorker()
	_, err := s.starter.StartDraft(ctxT(t), ticket, "configured")
	require.NoError(t, err)
	st := s.waitState(ticket, supportflow.DraftAwaitingApproval)
	require.NotNil(t, st.Proposal.UpdateTicket)
	assert.Equal(t, supportflow.TicketUpdate{Status: "pending", Tags: []string{"supportflow", "ai_replied"}}, *st.Proposal.UpdateTicket)
	stored, err := s.proposalStore.GetProposal(ctxT(t), st.Proposal.ID)
	require.NoError(t, err)
	assert.Equal(t, st.Proposal.UpdateTicket, stored.UpdateTicket, "saved with the proposal")

	_, err = s.starter.Approve(ctxT(t), ticket, supportflow.ApproveRequest{ProposalID: st.Proposal.ID, ApprovedBy: "agent"})
	require.NoError(t, err)
	s.waitState(ticket, supportflow.DraftDone)
	tk, _ := s.zd.Ticket(ticket)
	assert.Equal(t, "pending", tk.Status)
	assert.Equal(t, []string{"supportflow", "ai_replied"}, tk.Tags)
	assert.Equal(t, 1, s.zd.CommentCount(ticket), "one reply")
	assert.Equal(t, 1, s.subs.Cancellations("sub-1"))
	s.zd.AddComment(ticket, standin.SeedComment{Body: "Thanks! One more thing."})
	tk, _ = s.zd.Ticket(ticket)
	assert.Equal(t, "open", tk.Status, "the customer's reply reopens it, as in Zendesk")
}

// The customer writes while the model is still drafting: the in-flight
// call is cancelled and the same run drafts again from the new
// conversation, so the proposal shown answers the newest message.
func TestDraft_SupersedeWhileDraftingRedraftsInTheSameRun(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ticket := s.seedTicket("Where is my order?")
	hit := make(chan struct{}, 4)
	// The first answer holds after a few tokens, so the customer's
	// message always arrives mid-answer.
	s.model.Inject(standin.ModelFault{TokenDelay: 150 * time.Millisecond, Arrived: hit, HoldAfter: 3, Hold: heldUntilCleanup(t)})
	s.startWorker()
	run, err := s.starter.StartDraft(ctxT(t), ticket, "click")
	require.NoError(t, err)
	select {
	case <-hit:
	case <-time.After(waitBudget):
		t.Fatal("the model was never called")
	}
	// A second later: Zendesk's times are whole seconds, and activity in
	// the second the draft read is not news to it.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	s.zd.AddComment(ticket, standin.SeedComment{Body: "Actually, please cancel everything."})
	ok, err := s.starter.Supersede(ctxT(t), ticket, supportflow.TicketActivity{At: time.Now(), Source: "test"})
	require.NoError(t, err)
	assert.True(t, ok)
	st := s.waitState(ticket, supportflow.DraftAwaitingApproval)
	assert.Equal(t, 1, st.Redrafts, "one redraft, in the same run")
	assert.Equal(t, 1, s.proposals(ticket), "the interrupted draft saved nothing")
	assert.Equal(t, 2, s.model.Requests())
	assert.Equal(t, run.RunID, mustDescribeRun(t, s, supportflow.DraftWorkflowID(ticket)), "no new run")

	require.NoError(t, s.starter.Reject(ctxT(t), ticket, supportflow.RejectRequest{ProposalID: st.Proposal.ID, RejectedBy: "agent", Reason: "test over"}))
	s.waitState(ticket, supportflow.DraftRejected)
	s.recordHistory(supportflow.DraftWorkflowID(ticket), "", "draft_reply_superseded_while_drafting")
}

// An operator cancels a draft awaiting approval (the Web UI's Cancel): the
// draft ends, its proposal is recorded rejected with why, and it can no
// longer be approved.
func TestDraft_CancelledWhileAwaitingApproval(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	ticket := s.seedTicket("Where is my order?")
	s.startWorker()
	_, err := s.starter.StartDraft(ctxT(t), ticket, "click")
	require.NoError(t, err)
	st := s.waitState(ticket, supportflow.DraftAwaitingApproval)
	require.NoError(t, s.temporal.CancelWorkflow(ctxT(t), supportflow.DraftWorkflowID(ticket), ""))
	require.Eventually(t, func() bool {
		p, err := s.proposalStore.GetProposal(context.Background(), st.Proposal.ID)
		return err == nil && p.State == supportflow.DraftRejected
	}, waitBudget, 50*time.Millisecond, "the proposal is recorded rejected")
	p, err := s.proposalStore.GetProposal(context.Background(), st.Proposal.ID)
	require.NoError(t, err)
	assert.Contains(t, p.Error, "cancelled")
	_, err = s.starter.Approve(ctxT(t), ticket, supportflow.ApproveRequest{ProposalID: st.Proposal.ID, ApprovedBy: "tests"})
	assert.ErrorIs(t, err, starter.ErrStaleProposal, "a cancelled draft cannot be approved")
	assert.Zero(t, s.zd.CommentCount(ticket))
	s.recordHistory(supportflow.DraftWorkflowID(ticket), "", "draft_reply_cancelled")
}

func mustDescribeRun(t *testing.T, s *stack, workflowID string) string {
	t.Helper()
	d, err := s.temporal.DescribeWorkflowExecution(ctxT(t), workflowID, "")
	require.NoError(t, err)
	return d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
}

// heldUntilCleanup is a ModelFault's Hold that is released when the test
// ends, so a held answer never outlives it.
func heldUntilCleanup(t *testing.T) <-chan struct{} {
	hold, _ := releasableHold(t)
	return hold
}

// releasableHold is a hold released by release (any number of calls) or,
// at the latest, when the test ends.
func releasableHold(t *testing.T) (hold <-chan struct{}, release func()) {
	ch := make(chan struct{})
	var once sync.Once
	release = func() { once.Do(func() { close(ch) }) }
	t.Cleanup(release)
	return ch, release
}
