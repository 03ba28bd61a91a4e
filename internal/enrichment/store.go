// Package enrichment is the shadow-mode code path of ticket enrichment: the
// BigQuery lookup activity and the writes to supportflow's own enrichment
// tables (ticket_enrichment, enrichment_run, lookup_log,
// enrichment_dead_letter), of which it is the only writer; the drafts and
// the cancellations' ownership check read a ticket's enrichment here
// (GetEnrichment). It writes nothing else: it does not import the Zendesk
// client or the action ledger, and a test fails if it ever does
// (TestShadowPathImportsAndWritesOnlyItsOwn). Live mode's note on the
// ticket is a separate activity the workflow runs through the action
// ledger.
package enrichment

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/bqlookup"
)

// DB is what the store needs from a pool. *pgxpool.Pool satisfies it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// Store reads and writes one account's enrichment tables.
type Store struct {
	db      DB
	account string
}

// NewStore returns the store of account on db; an empty account panics.
func NewStore(db DB, account string) *Store {
	if account == "" {
		panic("enrichment: empty account")
	}
	return &Store{db: db, account: account}
}

// Attempt identifies one lookup attempt for the lookup log.
type Attempt struct {
	TicketID   int64
	WorkflowID string
	RunID      string
	ActivityID string
	Attempt    int32
}

// Lookup-log outcomes.
const (
	OutcomeRunning  = "running"
	OutcomeFound    = "found"
	OutcomeNotFound = "not_found"
	OutcomeError    = "error"
)

// BeginAttempt writes the attempt's lookup-log row (outcome running). A
// replayed call (same attempt) finds the row and writes nothing, so each
// attempt has exactly one row.
func (s *Store) BeginAttempt(ctx context.Context, a Attempt) error {
	_, err := s.db.Exec(ctx, `
INSERT INTO lookup_log (account, ticket_id, workflow_id, run_id, activity_id, attempt)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (account, workflow_id, run_id, activity_id, attempt) DO NOTHING`,
		s.account, a.TicketID, a.WorkflowID, a.RunID, a.ActivityID, a.Attempt)
	if err != nil {
		return fmt.Errorf("enrichment: lookup log of ticket %d: %w", a.TicketID, err)
	}
	return nil
}

// FinishAttempt records how the attempt ended on its lookup-log row.
func (s *Store) FinishAttempt(ctx context.Context, a Attempt, outcome, errMsg, jobID string) error {
	_, err := s.db.Exec(ctx, `
UPDATE lookup_log SET outcome = $7, error = NULLIF($8, ''), job_id = NULLIF($9, ''), finished_at = now()
WHERE account = $1 AND ticket_id = $2 AND workflow_id = $3 AND run_id = $4 AND activity_id = $5 AND attempt = $6`,
		s.account, a.TicketID, a.WorkflowID, a.RunID, a.ActivityID, a.Attempt, outcome, errMsg, jobID)
	if err != nil {
		return fmt.Errorf("enrichment: lookup log of ticket %d: %w", a.TicketID, err)
	}
	return nil
}

// LookupLogEntry is one row of the lookup log.
type LookupLogEntry struct {
	Attempt int32
	Outcome string
	Error   string
	JobID   string
}

// LookupLog reads a ticket's lookup-log rows, oldest first.
func (s *Store) LookupLog(ctx context.Context, ticketID int64) ([]LookupLogEntry, error) {
	rows, err := s.db.Query(ctx, `
SELECT attempt, outcome, COALESCE(error, ''), COALESCE(job_id, '')
FROM lookup_log WHERE account = $1 AND ticket_id = $2 ORDER BY id`, s.account, ticketID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (LookupLogEntry, error) {
		var e LookupLogEntry
		err := r.Scan(&e.Attempt, &e.Outcome, &e.Error, &e.JobID)
		return e, err
	})
}

