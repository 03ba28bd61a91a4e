package starter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/supportflow/supportflow"
)

// Draft identifies a ticket's draft workflow run.
type Draft struct {
	WorkflowID string
	RunID      string
	// Joined is true when a draft of the ticket was already running and
	// this call joined it instead of starting another.
	Joined bool
}

// StartDraft starts drafting a reply to a ticket, or joins the draft
// already running (workflow ID draft/{ticketID}, conflict policy
// USE_EXISTING), so a double click makes one draft. A ticket whose earlier
// draft has closed gets a new one. A ticket id that is not positive is
// refused with an error wrapping supportflow.ErrInvalidInput.
func (s *Starter) StartDraft(ctx context.Context, ticketID int64, reason string) (Draft, error) {
	req := supportflow.DraftRequest{TicketID: ticketID, Reason: reason}
	if err := req.Validate(); err != nil {
		return Draft{}, err
	}
	id := s.IDs.Draft(ticketID)
	running := s.runningRun(ctx, id)
	run, err := s.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                s.taskQueue(),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			temporal.NewSearchAttributeKeyKeyword(supportflow.SearchAttrTicketID).ValueSet(strconv.FormatInt(ticketID, 10)),
			temporal.NewSearchAttributeKeyKeyword(supportflow.SearchAttrState).ValueSet(supportflow.DraftGathering)),
		Priority:      temporal.Priority{PriorityKey: supportflow.PriorityRequestedDraft},
		StaticSummary: fmt.Sprintf("draft a reply to ticket %d", ticketID),
	}, supportflow.DraftReplyWorkflow, req)
	if err != nil {
		return Draft{}, fmt.Errorf("starter: draft ticket %d: %w", ticketID, err)
	}
	return Draft{WorkflowID: id, RunID: run.GetRunID(), Joined: running != "" && running == run.GetRunID()}, nil
}

// runningRun returns the run ID of the workflow's running execution, or
// "" when none runs. The start call does not say whether it joined; a run
// seen just before it is the one it joins.
func (s *Starter) runningRun(ctx context.Context, workflowID string) string {
	d, err := s.Client.DescribeWorkflowExecution(ctx, workflowID, "")
	if err == nil && d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return d.GetWorkflowExecutionInfo().GetExecution().GetRunId()
	}
	return ""
}

// ErrNoDraft is returned for a ticket that has never been drafted.
var ErrNoDraft = errors.New("starter: the ticket has no draft")

// DraftStatus returns a ticket's draft as its latest run sees it, while it
// runs or after it closed, with the model's progress: the workflow cannot
// see its activities' heartbeats, so the progress comes from the running
// activity's heartbeat details, read from the server.
func (s *Starter) DraftStatus(ctx context.Context, ticketID int64) (supportflow.DraftStatus, error) {
	if err := supportflow.ValidateTicketID(ticketID); err != nil {
		return supportflow.DraftStatus{}, err
	}
	id := s.IDs.Draft(ticketID)
	qctx, cancel := context.WithTimeout(ctx, cmp.Or(s.QueryTimeout, DefaultQueryTimeout))
	v, err := s.Client.QueryWorkflow(qctx, id, "", supportflow.DraftQuery)
	var deadline *serviceerror.DeadlineExceeded
	var noPoller *serviceerror.FailedPrecondition
	// The server answers a query no worker picks up with DeadlineExceeded
	// just before the caller's deadline, and, once no worker has polled
	// the queue for a while (matching.queryPollerUnavailableWindow, 20 s),
	// at once with FailedPrecondition: each means no worker answers.
	timedOut := ctx.Err() == nil && (qctx.Err() != nil || errors.As(err, &deadline) || errors.Is(err, context.DeadlineExceeded) ||
		errors.As(err, &noPoller))
	cancel()
	if err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return supportflow.DraftStatus{}, fmt.Errorf("%w: ticket %d", ErrNoDraft, ticketID)
		}
		if timedOut && s.Proposals != nil {
			// No worker picked the query up: answer from what the server
			// and PostgreSQL know, and say so.
			return s.draftFromRecords(ctx, ticketID)
		}
		return supportflow.DraftStatus{}, fmt.Errorf("starter: draft status of ticket %d: %w", ticketID, err)
	}
	var st supportflow.DraftStatus
	if err := v.Get(&st); err != nil {
		return st, fmt.Errorf("starter: decode draft status of ticket %d: %w", ticketID, err)
	}
	if supportflow.DraftTerminal(st.State) {
		return st, nil
	}
	d, err := s.Client.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		return st, nil // the state is still right; progress is best effort
	}
	st.Progress = progressOf(d.GetPendingActivities(), s.converter())
	return st, nil
}

