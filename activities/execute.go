package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/subscriptions"
	"github.com/supportflow/supportflow/internal/text"
	"github.com/supportflow/supportflow/ledger"
)

// PostReplyResult says how the Zendesk leg ended.
type PostReplyResult struct {
	AuditID   int64 `json:"audit_id"`
	CommentID int64 `json:"comment_id"`
	// Source says where the comment came from: "posted" by this attempt,
	// "ledger" (recorded earlier), "audit" (found on the ticket after an
	// earlier attempt's answer was lost) or "applied" (the whole action was
	// already applied).
	Source string `json:"source"`
	// State is the action's ledger state afterwards.
	State string `json:"state"`
}

// PostReply is the Zendesk leg of an action: it posts the action's comment
// on the ticket exactly once. It claims the action in the ledger; skips
// the post when the ledger says the comment landed; when an earlier
// attempt may have posted without recording it, looks for the action key in
// the ticket's audits first; and otherwise posts with the key in the
// audit's metadata and records the comment before returning.
//
// Errors: invalid input and Zendesk's permanent refusals (404 unknown
// ticket, 422 ...) are non-retryable; everything else is retried under the
// one policy, a 429 no sooner than its Retry-After.
func (a *Activities) PostReply(ctx context.Context, in ActionInput) (PostReplyResult, error) {
	if err := in.validate(); err != nil {
		return PostReplyResult{}, err
	}
	if in.Action.Comment == nil {
		return PostReplyResult{}, invalid(fmt.Errorf("%w: action %s has no comment to post", supportflow.ErrInvalidInput, in.Key))
	}
	claimant := claimantOf(ctx)
	res, err := a.reserve(ctx, in.reserveRequest(claimant, a.Durations))
	if err != nil {
		return PostReplyResult{}, reserveError(err)
	}
	if res.Applied {
		a.Metrics.ActionLeg("zendesk", "applied")
		return PostReplyResult{Source: "applied", State: supportflow.StateApplied}, nil
	}
	if in.ReplyLast && len(res.Cancelled) < len(in.Action.CancelSubscriptions) && !res.CommentLanded() {
		// The reply says what was done; it waits for every cancellation.
		_, _, _ = a.Ledger.Finish(context.WithoutCancel(ctx), res.ID, claimant, "")
		return PostReplyResult{}, invalid(fmt.Errorf("%w: action %s: its cancellations have not all succeeded; run CancelSubscriptions first", supportflow.ErrInvalidInput, in.Key))
	}
	log := a.log(ctx).With("action_key", in.Key, "ticket_id", in.Action.TicketID)
	if res.TookOver {
		log.Info("took over an expired claim", "prior_attempts", res.PriorAttempts)
	}

	p := &progress{v: Progress{Leg: "zendesk", Total: 1}}
	var out PostReplyResult
	var ambiguous bool
	// Search the audits on every attempt after the first (Temporal's count,
	// not only the ledger's, which a renamed account or a prune forgets),
	// back to the action's reservation less a margin for clocks.
	search := res.PriorAttempts > 0 || activity.GetInfo(ctx).Attempt > 1
	since := res.ReservedAt.Add(-auditSearchMargin)
	err = a.heartbeating(ctx, res.ID, claimant, p, func(ctx context.Context) error {
		auditID, commentID, source := res.AuditID, res.CommentID, "ledger"
		for conflicts := 0; commentID == 0; conflicts++ {
			if conflicts > maxConflicts {
				return fmt.Errorf("ticket %d changed %d times while posting; trying again later", in.Action.TicketID, conflicts)
			}
			if err := a.extendBeforeCall(ctx, res.ID, claimant); err != nil {
				return err
			}
			// The stamp is read before the search: a write of ours that
			// lands after the search has changed the ticket, so the post
			// below is refused (409) instead of landing a second comment.
			p.set(func(p *Progress) { p.Step = "reading the ticket" })
			callCtx, cancel := context.WithTimeout(ctx, a.Durations.ZendeskCallTimeout)
			stamp, err := a.Zendesk.TicketStamp(callCtx, in.Action.TicketID)
			cancel()
			if err != nil {
				return err
			}
			if search {
				p.set(func(p *Progress) { p.Step = "searching audits" })
				callCtx, cancel := context.WithTimeout(ctx, a.Durations.ZendeskCallTimeout)
				l, found, err := a.Zendesk.FindAction(callCtx, in.Action.TicketID, in.Key, since)
				cancel()
				if err != nil {
					return err
				}
				if found {
					auditID, commentID, source = l.AuditID, l.CommentID, "audit"
					log.Info("comment found on the ticket's audits; not posting again", "comment_id", l.CommentID)
					break
				}
			}
			// No lease check here: from the stamp on, Zendesk itself fences
			// the write (a successor's post changes the ticket, so this one
			// is refused), however long this attempt stalls.
			p.set(func(p *Progress) { p.Step = "posting" })
			callCtx, cancel = context.WithTimeout(ctx, a.Durations.ZendeskCallTimeout)
			l, err := a.Zendesk.PostComment(callCtx, in.Action.TicketID, *in.Action.Comment, in.Key, stamp)
			cancel()
			if isConflict(err) {
				// The ticket changed since the stamp: perhaps a late write
				// of ours landed. Look again before posting.
				log.Info("the ticket changed while posting; searching its audits again", "stamp", string(stamp))
				search = true
				continue
			}
			if err != nil {
				ambiguous = mayHaveLanded(err)
				return err
			}
			auditID, commentID, source = l.AuditID, l.CommentID, "posted"
		}
		state, won, err := a.Ledger.RecordComment(ctx, res.ID, claimant, auditID, commentID)
		if err != nil {
			return err
		}
		if !won {
			return errLostClaim
		}
		p.set(func(p *Progress) { p.Done, p.Step = 1, "recorded" })
		out = PostReplyResult{AuditID: auditID, CommentID: commentID, Source: source, State: state}
		return nil
	})
	if err == nil {
		a.Metrics.ActionLeg("zendesk", out.Source)
		return out, nil
	}
	err = a.endAttempt(ctx, res.ID, claimant, in.Key, err, ambiguous)
	a.Metrics.ActionLeg("zendesk", legOutcome(err))
	return PostReplyResult{}, err
}

