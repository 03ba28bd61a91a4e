package ledger

import (
	"context"
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
INSERT INTO ticket_mirror (account, ticket_id, subject, status, requester_id, zendesk_updated_at)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (account, ticket_id) DO UPDATE
SET subject = excluded.subject, status = excluded.status, requester_id = excluded.requester_id,
    zendesk_updated_at = excluded.zendesk_updated_at, mirrored_at = now()
WHERE ticket_mirror.zendesk_updated_at <= excluded.zendesk_updated_at`,
		l.account, t.TicketID, t.Subject, t.Status, requester, t.UpdatedAt)
	if err != nil {
		return false, fmt.Errorf("ledger: mirror ticket %d: %w", t.TicketID, err)
	}
	return tag.RowsAffected() == 1, nil
}