// draftFromRecords is a draft's status without a worker: the run's state
// from Temporal's visibility (Describe needs no worker) and the proposal
// from PostgreSQL. A proposal of the running run gives its state; a run
// with none yet is gathering or drafting, by its pending activity.
func (s *Starter) draftFromRecords(ctx context.Context, ticketID int64) (supportflow.DraftStatus, error) {
	st := supportflow.DraftStatus{TicketID: ticketID, WorkerUnavailable: true}
	d, err := s.Client.DescribeWorkflowExecution(ctx, s.IDs.Draft(ticketID), "")
	if err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return st, fmt.Errorf("%w: ticket %d", ErrNoDraft, ticketID)
		}
		return st, fmt.Errorf("starter: describe the draft of ticket %d: %w", ticketID, err)
	}
	info := d.GetWorkflowExecutionInfo()
	run := strings.ReplaceAll(info.GetExecution().GetRunId(), "-", "")
	p, err := s.Proposals.LatestProposal(ctx, ticketID)
	ofThisRun := err == nil && strings.HasPrefix(p.ID, fmt.Sprintf("%d-%s-", ticketID, run))
	if err != nil && !errors.Is(err, supportflow.ErrNotFound) {
		return st, fmt.Errorf("starter: draft status of ticket %d: %w", ticketID, err)
	}
	running := info.GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	// A run's own proposal tells its state, unless the two disagree: a
	// running draft whose proposal was superseded while saving is drafting
	// again, and a closed run whose proposal still looks live was ended
	// from outside (terminated, timed out).
	switch {
	case ofThisRun && running && supportflow.DraftTerminal(p.State):
		st.State = pendingState(d.GetPendingActivities())
	case ofThisRun && !running && !supportflow.DraftTerminal(p.State):
		dp := p.DraftProposal
		st.State, st.Proposal = supportflow.DraftFailed, &dp
		st.Error = "the draft ended (" + closeStatus(info.GetStatus()) + ") with its proposal " + p.State
	case ofThisRun:
		dp := p.DraftProposal
		st.State, st.Proposal, st.Error, st.ApprovedBy = p.State, &dp, p.Error, ""
		if p.State == supportflow.DraftExecuting || p.State == supportflow.DraftDone || p.State == supportflow.DraftFailed {
			st.ApprovedBy = p.DecidedBy
			st.ExecutionWorkflowID = s.IDs.Execute(p.ID)
		}
	case running:
		st.State = pendingState(d.GetPendingActivities())
	default:
		// Closed without a proposal of its own: the model or the ticket
		// failed it.
		st.State = supportflow.DraftFailed
		st.Error = "the draft ended without a proposal (" + closeStatus(info.GetStatus()) + ")"
	}
	return st, nil
}

// pendingState is a running draft's state by its pending activity.
func pendingState(pending []*workflowpb.PendingActivityInfo) string {
	for _, pa := range pending {
		if pa.GetActivityType().GetName() == "GenerateDraft" {
			return supportflow.DraftDrafting
		}
	}
	return supportflow.DraftGathering
}

func closeStatus(s enumspb.WorkflowExecutionStatus) string {
	return strings.ToLower(strings.TrimPrefix(s.String(), "WORKFLOW_EXECUTION_STATUS_"))
}

// progressOf reads the draft's progress from its running activity (the
// one not being cancelled). Details left by an earlier attempt (the server
// keeps them across retries) are not shown as the new attempt's.
func progressOf(pending []*workflowpb.PendingActivityInfo, dc converter.DataConverter) *supportflow.DraftProgress {
	for _, pa := range pending {
		if pa.GetState() == enumspb.PENDING_ACTIVITY_STATE_CANCEL_REQUESTED {
			continue
		}
		switch pa.GetActivityType().GetName() {
		case "LoadTicket", "GenerateDraft":
		default:
			continue
		}
		p := supportflow.DraftProgress{Step: "starting"}
		if pl := pa.GetHeartbeatDetails(); len(pl.GetPayloads()) > 0 {
			var hb supportflow.DraftProgress
			if dc.FromPayloads(pl, &hb) == nil && hb.Attempt == pa.GetAttempt() {
				p = hb
			}
		}
		p.Attempt = pa.GetAttempt()
		return &p
	}
	return nil
}