// maxConflicts bounds the 409s one attempt absorbs (each means the ticket
// changed under it) before it fails and is retried later.
const maxConflicts = 5

// auditSearchMargin is how far before the action's reservation the audit
// search still looks, for clock differences between PostgreSQL and
// Zendesk.
const auditSearchMargin = 10 * time.Minute

// isConflict reports a safe update that Zendesk refused because the
// ticket changed since its stamp.
func isConflict(err error) bool {
	var c interface{ Conflict() bool }
	return errors.As(err, &c) && c.Conflict()
}

// endAttempt turns a failed attempt's error into the activity's error and
// leaves the claim in the right shape for the next one. A write that may
// have landed keeps its lease until it lapses, so a successor cannot check
// for the write before it can have arrived; any other failure releases the
// claim at once, with the error recorded.
func (a *Activities) endAttempt(ctx context.Context, id int64, claimant, key string, err error, ambiguous bool) error {
	if errors.Is(err, errLostClaim) {
		return lostClaim(key)
	}
	if errors.Is(err, errAttemptOver) {
		return err
	}
	if !ambiguous {
		// Best effort: if this fails the lease simply lapses.
		if _, _, ferr := a.Ledger.Finish(context.WithoutCancel(ctx), id, claimant, err.Error()); ferr != nil {
			a.log(ctx).Warn("releasing claim failed", "action_key", key, "error", ferr)
		}
	}
	if isPermanent(err) {
		return rejected(err)
	}
	return err
}

// CancelResult says how the cancellation leg ended.
type CancelResult struct {
	// Cancelled lists every subscription of the action now recorded as
	// cancelled, in the action's order.
	Cancelled []string `json:"cancelled"`
	// Called lists the subscriptions this attempt sent to the service
	// (those not already recorded as cancelled).
	Called []string `json:"called"`
	State  string   `json:"state"`
}

