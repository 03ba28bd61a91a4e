package supportflow

import (
	"fmt"
	"regexp"
	"slices"
	"strconv"
)

// LegKind names one kind of effect an action has. An action is an ordered
// list of legs (Action.Legs); the ledger keeps one row per leg, so adding a
// kind means a value here, a spec in legSpecs and the activity that does
// it, not new columns.
type LegKind string

const (
	// LegCancelSubscription cancels one subscription (target: its ID).
	LegCancelSubscription LegKind = "cancel_subscription"
	// LegTicketUpdate sets the ticket's status and adds tags (target: the
	// ticket ID). It travels in the same Zendesk update as the reply when
	// the action has one, so the two land together or not at all.
	LegTicketUpdate LegKind = "ticket_update"
	// LegReply posts the action's comment on the ticket (target: the ticket
	// ID). It is always last: it says what the other legs did.
	LegReply LegKind = "reply"
)

// Replay says how a leg's effect is made safe to attempt again after an
// attempt whose outcome is not known (a lost answer, a killed worker).
// The subscription service also deduplicates cancellations by our
// Idempotency-Key (a repeat gets the first request's answer: see
// subscriptions.Client.Cancel), but a cancellation's safety does not rest
// on that: a second cancellation has no second effect whatever key it
// carries (ReplayIdempotent).
type Replay string

const (
	// ReplaySearchReceiver: the receiver does not deduplicate but can be
	// searched for our key (Zendesk keeps it in the audit's metadata): the
	// retry searches before it writes, and the write is fenced by the
	// ticket's updated_stamp, so a late write of ours is refused.
	ReplaySearchReceiver Replay = "search_receiver"
	// ReplayIdempotent: doing it twice has the effect of doing it once (a
	// second cancellation answers 409 already_cancelled). A lost answer is
	// still 'unknown' until the receiver's status read resolves it: never
	// 'failed' on a guess.
	ReplayIdempotent Replay = "idempotent"
)

// LegSpec is what the product knows about one leg kind: the one place that
// says who receives it, when it runs and how its replay is made safe.
type LegSpec struct {
	Kind LegKind
	// Receiver is the external service the leg writes to.
	Receiver string
	// Phase orders the legs of an action: lower phases run first, and a
	// leg runs only once every leg of a lower phase succeeded. Legs that
	// change the customer's account are phase 0; the public reply, which
	// says what they did, is the last phase.
	Phase int
	// Replay is how a retry of the leg is made safe.
	Replay Replay
	// Resolvable is true when a lost answer can be resolved by reading the
	// receiver's state (the subscription's status), so the leg may be
	// 'unknown' in the ledger until it is.
	Resolvable bool
}

var legSpecs = map[LegKind]LegSpec{
	LegCancelSubscription: {Kind: LegCancelSubscription, Receiver: "subscriptions", Phase: 0, Replay: ReplayIdempotent, Resolvable: true},
	LegTicketUpdate:       {Kind: LegTicketUpdate, Receiver: "zendesk", Phase: 1, Replay: ReplaySearchReceiver},
	LegReply:              {Kind: LegReply, Receiver: "zendesk", Phase: 1, Replay: ReplaySearchReceiver},
}

// SpecOf returns the spec of a leg kind; ok is false for an unknown kind.
func SpecOf(k LegKind) (LegSpec, bool) {
	s, ok := legSpecs[k]
	return s, ok
}

// LegKinds lists every kind, in the order an action's legs run.
func LegKinds() []LegKind {
	return []LegKind{LegCancelSubscription, LegTicketUpdate, LegReply}
}

// Leg is one effect of an action, as the ledger keys it: a kind and the
// target it acts on.
type Leg struct {
	Kind   LegKind `json:"kind"`
	Target string  `json:"target"`
}

// Legs returns the action's legs in the order they run: the subscription
// cancellations (in the action's order), the ticket update, the reply.
// Their index is the leg's position in the ledger.
func (a Action) Legs() []Leg {
	var legs []Leg
	for _, s := range a.CancelSubscriptions {
		legs = append(legs, Leg{Kind: LegCancelSubscription, Target: s})
	}
	ticket := strconv.FormatInt(a.TicketID, 10)
	if a.UpdateTicket != nil {
		legs = append(legs, Leg{Kind: LegTicketUpdate, Target: ticket})
	}
	if a.Comment != nil {
		legs = append(legs, Leg{Kind: LegReply, Target: ticket})
	}
	return legs
}

// HasZendeskLeg reports whether the action writes to the ticket (a reply,
// a ticket update, or both, in one Zendesk update).
func (a Action) HasZendeskLeg() bool { return a.Comment != nil || a.UpdateTicket != nil }

// TicketUpdate sets a ticket's status and adds tags. Tags are only added:
// the update sends the ticket's tags read just before, plus these, as a
// safe update, so a tag someone else set meanwhile is never dropped (the
// write is refused and read again instead). Zendesk's Update Ticket
// replaces the whole tag list, and its additional_tags works only on bulk
// updates:
// https://developer.zendesk.com/documentation/ticketing/managing-tickets/adding-tags-to-tickets-without-overwriting-existing-tags/
type TicketUpdate struct {
	// Status is one of TicketStatuses, or empty to leave it.
	Status string `json:"status,omitempty"`
	// Tags are added to the ticket's tags.
	Tags []string `json:"tags,omitempty"`
}

// TicketStatuses are the statuses an action may set. "new" cannot be set
// back and "closed" is set by Zendesk's own automations, not by agents.
// https://developer.zendesk.com/api-reference/ticketing/tickets/tickets/#json-format
var TicketStatuses = []string{"open", "pending", "hold", "solved"}

// MaxTagsPerUpdate bounds one action's tags.
const MaxTagsPerUpdate = 20

// tagPattern is the subset of tags we send: Zendesk lowercases tags and
// splits them at spaces, so anything outside it would be stored as
// something other than what was asked.
var tagPattern = regexp.MustCompile(`^[a-z0-9_][a-z0-9_./:-]{0,79}$`)

// Validate checks a ticket update; every problem wraps ErrInvalidInput.
func (u TicketUpdate) Validate() error {
	if u.Status == "" && len(u.Tags) == 0 {
		return fmt.Errorf("%w: update_ticket sets neither a status nor tags", ErrInvalidInput)
	}
	if u.Status != "" && !slices.Contains(TicketStatuses, u.Status) {
		return fmt.Errorf("%w: update_ticket status %q must be one of %v", ErrInvalidInput, u.Status, TicketStatuses)
	}
	if len(u.Tags) > MaxTagsPerUpdate {
		return fmt.Errorf("%w: update_ticket has %d tags, more than %d", ErrInvalidInput, len(u.Tags), MaxTagsPerUpdate)
	}
	for i, t := range u.Tags {
		if !tagPattern.MatchString(t) {
			return fmt.Errorf("%w: tag %q must be 1-80 characters of lower-case letters, digits and _ . / : - (no spaces)", ErrInvalidInput, t)
		}
		if slices.Contains(u.Tags[:i], t) {
			return fmt.Errorf("%w: tag %s listed twice", ErrInvalidInput, t)
		}
	}
	return nil
}
