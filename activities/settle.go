package activities

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"go.temporal.io/sdk/activity"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/subscriptions"
	"github.com/supportflow/supportflow/internal/text"
	"github.com/supportflow/supportflow/ledger"
)

// SettleLegs settles an action the execution gave up on, from what the
// receivers say rather than from the ledger alone (each leg's replay rule,
// supportflow.SpecOf):
//
//   - a cancellation whose answer was lost is resolved by the
//     subscription's status, and when that says active, by sending the
//     cancel again under the same Idempotency-Key: the service answers a
//     repeated key with its first answer and no second effect, so the
//     answer is what that first request did, and a request still in flight
//     can no longer land differently (the README's subscription-service
//     requirements);
//   - a Zendesk leg that may have landed is resolved by a fence, then the
//     audit search: without Fenced it answers NeedsFence and changes
//     nothing; with it, an audit of the key means done, none means failed
//     (a write still in flight carries a stamp from before the fence and
//     is refused).
//
// While a receiver cannot be read it fails retryably; the workflow bounds
// that (policy.Durations.UnresolvedLegBound) and then calls it with
// GiveUp, which ends the action needs_attention, counts
// supportflow_legs_unresolved_total and logs at ERROR.
func (a *Activities) SettleLegs(ctx context.Context, in supportflow.SettleLegsInput) (supportflow.SettleLegsResult, error) {
	if _, _, err := supportflow.ParseActionKey(in.Key); err != nil {
		return supportflow.SettleLegsResult{}, invalid(err)
	}
	row, err := a.Ledger.Get(ctx, in.Key)
	switch {
	case errors.Is(err, supportflow.ErrNotFound):
		row = ledger.Action{} // never reserved: nothing to resolve
	case err != nil:
		return supportflow.SettleLegsResult{}, err
	}
	log := a.log(ctx).With("action_key", in.Key, "ticket_id", in.TicketID)
	var outcomes []ledger.LegOutcome
	var unresolved []string
	zendeskOpen := false
	for _, leg := range row.Legs {
		if leg.State == ledger.LegDone {
			continue
		}
		spec, _ := supportflow.SpecOf(leg.Kind)
		switch {
		case leg.Kind == supportflow.LegCancelSubscription && leg.State == ledger.LegUnknown:
			o, err := a.resolveCancellation(ctx, in.Key, leg.Target)
			if err != nil {
				if !in.GiveUp {
					return supportflow.SettleLegsResult{}, fmt.Errorf("subscription %s: its answer was lost and the service cannot say yet: %w", leg.Target, err)
				}
				unresolved = append(unresolved, string(leg.Kind)+" "+leg.Target)
				continue
			}
			outcomes = append(outcomes, o)
		case spec.Receiver == "zendesk" && (leg.State == ledger.LegUnknown || in.ZendeskMayHaveLanded):
			zendeskOpen = true
		}
	}
	if zendeskOpen {
		switch {
		case in.Fenced:
			o, err := a.searchZendeskLegs(ctx, in, row)
			if err != nil {
				if !in.GiveUp {
					return supportflow.SettleLegsResult{}, fmt.Errorf("searching ticket %d's audits after the fence: %w", in.TicketID, err)
				}
				// The audits could not be read: what landed stays unknown.
				unresolved = append(unresolved, "zendesk "+strconv.FormatInt(in.TicketID, 10))
				o = openZendeskLegsUnknown(row.Legs)
			}
			outcomes = append(outcomes, o...)
		case in.GiveUp:
			// Never fenced: what landed cannot be known, so it stays unknown.
			outcomes = append(outcomes, openZendeskLegsUnknown(row.Legs)...)
		case !in.ResolveOnly:
			return resultOf(row, true), nil
		}
	}
	mode := ledger.SettleFinal
	switch {
	case in.ResolveOnly:
		mode = ledger.SettleResolveOnly
	case in.GiveUp:
		mode = ledger.SettleGiveUp
	}
	settled, err := a.Ledger.Settle(ctx, ledger.SettleRequest{Key: in.Key, TicketID: in.TicketID, Error: text.Clip(in.Error, 4000),
		Outcomes: outcomes, HeldBack: in.HeldBack, Mode: mode, Run: activity.GetInfo(ctx).WorkflowExecution.RunID})
	if err != nil {
		return supportflow.SettleLegsResult{}, reserveError(err)
	}
	out := resultOf(settled, false)
	if in.GiveUp && len(out.Unknown) > 0 {
		for _, u := range out.Unknown {
			receiver := "zendesk"
			if strings.HasPrefix(u, string(supportflow.LegCancelSubscription)+" ") {
				receiver = "subscriptions"
			}
			a.Metrics.LegUnresolved(receiver)
		}
		log.Error("leg outcome unresolved: the action ends needs_attention; find out on the receiver whether it landed",
			"unknown_legs", out.Unknown, "unresolved", unresolved, "state", out.State)
	}
	if out.State == supportflow.StateNeedsAttention {
		a.Metrics.ActionLeg("zendesk", "needs_attention")
	}
	return out, nil
}

