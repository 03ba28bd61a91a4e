// Package workflows holds supportflow's Temporal workflows. They are
// deterministic: every side effect is an activity, every timer a workflow
// timer, and every duration comes from policy.Durations given at
// registration.
package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/activities"
	"github.com/supportflow/supportflow/internal/policy"
)

// Workflows carries the durations its workflows arm. Register it with
// Register; the zero value uses the product's defaults.
type Workflows struct {
	Durations policy.Durations
	// EnrichmentMode is supportflow.EnrichmentShadow (the default) or
	// EnrichmentLive.
	EnrichmentMode string
}

// Register registers every workflow under its stable name.
func (w *Workflows) Register(r worker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(w.ExecuteProposal, workflow.RegisterOptions{Name: supportflow.ExecuteProposalWorkflow})
	r.RegisterWorkflowWithOptions(w.DraftReply, workflow.RegisterOptions{Name: supportflow.DraftReplyWorkflow})
	r.RegisterWorkflowWithOptions(w.ScanTickets, workflow.RegisterOptions{Name: supportflow.ScanTicketsWorkflow})
	r.RegisterWorkflowWithOptions(w.EvaluateDrafts, workflow.RegisterOptions{Name: supportflow.EvaluateDraftsWorkflow})
	r.RegisterWorkflowWithOptions(w.EnrichTicket, workflow.RegisterOptions{Name: supportflow.EnrichTicketWorkflow})
	r.RegisterWorkflowWithOptions(w.PruneRetention, workflow.RegisterOptions{Name: supportflow.PruneRetentionWorkflow})
	r.RegisterWorkflowWithOptions(w.ReconcileTickets, workflow.RegisterOptions{Name: supportflow.ReconcileTicketsWorkflow})
}

func (w *Workflows) durations() policy.Durations { return w.Durations.Fill() }

// a is the typed nil through which workflows name activities.
var a *activities.Activities

// activityOptions arms one activity call: a start-to-close deadline per
// attempt (time waiting in the queue does not count), the heartbeat
// timeout, and the one retry policy with the kind's attempt budget.
func (w *Workflows) activityOptions(ctx workflow.Context, kind policy.Kind, startToClose time.Duration, heartbeat bool) workflow.Context {
	d := w.durations()
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: startToClose,
		RetryPolicy:         d.RetryPolicy(kind),
	}
	if heartbeat {
		opts.HeartbeatTimeout = d.HeartbeatTimeout
	}
	// The workflow's own queue unless the work calls a rate-limited
	// service: named either way, so a context derived from a routed one
	// never carries its queue to other work. (The same command as leaving
	// it empty.)
	opts.TaskQueue = workflow.GetInfo(ctx).TaskQueueName
	if r := policy.ResourceOf(kind); r != "" && workflow.GetVersion(ctx, versionResourceQueues, workflow.DefaultVersion, 1) == 1 {
		// Work on a rate-limited service waits in that service's queue,
		// where the fleet-wide rate applies.
		opts.TaskQueue = policy.ResourceQueue(workflow.GetInfo(ctx).TaskQueueName, r)
	}
	return workflow.WithActivityOptions(ctx, opts)
}

// versionResourceQueues marks the change that runs each rate-limited
// service's activities on its own task queue.
const versionResourceQueues = "resource-queues"

// PostReplyDeadline is PostReply's start-to-close timeout: it reads the
// ticket's stamp, may search its audits, and posts, each bounded by the
// Zendesk call timeout, plus a margin for its ledger writes. (A 409 starts
// the three again; an attempt that runs out is retried.)
func PostReplyDeadline(d policy.Durations) time.Duration {
	d = d.Fill()
	return 3*d.ZendeskCallTimeout + d.DeadlineMargin
}

// CancelSubscriptionsDeadline is CancelSubscriptions' start-to-close
// timeout: its calls are sequential, each bounded by the subscription call
// timeout, plus a margin for the ledger writes.
func CancelSubscriptionsDeadline(d policy.Durations, subscriptions int) time.Duration {
	d = d.Fill()
	return time.Duration(subscriptions)*d.SubscriptionCallTimeout + d.DeadlineMargin
}

