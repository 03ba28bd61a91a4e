package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/policy"
)

// executeAction runs one action of an execution that settles from the
// receivers: the cancellations, then (only once every one of them is
// done) the ticket update and reply. On a failure it settles the action
// and returns an ActionFailed error carrying statuses; nil when the action
// ends applied.
//
// step sets the run's current details to what the action is doing.
func (w *Workflows) executeAction(ctx workflow.Context, proposalID string, i int, in supportflow.ActionInput, statuses []supportflow.ActionStatus, step func(string)) error {
	d := w.durations()
	log := workflow.GetLogger(ctx)
	st, act := &statuses[i], in.Action
	var cancelErr, replyErr error
	if len(act.CancelSubscriptions) > 0 {
		var r supportflow.CancelResult
		step("executing: " + cancelWords(act))
		cctx := w.activityOptions(ctx, policy.KindSubscriptions, CancelSubscriptionsDeadline(d, len(act.CancelSubscriptions)), true, onTicket(cancelWords(act), act.TicketID))
		cancelErr = call(cctx, supportflow.CancelSubscriptions, in).Get(ctx, &r)
		st.Cancelled = r.Cancelled
		if cancelErr != nil && !isRefusal(cancelErr) && !temporal.IsCanceledError(cancelErr) {
			// Retries spent on failures that may have landed (5xx, a
			// timeout): every cancellation may be done with only its answer
			// lost. Ask the service before giving up on the reply.
			step("asking the subscription service what landed")
			res, err := w.settleLegs(ctx, supportflow.SettleLegsInput{Key: st.Key, TicketID: act.TicketID, ResolveOnly: true}, len(act.CancelSubscriptions), false,
				onTicket("check cancellations", act.TicketID))
			if err == nil {
				st.Cancelled = res.Cancelled
				if res.AllCancelled {
					log.Info("every cancellation had landed; its answers were lost", "action_key", st.Key)
					cancelErr = nil
				}
			}
		}
	}
	zendeskTried := false
	if cancelErr == nil && act.HasZendeskLeg() {
		zendeskTried = true
		var r supportflow.PostReplyResult
		step("executing: " + zendeskWords(act))
		zctx := w.activityOptions(ctx, policy.KindZendesk, PostReplyDeadline(d), true, onTicket(zendeskWords(act), act.TicketID))
		replyErr = call(zctx, supportflow.PostReply, in).Get(ctx, &r)
		if replyErr == nil {
			st.CommentID = r.CommentID
			log.Info("reply on ticket", "action_key", st.Key, "comment_id", r.CommentID, "source", r.Source)
		}
	}
	legErr := cancelErr
	if legErr == nil {
		legErr = replyErr
	}
	if legErr == nil {
		st.State = supportflow.StateApplied
		return nil
	}
	st.Error, st.Reason = errorMessage(legErr), failureReason(legErr)
	if isNotApproved(legErr) {
		// Nothing was written and nothing may be: no settle, no note.
		st.State = supportflow.StateFailed
		return policy.AppError(
			fmt.Sprintf("action %s was not run: %s", st.Key, st.Error), supportflow.ErrTypeNotApproved, legErr, statuses)
	}
	sctx := ctx
	if temporal.IsCanceledError(legErr) {
		// Cancelled (an operator): the action must still leave 'applying'.
		sctx, _ = workflow.NewDisconnectedContext(ctx)
	}
	heldBack := cancelErr != nil && act.Comment != nil
	settle := supportflow.SettleLegsInput{Key: st.Key, TicketID: act.TicketID, Error: st.Error, HeldBack: heldBack,
		ZendeskMayHaveLanded: zendeskTried && !isRefusal(replyErr)}
	step("settling")
	settleSummary := onTicket("settle action", act.TicketID)
	res, err := w.settleLegs(sctx, settle, len(act.CancelSubscriptions), true, settleSummary)
	if err == nil && res.NeedsFence {
		// A write of ours may have landed or still be in flight. Any write
		// to the ticket moves its updated_stamp, so one still in flight is
		// refused; the agents' note is that write. Then the audits say.
		// Zendesk's updated_stamp has whole seconds: the fence must land
		// in a later second than any stamp an attempt of ours read.
		step("fencing the ticket")
		_ = workflow.Sleep(sctx, fencePause)
		noteErr := w.postNote(sctx, fenceKey(proposalID, workflow.GetInfo(ctx).WorkflowExecution.RunID, i), act.TicketID, fenceNote(st.Key, st.Reason), "fence note")
		if noteErr == nil {
			settle.Fenced = true
		} else {
			log.Error("the fence note could not be written; the reply's outcome stays unknown", "action_key", st.Key, "error_type", policy.ErrorClass(noteErr))
			settle.GiveUp = true
		}
		step("settling")
		res, err = w.settleLegs(sctx, settle, len(act.CancelSubscriptions), true, settleSummary)
	}
	if err != nil {
		return err
	}
	st.State, st.Cancelled, st.NotCancelled, st.Unknown = res.State, res.Cancelled, res.NotCancelled, res.Unknown
	if res.ReplyLanded {
		st.CommentID = res.CommentID
	}
	if res.State == supportflow.StateApplied {
		st.Error, st.Reason = "", ""
		log.Info("the action had landed after all", "action_key", st.Key)
		return nil
	}
	if res.State == supportflow.StateNeedsAttention {
		if heldBack && act.Comment.Public {
			// The customer was not told; the agents must be.
			// Keyed by what it says: a retry with the same outcome finds its
			// note applied and does not repeat it; one with another outcome
			// writes its own.
			body := attentionNoteFromLedger(st)
			sum := sha256.Sum256([]byte(body))
			noteKey := attentionKey(proposalID+"/"+hex.EncodeToString(sum[:8]), i)
			step("posting the agents' note")
			if err := w.postNote(sctx, noteKey, act.TicketID, body, "attention note"); err != nil {
				log.Error("the note telling the agents failed", "action_key", st.Key, "error_type", policy.ErrorClass(err))
			}
		}
		// Operators find these in the Web UI: SupportflowState = needs_attention.
		_ = workflow.UpsertTypedSearchAttributes(sctx, stateKey.ValueSet(supportflow.StateNeedsAttention))
	}
	return policy.AppError(
		fmt.Sprintf("action %s ended %s: %s", st.Key, res.State, st.Reason), supportflow.ErrTypeActionFailed, legErr, statuses)
}

