package ingest

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/supportflow/supportflow/internal/text"
	"github.com/supportflow/supportflow/ledger"
)

// The reconciler's own state: its export cursor, its lock and its runs.

// ExportCursor is where the reconciler resumes Zendesk's incremental
// exports.
type ExportCursor struct {
	// Tickets is the cursor-based ticket export's after_cursor; empty
	// before the first page (which starts from TicketsStart).
	Tickets string `json:"tickets,omitempty"`
	// TicketsStart is the ticket export's start_time (Unix seconds) until
	// a page gives an after_cursor; saved by a cold start before its first
	// read, so a cold start that fails resumes from the same point.
	TicketsStart int64 `json:"tickets_start,omitempty"`
	// EventsStart is the next ticket event export's start_time (Unix
	// seconds); 0 before the first.
	EventsStart int64 `json:"events_start,omitempty"`
	// CrowdedSecond is the event export's second (Unix) whose tickets are
	// being listed through the ticket export because it holds more events
	// than a page; 0 when none. EventsStart stays on it until the listing
	// ends, so a pass that runs out of requests mid-listing resumes the
	// listing, and only then steps past the second.
	CrowdedSecond int64 `json:"crowded_second,omitempty"`
	// CrowdedCursor is that listing's after_cursor ("" before its first
	// page).
	CrowdedCursor string `json:"crowded_cursor,omitempty"`
}

// Cursor reads the account's export cursor; the zero cursor when none.
func (s *Store) Cursor(ctx context.Context) (ExportCursor, error) {
	var c ExportCursor
	var tickets, crowdedCursor *string
	var ticketsStart, start, crowded *int64
	err := s.db.QueryRow(ctx, `SELECT tickets_cursor, tickets_start, events_start, crowded_second, crowded_cursor
FROM zendesk_export_cursor WHERE account = $1`,
		s.account).Scan(&tickets, &ticketsStart, &start, &crowded, &crowdedCursor)
	if errors.Is(err, pgx.ErrNoRows) {
		return c, nil
	}
	if err != nil {
		return c, fmt.Errorf("ingest: read export cursor: %w", err)
	}
	if tickets != nil {
		c.Tickets = *tickets
	}
	if ticketsStart != nil {
		c.TicketsStart = *ticketsStart
	}
	if start != nil {
		c.EventsStart = *start
	}
	if crowded != nil {
		c.CrowdedSecond = *crowded
	}
	if crowdedCursor != nil {
		c.CrowdedCursor = *crowdedCursor
	}
	return c, nil
}

// SaveCursor stores the export cursor. The event export's start never
// moves backwards (the greater of the stored and the given is kept), and
// an empty ticket cursor or a zero start keeps what is stored; the crowded
// second's listing is stored as given (zero and "" clear it).
func (s *Store) SaveCursor(ctx context.Context, c ExportCursor) error {
	_, err := s.db.Exec(ctx, `
INSERT INTO zendesk_export_cursor (account, tickets_cursor, tickets_start, events_start, crowded_second, crowded_cursor)
VALUES ($1, NULLIF($2, ''), NULLIF($3, 0), NULLIF($4, 0), NULLIF($5, 0), NULLIF($6, ''))
ON CONFLICT (account) DO UPDATE
SET tickets_cursor = COALESCE(excluded.tickets_cursor, zendesk_export_cursor.tickets_cursor),
    tickets_start = COALESCE(zendesk_export_cursor.tickets_start, excluded.tickets_start),
    events_start = GREATEST(zendesk_export_cursor.events_start, excluded.events_start),
    crowded_second = excluded.crowded_second,
    crowded_cursor = excluded.crowded_cursor,
    updated_at = now()`,
		s.account, c.Tickets, c.TicketsStart, c.EventsStart, c.CrowdedSecond, c.CrowdedCursor)
	if err != nil {
		return fmt.Errorf("ingest: save export cursor: %w", err)
	}
	return nil
}

// MarkCaughtUp records that the event export was read to its end
// (end_of_stream) by a request sent at asked: every change older than that
// (less Zendesk's minute) has been read. It never moves backwards.
func (s *Store) MarkCaughtUp(ctx context.Context, asked time.Time) error {
	_, err := s.db.Exec(ctx, `UPDATE zendesk_export_cursor
SET caught_up_at = GREATEST(caught_up_at, $2), updated_at = now() WHERE account = $1`, s.account, asked)
	if err != nil {
		return fmt.Errorf("ingest: mark export caught up: %w", err)
	}
	return nil
}

