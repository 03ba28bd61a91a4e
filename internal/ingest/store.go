package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/text"
	"github.com/supportflow/supportflow/ledger"
)

// Store keeps the ticket mirror (mirror.go), ticket events, the
// reconciler's export cursor and its runs for one account. Its mirror
// writes share the per-ticket advisory lock with action reservation
// (ledger.TicketLockKey).
type Store struct {
	db      ledger.DB
	account string
}

// NewStore returns the account's store on db (the same kind of handle
// the ledger takes), for the ledger's account. An empty account is a
// programming error and panics.
func NewStore(db ledger.DB, account string) *Store {
	if account == "" {
		panic("ingest: empty account")
	}
	return &Store{db: db, account: account}
}

// Source of a ticket event row.
const (
	SourceWebhook   = "webhook"
	SourceReconcile = "reconcile"
)

// Recorded is what recording an event did.
type Recorded struct {
	// Duplicate is true when the event ID was already recorded: nothing
	// was written.
	Duplicate bool
	Mirror    MirrorChange
	// Own is true when supportflow's own API user caused the event.
	Own bool
	// Dispatch is true when the event is queued for Temporal (enrichment,
	// and a supersede when Event.CustomerActivity).
	Dispatch bool
	Event    supportflow.TicketEvent
}

// RecordWebhook applies a webhook's ticket change in one transaction: the
// mirror under the ticket's lock and the ticket_event row keyed by the
// event ID. A repeated event ID writes nothing and reports Duplicate.
// ownUserID is supportflow's Zendesk API user (0: unknown, nothing is
// treated as its own).
//
// Who spoke (Speaker) moves "customer spoke last" or "agent spoke last";
// the ticket's fields follow the newest copy, ordered within a second by
// the envelope's time (Newest).
func (s *Store) RecordWebhook(ctx context.Context, c TicketChange, ownUserID int64) (Recorded, error) {
	m := TicketMirror{TicketID: c.TicketID, Subject: c.Subject, Status: c.Status, RequesterID: c.RequesterID,
		UpdatedAt: c.UpdatedAt, EventTime: c.At}
	own := ownUserID != 0 && (c.ActorID == ownUserID || (c.Comment != nil && c.Comment.AuthorID == ownUserID))
	var spokeAt time.Time
	var speaker string
	switch {
	case c.Comment != nil && c.Comment.Public:
		speaker, spokeAt = Speaker(c.Comment.AuthorID, c.Comment.Staff, c.RequesterID, ownUserID), c.Comment.At
	case c.Message != nil:
		speaker, spokeAt = MessageSpeaker(c.Message.ActorType, c.Message.ActorID, ownUserID), c.Message.At
	}
	switch speaker {
	case SpeakerCustomer:
		m.LastCustomerCommentAt = spokeAt
	case SpeakerAgent:
		m.LastAgentCommentAt = spokeAt
	}
	kind := supportflow.TicketUpdated
	if c.EventType == TypeTicketCreated {
		kind = supportflow.TicketCreated
		// A ticket the requester opened starts with their public
		// description: the customer spoke.
		if c.ActorID > 0 && c.ActorID == c.RequesterID && !own {
			m.LastCustomerCommentAt = c.UpdatedAt
		}
	}
	var actor int64
	if c.ActorID > 0 || c.ActorID == SystemActorID {
		actor = c.ActorID
	}
	r := row{eventType: c.EventType, source: SourceWebhook, at: c.At, kind: kind, actorID: actor, own: own}
	return s.record(ctx, c.EventID, func(MirrorChange) row { return r }, func(tx pgx.Tx) (MirrorChange, error) {
		if c.Message != nil {
			// A messaging event carries none of the ticket's fields: only
			// who spoke moves, and a message by no one (a bot's) changes
			// nothing.
			if m.LastCustomerCommentAt.IsZero() && m.LastAgentCommentAt.IsZero() {
				return MirrorChange{}, nil
			}
			return s.AdvanceCommentsTx(ctx, tx, c.TicketID, m.LastCustomerCommentAt, m.LastAgentCommentAt)
		}
		return s.ApplyTicketMirrorTx(ctx, tx, m)
	}, c.TicketID, c.RequesterID)
}