// ErrStaleProposal wraps the refusal of an approval or rejection of a
// proposal that is not the draft's current one awaiting approval (a stale
// browser tab, an expired or superseded proposal, a rejected one).
var ErrStaleProposal = errors.New("starter: the proposal is not awaiting approval")

// ErrAnswerConflict wraps an approval refused because another proposal of
// the ticket answers it (a retry executing, or one that went out after
// this proposal was drafted): the ticket must be drafted again.
var ErrAnswerConflict = errors.New("starter: another proposal answers this ticket")

// ErrNoApprovals is returned by Approve and ExecuteProposal on a Starter
// without Approvals: an approval must be recorded in PostgreSQL, where
// every leg checks it, before it can run.
var ErrNoApprovals = errors.New("starter: Approvals is not set, so an approval cannot be recorded")

// Approvals records and reads approvals and the proposals they approve
// (internal/proposals.Store).
type Approvals interface {
	GetProposal(ctx context.Context, proposalID string) (supportflow.ProposalRecord, error)
	RecordApproval(ctx context.Context, p supportflow.Proposal, by, onBehalfOf string, drafted bool) (bool, error)
	RevokeApproval(ctx context.Context, proposalID string) error
	GetApproval(ctx context.Context, proposalID string) (supportflow.Approval, error)
}

// Approve approves a ticket's current proposal and returns the execution
// it started. The approval is recorded in PostgreSQL first, with the
// proposal's content digest and r.ApprovedBy (the token's name), so the
// execution's legs can check it; then the draft is told. Approving the
// same proposal again, while it executes or after it finished, returns
// the same execution with AlreadyApproved set. Any other proposal, or a
// draft not awaiting approval, is refused with an error wrapping
// ErrStaleProposal; a ticket without a draft with ErrNoDraft; a ticket
// another proposal answers with ErrAnswerConflict.
func (s *Starter) Approve(ctx context.Context, ticketID int64, r supportflow.ApproveRequest) (supportflow.ApproveResult, error) {
	var res supportflow.ApproveResult
	if err := supportflow.ValidateProposalID(r.ProposalID); err != nil {
		return res, err
	}
	if err := supportflow.ValidateTicketID(ticketID); err != nil {
		return res, err
	}
	if s.Approvals == nil {
		return res, ErrNoApprovals
	}
	if r.ApprovedBy == "" {
		return res, fmt.Errorf("%w: an approval needs the approver's name", supportflow.ErrInvalidInput)
	}
	p, err := s.Approvals.GetProposal(ctx, r.ProposalID)
	if errors.Is(err, supportflow.ErrNotFound) {
		// No such proposal: the draft says why (no draft, or not its
		// current one). Nothing is recorded, so nothing could run.
		if err := s.update(ctx, ticketID, supportflow.ApproveUpdate, r, &res); err != nil {
			return res, err
		}
		return res, fmt.Errorf("%w: proposal %s is not a proposal of ticket %d", ErrStaleProposal, r.ProposalID, ticketID)
	}
	if err != nil {
		return res, err
	}
	if p.TicketID != ticketID {
		return res, fmt.Errorf("%w: proposal %s is a proposal of ticket %d, not of ticket %d", ErrStaleProposal, p.ID, p.TicketID, ticketID)
	}
	switch p.State {
	case supportflow.DraftExecuting, supportflow.DraftDone, supportflow.DraftFailed:
		if _, err := s.Approvals.GetApproval(ctx, p.ID); err == nil {
			// Approved before: the same execution, whatever became of it.
			return supportflow.ApproveResult{ProposalID: p.ID, ExecutionWorkflowID: s.IDs.Execute(p.ID), AlreadyApproved: true}, nil
		}
	}
	_, err = s.Approvals.RecordApproval(ctx, p.DraftProposal.Proposal(), r.ApprovedBy, r.OnBehalfOf, true)
	switch {
	case errors.Is(err, supportflow.ErrNotAwaitingApproval):
		return res, fmt.Errorf("%w: %w", ErrStaleProposal, err)
	case errors.Is(err, supportflow.ErrAnswerConflict):
		return res, fmt.Errorf("%w: %w", ErrAnswerConflict, err)
	case err != nil:
		return res, err
	}
	err = s.update(ctx, ticketID, supportflow.ApproveUpdate, r, &res)
	if errors.Is(err, ErrStaleProposal) || errors.Is(err, ErrNoDraft) {
		// The draft refused it: nothing will run it, so nothing may.
		if rerr := s.Approvals.RevokeApproval(context.WithoutCancel(ctx), p.ID); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	return res, err
}

// Reject rejects a ticket's current proposal; errors as for Approve.
func (s *Starter) Reject(ctx context.Context, ticketID int64, r supportflow.RejectRequest) error {
	if err := supportflow.ValidateProposalID(r.ProposalID); err != nil {
		return err
	}
	return s.update(ctx, ticketID, supportflow.RejectUpdate, r, nil)
}

func (s *Starter) update(ctx context.Context, ticketID int64, name string, arg, result any) error {
	if err := supportflow.ValidateTicketID(ticketID); err != nil {
		return err
	}
	h, err := s.Client.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID:   s.IDs.Draft(ticketID),
		UpdateName:   name,
		Args:         []any{arg},
		WaitForStage: client.WorkflowUpdateStageCompleted,
	})
	if err == nil {
		err = h.Get(ctx, result)
	}
	if err == nil {
		return nil
	}
	var app *temporal.ApplicationError
	var nf *serviceerror.NotFound
	switch {
	case errors.As(err, &app) && app.Type() == supportflow.ErrTypeStaleProposal:
		return fmt.Errorf("%w: %s", ErrStaleProposal, app.Message())
	case errors.As(err, &nf):
		// The server answers NotFound both for a ticket never drafted and
		// for a draft that has closed (an update needs a running workflow).
		_, derr := s.Client.DescribeWorkflowExecution(ctx, s.IDs.Draft(ticketID), "")
		switch {
		case derr == nil:
			return fmt.Errorf("%w: the draft of ticket %d has closed", ErrStaleProposal, ticketID)
		case errors.As(derr, &nf):
			return fmt.Errorf("%w: ticket %d", ErrNoDraft, ticketID)
		}
		return fmt.Errorf("starter: %s on ticket %d: %w", name, ticketID, errors.Join(err, derr))
	}
	return fmt.Errorf("starter: %s on ticket %d: %w", name, ticketID, err)
}