// CancelSubscriptions is the cancellation leg of an action. It claims the
// action, reads which subscriptions already succeeded and cancels only the
// rest, one at a time, writing each call's outcome to the ledger before
// acting on it, so a crash after a partial success still records it.
//
// A subscription the service refuses permanently (404 unknown ...) is
// recorded failed and the others are still attempted; the activity then
// fails non-retryably and the workflow settles the action. Any other
// failure stops the leg and is retried.
func (a *Activities) CancelSubscriptions(ctx context.Context, in ActionInput) (CancelResult, error) {
	if err := in.validate(); err != nil {
		return CancelResult{}, err
	}
	if len(in.Action.CancelSubscriptions) == 0 {
		return CancelResult{}, invalid(fmt.Errorf("%w: action %s has no subscriptions to cancel", supportflow.ErrInvalidInput, in.Key))
	}
	claimant := claimantOf(ctx)
	res, err := a.reserve(ctx, in.reserveRequest(claimant, a.Durations))
	if err != nil {
		return CancelResult{}, reserveError(err)
	}
	if res.Applied {
		a.Metrics.ActionLeg("cancellations", "applied")
		return CancelResult{Cancelled: in.Action.CancelSubscriptions, State: supportflow.StateApplied}, nil
	}
	if in.Action.Comment != nil && !res.CommentLanded() && !in.ReplyLast {
		// The legs run in order; cancelling before the reply is recorded
		// would let a failed reply leave a silent cancellation behind.
		_, _, _ = a.Ledger.Finish(context.WithoutCancel(ctx), res.ID, claimant, "")
		return CancelResult{}, invalid(fmt.Errorf("%w: action %s: the comment has not landed; run PostReply first", supportflow.ErrInvalidInput, in.Key))
	}
	log := a.log(ctx).With("action_key", in.Key, "ticket_id", in.Action.TicketID)

	cancelled := slices.Clone(res.Cancelled)
	var todo []string
	for _, s := range in.Action.CancelSubscriptions {
		if !slices.Contains(res.Cancelled, s) {
			todo = append(todo, s)
		}
	}
	p := &progress{v: Progress{Leg: "cancellations", Total: len(in.Action.CancelSubscriptions), Done: len(res.Cancelled)}}
	var (
		out       CancelResult
		ambiguous bool
		refused   []error
	)
	err = a.heartbeating(ctx, res.ID, claimant, p, func(ctx context.Context) error {
		// A call whose answer was lost may have cancelled: ask the service
		// before calling again, and record what it says.
		for _, sub := range res.Unknown {
			p.set(func(p *Progress) { p.Step = "reading the status of " + sub })
			isCancelled, err := a.cancelledAtService(ctx, sub)
			if err != nil {
				return fmt.Errorf("subscription %s: status after a lost answer: %w", sub, err)
			}
			if !isCancelled {
				continue // not cancelled: called again below
			}
			won, err := a.Ledger.RecordCancellation(context.WithoutCancel(ctx), res.ID, claimant, sub,
				ledger.CancellationOutcome{Cancelled: true, AlreadyCancelled: true})
			if err != nil {
				return err
			}
			if !won {
				return errLostClaim
			}
			log.Info("a lost answer's cancellation had landed", "subscription_id", sub)
			cancelled = append(cancelled, sub)
			todo = slices.DeleteFunc(todo, func(s string) bool { return s == sub })
			p.set(func(p *Progress) { p.Done++ })
		}
		for _, sub := range todo {
			if err := a.extendBeforeCall(ctx, res.ID, claimant); err != nil {
				return err
			}
			p.set(func(p *Progress) { p.Step = "cancelling " + sub })
			out.Called = append(out.Called, sub)
			callCtx, cancel := context.WithTimeout(ctx, a.Durations.SubscriptionCallTimeout)
			c, callErr := a.Subscriptions.Cancel(callCtx, sub, in.Key+":"+sub)
			cancel()
			outcome := ledger.CancellationOutcome{Cancelled: callErr == nil, AlreadyCancelled: c.AlreadyCancelled,
				Unknown: callErr != nil && mayHaveLanded(callErr)}
			if callErr != nil {
				outcome.Error = callErr.Error()
			}
			// Record before acting on the outcome, even for a failure, so
			// the ledger never forgets a call that may have landed.
			won, err := a.Ledger.RecordCancellation(context.WithoutCancel(ctx), res.ID, claimant, sub, outcome)
			if err != nil {
				return errors.Join(callErr, err)
			}
			if !won {
				return errLostClaim
			}
			switch {
			case callErr == nil:
				cancelled = append(cancelled, sub)
				p.set(func(p *Progress) { p.Done++ })
			case isPermanent(callErr):
				log.Warn("subscription service refused a cancellation", "subscription_id", sub, "error", callErr)
				refused = append(refused, fmt.Errorf("subscription %s: %w", sub, callErr))
			default:
				ambiguous = mayHaveLanded(callErr)
				return fmt.Errorf("subscription %s: %w", sub, callErr)
			}
		}
		if len(refused) > 0 {
			// Permanent, so endAttempt releases the claim with this error
			// and fails the activity non-retryably.
			return errors.Join(refused...)
		}
		state, won, err := a.Ledger.Finish(ctx, res.ID, claimant, "")
		if err != nil {
			return err
		}
		if !won {
			return errLostClaim
		}
		out.State = state
		return nil
	})
	out.Cancelled = ordered(in.Action.CancelSubscriptions, cancelled)
	if err == nil {
		a.Metrics.ActionLeg("cancellations", "cancelled")
		return out, nil
	}
	err = a.endAttempt(ctx, res.ID, claimant, in.Key, err, ambiguous)
	a.Metrics.ActionLeg("cancellations", legOutcome(err))
	var app *temporal.ApplicationError
	if errors.As(err, &app) && app.NonRetryable() && app.Type() == supportflow.ErrTypeRejected {
		// Temporal drops a failed activity's result: carry what was
		// cancelled on the error, so the agents' note and the redraft say
		// it truthfully.
		return out, temporal.NewNonRetryableApplicationError(app.Error(), supportflow.ErrTypeRejected, errors.Unwrap(app), out)
	}
	return out, err
}