// ExecuteProposal runs an approved proposal's actions in order, each
// exactly once: the cancellation legs (CancelSubscriptions), then the
// Zendesk legs, ticket update and reply in one update (PostReply), only
// once every cancellation succeeded. Its workflow ID is ExecuteWorkflowID(proposal ID),
// started with conflict policy USE_EXISTING so a second approval joins it.
//
// An action whose last attempt fails is settled in the ledger
// (partial_failure or failed) and the workflow fails with an ActionFailed
// error; later actions are not started, because a reply may promise what
// an earlier action did. Bad input fails at once with InvalidInput and
// writes nothing. The "actions" query returns every action's state.
func (w *Workflows) ExecuteProposal(ctx workflow.Context, p supportflow.Proposal) ([]supportflow.ActionStatus, error) {
	statuses := make([]supportflow.ActionStatus, len(p.Actions))
	for i, act := range p.Actions {
		statuses[i] = supportflow.ActionStatus{Key: supportflow.ActionKey(p.ID, i), TicketID: act.TicketID, State: supportflow.StatePending}
	}
	if err := workflow.SetQueryHandler(ctx, supportflow.ActionsQuery, func() ([]supportflow.ActionStatus, error) {
		return statuses, nil
	}); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return statuses, temporal.NewNonRetryableApplicationError(err.Error(), supportflow.ErrTypeInvalidInput, err)
	}
	d := w.durations()
	log := workflow.GetLogger(ctx)

	// Truthful order: cancellations first, the reply only after all of
	// them succeeded. Histories from before post the reply first.
	replyLast := workflow.GetVersion(ctx, versionReplyLast, workflow.DefaultVersion, 1) == 1
	// What the execution says was done comes from the ledger after a
	// settle that asked the receivers; histories from before settle from
	// the ledger alone.
	fromReceivers := workflow.GetVersion(ctx, versionSettleFromReceivers, workflow.DefaultVersion, 1) == 1

	for i, act := range p.Actions {
		st := &statuses[i]
		st.State = supportflow.StateApplying
		in := activities.ActionInput{Key: st.Key, Action: act, ReplyLast: replyLast}
		if fromReceivers {
			if err := w.executeAction(ctx, p.ID, i, in, statuses); err != nil {
				w.markProposal(ctx, p.ID, supportflow.DraftFailed, st.Reason)
				return statuses, err
			}
			continue
		}
		reply := func() error {
			var r activities.PostReplyResult
			actx := w.activityOptions(ctx, policy.KindZendesk, PostReplyDeadline(d), true)
			err := workflow.ExecuteActivity(actx, a.PostReply, in).Get(ctx, &r)
			if err == nil {
				st.CommentID = r.CommentID
				log.Info("reply on ticket", "action_key", st.Key, "comment_id", r.CommentID, "source", r.Source)
			}
			return err
		}
		cancelLeg := func() error {
			var r activities.CancelResult
			actx := w.activityOptions(ctx, policy.KindSubscriptions, CancelSubscriptionsDeadline(d, len(act.CancelSubscriptions)), true)
			err := workflow.ExecuteActivity(actx, a.CancelSubscriptions, in).Get(ctx, &r)
			var app *temporal.ApplicationError
			if err != nil && errors.As(err, &app) && app.HasDetails() {
				_ = app.Details(&r) // a refusal carries what was cancelled
			}
			st.Cancelled = r.Cancelled
			return err
		}
		var legErr error
		cancelFailed := false
		if replyLast {
			if len(act.CancelSubscriptions) > 0 {
				legErr = cancelLeg()
				cancelFailed = legErr != nil
			}
			if legErr == nil && act.HasZendeskLeg() {
				legErr = reply()
			}
		} else {
			if act.HasZendeskLeg() {
				legErr = reply()
			}
			if legErr == nil && len(act.CancelSubscriptions) > 0 {
				legErr = cancelLeg()
			}
		}
		if legErr == nil {
			st.State = supportflow.StateApplied
			continue
		}
		st.Error = errorMessage(legErr)
		var state string
		sctx := w.activityOptions(ctx, policy.KindLedger, d.Lease, false)
		if temporal.IsCanceledError(legErr) && workflow.GetVersion(ctx, versionSettleOnCancel, workflow.DefaultVersion, 1) == 1 {
			// Cancelled (an operator, or the parent): the action must still
			// leave 'applying', so settle it on a context the cancellation
			// does not reach.
			dctx, _ := workflow.NewDisconnectedContext(ctx)
			sctx = w.activityOptions(dctx, policy.KindLedger, d.Lease, false)
		}
		settle := activities.SettleInput{Key: st.Key, TicketID: act.TicketID, Error: st.Error,
			HeldBack: cancelFailed && act.Comment != nil}
		if err := workflow.ExecuteActivity(sctx, a.SettleAction, settle).Get(ctx, &state); err != nil {
			return statuses, err
		}
		st.State = state
		if state == supportflow.StateApplied {
			// A stale attempt finished the work after all.
			st.Error = ""
			continue
		}
		if cancelFailed && act.Comment != nil && act.Comment.Public {
			// The customer was not told; the agents must be. A private
			// note on the ticket, itself exactly once through the ledger.
			note := activities.ActionInput{Key: attentionKey(p.ID, i), Action: supportflow.Action{TicketID: act.TicketID,
				Comment: &supportflow.Comment{Body: attentionNote(st), Public: false}}}
			nctx := w.activityOptions(ctx, policy.KindZendesk, PostReplyDeadline(d), true)
			if err := workflow.ExecuteActivity(nctx, a.PostReply, note).Get(ctx, nil); err != nil {
				log.Error("the note telling the agents failed", "action_key", st.Key, "error", err)
			}
			if state == supportflow.StateNeedsAttention && workflow.GetVersion(ctx, versionNeedsAttentionAttr, workflow.DefaultVersion, 1) == 1 {
				// Operators find these in the Web UI: SupportflowState = needs_attention.
				_ = workflow.UpsertTypedSearchAttributes(ctx, stateKey.ValueSet(supportflow.StateNeedsAttention))
			}
		}
		return statuses, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("action %s ended %s: %s", st.Key, state, st.Error), supportflow.ErrTypeActionFailed, legErr, statuses)
	}
	if fromReceivers {
		w.markProposal(ctx, p.ID, supportflow.DraftDone, "")
	}
	return statuses, nil
}