// Supersede tells a ticket's running draft that the customer wrote again.
// It reports false when no draft is running (nothing to supersede).
func (s *Starter) Supersede(ctx context.Context, ticketID int64, act supportflow.TicketActivity) (bool, error) {
	if err := supportflow.ValidateTicketID(ticketID); err != nil {
		return false, err
	}
	err := s.Client.SignalWorkflow(ctx, s.IDs.Draft(ticketID), "", supportflow.SupersedeSignal, act)
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("starter: supersede the draft of ticket %d: %w", ticketID, err)
	}
	return true, nil
}

// EnsureScanSchedule creates, or updates to the given interval, the
// Temporal Schedule that runs ScanTickets every interval, skipping a run
// while the previous one still runs. It is safe to call at every start.
func (s *Starter) EnsureScanSchedule(ctx context.Context, interval time.Duration) error {
	return s.ensureSchedule(ctx, s.IDs.ScanSchedule(), interval, &client.ScheduleWorkflowAction{
		ID:            s.IDs.ScanAction(),
		Workflow:      supportflow.ScanTicketsWorkflow,
		Args:          []any{supportflow.ScanRequest{}},
		TaskQueue:     s.taskQueue(),
		Priority:      temporal.Priority{PriorityKey: supportflow.PriorityBackground},
		StaticSummary: "scan tickets for drafts",
	})
}

// EnsurePruneSchedule creates, or updates, the Temporal Schedule that runs
// PruneRetention once a day (overlap skip).
func (s *Starter) EnsurePruneSchedule(ctx context.Context) error {
	return s.ensureSchedule(ctx, s.IDs.PruneSchedule(), 24*time.Hour, &client.ScheduleWorkflowAction{
		ID:            s.IDs.PruneAction(),
		Workflow:      supportflow.PruneRetentionWorkflow,
		TaskQueue:     s.taskQueue(),
		Priority:      temporal.Priority{PriorityKey: supportflow.PriorityMaintenance},
		StaticSummary: "daily retention prune",
	})
}

// EnsureReconcileSchedule creates, or updates to the given interval, the
// Temporal Schedule that runs ReconcileTickets (overlap skip).
func (s *Starter) EnsureReconcileSchedule(ctx context.Context, interval time.Duration) error {
	return s.ensureSchedule(ctx, s.IDs.ReconcileSchedule(), interval, &client.ScheduleWorkflowAction{
		ID:            s.IDs.ReconcileAction(),
		Workflow:      supportflow.ReconcileTicketsWorkflow,
		Args:          []any{supportflow.ReconcileRequest{}},
		TaskQueue:     s.taskQueue(),
		Priority:      temporal.Priority{PriorityKey: supportflow.PriorityBackground},
		StaticSummary: "reconcile tickets with Zendesk's exports",
	})
}

