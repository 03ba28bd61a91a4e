package ingest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/ledger"
)

// The ticket mirror (table ticket_mirror) is ingestion's: webhooks and the
// reconciler write it, here and nowhere else; the scan, the enrichment
// lookup and the API read it. Every write takes the ticket's advisory lock
// (ledger.TicketLockKey), the lock the ledger's Reserve takes too, so a
// mirror write and an action reservation of one ticket serialize.

// TicketMirror is supportflow's local copy of a Zendesk ticket's headline
// fields.
type TicketMirror struct {
	TicketID    int64
	Subject     string
	Status      string
	RequesterID int64
	// UpdatedAt is Zendesk's updated_at; an older copy never overwrites a
	// newer one, so out-of-order webhooks are harmless.
	UpdatedAt time.Time
	// LastCustomerCommentAt and LastAgentCommentAt are the times of the
	// newest public comment by the requester and by an agent; zero when
	// unknown. The scan drafts a reply when the customer spoke last.
	LastCustomerCommentAt time.Time
	LastAgentCommentAt    time.Time
	// EventTime orders copies of one second. Zendesk's updated_at is whole
	// seconds, so two updates of one second carry the same one; a webhook's
	// envelope time has sub-second precision, and the copy of the later
	// event wins. Zero means the copy is final for its second: a copy read
	// from the incremental export long after that second (the
	// reconciler's), which wins a tie against any webhook's copy, since no
	// update of that second can follow it. On a copy read back, zero means
	// the stored fields came from such a copy or from before event times
	// were kept.
	EventTime time.Time

	// final is whether the stored fields came from a copy final for its
	// second (read back only).
	final bool
}

// UpsertTicketMirror writes a ticket's mirror in its own transaction,
// under the ticket's advisory lock.
func (s *Store) UpsertTicketMirror(ctx context.Context, t TicketMirror) (bool, error) {
	var wrote bool
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var err error
		wrote, err = s.UpsertTicketMirrorTx(ctx, tx, t)
		return err
	})
	return wrote, err
}

// UpsertTicketMirrorTx writes a ticket's mirror inside tx after taking the
// ticket's advisory lock (held until tx ends), the same lock the ledger's
// Reserve takes. It reports whether the row changed (false when the stored
// copy is newer and the copy brings no newer comment).
func (s *Store) UpsertTicketMirrorTx(ctx context.Context, tx pgx.Tx, t TicketMirror) (bool, error) {
	c, err := s.ApplyTicketMirrorTx(ctx, tx, t)
	return c.Wrote, err
}

// MirrorChange says what a mirror write changed.
type MirrorChange struct {
	// Wrote is true when the row was inserted or updated (an older copy
	// of the ticket writes nothing).
	Wrote bool
	// Created is true when the ticket was not mirrored before.
	Created bool
	// Newer is true when the ticket's updated_at moved forward (or the
	// row is new): the write carried news, not a repeat.
	Newer bool
	// CustomerNews is true when the customer's newest public comment moved
	// forward and is newer than the agents' newest: the customer wrote.
	CustomerNews bool
	// CommentNews is true when either comment time moved forward.
	CommentNews bool
	// Changed is true when the ticket's fields changed (Newer, or a copy
	// of the same second with other fields).
	Changed bool
}