// TryLockReconcile takes the account's reconciliation lock (a session
// advisory lock on a connection of its own) if no one holds it; release
// gives it back. ok is false when another pass holds it.
func (s *Store) TryLockReconcile(ctx context.Context) (release func(), ok bool, err error) {
	acquirer, can := s.db.(interface {
		Acquire(ctx context.Context) (*pgxpool.Conn, error)
	})
	if !can {
		return func() {}, true, nil // a single connection: nothing to race
	}
	conn, err := acquirer.Acquire(ctx)
	if err != nil {
		return nil, false, fmt.Errorf("ingest: reconcile lock: %w", err)
	}
	key := ledger.TicketLockKey("reconcile/"+s.account, 0)
	if err := conn.QueryRow(ctx, `SELECT pg_try_advisory_lock($1)`, key).Scan(&ok); err != nil || !ok {
		conn.Release()
		if err != nil {
			return nil, false, fmt.Errorf("ingest: reconcile lock: %w", err)
		}
		return nil, false, nil
	}
	return func() {
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if _, err := conn.Exec(uctx, `SELECT pg_advisory_unlock($1)`, key); err != nil {
			conn.Conn().Close(uctx) // closing the session releases its locks
		}
		conn.Release()
	}, true, nil
}

// ReconcileRun is a reconciliation pass's record (reconcile_run).
type ReconcileRun struct {
	WorkflowID  string
	TicketsRead int
	EventsRead  int
	Requests    int
	Repaired    []int64
	CaughtUp    bool
	// Lag is how far behind the run's end the event cursor is.
	Lag time.Duration
	// Held is how many tickets were held when the run ended.
	Held int
	// Stepped lists the event export's seconds stepped past (Unix).
	Stepped []int64
	// GivenUp lists held tickets let go without being placed (deleted in
	// Zendesk, too many audits, too many attempts or held too long).
	GivenUp []int64
	// Error is what ended the run early ("" when it finished); never
	// customer text.
	Error string
}

// RecordRun stores a reconciliation's summary.
func (s *Store) RecordRun(ctx context.Context, run ReconcileRun) error {
	repaired, stepped, givenUp := run.Repaired, run.Stepped, run.GivenUp
	if repaired == nil {
		repaired = []int64{}
	}
	if stepped == nil {
		stepped = []int64{}
	}
	if givenUp == nil {
		givenUp = []int64{}
	}
	var errText *string
	if run.Error != "" {
		e := text.Clip(run.Error, 1024)
		errText = &e
	}
	_, err := s.db.Exec(ctx, `INSERT INTO reconcile_run (account, workflow_id, tickets_read, events_read, repaired, repaired_tickets,
  requests, caught_up, lag_seconds, held, stepped_seconds, given_up, error)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)`, s.account, run.WorkflowID, run.TicketsRead, run.EventsRead,
		len(repaired), repaired, run.Requests, run.CaughtUp, run.Lag.Seconds(), run.Held, stepped, givenUp, errText)
	if err != nil {
		return fmt.Errorf("ingest: record reconcile run: %w", err)
	}
	return nil
}

// HeldTicket is a ticket the reconciler could not place (reconcile_held).
type HeldTicket struct {
	TicketID  int64
	Reason    string
	Since     time.Time
	FirstSeen time.Time
	Attempts  int
}

// HoldTicket records that the changes of ticketID from since on could not
// be placed, and why (no customer text); a ticket already held keeps the
// older since.
func (s *Store) HoldTicket(ctx context.Context, ticketID int64, reason string, since time.Time) error {
	_, err := s.db.Exec(ctx, `
INSERT INTO reconcile_held (account, ticket_id, reason, since) VALUES ($1, $2, $3, $4)
ON CONFLICT (account, ticket_id) DO UPDATE
SET reason = excluded.reason, since = LEAST(reconcile_held.since, excluded.since), last_seen = now(),
    attempts = reconcile_held.attempts + 1`, s.account, ticketID, text.Clip(reason, 512), since)
	if err != nil {
		return fmt.Errorf("ingest: hold ticket %d: %w", ticketID, err)
	}
	return nil
}