// versionNeedsAttentionAttr marks the search attribute an execution
// sets when it ends needs_attention.
const versionNeedsAttentionAttr = "execute-needs-attention-attr"

// versionReplyLast marks the truthful order: cancellations, then the reply.
const versionReplyLast = "execute-reply-last"

// attentionKey is the ledger key of the private note that tells the
// agents an action's reply was held back (one per action, whatever the
// proposal ID's length).
func attentionKey(proposalID string, index int) string {
	sum := sha256.Sum256([]byte(proposalID))
	return supportflow.ActionKey("attention-"+hex.EncodeToString(sum[:12]), index)
}

// attentionNote is that note's text.
func attentionNote(st *supportflow.ActionStatus) string {
	return fmt.Sprintf("supportflow did not send the approved reply (action %s): a cancellation failed for good, so the reply "+
		"would have promised what did not happen. Cancelled: %v. Error: %s. The customer has not been answered; please follow up.",
		st.Key, st.Cancelled, st.Error)
}

// versionSettleOnCancel marks the change that settles an action when its
// execution is cancelled (it used to stay 'applying').
const versionSettleOnCancel = "execute-settle-on-cancel"

// errorMessage is the innermost cause's message, which is what an operator
// needs ("HTTP 404: ticket not found"), not the activity-task wrapper.
func errorMessage(err error) string {
	var app *temporal.ApplicationError
	if errors.As(err, &app) {
		return app.Error()
	}
	var timeout *temporal.TimeoutError
	if errors.As(err, &timeout) {
		return timeout.Error()
	}
	return err.Error()
}