// Who a public comment or message is from, for "who spoke last".
const (
	// SpeakerCustomer is an end user: the requester, a CC'd colleague,
	// the customer writing from another address.
	SpeakerCustomer = "customer"
	// SpeakerAgent is staff (an agent or admin) or supportflow itself.
	SpeakerAgent = "agent"
	// SpeakerNone is no one a reply is owed to or came from: a trigger,
	// an automation, Zendesk itself (actor "-1"), a bot.
	SpeakerNone = ""
)

// Speaker classifies a public comment's author the way Zendesk describes
// people: ticket.comment_added carries comment.author.is_staff, true for
// agents and admins, false for end users
// (https://developer.zendesk.com/api-reference/webhooks/event-types/ticket-events).
//
//   - supportflow's own API user (ownUserID) is an agent, whatever the event says;
//   - the system actor (SystemActorID: a trigger or automation's comment) is no one;
//   - is_staff false is a customer (any end user, not only the requester),
//     is_staff true an agent;
//   - is_staff absent (an event that does not say): the requester is the
//     customer and anyone else an agent, the rule before is_staff was read.
func Speaker(authorID int64, isStaff *bool, requesterID, ownUserID int64) string {
	switch {
	case ownUserID != 0 && authorID == ownUserID:
		return SpeakerAgent
	case authorID == SystemActorID:
		return SpeakerNone
	case isStaff != nil && *isStaff:
		return SpeakerAgent
	case isStaff != nil:
		return SpeakerCustomer
	case authorID != 0 && authorID == requesterID:
		return SpeakerCustomer
	}
	return SpeakerAgent
}

// MessageSpeaker classifies a messaging message by event.actor.type, as
// the messaging events page lists them (end_user, agent, trigger, system):
// an end user's message is the customer's, an agent's (or supportflow's)
// an agent's, and a trigger's, the system's or an unknown type's no one's.
// https://developer.zendesk.com/api-reference/webhooks/event-types/messaging-events
func MessageSpeaker(actorType string, actorID, ownUserID int64) string {
	switch {
	case ownUserID != 0 && actorID == ownUserID:
		return SpeakerAgent
	case actorType == ActorEndUser:
		return SpeakerCustomer
	case actorType == ActorAgent:
		return SpeakerAgent
	}
	return SpeakerNone
}

// row is a ticket_event row before the mirror decided the rest.
type row struct {
	eventType, source, kind string
	at                      time.Time
	actorID                 int64
	own                     bool
}

// record runs mirror inside a transaction and records event eventID with
// the row that rowFor derives from the mirror's change. The ID is checked
// first, so a known event changes nothing.
func (s *Store) record(ctx context.Context, eventID string, rowFor func(MirrorChange) row, mirror func(pgx.Tx) (MirrorChange, error), ticketID, requesterID int64) (Recorded, error) {
	var rec Recorded
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var exists bool
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM ticket_event WHERE account = $1 AND event_id = $2)`,
			s.account, eventID).Scan(&exists); err != nil {
			return fmt.Errorf("ingest: look up event: %w", err)
		}
		if exists {
			rec.Duplicate = true
			return nil
		}
		mc, err := mirror(tx)
		if err != nil {
			return err
		}
		r := rowFor(mc)
		rec.Mirror, rec.Own = mc, r.own
		// Only news is handed on: an older copy of the ticket (out of
		// order) changes nothing and must not supersede a proposal that
		// already covered it. Our own writes are recorded, never handed on.
		rec.Dispatch = mc.Wrote && !r.own
		rec.Event = supportflow.TicketEvent{TicketID: ticketID, Kind: r.kind, At: r.at, RequesterID: requesterID,
			CustomerActivity: rec.Dispatch && mc.CustomerNews && r.kind == supportflow.TicketUpdated}
		var requester, actor *int64
		if requesterID != 0 {
			requester = &requesterID
		}
		if r.actorID != 0 {
			actor = &r.actorID
		}
		tag, err := tx.Exec(ctx, `
INSERT INTO ticket_event (account, event_id, ticket_id, event_type, source, occurred_at, kind, requester_id, actor_id,
                          own_write, customer_activity, mirrored, dispatched_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, CASE WHEN $13 THEN NULL ELSE now() END)