// HeldTickets returns up to limit held tickets, the longest untried first.
func (s *Store) HeldTickets(ctx context.Context, limit int) ([]HeldTicket, error) {
	rows, err := s.db.Query(ctx, `SELECT ticket_id, reason, since, first_seen, attempts FROM reconcile_held
WHERE account = $1 ORDER BY last_seen, ticket_id LIMIT $2`, s.account, limit)
	if err != nil {
		return nil, fmt.Errorf("ingest: held tickets: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (HeldTicket, error) {
		var h HeldTicket
		err := r.Scan(&h.TicketID, &h.Reason, &h.Since, &h.FirstSeen, &h.Attempts)
		return h, err
	})
	if err != nil {
		return nil, fmt.Errorf("ingest: held tickets: %w", err)
	}
	return out, nil
}

// ReleaseHeld clears a held ticket once placed, unless it was held again
// after it was read (HoldTicket counts attempts up, so attempts no longer
// matches): a hold recorded meanwhile is kept for the next pass. The
// reconciliation lock makes a pass the only writer of reconcile_held, so
// in practice only the pass itself holds a ticket again.
func (s *Store) ReleaseHeld(ctx context.Context, ticketID int64, attempts int) error {
	_, err := s.db.Exec(ctx, `DELETE FROM reconcile_held WHERE account = $1 AND ticket_id = $2 AND attempts = $3`,
		s.account, ticketID, attempts)
	if err != nil {
		return fmt.Errorf("ingest: release held ticket %d: %w", ticketID, err)
	}
	return nil
}

// DropHeld lets a held ticket go without placing it (deleted in Zendesk,
// or given up); the caller logs and records why. An operator may do the
// same by hand: DELETE FROM reconcile_held WHERE account = ... AND
// ticket_id = ... (docs/ingestion.md).
func (s *Store) DropHeld(ctx context.Context, ticketID int64) error {
	_, err := s.db.Exec(ctx, `DELETE FROM reconcile_held WHERE account = $1 AND ticket_id = $2`, s.account, ticketID)
	if err != nil {
		return fmt.Errorf("ingest: drop held ticket %d: %w", ticketID, err)
	}
	return nil
}

// ReconcileHealth is what the reconciler's gauges read: the lag, and how
// many tickets are held. The lag is how long ago the reconciler last read
// the event export to its end (end_of_stream): a change older than that
// (and Zendesk's one-minute export delay) has surely been read, a newer
// one may not have been. It is measured from that moment, not from the
// cursor: Zendesk's end_time is the most recent time present in the
// result set, so on a quiet account the cursor stays at the last event's
// second and would count idle time as lag. Before the export was ever read
// to its end, the lag is how far the cursor is behind now; 0 before the
// first run.
// https://developer.zendesk.com/api-reference/ticketing/ticket-management/incremental_exports/#incremental-ticket-event-export
func (s *Store) ReconcileHealth(ctx context.Context) (lagSeconds float64, held int, err error) {
	err = s.db.QueryRow(ctx, `
SELECT COALESCE((SELECT GREATEST(CASE WHEN caught_up_at IS NOT NULL THEN EXTRACT(EPOCH FROM now() - caught_up_at)
                                      ELSE EXTRACT(EPOCH FROM now()) - events_start END, 0)::float8
                 FROM zendesk_export_cursor WHERE account = $1 AND events_start IS NOT NULL), 0),
       (SELECT count(*) FROM reconcile_held WHERE account = $1)`, s.account).Scan(&lagSeconds, &held)
	if err != nil {
		return 0, 0, fmt.Errorf("ingest: reconcile health: %w", err)
	}
	return lagSeconds, held, nil
}

// reconcileEventID names a ticket event the reconciler recorded, from
// business identity (the ticket and the change's time), so a second
// reconciliation of the same change is a duplicate.
func reconcileEventID(ticketID int64, what string, at time.Time) string {
	return "reconcile:" + strconv.FormatInt(ticketID, 10) + ":" + what + ":" + strconv.FormatInt(at.Unix(), 10)
}

// reconcileCommentEventID names a comment repair from what it carries: the
// ticket and the customer's and the agents' newest comment times it moves
// the mirror to (0 for none). A repair that carries a time an earlier one
// did not is a new event, even when its newest second is the earlier
// one's; the same repair read again is a duplicate.
func reconcileCommentEventID(ticketID int64, customerAt, agentAt time.Time) string {
	unix := func(t time.Time) string {
		if t.IsZero() {
			return "0"
		}
		return strconv.FormatInt(t.Unix(), 10)
	}
	return "reconcile:" + strconv.FormatInt(ticketID, 10) + ":comment:" + unix(customerAt) + ":" + unix(agentAt)
}