// legOutcome names a failed leg attempt for the metrics.
func legOutcome(err error) string {
	var app *temporal.ApplicationError
	switch {
	case errors.As(err, &app) && app.Type() == supportflow.ErrTypeLostClaim:
		return "lost_claim"
	case errors.As(err, &app) && app.NonRetryable():
		return "rejected"
	}
	return "failed"
}

func ordered(all, subset []string) []string {
	var out []string
	for _, s := range all {
		if slices.Contains(subset, s) {
			out = append(out, s)
		}
	}
	return out
}

// cancelledAtService reads whether the subscription service has the
// subscription cancelled: how a lost answer is resolved.
func (a *Activities) cancelledAtService(ctx context.Context, subscriptionID string) (bool, error) {
	callCtx, cancel := context.WithTimeout(ctx, a.Durations.SubscriptionCallTimeout)
	defer cancel()
	status, err := a.Subscriptions.Status(callCtx, subscriptionID)
	return err == nil && status == subscriptions.StatusCancelled, err
}

// SettleInput names an action whose last attempt failed.
type SettleInput struct {
	Key        string `json:"key"`
	TicketID   int64  `json:"ticket_id"`
	HasComment bool   `json:"has_comment"`
	Error      string `json:"error"`
	// HeldBack says the reply was held back because a cancellation was
	// refused for good: the action ends needs_attention.
	HeldBack bool `json:"held_back,omitempty"`
}

// SettleAction makes an action's failure terminal once the workflow has
// given up on it: partial_failure when some effect landed, failed when none
// did, applied when a lost answer turns out to have landed after all. A
// cancellation whose answer was lost is never settled as failed on a
// guess: its status is read first, and while it cannot be read the
// activity fails retryably (unknown is not failed). While a stale attempt
// still holds a live lease it fails retryably, waiting no less than the
// lease's remaining time.
func (a *Activities) SettleAction(ctx context.Context, in SettleInput) (string, error) {
	if _, _, err := supportflow.ParseActionKey(in.Key); err != nil {
		return "", invalid(err)
	}
	resolved := map[string]bool{}
	if row, err := a.Ledger.Get(ctx, in.Key); err == nil {
		for _, c := range row.Cancellations {
			if c.State != "unknown" {
				continue
			}
			isCancelled, err := a.cancelledAtService(ctx, c.SubscriptionID)
			if err != nil && !isPermanent(err) {
				return "", fmt.Errorf("subscription %s: its cancellation's answer was lost and its status cannot be read yet: %w", c.SubscriptionID, err)
			}
			// A status the service refuses for good (the subscription is
			// gone, 404) is not a cancellation of ours.
			resolved[c.SubscriptionID] = err == nil && isCancelled
		}
	} else if !errors.Is(err, ledger.ErrNotFound) {
		return "", err
	}
	state, err := a.Ledger.SettleFailed(ctx, in.Key, in.TicketID, in.HasComment, text.Clip(in.Error, 4000), resolved, in.HeldBack)
	if err != nil {
		return "", reserveError(err)
	}
	if state == supportflow.StateNeedsAttention {
		a.Metrics.ActionLeg("zendesk", "needs_attention")
	}
	return state, nil
}
