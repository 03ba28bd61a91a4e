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

// Register registers every workflow under its stable name, with its
// versioning behavior (used when the worker runs Worker Deployment
// Versioning, ignored otherwise):
//
//   - Pinned: a run stays on the build that started it, to its end. The
//     draft (which waits up to 72 h for a person), the execution, the scan,
//     the evaluation, the prune and the reconciliation: a deploy never
//     replays them on code they did not start on, and the old build keeps
//     running until they drain (docs/versioning.md).
//   - Auto-upgrade: a run moves to the deployment's current build at its
//     next workflow task. The enrichment loop, which lives as long as its
//     ticket (continuing as new) and would otherwise keep an old build
//     alive for ever; its changes are guarded by version markers
//     (versions.go).
//
// https://docs.temporal.io/worker-versioning#versioning-behaviors
func (w *Workflows) Register(r worker.WorkflowRegistry) {
	pinned, auto := workflow.VersioningBehaviorPinned, workflow.VersioningBehaviorAutoUpgrade
	for _, wf := range []struct {
		fn       any
		name     string
		behavior workflow.VersioningBehavior
	}{
		{w.ExecuteProposal, supportflow.ExecuteProposalWorkflow, pinned},
		{w.DraftReply, supportflow.DraftReplyWorkflow, pinned},
		{w.ScanTickets, supportflow.ScanTicketsWorkflow, pinned},
		{w.EvaluateDrafts, supportflow.EvaluateDraftsWorkflow, pinned},
		{w.EnrichTicket, supportflow.EnrichTicketWorkflow, auto},
		{w.PruneRetention, supportflow.PruneRetentionWorkflow, pinned},
		{w.ReconcileTickets, supportflow.ReconcileTicketsWorkflow, pinned},
	} {
		r.RegisterWorkflowWithOptions(wf.fn, workflow.RegisterOptions{Name: wf.name, VersioningBehavior: wf.behavior})
	}
}

func (w *Workflows) durations() policy.Durations { return w.Durations.Fill() }

// activityOptions arms one activity call: a start-to-close deadline per
// attempt (time waiting in the queue does not count), the heartbeat
// timeout, the one retry policy with the kind's attempt budget, and the
// summary the Web UI shows for the call (IDs and counts only: see
// metadata.go).
func (w *Workflows) activityOptions(ctx workflow.Context, kind policy.Kind, startToClose time.Duration, heartbeat bool, summary string) workflow.Context {
	d := w.durations()
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: startToClose,
		RetryPolicy:         d.RetryPolicy(kind),
		Summary:             summary,
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
		setDetails(ctx, "invalid input") // not even its ID is known to be one
		return statuses, policy.AppError(err.Error(), supportflow.ErrTypeInvalidInput, err)
	}
	d := w.durations()
	log := workflow.GetLogger(ctx)
	setDetails(ctx, "proposal "+p.ID, plural(len(p.Actions), "action"), "executing")

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
		in := supportflow.ActionInput{Key: st.Key, Action: act, ReplyLast: replyLast}
		step := func(what string) { actionDetails(ctx, p, i, what) }
		if fromReceivers {
			if err := w.executeAction(ctx, p.ID, i, in, statuses, step); err != nil {
				step(endWords(st))
				w.markProposal(ctx, p.ID, supportflow.DraftFailed, st.Reason)
				return statuses, err
			}
			continue
		}
		reply := func() error {
			var r supportflow.PostReplyResult
			step("executing: " + zendeskWords(act))
			actx := w.activityOptions(ctx, policy.KindZendesk, PostReplyDeadline(d), true, onTicket(zendeskWords(act), act.TicketID))
			err := call(actx, supportflow.PostReply, in).Get(ctx, &r)
			if err == nil {
				st.CommentID = r.CommentID
				log.Info("reply on ticket", "action_key", st.Key, "comment_id", r.CommentID, "source", r.Source)
			}
			return err
		}
		cancelLeg := func() error {
			var r supportflow.CancelResult
			step("executing: " + cancelWords(act))
			actx := w.activityOptions(ctx, policy.KindSubscriptions, CancelSubscriptionsDeadline(d, len(act.CancelSubscriptions)), true, onTicket(cancelWords(act), act.TicketID))
			err := call(actx, supportflow.CancelSubscriptions, in).Get(ctx, &r)
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
		step("settling")
		settleSummary := onTicket("settle action", act.TicketID)
		sctx := w.activityOptions(ctx, policy.KindLedger, d.Lease, false, settleSummary)
		if temporal.IsCanceledError(legErr) && workflow.GetVersion(ctx, versionSettleOnCancel, workflow.DefaultVersion, 1) == 1 {
			// Cancelled (an operator, or the parent): the action must still
			// leave 'applying', so settle it on a context the cancellation
			// does not reach.
			dctx, _ := workflow.NewDisconnectedContext(ctx)
			sctx = w.activityOptions(dctx, policy.KindLedger, d.Lease, false, settleSummary)
		}
		settle := supportflow.SettleInput{Key: st.Key, TicketID: act.TicketID, Error: st.Error,
			HeldBack: cancelFailed && act.Comment != nil}
		if err := call(sctx, supportflow.SettleAction, settle).Get(ctx, &state); err != nil {
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
			note := supportflow.ActionInput{Key: attentionKey(p.ID, i), Action: supportflow.Action{TicketID: act.TicketID,
				Comment: &supportflow.Comment{Body: attentionNote(st), Public: false}}}
			step("posting the agents' note")
			nctx := w.activityOptions(ctx, policy.KindZendesk, PostReplyDeadline(d), true, onTicket("post attention note", act.TicketID))
			if err := call(nctx, supportflow.PostReply, note).Get(ctx, nil); err != nil {
				log.Error("the note telling the agents failed", "action_key", st.Key, "error_type", policy.ErrorClass(err))
			}
			if state == supportflow.StateNeedsAttention && workflow.GetVersion(ctx, versionNeedsAttentionAttr, workflow.DefaultVersion, 1) == 1 {
				// Operators find these in the Web UI: SupportflowState = needs_attention.
				_ = workflow.UpsertTypedSearchAttributes(ctx, stateKey.ValueSet(supportflow.StateNeedsAttention))
			}
		}
		step(endWords(st))
		return statuses, policy.AppError(
			fmt.Sprintf("action %s ended %s: %s", st.Key, state, st.Error), supportflow.ErrTypeActionFailed, legErr, statuses)
	}
	if fromReceivers {
		w.markProposal(ctx, p.ID, supportflow.DraftDone, "")
	}
	setDetails(ctx, "proposal "+p.ID, plural(len(p.Actions), "action"), "done")
	return statuses, nil
}

// actionDetails sets an execution's current details while it works on
// action i: "proposal P · action 1 of 2 · ticket 123 · executing: post reply".
func actionDetails(ctx workflow.Context, p supportflow.Proposal, i int, what string) {
	setDetails(ctx, "proposal "+p.ID, fmt.Sprintf("action %d of %d", i+1, len(p.Actions)), ticketPart(p.Actions[i].TicketID), what)
}

// endWords is how an action that did not apply ended, in words: its state
// and, settled from the receivers, the classified reason (never a
// service's text).
func endWords(st *supportflow.ActionStatus) string {
	words := stateWords(nil, st.State)
	if st.Reason != "" {
		words += ": " + st.Reason
	}
	return words
}

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
