package ledger

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

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
}

// UpsertTicketMirror writes a ticket's mirror in its own transaction,
// under the ticket's advisory lock.
func (l *Ledger) UpsertTicketMirror(ctx context.Context, t TicketMirror) (bool, error) {
	var wrote bool
	err := pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		var err error
		wrote, err = l.UpsertTicketMirrorTx(ctx, tx, t)
		return err
	})
	return wrote, err
}

// UpsertTicketMirrorTx writes a ticket's mirror inside tx after taking the
// ticket's advisory lock (held until tx ends), the same lock Reserve takes.
// It reports whether the row changed (false when the stored copy is
// newer).
func (l *Ledger) UpsertTicketMirrorTx(ctx context.Context, tx pgx.Tx, t TicketMirror) (bool, error) {
	if t.TicketID <= 0 {
		return false, fmt.Errorf("ledger: mirror ticket id %d must be positive", t.TicketID)
	}
	if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, TicketLockKey(l.account, t.TicketID)); err != nil {
		return false, fmt.Errorf("ledger: mirror ticket %d: lock: %w", t.TicketID, err)
	}
	var requester *int64
	if t.RequesterID != 0 {
		requester = &t.RequesterID
	}
	tag, err := tx.Exec(ctx, `
INSERT INTO ticket_mirror (account, ticket_id, subject, status, requester_id, zendesk_updated_at,
                           last_customer_comment_at, last_agent_comment_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)
ON CONFLICT (account, ticket_id) DO UPDATE
SET subject = excluded.subject, status = excluded.status, requester_id = excluded.requester_id,
    zendesk_updated_at = excluded.zendesk_updated_at, mirrored_at = now(),
    last_customer_comment_at = GREATEST(ticket_mirror.last_customer_comment_at, excluded.last_customer_comment_at),
    last_agent_comment_at = GREATEST(ticket_mirror.last_agent_comment_at, excluded.last_agent_comment_at)
WHERE ticket_mirror.zendesk_updated_at <= excluded.zendesk_updated_at`,
		l.account, t.TicketID, t.Subject, t.Status, requester, t.UpdatedAt,
		nullTime(t.LastCustomerCommentAt), nullTime(t.LastAgentCommentAt))
	if err != nil {
		return false, fmt.Errorf("ledger: mirror ticket %d: %w", t.TicketID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// nullTime maps the zero time to SQL NULL.
func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// GetTicketMirror reads a mirrored ticket; ErrNotFound when the ticket has
// never been mirrored.
func (l *Ledger) GetTicketMirror(ctx context.Context, ticketID int64) (TicketMirror, error) {
	t := TicketMirror{TicketID: ticketID}
	var requester *int64
	var customer, agent *time.Time
	err := l.db.QueryRow(ctx, `
SELECT subject, status, requester_id, zendesk_updated_at, last_customer_comment_at, last_agent_comment_at
FROM ticket_mirror WHERE account = $1 AND ticket_id = $2`, l.account, ticketID).Scan(
		&t.Subject, &t.Status, &requester, &t.UpdatedAt, &customer, &agent)
	if errors.Is(err, pgx.ErrNoRows) {
		return t, fmt.Errorf("%w: ticket %d is not mirrored", ErrNotFound, ticketID)
	}
	if err != nil {
		return t, fmt.Errorf("ledger: mirror of ticket %d: %w", ticketID, err)
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
	return t, nil
}
