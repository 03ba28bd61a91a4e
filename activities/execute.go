package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/policy"
	"github.com/supportflow/supportflow/internal/subscriptions"
	"github.com/supportflow/supportflow/internal/text"
	"github.com/supportflow/supportflow/internal/zendeskclient"
	"github.com/supportflow/supportflow/ledger"
)

// PostReply runs the action's Zendesk legs, the ticket update and the
// reply, in one safe ticket update, exactly once. It claims the action in
// the ledger; skips the write when the ledger says the legs are done; on
// every attempt after the first (and after a 409), looks for the action key
// in the ticket's audits first (the legs' replay rule,
// supportflow.ReplaySearchReceiver); and otherwise writes with the key in
// the audit's metadata, fenced by the ticket's updated_stamp, and records
// the legs before returning. With ReplyLast it refuses to run before every
// leg of an earlier phase (the cancellations) is done.
//
// Errors: invalid input and Zendesk's permanent refusals (404 unknown
// ticket, 422 ...) are non-retryable; everything else is retried under the
// one policy, a 429 no sooner than its Retry-After.
func (a *Activities) PostReply(ctx context.Context, in supportflow.ActionInput) (supportflow.PostReplyResult, error) {
	if err := validate(in); err != nil {
		return supportflow.PostReplyResult{}, err
	}
	if !in.Action.HasZendeskLeg() {
		return supportflow.PostReplyResult{}, invalid(fmt.Errorf("%w: action %s has no comment and no ticket update", supportflow.ErrInvalidInput, in.Key))
	}
	if err := a.checkApproved(ctx, in); err != nil {
		return supportflow.PostReplyResult{}, err
	}
	claimant := claimantOf(ctx)
	res, err := a.reserve(ctx, reserveRequest(in, claimant, activity.GetInfo(ctx).WorkflowExecution.RunID, a.Durations))
	if err != nil {
		return supportflow.PostReplyResult{}, reserveError(err)
	}
	if res.Applied {
		a.Metrics.ActionLeg("zendesk", "applied")
		return supportflow.PostReplyResult{Source: "applied", State: supportflow.StateApplied}, nil
	}
	mine, todo := receiverLegs(res.Legs, "zendesk")
	if in.ReplyLast && len(todo) > 0 && !earlierPhasesDone(res.Legs, "zendesk") {
		// The reply says what was done; it waits for every earlier leg.
		_, _, _ = a.Ledger.Finish(context.WithoutCancel(ctx), res.ID, claimant, "")
		return supportflow.PostReplyResult{}, invalid(fmt.Errorf("%w: action %s: its cancellations have not all succeeded; run CancelSubscriptions first", supportflow.ErrInvalidInput, in.Key))
	}
	log := a.log(ctx).With("action_key", in.Key, "ticket_id", in.Action.TicketID)
	if res.TookOver {
		log.Info("took over an expired claim", "prior_attempts", res.PriorAttempts)
	}

	p := &progress{v: Progress{Leg: "zendesk", Total: 1}}
	var out supportflow.PostReplyResult
	var ambiguous bool
	// Search the audits on every attempt after the first (Temporal's count,
	// not only the ledger's, which a renamed account or a prune forgets),
	// back to the action's reservation less a margin for clocks.
	search := res.PriorAttempts > 0 || activity.GetInfo(ctx).Attempt > 1
	since := res.ReservedAt.Add(-auditSearchMargin)
	err = a.heartbeating(ctx, res.ID, claimant, p, func(ctx context.Context) error {
		landed, source := recordedLanding(mine), "ledger"
		var already bool
		replyPending := slices.ContainsFunc(todo, func(l ledger.LegRow) bool { return l.Kind == supportflow.LegReply })
		for conflicts := 0; len(todo) > 0; conflicts++ {
			if conflicts > maxConflicts {
				return fmt.Errorf("ticket %d changed %d times while writing; trying again later", in.Action.TicketID, conflicts)
			}
			if err := a.extendBeforeCall(ctx, res.ID, claimant); err != nil {
				return err
			}
			// The stamp is read before the search: a write of ours that
			// lands after the search has changed the ticket, so the write
			// below is refused (409) instead of landing a second time.
			p.set(func(p *Progress) { p.Step = "reading the ticket" })
			callCtx, cancel := context.WithTimeout(ctx, a.Durations.ZendeskCallTimeout)
			ticket, err := a.Zendesk.ReadTicket(callCtx, in.Action.TicketID)
			cancel()
			if err != nil {
				return err
			}
			if search {
				p.set(func(p *Progress) { p.Step = "searching audits" })
				callCtx, cancel := context.WithTimeout(ctx, a.Durations.ZendeskCallTimeout)
				l, found, err := a.Zendesk.FindAction(callCtx, in.Action.TicketID, in.Key, since, replyPending)
				cancel()
				if err != nil {
					return err
				}
				if found {
					landed, source = l, "audit"
					log.Info("our update found on the ticket's audits; not writing again", "audit_id", l.AuditID, "comment_id", l.CommentID)
					break
				}
			}
			update, changes := zendeskUpdate(in.Action, todo, ticket)
			if !changes {
				// A ticket update alone that Zendesk already shows: nothing
				// to write (and Zendesk would make no audit of it).
				already, source = true, "already"
				break
			}
			// No lease check here: from the stamp on, Zendesk itself fences
			// the write (a successor's write changes the ticket, so this one
			// is refused), however long this attempt stalls.
			p.set(func(p *Progress) { p.Step = "posting" })
			callCtx, cancel = context.WithTimeout(ctx, a.Durations.ZendeskCallTimeout)
			l, err := a.Zendesk.UpdateTicket(callCtx, in.Action.TicketID, update, in.Key, ticket.Stamp)
			cancel()
			if isConflict(err) {
				// The ticket changed since the stamp: perhaps a late write
				// of ours landed. Look again before writing.
				log.Info("the ticket changed while writing; searching its audits again", "stamp", string(ticket.Stamp))
				search = true
				continue
			}
			if err != nil {
				if ambiguous = mayHaveLanded(err); ambiguous {
					// The write may have landed: its legs are unknown until
					// the ticket's audits say (the next attempt's search, or
					// the settle's, after its fence).
					var unknown []ledger.LegOutcome
					for _, leg := range todo {
						unknown = append(unknown, ledger.LegOutcome{Kind: leg.Kind, Target: leg.Target, State: ledger.LegUnknown, Error: err.Error()})
					}
					if _, rerr := a.Ledger.RecordLegs(context.WithoutCancel(ctx), res.ID, claimant, unknown...); rerr != nil {
						log.Warn("recording a write whose answer was lost failed", "error", rerr)
					}
				}
				return err
			}
			landed, source = l, "posted"
			break
		}
		var outcomes []ledger.LegOutcome
		for _, leg := range todo {
			o := ledger.LegOutcome{Kind: leg.Kind, Target: leg.Target, State: ledger.LegDone, AlreadyDone: already,
				RequestID: idString(landed.AuditID), ExternalID: idString(landed.AuditID)}
			if leg.Kind == supportflow.LegReply {
				o.ExternalID = idString(landed.CommentID)
			}
			outcomes = append(outcomes, o)
		}
		state, won, err := a.Ledger.Finish(ctx, res.ID, claimant, "", outcomes...)
		if err != nil {
			return err
		}
		if !won {
			return errLostClaim
		}
		p.set(func(p *Progress) { p.Done, p.Step = 1, "recorded" })
		out = supportflow.PostReplyResult{AuditID: landed.AuditID, CommentID: landed.CommentID, Source: source, State: state}
		return nil
	})
	if err == nil {
		a.Metrics.ActionLeg("zendesk", out.Source)
		return out, nil
	}
	err = a.endAttempt(ctx, res.ID, claimant, in.Key, err, ambiguous)
	a.Metrics.ActionLeg("zendesk", legOutcome(err))
	return supportflow.PostReplyResult{}, err
}