// settleLegs runs SettleLegs. Bounded, it keeps trying for as long as
// UnresolvedLegBound while a receiver cannot be read, then settles with
// GiveUp (needs_attention with the leg still unknown, and an alert).
// summary names the call in the Web UI.
func (w *Workflows) settleLegs(ctx workflow.Context, in supportflow.SettleLegsInput, subscriptions int, bounded bool, summary string) (supportflow.SettleLegsResult, error) {
	d := w.durations()
	opts := workflow.ActivityOptions{
		// A status read and a repeated cancel per subscription, and an
		// audit search, each bounded by its call timeout.
		StartToCloseTimeout: time.Duration(2*subscriptions)*d.SubscriptionCallTimeout + d.ZendeskCallTimeout + d.DeadlineMargin,
		RetryPolicy:         d.RetryPolicy(policy.KindLedger),
		TaskQueue:           workflow.GetInfo(ctx).TaskQueueName,
		Summary:             summary,
	}
	if bounded {
		opts.ScheduleToCloseTimeout = d.UnresolvedLegBound
		opts.RetryPolicy.MaximumAttempts = 0 // until the bound
	} else {
		// A quick look before the reply: long enough to wait out the lease
		// a last attempt whose call may have landed keeps, no longer.
		opts.RetryPolicy.MaximumAttempts = 0
		opts.ScheduleToCloseTimeout = 2*d.Lease + opts.StartToCloseTimeout
	}
	var res supportflow.SettleLegsResult
	err := call(workflow.WithActivityOptions(ctx, opts), supportflow.SettleLegs, in).Get(ctx, &res)
	if err == nil || !bounded || in.GiveUp {
		return res, err
	}
	var app *temporal.ApplicationError
	if errors.As(err, &app) && app.NonRetryable() {
		return res, err
	}
	workflow.GetLogger(ctx).Error("a leg's outcome could not be learned within the bound; ending needs_attention",
		"action_key", in.Key, "bound", d.UnresolvedLegBound, "error_type", policy.ErrorClass(err))
	in.GiveUp = true
	opts.Summary = summary + " (giving up)"
	err = call(workflow.WithActivityOptions(ctx, opts), supportflow.SettleLegs, in).Get(ctx, &res)
	return res, err
}

// postNote posts one of supportflow's private notes to the agents,
// exactly once through the ledger; a note that fails for good is settled,
// so it never stays applying. what names the note in the Web UI ("fence
// note").
func (w *Workflows) postNote(ctx workflow.Context, key string, ticketID int64, body, what string) error {
	d := w.durations()
	note := supportflow.ActionInput{Key: key, Action: supportflow.Action{TicketID: ticketID,
		Comment: &supportflow.Comment{Body: body, Public: false}}}
	nctx := w.activityOptions(ctx, policy.KindZendesk, PostReplyDeadline(d), true, onTicket("post "+what, ticketID))
	err := call(nctx, supportflow.PostReply, note).Get(ctx, nil)
	if err == nil {
		return nil
	}
	settle := supportflow.SettleLegsInput{Key: key, TicketID: ticketID, Error: errorMessage(err), Fenced: true,
		ZendeskMayHaveLanded: !isRefusal(err)}
	if _, serr := w.settleLegs(ctx, settle, 0, true, onTicket("settle "+what, ticketID)); serr != nil {
		workflow.GetLogger(ctx).Error("settling the note failed", "action_key", key, "error_type", policy.ErrorClass(serr))
	}
	return err
}