// Record writes a lookup's result in one transaction: the run (what
// BigQuery ran and billed), the projection when the customer was found,
// and the resolution of a dead letter the ticket may have. It returns the
// run's ID. The projection records requesterID, the requester looked up:
// readers take a ticket's enrichment only for its current requester
// (GetEnrichment), so a lookup that finds nothing for a new
// requester leaves the previous requester's row unread.
func (s *Store) Record(ctx context.Context, ticketID, requesterID int64, r bqlookup.Result) (int64, error) {
	var runID int64
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := tx.QueryRow(ctx, `
INSERT INTO enrichment_run (account, ticket_id, requester_id, found, job_id, bytes_billed, bytes_processed)
VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id`,
			s.account, ticketID, requesterID, r.Found, r.JobID, r.BytesBilled, r.BytesProcessed).Scan(&runID); err != nil {
			return err
		}
		if r.Found {
			subs := r.Customer.ActiveSubscriptions
			if subs == nil {
				subs = []string{}
			}
			if _, err := tx.Exec(ctx, `
INSERT INTO ticket_enrichment (account, ticket_id, requester_id, customer_id, customer_email, lifetime_orders, active_subscriptions, looked_up_at, run_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, now(), $8)
ON CONFLICT (account, ticket_id) DO UPDATE
SET requester_id = excluded.requester_id,
    customer_id = excluded.customer_id, customer_email = excluded.customer_email,
    lifetime_orders = excluded.lifetime_orders, active_subscriptions = excluded.active_subscriptions,
    looked_up_at = excluded.looked_up_at, run_id = excluded.run_id`,
				s.account, ticketID, requesterID, r.Customer.CustomerID, r.Customer.Email, r.Customer.LifetimeOrders, subs, runID); err != nil {
				return err
			}
		}
		_, err := tx.Exec(ctx, `
UPDATE enrichment_dead_letter SET resolved_at = now()
WHERE account = $1 AND ticket_id = $2 AND resolved_at IS NULL`, s.account, ticketID)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("enrichment: record lookup of ticket %d: %w", ticketID, err)
	}
	return runID, nil
}

// GetEnrichment reads the enrichment of a ticket's requester. found is
// false when the ticket has none yet, and when the stored one was looked up
// for another requester (or for one not recorded, a row from before
// requesters were stored): a requester change drops what was known, so the
// previous requester's subscriptions never reach a prompt or a
// cancellation. A requesterID that is not positive (unknown) matches
// nothing.
func (s *Store) GetEnrichment(ctx context.Context, ticketID, requesterID int64) (e supportflow.Enrichment, found bool, err error) {
	if requesterID <= 0 {
		return supportflow.Enrichment{}, false, nil
	}
	err = s.db.QueryRow(ctx, `
SELECT customer_id, customer_email, lifetime_orders, active_subscriptions, looked_up_at
FROM ticket_enrichment WHERE account = $1 AND ticket_id = $2 AND requester_id = $3`, s.account, ticketID, requesterID).Scan(
		&e.CustomerID, &e.CustomerEmail, &e.LifetimeOrders, &e.ActiveSubscriptions, &e.LookedUpAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return supportflow.Enrichment{}, false, nil
	}
	if err != nil {
		return supportflow.Enrichment{}, false, fmt.Errorf("enrichment: enrichment of ticket %d: %w", ticketID, err)
	}
	return e, true, nil
}

// PutEnrichment writes the enrichment of a ticket's requester, replacing
// whatever the ticket had, as Record does for a lookup that found the
// customer but without a recorded run (run_id stays as it was): tests and
// the local run seed the projection with it. A requesterID that is not
// positive is supportflow.ErrInvalidInput: data of an unknown requester
// could never be read back.
func (s *Store) PutEnrichment(ctx context.Context, ticketID, requesterID int64, e supportflow.Enrichment) error {
	if requesterID <= 0 {
		return fmt.Errorf("%w: enrichment of ticket %d needs its requester, got %d", supportflow.ErrInvalidInput, ticketID, requesterID)
	}
	subs := e.ActiveSubscriptions
	if subs == nil {
		subs = []string{}
	}
	_, err := s.db.Exec(ctx, `
INSERT INTO ticket_enrichment (account, ticket_id, requester_id, customer_id, customer_email, lifetime_orders, active_subscriptions, looked_up_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, now())
ON CONFLICT (account, ticket_id) DO UPDATE
SET requester_id = excluded.requester_id,
    customer_id = excluded.customer_id, customer_email = excluded.customer_email,
    lifetime_orders = excluded.lifetime_orders, active_subscriptions = excluded.active_subscriptions,
    looked_up_at = excluded.looked_up_at`,
		s.account, ticketID, requesterID, e.CustomerID, e.CustomerEmail, e.LifetimeOrders, subs)
	if err != nil {
		return fmt.Errorf("enrichment: put enrichment of ticket %d: %w", ticketID, err)
	}
	return nil
}

// Run is one recorded lookup.
type Run struct {
	ID             int64
	Found          bool
	JobID          string
	BytesBilled    int64
	BytesProcessed int64
}

// Runs reads a ticket's recorded lookups, oldest first.
func (s *Store) Runs(ctx context.Context, ticketID int64) ([]Run, error) {
	rows, err := s.db.Query(ctx, `
SELECT id, found, job_id, bytes_billed, bytes_processed
FROM enrichment_run WHERE account = $1 AND ticket_id = $2 ORDER BY id`, s.account, ticketID)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowToStructByPos[Run])
}

// DeadLetter is a ticket whose lookup gave up.
type DeadLetter struct {
	TicketID       int64
	Attempts       int
	LastError      string
	Reason         string
	DeadLetteredAt time.Time
	RedrivenAt     *time.Time
	ResolvedAt     *time.Time
}