// receiverLegs returns the legs one receiver carries out, and those of
// them not yet done.
func receiverLegs(legs ledger.Legs, receiver string) (mine, todo ledger.Legs) {
	for _, l := range legs {
		if spec, _ := supportflow.SpecOf(l.Kind); spec.Receiver == receiver {
			mine = append(mine, l)
			if l.State != ledger.LegDone {
				todo = append(todo, l)
			}
		}
	}
	return mine, todo
}

// earlierPhasesDone reports whether every leg of a phase before the
// receiver's legs is done: what the truthful order waits for.
func earlierPhasesDone(legs ledger.Legs, receiver string) bool {
	phase := -1
	for _, l := range legs {
		if spec, _ := supportflow.SpecOf(l.Kind); spec.Receiver == receiver && (phase < 0 || spec.Phase < phase) {
			phase = spec.Phase
		}
	}
	for _, l := range legs {
		if spec, _ := supportflow.SpecOf(l.Kind); spec.Phase < phase && l.State != ledger.LegDone {
			return false
		}
	}
	return true
}

// recordedLanding is what the ledger knows of an earlier landing of the
// Zendesk legs.
func recordedLanding(legs ledger.Legs) zendeskclient.Landed {
	var l zendeskclient.Landed
	for _, leg := range legs {
		if leg.State != ledger.LegDone {
			continue
		}
		l.AuditID, _ = strconv.ParseInt(leg.RequestID, 10, 64)
		if leg.Kind == supportflow.LegReply {
			l.CommentID, _ = strconv.ParseInt(leg.ExternalID, 10, 64)
		}
	}
	return l
}