// markProposal records the execution's end on its proposal (done or
// failed), so a retried proposal ends as its execution did. A proposal the
// app composed has no row: nothing to mark.
func (w *Workflows) markProposal(ctx workflow.Context, proposalID, state, reason string) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	mctx := w.activityOptions(dctx, policy.KindLedger, w.durations().Lease, false, "mark proposal "+stateWords(draftStateWords, state))
	in := supportflow.ProposalStateInput{ProposalID: proposalID, State: state, Error: reason}
	if err := call(mctx, supportflow.SetProposalState, in).Get(dctx, nil); err != nil {
		workflow.GetLogger(ctx).Error("recording the proposal's state failed", "proposal_id", proposalID, "state", state, "error_type", policy.ErrorClass(err))
	}
}

// isRefusal reports a leg that failed for good (a permanent refusal, bad
// input, no approval): nothing of its last attempt can land.
func isRefusal(err error) bool {
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || !app.NonRetryable() {
		return false
	}
	switch app.Type() {
	case supportflow.ErrTypeRejected, supportflow.ErrTypeInvalidInput, supportflow.ErrTypeNotApproved:
		return true
	}
	return false
}

func isNotApproved(err error) bool {
	var app *temporal.ApplicationError
	return errors.As(err, &app) && app.Type() == supportflow.ErrTypeNotApproved
}

// failureReason classifies a leg's failure in a few words, for the notes,
// the redraft's prompt and the proposal: never a service's own error text,
// which may quote anything (customer text included).
func failureReason(err error) string {
	var (
		timeout *temporal.TimeoutError
		app     *temporal.ApplicationError
	)
	switch {
	case temporal.IsCanceledError(err):
		return "the execution was cancelled"
	case errors.As(err, &timeout):
		return "a service did not answer in time"
	case errors.As(err, &app):
		switch app.Type() {
		case supportflow.ErrTypeRejected:
			return "a service refused it for good"
		case supportflow.ErrTypeNotApproved:
			return "it was not approved"
		case supportflow.ErrTypeInvalidInput:
			return "its input was invalid"
		case supportflow.ErrTypeLeaseHeld, supportflow.ErrTypeLostClaim:
			return "an earlier attempt was still at work on it"
		}
	}
	return "a service kept failing"
}

// fencePause is how long the fence waits after the last attempt, so its
// write moves the ticket's updated_at (whole seconds) past every stamp an
// attempt read.
const fencePause = 2 * time.Second

// fenceKey is the ledger key of the note that fences an action's Zendesk
// write (its own key space, beside the attention note's). It is one per
// execution run: a later run of the same proposal (a re-approval, a retry)
// must write a fence of its own, never find an earlier run's note applied
// and take that for a fence.
func fenceKey(proposalID, runID string, index int) string {
	return attentionKey("fence/"+proposalID+"/"+runID, index)
}

// fenceNote is the fence note's text: what happened, in classified words.
func fenceNote(actionKey, reason string) string {
	return fmt.Sprintf("supportflow gave up on action %s (%s) without learning whether its update reached this ticket. "+
		"This note settles it: an update of the action still in flight can no longer land. "+
		"Whether it had landed is recorded on the action (GET /actions/%s).", actionKey, reason, actionKey)
}

// attentionNoteFromLedger is the note telling the agents that an action's
// reply was held back, from what the ledger recorded after the settle.
func attentionNoteFromLedger(st *supportflow.ActionStatus) string {
	var b strings.Builder
	b.WriteString(fmt.Sprintf("supportflow did not send the approved reply (action %s): a cancellation could not be done (%s), so the reply "+
		"would have promised what did not happen. Cancelled: %s. Not cancelled: %s.", st.Key, st.Reason, listOrNone(st.Cancelled), listOrNone(st.NotCancelled)))
	if len(st.Unknown) > 0 {
		b.WriteString(fmt.Sprintf(" Outcome unknown (check the subscription service): %s.", strings.Join(st.Unknown, ", ")))
	}
	b.WriteString(" The customer has not been answered; a new draft follows.")
	return b.String()
}

func listOrNone(xs []string) string {
	if len(xs) == 0 {
		return "none"
	}
	return strings.Join(xs, ", ")
}