// PutDeadLetter dead-letters a ticket: one row per ticket, replaced (and
// re-opened) when it is dead-lettered again.
// requesterID 0 means unknown.
func (s *Store) PutDeadLetter(ctx context.Context, ticketID, requesterID int64, attempts int, lastErr, reason string) error {
	var requester *int64
	if requesterID > 0 {
		requester = &requesterID
	}
	_, err := s.db.Exec(ctx, `
INSERT INTO enrichment_dead_letter (account, ticket_id, requester_id, attempts, last_error, reason)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (account, ticket_id) DO UPDATE
SET requester_id = COALESCE(excluded.requester_id, enrichment_dead_letter.requester_id),
    attempts = excluded.attempts, last_error = excluded.last_error, reason = excluded.reason,
    dead_lettered_at = now(), redriven_at = NULL, resolved_at = NULL`,
		s.account, ticketID, requester, attempts, lastErr, reason)
	if err != nil {
		return fmt.Errorf("enrichment: dead-letter ticket %d: %w", ticketID, err)
	}
	return nil
}

// MarkRedriven records an operator's re-drive of an open dead letter; it
// reports false when the ticket has no open dead letter.
func (s *Store) MarkRedriven(ctx context.Context, ticketID int64) (bool, error) {
	tag, err := s.db.Exec(ctx, `
UPDATE enrichment_dead_letter SET redriven_at = now()
WHERE account = $1 AND ticket_id = $2 AND resolved_at IS NULL`, s.account, ticketID)
	if err != nil {
		return false, fmt.Errorf("enrichment: re-drive ticket %d: %w", ticketID, err)
	}
	return tag.RowsAffected() == 1, nil
}

// GetDeadLetter reads a ticket's dead letter; an error wrapping
// supportflow.ErrNotFound when it has none.
func (s *Store) GetDeadLetter(ctx context.Context, ticketID int64) (DeadLetter, error) {
	var d DeadLetter
	err := s.db.QueryRow(ctx, `
SELECT ticket_id, attempts, last_error, reason, dead_lettered_at, redriven_at, resolved_at
FROM enrichment_dead_letter WHERE account = $1 AND ticket_id = $2`, s.account, ticketID).Scan(
		&d.TicketID, &d.Attempts, &d.LastError, &d.Reason, &d.DeadLetteredAt, &d.RedrivenAt, &d.ResolvedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return d, fmt.Errorf("%w: no dead letter for ticket %d", supportflow.ErrNotFound, ticketID)
	}
	return d, err
}

// RequesterOf finds a ticket's requester: in the ticket mirror (read
// only), else the newest lookup of the ticket, else its dead letter. found
// is false when none of them knows.
func (s *Store) RequesterOf(ctx context.Context, ticketID int64) (requesterID int64, found bool, err error) {
	var id *int64
	err = s.db.QueryRow(ctx, `
SELECT COALESCE(
  (SELECT requester_id FROM ticket_mirror WHERE account = $1 AND ticket_id = $2),
  (SELECT requester_id FROM enrichment_run WHERE account = $1 AND ticket_id = $2 ORDER BY id DESC LIMIT 1),
  (SELECT requester_id FROM enrichment_dead_letter WHERE account = $1 AND ticket_id = $2))`,
		s.account, ticketID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) || (err == nil && id == nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("enrichment: requester of ticket %d: %w", ticketID, err)
	}
	return *id, true, nil
}

// Prune deletes this account's finished enrichment rows older than
// cutoff: lookup-log rows that ended (never one still running), recorded
// runs (a projection keeps its data; its run_id is cleared) and resolved
// dead letters. Open dead letters stay until resolved.
func (s *Store) Prune(ctx context.Context, cutoff time.Time) (map[string]int64, error) {
	out := map[string]int64{}
	// Each statement is spelled out, so the shadow-path guard test sees
	// every table this package writes.
	for _, p := range []struct{ table, sql string }{
		{"lookup_log", `DELETE FROM lookup_log WHERE id IN (SELECT id FROM lookup_log
WHERE account = $1 AND outcome <> 'running' AND finished_at < $2 LIMIT 5000)`},
		{"enrichment_run", `DELETE FROM enrichment_run WHERE id IN (SELECT id FROM enrichment_run
WHERE account = $1 AND created_at < $2 LIMIT 5000)`},
		{"enrichment_dead_letter", `DELETE FROM enrichment_dead_letter WHERE ctid IN (SELECT ctid FROM enrichment_dead_letter
WHERE account = $1 AND resolved_at IS NOT NULL AND resolved_at < $2 LIMIT 5000)`},
	} {
		for {
			tag, err := s.db.Exec(ctx, p.sql, s.account, cutoff)
			if err != nil {
				return out, fmt.Errorf("enrichment: prune %s: %w", p.table, err)
			}
			out[p.table] += tag.RowsAffected()
			if tag.RowsAffected() < 5000 {
				break
			}
		}
	}
	return out, nil
}