// ApplyTicketMirrorTx is UpsertTicketMirrorTx reporting what changed.
// Comment times only ever move forward (the newest of the stored and the
// given), so events applied in any order leave the same mirror.
func (s *Store) ApplyTicketMirrorTx(ctx context.Context, tx pgx.Tx, t TicketMirror) (MirrorChange, error) {
	var c MirrorChange
	if t.TicketID <= 0 {
		return c, fmt.Errorf("ingest: mirror ticket id %d must be positive", t.TicketID)
	}
	prev, found, err := s.lockMirror(ctx, tx, t.TicketID)
	if err != nil {
		return c, err
	}
	var requester *int64
	if t.RequesterID != 0 {
		requester = &t.RequesterID
	}
	// The ticket's fields follow the newest copy (Newest). Comment times
	// only ever move forward, whatever the copy's age, so a late event
	// still tells who spoke: applied in any order, the events leave the
	// same mirror.
	fresh := !found || Newest(prev, t)
	c.commentNews(prev, t)
	if !fresh && !c.CommentNews {
		return c, nil // an older copy with nothing new
	}
	if _, err := tx.Exec(ctx, `
INSERT INTO ticket_mirror (account, ticket_id, subject, status, requester_id, zendesk_updated_at,
                           last_customer_comment_at, last_agent_comment_at, fields_event_time, fields_final)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $10, $11)
ON CONFLICT (account, ticket_id) DO UPDATE
SET subject = CASE WHEN $9 THEN excluded.subject ELSE ticket_mirror.subject END,
    status = CASE WHEN $9 AND excluded.status <> '' THEN excluded.status ELSE ticket_mirror.status END,
    requester_id = CASE WHEN $9 THEN COALESCE(excluded.requester_id, ticket_mirror.requester_id) ELSE ticket_mirror.requester_id END,
    fields_event_time = CASE WHEN $9 THEN excluded.fields_event_time ELSE ticket_mirror.fields_event_time END,
    fields_final = CASE WHEN $9 THEN excluded.fields_final ELSE ticket_mirror.fields_final END,
    zendesk_updated_at = GREATEST(ticket_mirror.zendesk_updated_at, excluded.zendesk_updated_at),
    mirrored_at = now(),
    last_customer_comment_at = GREATEST(ticket_mirror.last_customer_comment_at, excluded.last_customer_comment_at),
    last_agent_comment_at = GREATEST(ticket_mirror.last_agent_comment_at, excluded.last_agent_comment_at)`,
		s.account, t.TicketID, t.Subject, t.Status, requester, t.UpdatedAt,
		nullTime(t.LastCustomerCommentAt), nullTime(t.LastAgentCommentAt), fresh,
		nullTime(t.EventTime), t.EventTime.IsZero()); err != nil {
		return c, fmt.Errorf("ingest: mirror ticket %d: %w", t.TicketID, err)
	}
	c.Wrote = true
	c.Created = !found
	c.Newer = !found || t.UpdatedAt.After(prev.UpdatedAt)
	// Same second, other fields: the copy is news to the mirror (a later
	// event of that second, or the reconciler's export copy repairing
	// what an out-of-order webhook left).
	c.Changed = c.Newer || (fresh && ((t.Status != "" && t.Status != prev.Status) || t.Subject != prev.Subject ||
		(t.RequesterID != 0 && t.RequesterID != prev.RequesterID)))
	return c, nil
}

// Newest reports whether copy t of a ticket replaces the stored copy
// prev's fields (status, subject, requester):
//
//   - a newer updated_at wins, an older one loses;
//   - a stored row without fields (only comment times, AdvanceCommentsTx)
//     takes any copy's;
//   - within one second (Zendesk's updated_at is whole seconds): a copy
//     final for its second (zero EventTime: read from the export after
//     that second) wins; a webhook's copy loses to a final one and
//     otherwise wins only with a later envelope time (sub-second), so a
//     late delivery of an older event of that second never overwrites a
//     newer one; a stored copy of unknown order (from before event times
//     were kept) is replaced, as before.
//
// Equal envelope times are two events of one action (one audit), which
// carry the same ticket: the first stays.
func Newest(prev, t TicketMirror) bool {
	switch {
	case prev.Status == "" && prev.Subject == "" && prev.RequesterID == 0:
		return true
	case t.UpdatedAt.After(prev.UpdatedAt):
		return true
	case t.UpdatedAt.Before(prev.UpdatedAt):
		return false
	case t.EventTime.IsZero():
		return true
	case prev.final:
		return false
	case prev.EventTime.IsZero():
		return true
	}
	return t.EventTime.After(prev.EventTime)
}