// EnsureSchedules creates or updates every supportflow schedule: the scan
// (every scanInterval), the reconciliation (every reconcileInterval) and
// the daily retention prune.
func (s *Starter) EnsureSchedules(ctx context.Context, scanInterval, reconcileInterval time.Duration) error {
	if err := s.EnsureScanSchedule(ctx, scanInterval); err != nil {
		return err
	}
	if err := s.EnsureReconcileSchedule(ctx, reconcileInterval); err != nil {
		return err
	}
	return s.EnsurePruneSchedule(ctx)
}

// ReconcileNowWorkflowID is the workflow ID of an on-demand
// reconciliation of an account without an ID prefix (IDs.ReconcileNow);
// one runs at a time (a second request joins it).
const ReconcileNowWorkflowID = "reconcile-tickets-now"

// Reconcile runs a reconciliation now (or joins the one running on
// demand) and waits for its result.
func (s *Starter) Reconcile(ctx context.Context) (supportflow.ReconcileResult, error) {
	var res supportflow.ReconcileResult
	run, err := s.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       s.IDs.ReconcileNow(),
		TaskQueue:                s.taskQueue(),
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		Priority:                 temporal.Priority{PriorityKey: supportflow.PriorityBackground},
		StaticSummary:            "reconcile tickets with Zendesk's exports (on demand)",
	}, supportflow.ReconcileTicketsWorkflow, supportflow.ReconcileRequest{})
	if err != nil {
		return res, fmt.Errorf("starter: reconcile: %w", err)
	}
	if err := run.Get(ctx, &res); err != nil {
		return res, fmt.Errorf("starter: reconcile: %w", err)
	}
	return res, nil
}

func (s *Starter) ensureSchedule(ctx context.Context, id string, every time.Duration, action *client.ScheduleWorkflowAction) error {
	if every <= 0 {
		return fmt.Errorf("%w: schedule %s's interval %s must be positive", supportflow.ErrInvalidInput, id, every)
	}
	spec := client.ScheduleSpec{Intervals: []client.ScheduleIntervalSpec{{Every: every}}}
	_, err := s.Client.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID:      id,
		Spec:    spec,
		Action:  action,
		Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
	})
	if !errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		if err != nil {
			return fmt.Errorf("starter: create schedule %s: %w", id, err)
		}
		return nil
	}
	h := s.Client.ScheduleClient().GetHandle(ctx, id)
	err = h.Update(ctx, client.ScheduleUpdateOptions{DoUpdate: func(in client.ScheduleUpdateInput) (*client.ScheduleUpdate, error) {
		sch := in.Description.Schedule
		sch.Spec = &spec
		sch.Action = action
		if sch.Policy == nil {
			sch.Policy = &client.SchedulePolicies{}
		}
		sch.Policy.Overlap = enumspb.SCHEDULE_OVERLAP_POLICY_SKIP
		return &client.ScheduleUpdate{Schedule: &sch}, nil
	}})
	if err != nil {
		return fmt.Errorf("starter: update schedule %s: %w", id, err)
	}
	return nil
}

// StartEvaluation starts an evaluation run (workflow ID eval/{runID}); a
// run with the same ID that is still going is joined.
func (s *Starter) StartEvaluation(ctx context.Context, req supportflow.EvaluationRequest) (string, error) {
	if err := req.Validate(); err != nil {
		return "", err
	}
	id := s.IDs.Evaluation(req.RunID)
	_, err := s.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                s.taskQueue(),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		Priority:                 temporal.Priority{PriorityKey: supportflow.PriorityBackground},
		StaticSummary:            "evaluate drafts, run " + req.RunID,
	}, supportflow.EvaluateDraftsWorkflow, req)
	if err != nil {
		return "", fmt.Errorf("starter: start evaluation %s: %w", req.RunID, err)
	}
	return id, nil
}

// EvaluationStatus returns an evaluation run's progress (or summary).
func (s *Starter) EvaluationStatus(ctx context.Context, runID string) (supportflow.EvaluationStatus, error) {
	var st supportflow.EvaluationStatus
	if err := supportflow.ValidateProposalID(runID); err != nil {
		return st, err
	}
	v, err := s.Client.QueryWorkflow(ctx, s.IDs.Evaluation(runID), "", supportflow.EvaluationQuery)
	if err != nil {
		return st, fmt.Errorf("starter: evaluation %s: %w", runID, err)
	}
	return st, v.Get(&st)
}
