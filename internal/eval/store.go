package eval

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/ledger"
)

// Store keeps one account's evaluation results (tables eval_run and
// eval_result); it is their only writer.
type Store struct {
	db      ledger.DB
	account string
}

// NewStore returns the store of account (the ledger's account) on db. An
// empty account is a programming error and panics.
func NewStore(db ledger.DB, account string) *Store {
	if account == "" {
		panic("eval: empty account")
	}
	return &Store{db: db, account: account}
}

// Result is one ticket's outcome in an evaluation run.
type Result struct {
	TicketID    int64
	Draft       string
	ActualReply string
	// Score is in [0, 1]; nil when the ticket could not be drafted.
	Score *float64
	Error string
}

// PutResult stores a ticket's result in a run; a retried write replaces
// the earlier one.
func (s *Store) PutResult(ctx context.Context, runID string, r Result) error {
	_, err := s.db.Exec(ctx, `
INSERT INTO eval_result (account, run_id, ticket_id, draft, actual_reply, score, error)
VALUES ($1, $2, $3, $4, $5, $6, NULLIF($7, ''))
ON CONFLICT (account, run_id, ticket_id) DO UPDATE
SET draft = excluded.draft, actual_reply = excluded.actual_reply, score = excluded.score,
    error = excluded.error, created_at = now()`,
		s.account, runID, r.TicketID, r.Draft, r.ActualReply, r.Score, r.Error)
	if err != nil {
		return fmt.Errorf("eval: result %s/%d: %w", runID, r.TicketID, err)
	}
	return nil
}

// Results reads a run's per-ticket results, by ticket.
func (s *Store) Results(ctx context.Context, runID string) ([]Result, error) {
	rows, err := s.db.Query(ctx, `
SELECT ticket_id, draft, actual_reply, score, COALESCE(error, '')
FROM eval_result WHERE account = $1 AND run_id = $2 ORDER BY ticket_id`, s.account, runID)
	if err != nil {
		return nil, fmt.Errorf("eval: results %s: %w", runID, err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (Result, error) {
		var r Result
		err := row.Scan(&r.TicketID, &r.Draft, &r.ActualReply, &r.Score, &r.Error)
		return r, err
	})
}

// PutSummary stores (or replaces) a run's summary.
func (s *Store) PutSummary(ctx context.Context, sum supportflow.EvaluationStatus) error {
	_, err := s.db.Exec(ctx, `
INSERT INTO eval_run (account, run_id, set_name, tickets, drafted, failed, mean_score)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (account, run_id) DO UPDATE
SET set_name = excluded.set_name, tickets = excluded.tickets, drafted = excluded.drafted,
    failed = excluded.failed, mean_score = excluded.mean_score, finished_at = now()`,
		s.account, sum.RunID, sum.Set, sum.Total, sum.Done-sum.Failed, sum.Failed, sum.MeanScore)
	if err != nil {
		return fmt.Errorf("eval: summary %s: %w", sum.RunID, err)
	}
	return nil
}

// GetSummary reads a run's summary; supportflow.ErrNotFound before it
// finished.
func (s *Store) GetSummary(ctx context.Context, runID string) (supportflow.EvaluationStatus, error) {
	sum := supportflow.EvaluationStatus{RunID: runID, Finished: true}
	var drafted int
	err := s.db.QueryRow(ctx, `
SELECT set_name, tickets, drafted, failed, mean_score FROM eval_run WHERE account = $1 AND run_id = $2`,
		s.account, runID).Scan(&sum.Set, &sum.Total, &drafted, &sum.Failed, &sum.MeanScore)
	if errors.Is(err, pgx.ErrNoRows) {
		return sum, fmt.Errorf("%w: evaluation run %s", supportflow.ErrNotFound, runID)
	}
	sum.Done = drafted + sum.Failed
	return sum, err
}