// zendeskUpdate builds the one ticket update that carries the legs still
// to do: the comment, and the status and the ticket's tags plus ours.
// changes is false when it would change nothing on the ticket as read.
func zendeskUpdate(act supportflow.Action, todo ledger.Legs, ticket zendeskclient.TicketState) (u zendeskclient.Update, changes bool) {
	for _, leg := range todo {
		switch leg.Kind {
		case supportflow.LegReply:
			u.Comment = act.Comment
			changes = true
		case supportflow.LegTicketUpdate:
			want := act.UpdateTicket
			if want.Status != "" && want.Status != ticket.Status {
				u.Status, changes = want.Status, true
			}
			tags := slices.Clone(ticket.Tags)
			for _, t := range want.Tags {
				if !slices.Contains(tags, t) {
					tags = append(tags, t)
				}
			}
			if len(tags) != len(ticket.Tags) {
				u.Tags, changes = tags, true
			}
		}
	}
	return u, changes
}

func idString(id int64) string {
	if id == 0 {
		return ""
	}
	return strconv.FormatInt(id, 10)
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

// CancelSubscriptions runs the action's cancellation legs. It claims the
// action, reads which subscriptions are already cancelled and cancels only
// the rest, one at a time, writing each call's outcome to the ledger
// before acting on it, so a crash after a partial success still records
// it. A cancellation is idempotent at the service (a second one answers
// 409 already_cancelled), and a call whose answer was lost is 'unknown'
// until the subscription's status says what happened
// (supportflow.ReplayIdempotent).
//
// A subscription the service refuses permanently (404 unknown ...) is
// recorded failed and the others are still attempted; the activity then
// fails non-retryably and the workflow settles the action. Any other
// failure stops the leg and is retried.
func (a *Activities) CancelSubscriptions(ctx context.Context, in supportflow.ActionInput) (supportflow.CancelResult, error) {
	if err := validate(in); err != nil {
		return supportflow.CancelResult{}, err
	}
	if len(in.Action.CancelSubscriptions) == 0 {
		return supportflow.CancelResult{}, invalid(fmt.Errorf("%w: action %s has no subscriptions to cancel", supportflow.ErrInvalidInput, in.Key))
	}
	if err := a.checkApproved(ctx, in); err != nil {
		return supportflow.CancelResult{}, err
	}
	claimant := claimantOf(ctx)
	res, err := a.reserve(ctx, reserveRequest(in, claimant, activity.GetInfo(ctx).WorkflowExecution.RunID, a.Durations))
	if err != nil {
		return supportflow.CancelResult{}, reserveError(err)
	}
	if res.Applied {
		a.Metrics.ActionLeg("cancellations", "applied")
		return supportflow.CancelResult{Cancelled: in.Action.CancelSubscriptions, State: supportflow.StateApplied}, nil
	}
	if !in.ReplyLast && slices.ContainsFunc(res.Legs.Of(supportflow.LegReply), func(l ledger.LegRow) bool { return l.State != ledger.LegDone }) {
		// Executions from before the truthful order ran the reply first;
		// cancelling before it is recorded would let a failed reply leave
		// a silent cancellation behind.
		_, _, _ = a.Ledger.Finish(context.WithoutCancel(ctx), res.ID, claimant, "")
		return supportflow.CancelResult{}, invalid(fmt.Errorf("%w: action %s: the comment has not landed; run PostReply first", supportflow.ErrInvalidInput, in.Key))
	}
	log := a.log(ctx).With("action_key", in.Key, "ticket_id", in.Action.TicketID)

	const kind = supportflow.LegCancelSubscription
	cancelled := res.Legs.InState(kind, ledger.LegDone)
	unknown := res.Legs.InState(kind, ledger.LegUnknown)
	var todo []string
	for _, s := range in.Action.CancelSubscriptions {
		if !slices.Contains(cancelled, s) {
			todo = append(todo, s)
		}
	}
	p := &progress{v: Progress{Leg: "cancellations", Total: len(in.Action.CancelSubscriptions), Done: len(cancelled)}}
	var (
		out       supportflow.CancelResult
		ambiguous bool
		refused   []error
	)
	record := func(o ledger.LegOutcome) error {
		o.Kind = kind
		won, err := a.Ledger.RecordLegs(context.WithoutCancel(ctx), res.ID, claimant, o)
		if err != nil {
			return err
		}
		if !won {
			return errLostClaim
		}
		return nil
	}
	err = a.heartbeating(ctx, res.ID, claimant, p, func(ctx context.Context) error {
		// A call whose answer was lost may have cancelled: ask the service
		// before calling again, and record what it says.
		for _, sub := range unknown {
			p.set(func(p *Progress) { p.Step = "reading the status of " + sub })
			isCancelled, err := a.cancelledAtService(ctx, sub)
			if err != nil {
				return fmt.Errorf("subscription %s: status after a lost answer: %w", sub, err)
			}
			if !isCancelled {
				continue // not cancelled: called again below
			}
			if err := record(ledger.LegOutcome{Target: sub, State: ledger.LegDone, AlreadyDone: true, Resolved: true}); err != nil {
				return err
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
			if !slices.Contains(unknown, sub) {
				// Only the ticket's requester's subscriptions are cancelled
				// (one whose answer was lost was checked when first called).
				p.set(func(p *Progress) { p.Step = "checking whose " + sub + " is" })
				owned, why, err := a.subscriptionOwner(ctx, in.Action.TicketID, sub)
				if err != nil {
					return err
				}
				if !owned {
					a.Metrics.LegRefused("not_owned")
					log.Warn("refused to cancel a subscription that is not the requester's", "subscription_id", sub, "reason", why)
					if err := record(ledger.LegOutcome{Target: sub, State: ledger.LegFailed, Error: why, Resolved: true}); err != nil {
						return err
					}
					refused = append(refused, notOwnedError("subscription "+sub+": "+why))
					continue
				}
			}
			p.set(func(p *Progress) { p.Step = "cancelling " + sub })
			out.Called = append(out.Called, sub)
			callCtx, cancel := context.WithTimeout(ctx, a.Durations.SubscriptionCallTimeout)
			c, callErr := a.Subscriptions.Cancel(callCtx, sub, in.Key+":"+sub)
			cancel()
			o := ledger.LegOutcome{Target: sub, State: ledger.LegDone, AlreadyDone: c.AlreadyCancelled}
			if callErr != nil {
				o.State, o.Error = ledger.LegFailed, callErr.Error()
				if mayHaveLanded(callErr) {
					o.State = ledger.LegUnknown
				}
			}
			// Record before acting on the outcome, even for a failure, so
			// the ledger never forgets a call that may have landed.
			if err := record(o); err != nil {
				return errors.Join(callErr, err)
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
		return out, policy.AppError(app.Error(), supportflow.ErrTypeRejected, errors.Unwrap(app), out)
	}
	return out, err
}

// notOwnedError refuses a cancellation of a subscription that is not the
// ticket's requester's: permanent, and nothing was sent.
type notOwnedError string

func (e notOwnedError) Error() string       { return string(e) }
func (e notOwnedError) Permanent() bool     { return true }
func (e notOwnedError) MayHaveLanded() bool { return false }

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

// SettleAction makes an action's failure terminal once the workflow has
// given up on it: partial_failure when some leg landed, failed when none
// did, needs_attention when the reply was held back, applied when a lost
// answer turns out to have landed after all. A leg whose answer was lost
// is never settled as failed on a guess: the receiver's state is read
// first (supportflow.LegSpec.Resolvable), and while it cannot be read the
// activity fails retryably (unknown is not failed). While a stale attempt
// still holds a live lease it fails retryably, waiting no less than the
// lease's remaining time.
func (a *Activities) SettleAction(ctx context.Context, in supportflow.SettleInput) (string, error) {
	if _, _, err := supportflow.ParseActionKey(in.Key); err != nil {
		return "", invalid(err)
	}
	resolved := map[supportflow.Leg]bool{}
	if row, err := a.Ledger.Get(ctx, in.Key); err == nil {
		for _, leg := range row.Legs {
			if leg.State != ledger.LegUnknown {
				continue
			}
			landed, err := a.resolveLeg(ctx, leg.Leg())
			if err != nil && !isPermanent(err) {
				return "", fmt.Errorf("%s %s: its answer was lost and the receiver cannot be read yet: %w", leg.Kind, leg.Target, err)
			}
			// A state the receiver refuses for good (the subscription is
			// gone, 404) is not an effect of ours.
			resolved[leg.Leg()] = err == nil && landed
		}
	} else if !errors.Is(err, supportflow.ErrNotFound) {
		return "", err
	}
	state, err := a.Ledger.SettleFailed(ctx, in.Key, in.TicketID, text.Clip(in.Error, 4000), resolved, in.HeldBack)
	if err != nil {
		return "", reserveError(err)
	}
	if state == supportflow.StateNeedsAttention {
		a.Metrics.ActionLeg("zendesk", "needs_attention")
	}
	return state, nil
}

// resolveLeg reads from the receiver whether a leg whose answer was lost
// landed. Only resolvable kinds are ever left unknown (the Zendesk legs
// find a lost answer by searching the audits instead).
func (a *Activities) resolveLeg(ctx context.Context, leg supportflow.Leg) (bool, error) {
	switch leg.Kind {
	case supportflow.LegCancelSubscription:
		return a.cancelledAtService(ctx, leg.Target)
	}
	return false, rejected(fmt.Errorf("%w: a %s leg cannot be read back", supportflow.ErrInvalidInput, leg.Kind))
}