// AdvanceCommentsTx moves a ticket's comment times forward (never back)
// under its advisory lock, for a source that knows who spoke when but not
// the ticket's other fields. A ticket not yet mirrored gets a row with
// only those times (no status, so the scan skips it until its fields
// arrive).
func (s *Store) AdvanceCommentsTx(ctx context.Context, tx pgx.Tx, ticketID int64, customerAt, agentAt time.Time) (MirrorChange, error) {
	var c MirrorChange
	if ticketID <= 0 {
		return c, fmt.Errorf("ingest: mirror ticket id %d must be positive", ticketID)
	}
	prev, found, err := s.lockMirror(ctx, tx, ticketID)
	if err != nil {
		return c, err
	}
	updated := customerAt
	if agentAt.After(updated) {
		updated = agentAt
	}
	_, err = tx.Exec(ctx, `
INSERT INTO ticket_mirror (account, ticket_id, zendesk_updated_at, last_customer_comment_at, last_agent_comment_at)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (account, ticket_id) DO UPDATE
SET last_customer_comment_at = GREATEST(ticket_mirror.last_customer_comment_at, excluded.last_customer_comment_at),
    last_agent_comment_at = GREATEST(ticket_mirror.last_agent_comment_at, excluded.last_agent_comment_at),
    mirrored_at = now()`,
		s.account, ticketID, updated, nullTime(customerAt), nullTime(agentAt))
	if err != nil {
		return c, fmt.Errorf("ingest: mirror comments of ticket %d: %w", ticketID, err)
	}
	c.Wrote, c.Created = true, !found
	c.commentNews(prev, TicketMirror{LastCustomerCommentAt: customerAt, LastAgentCommentAt: agentAt})
	return c, nil
}

func (c *MirrorChange) commentNews(prev, t TicketMirror) {
	customer := t.LastCustomerCommentAt.After(prev.LastCustomerCommentAt)
	agent := t.LastAgentCommentAt.After(prev.LastAgentCommentAt)
	c.CommentNews = customer || agent
	newestAgent := prev.LastAgentCommentAt
	if t.LastAgentCommentAt.After(newestAgent) {
		newestAgent = t.LastAgentCommentAt
	}
	c.CustomerNews = customer && t.LastCustomerCommentAt.After(newestAgent)
}

// lockMirror takes the ticket's advisory lock and reads its mirror.
func (s *Store) lockMirror(ctx context.Context, tx pgx.Tx, ticketID int64) (TicketMirror, bool, error) {
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, ledger.TicketLockKey(s.account, ticketID)); err != nil {
		return TicketMirror{}, false, fmt.Errorf("ingest: mirror ticket %d: lock: %w", ticketID, err)
	}
	t, err := s.getTicketMirror(ctx, tx, ticketID)
	if errors.Is(err, supportflow.ErrNotFound) {
		return t, false, nil
	}
	return t, err == nil, err
}

// nullTime maps the zero time to SQL NULL.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// GetTicketMirror reads a mirrored ticket; supportflow.ErrNotFound when the ticket has
// never been mirrored.
func (s *Store) GetTicketMirror(ctx context.Context, ticketID int64) (TicketMirror, error) {
	return s.getTicketMirror(ctx, s.db, ticketID)
}

func (s *Store) getTicketMirror(ctx context.Context, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, ticketID int64) (TicketMirror, error) {
	t := TicketMirror{TicketID: ticketID}
	var requester *int64
	var customer, agent, eventTime *time.Time
	err := db.QueryRow(ctx, `
SELECT subject, status, requester_id, zendesk_updated_at, last_customer_comment_at, last_agent_comment_at,
       fields_event_time, fields_final
FROM ticket_mirror WHERE account = $1 AND ticket_id = $2`, s.account, ticketID).Scan(
		&t.Subject, &t.Status, &requester, &t.UpdatedAt, &customer, &agent, &eventTime, &t.final)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, fmt.Errorf("%w: ticket %d is not mirrored", supportflow.ErrNotFound, ticketID)
	}
	if err != nil {
		return t, fmt.Errorf("ingest: mirror of ticket %d: %w", ticketID, err)
	}
	if requester != nil {
		t.RequesterID = *requester
	}
	if customer != nil {
		t.LastCustomerCommentAt = *customer
	}
	if agent != nil {
		t.LastAgentCommentAt = *agent
	}
	if eventTime != nil {
		t.EventTime = *eventTime
	}
	return t, nil
}
