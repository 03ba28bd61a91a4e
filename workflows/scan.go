package workflows

import (
	"errors"
	"fmt"
	"strconv"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/policy"
)

// ScanTickets starts a DraftReply for each mirrored ticket that needs one
// (proposals.Store.DraftCandidates: open, the customer spoke last, no proposal has
// seen that comment). Drafts are started as abandoned children with the
// draft's own workflow ID, so a ticket whose draft is running (started by
// a click or an earlier scan) is left alone: running the scan twice starts
// nothing twice. A Temporal Schedule runs it every ScanInterval, skipping
// a run while the previous one is still going.
func (w *Workflows) ScanTickets(ctx workflow.Context, req supportflow.ScanRequest) (supportflow.ScanResult, error) {
	limit := req.Limit
	if limit == 0 {
		limit = supportflow.DefaultScanLimit
	}
	if limit < 0 || limit > supportflow.MaxScanLimit {
		err := errors.New("scan limit must be 0-" + strconv.Itoa(supportflow.MaxScanLimit))
		setDetails(ctx, "scan", "invalid input")
		return supportflow.ScanResult{}, policy.AppError(err.Error(), supportflow.ErrTypeInvalidInput, err)
	}
	d := w.durations()
	// The drafts are the scan's account's: the prefix comes from the
	// scan's own ID ({prefix}/scan-tickets-{time}), which its history
	// holds, so a replay starts the same children.
	ids := supportflow.ScanIDsOf(workflow.GetInfo(ctx).WorkflowExecution.ID)
	var res supportflow.ScanResult
	setDetails(ctx, "scan", "finding draft candidates")
	fctx := w.activityOptions(ctx, policy.KindLedger, d.Lease, false, fmt.Sprintf("find draft candidates, limit %d", limit))
	if err := call(fctx, supportflow.FindDraftCandidates, limit).Get(ctx, &res.Candidates); err != nil {
		return res, err
	}
	setDetails(ctx, "scan", "starting "+plural(len(res.Candidates), "draft"))
	children := make([]workflow.ChildWorkflowFuture, len(res.Candidates))
	for i, ticket := range res.Candidates {
		cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
			WorkflowID: ids.Draft(ticket),
			// Below a draft a person asked for, above the scan itself.
			Priority:              temporal.Priority{PriorityKey: supportflow.PriorityScannedDraft},
			ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
			WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
			TypedSearchAttributes: temporal.NewSearchAttributes(
				ticketKey.ValueSet(strconv.FormatInt(ticket, 10)), stateKey.ValueSet(supportflow.DraftGathering)),
		})
		children[i] = workflow.ExecuteChildWorkflow(cctx, supportflow.DraftReplyWorkflow, supportflow.DraftRequest{TicketID: ticket, Reason: "scan"})
	}
	for i, ticket := range res.Candidates {
		err := children[i].GetChildWorkflowExecution().Get(ctx, nil)
		var running *temporal.ChildWorkflowExecutionAlreadyStartedError
		switch {
		case err == nil:
			res.Started = append(res.Started, ticket)
		case errors.As(err, &running):
			res.Running = append(res.Running, ticket)
		default:
			workflow.GetLogger(ctx).Error("starting a draft failed", "ticket_id", ticket, "error_type", policy.ErrorClass(err))
			res.Failed = append(res.Failed, ticket)
		}
	}
	setDetails(ctx, "scan", "done", plural(len(res.Candidates), "candidate"), fmt.Sprintf("%d started", len(res.Started)),
		fmt.Sprintf("%d already running", len(res.Running)), fmt.Sprintf("%d failed to start", len(res.Failed)))
	return res, nil
}