// openZendeskLegsUnknown records the Zendesk legs not done as unknown:
// what landed on the ticket could not be learned.
func openZendeskLegsUnknown(legs ledger.Legs) []ledger.LegOutcome {
	_, todo := receiverLegs(legs, "zendesk")
	var out []ledger.LegOutcome
	for _, leg := range todo {
		out = append(out, ledger.LegOutcome{Kind: leg.Kind, Target: leg.Target, State: ledger.LegUnknown, Resolved: true})
	}
	return out
}

// resultOf reads a settle's result off the recorded action.
func resultOf(row ledger.Action, needsFence bool) supportflow.SettleLegsResult {
	legs := row.Legs.Of(supportflow.LegCancelSubscription)
	// No cancellation leg recorded (every attempt failed before its
	// reserve) is not "every cancellation landed".
	out := supportflow.SettleLegsResult{State: row.State, NeedsFence: needsFence, AllCancelled: len(legs) > 0}
	for _, l := range row.Legs {
		switch {
		case l.Kind == supportflow.LegCancelSubscription && l.State == ledger.LegDone:
			out.Cancelled = append(out.Cancelled, l.Target)
		case l.Kind == supportflow.LegCancelSubscription && l.State == ledger.LegFailed:
			out.NotCancelled = append(out.NotCancelled, l.Target)
		}
		if l.Kind == supportflow.LegCancelSubscription && l.State != ledger.LegDone {
			out.AllCancelled = false
		}
		if l.State == ledger.LegUnknown {
			out.Unknown = append(out.Unknown, string(l.Kind)+" "+l.Target)
		}
	}
	if id := row.CommentID(); id != 0 {
		out.ReplyLanded, out.CommentID = true, id
	}
	return out
}

// resolveCancellation learns whether a cancellation whose answer was lost
// landed: the status first; when it says active, the cancel again under
// the same key, whose answer (deduplicated by the service) is final. A
// refusal for good (404, 422) means it did not land.
func (a *Activities) resolveCancellation(ctx context.Context, actionKey, sub string) (ledger.LegOutcome, error) {
	o := ledger.LegOutcome{Kind: supportflow.LegCancelSubscription, Target: sub, Resolved: true}
	isCancelled, err := a.cancelledAtService(ctx, sub)
	switch {
	case err == nil && isCancelled:
		o.State, o.AlreadyDone = ledger.LegDone, true
		return o, nil
	case err != nil && hasStatus(err, http.StatusNotFound, http.StatusGone):
		// The service does not have it: nothing of ours landed on it.
		o.State, o.Error = ledger.LegFailed, "the subscription service does not know it: "+lookupRefusal(err)
		return o, nil
	case err != nil:
		// Any other refusal (401, 403, 400: our credentials or request)
		// says nothing of what landed: ask again, up to the bound.
		return o, err
	}
	callCtx, cancel := context.WithTimeout(ctx, a.Durations.Fill().SubscriptionCallTimeout)
	c, err := a.Subscriptions.Cancel(callCtx, sub, actionKey+":"+sub)
	cancel()
	switch {
	case err == nil:
		o.State, o.AlreadyDone = ledger.LegDone, c.AlreadyCancelled
		return o, nil
	case hasStatus(err, http.StatusNotFound, http.StatusGone, http.StatusUnprocessableEntity):
		// Refused on the subscription's own account (unknown, or not
		// cancellable): this key's answer, so the first request's too.
		o.State, o.Error = ledger.LegFailed, "the subscription service refused the cancellation: "+lookupRefusal(err)
		return o, nil
	}
	return o, err
}

// hasStatus reports whether err is a subscription-service answer with one
// of statuses.
func hasStatus(err error, statuses ...int) bool {
	var e *subscriptions.Error
	return errors.As(err, &e) && slices.Contains(statuses, e.Status)
}

// searchZendeskLegs reads, after the fence, whether the action's Zendesk
// legs landed: an audit of the key makes them done (with its IDs), none
// makes them failed.
func (a *Activities) searchZendeskLegs(ctx context.Context, in supportflow.SettleLegsInput, row ledger.Action) ([]ledger.LegOutcome, error) {
	_, todo := receiverLegs(row.Legs, "zendesk")
	if len(todo) == 0 {
		return nil, nil
	}
	withComment := slices.ContainsFunc(todo, func(l ledger.LegRow) bool { return l.Kind == supportflow.LegReply })
	callCtx, cancel := context.WithTimeout(ctx, a.Durations.Fill().ZendeskCallTimeout)
	landed, found, err := a.Zendesk.FindAction(callCtx, in.TicketID, in.Key, row.CreatedAt.Add(-auditSearchMargin), withComment)
	cancel()
	if err != nil {
		return nil, err
	}
	var out []ledger.LegOutcome
	for _, leg := range todo {
		o := ledger.LegOutcome{Kind: leg.Kind, Target: leg.Target, Resolved: true, State: ledger.LegFailed,
			Error: "not on the ticket's audits after the fence: it never landed, and cannot any more"}
		if found {
			o = ledger.LegOutcome{Kind: leg.Kind, Target: leg.Target, Resolved: true, State: ledger.LegDone,
				RequestID: idString(landed.AuditID), ExternalID: idString(landed.AuditID)}
			if leg.Kind == supportflow.LegReply {
				o.ExternalID = idString(landed.CommentID)
			}
		}
		out = append(out, o)
	}
	a.log(ctx).Info("settled the Zendesk legs from the ticket's audits after the fence", "action_key", in.Key, "found", found)
	return out, nil
}