ON CONFLICT (account, event_id) DO NOTHING`,
			s.account, eventID, ticketID, text.Clip(r.eventType, 200), r.source, r.at, r.kind, requester, actor,
			r.own, rec.Event.CustomerActivity, mc.Wrote, rec.Dispatch)
		if err != nil {
			return fmt.Errorf("ingest: record event: %w", err)
		}
		if tag.RowsAffected() == 0 {
			// A concurrent delivery of the same event won; roll back our
			// copy of its (identical) mirror write.
			rec = Recorded{Duplicate: true}
			return errDuplicate
		}
		return nil
	})
	if errors.Is(err, errDuplicate) {
		return Recorded{Duplicate: true}, nil
	}
	if err != nil {
		return rec, err
	}
	return rec, nil
}

var errDuplicate = errors.New("duplicate event")

// Due is an event the relay hands to Temporal.
type Due struct {
	EventID  string
	Event    supportflow.TicketEvent
	Attempts int
}

// ClaimDue takes up to limit events due for dispatch, pushing each one's
// dispatch_after a lease ahead so no other relay takes it meanwhile.
func (s *Store) ClaimDue(ctx context.Context, limit int, lease time.Duration) ([]Due, error) {
	rows, err := s.db.Query(ctx, `
UPDATE ticket_event SET dispatch_after = now() + $3::interval, dispatch_attempts = dispatch_attempts + 1
WHERE (account, event_id) IN (
    SELECT account, event_id FROM ticket_event
    WHERE account = $1 AND dispatched_at IS NULL AND NOT own_write AND dispatch_after <= now()
    ORDER BY dispatch_after LIMIT $2
    FOR UPDATE SKIP LOCKED)
RETURNING event_id, ticket_id, kind, occurred_at, COALESCE(requester_id, 0), customer_activity, dispatch_attempts`,
		s.account, limit, lease.String())
	if err != nil {
		return nil, fmt.Errorf("ingest: claim due events: %w", err)
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (Due, error) {
		var d Due
		err := r.Scan(&d.EventID, &d.Event.TicketID, &d.Event.Kind, &d.Event.At, &d.Event.RequesterID, &d.Event.CustomerActivity, &d.Attempts)
		return d, err
	})
}

// MarkDispatched records that Temporal has the event.
func (s *Store) MarkDispatched(ctx context.Context, eventID string) error {
	_, err := s.db.Exec(ctx, `UPDATE ticket_event SET dispatched_at = now(), last_error = NULL
WHERE account = $1 AND event_id = $2 AND dispatched_at IS NULL`, s.account, eventID)
	if err != nil {
		return fmt.Errorf("ingest: mark dispatched: %w", err)
	}
	return nil
}

// Postpone records a failed dispatch; the event is due again after wait.
func (s *Store) Postpone(ctx context.Context, eventID string, wait time.Duration, cause error) error {
	_, err := s.db.Exec(ctx, `UPDATE ticket_event SET dispatch_after = now() + $3::interval, last_error = $4
WHERE account = $1 AND event_id = $2 AND dispatched_at IS NULL`, s.account, eventID, wait.String(), text.Clip(cause.Error(), 1024))
	if err != nil {
		return fmt.Errorf("ingest: postpone dispatch: %w", err)
	}
	return nil
}

// Prune deletes this account's ticket events older than cutoff that have
// nothing left to do (dispatched, or our own writes, which are never
// dispatched) and reconciliation runs older than cutoff. An undispatched
// event stays until a relay hands it on. Zendesk does not redeliver an
// event that old, so its ID is no longer needed to deduplicate.
func (s *Store) Prune(ctx context.Context, cutoff time.Time) (map[string]int64, error) {
	out := map[string]int64{}
	for _, q := range []struct{ table, sql string }{
		{"ticket_event", `DELETE FROM ticket_event WHERE ctid IN (SELECT ctid FROM ticket_event
WHERE account = $1 AND received_at < $2 AND (dispatched_at IS NOT NULL OR own_write) LIMIT $3)`},
		{"reconcile_run", `DELETE FROM reconcile_run WHERE id IN (SELECT id FROM reconcile_run
WHERE account = $1 AND finished_at < $2 LIMIT $3)`},
	} {
		n, err := ledger.PruneInBatches(ctx, s.db, q.table, q.sql, s.account, cutoff)
		out[q.table] = n
		if err != nil {
			return out, fmt.Errorf("ingest: %w", err)
		}
	}
	return out, nil
}
