package ledger

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/supportflow/supportflow"
)

// GetEnrichment reads the enrichment of a ticket's requester. found is
// false when the ticket has none yet, and when the stored one was looked up
// for another requester (or for one not recorded, a row from before
// requesters were stored): a requester change drops what was known, so the
// previous requester's subscriptions never reach a prompt or a
// cancellation. A requesterID that is not positive (unknown) matches
// nothing.
func (l *Ledger) GetEnrichment(ctx context.Context, ticketID, requesterID int64) (e supportflow.Enrichment, found bool, err error) {
	if requesterID <= 0 {
		return supportflow.Enrichment{}, false, nil
	}
	err = l.db.QueryRow(ctx, `
SELECT customer_id, customer_email, lifetime_orders, active_subscriptions, looked_up_at
FROM ticket_enrichment WHERE account = $1 AND ticket_id = $2 AND requester_id = $3`, l.account, ticketID, requesterID).Scan(
		&e.CustomerID, &e.CustomerEmail, &e.LifetimeOrders, &e.ActiveSubscriptions, &e.LookedUpAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return supportflow.Enrichment{}, false, nil
	}
	if err != nil {
		return supportflow.Enrichment{}, false, fmt.Errorf("ledger: enrichment of ticket %d: %w", ticketID, err)
	}
	return e, true, nil
}

// PutEnrichment writes the enrichment of a ticket's requester, replacing
// whatever the ticket had (the enrichment workflow's projection, written
// by package enrichment; tests and the local run seed it here). A
// requesterID that is not positive is ErrInvalidInput: data of an unknown
// requester could never be read back.
func (l *Ledger) PutEnrichment(ctx context.Context, ticketID, requesterID int64, e supportflow.Enrichment) error {
	if requesterID <= 0 {
		return fmt.Errorf("%w: enrichment of ticket %d needs its requester, got %d", supportflow.ErrInvalidInput, ticketID, requesterID)
	}
	subs := e.ActiveSubscriptions
	if subs == nil {
		subs = []string{}
	}
	_, err := l.db.Exec(ctx, `
INSERT INTO ticket_enrichment (account, ticket_id, requester_id, customer_id, customer_email, lifetime_orders, active_subscriptions, looked_up_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, now())
ON CONFLICT (account, ticket_id) DO UPDATE
SET requester_id = excluded.requester_id,
    customer_id = excluded.customer_id, customer_email = excluded.customer_email,
    lifetime_orders = excluded.lifetime_orders, active_subscriptions = excluded.active_subscriptions,
    looked_up_at = excluded.looked_up_at`,
		l.account, ticketID, requesterID, e.CustomerID, e.CustomerEmail, e.LifetimeOrders, subs)
	if err != nil {
		return fmt.Errorf("ledger: put enrichment of ticket %d: %w", ticketID, err)
	}
	return nil
}
