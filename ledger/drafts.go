package ledger

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/supportflow/supportflow"
)

// SaveProposal stores a draft's proposal in state awaiting_approval. It is
// idempotent: saving the same proposal again (an activity retried after its
// answer was lost) changes nothing and reports created=false. The same ID
// with a different reply, ticket, subscriptions or ticket update is supportflow.ErrConflict, since a
// proposal a human may have seen must never change under them.
func (l *Ledger) SaveProposal(ctx context.Context, p supportflow.DraftProposal) (created bool, err error) {
	if err := supportflow.ValidateProposalID(p.ID); err != nil {
		return false, err
	}
	if err := supportflow.ValidateTicketID(p.TicketID); err != nil {
		return false, err
	}
	subs := p.CancelSubscriptions
	if subs == nil {
		subs = []string{}
	}
	tag, err := l.db.Exec(ctx, `
INSERT INTO proposal (account, proposal_id, ticket_id, reply, cancel_subscriptions, model, conversation_through, update_ticket,
                      prompt_tokens, completion_tokens)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (account, proposal_id) DO NOTHING`,
		l.account, p.ID, p.TicketID, p.Reply, subs, p.Model, p.ConversationThrough, p.UpdateTicket, p.PromptTokens, p.CompletionTokens)
	if err != nil {
		return false, fmt.Errorf("ledger: save proposal %s: %w", p.ID, err)
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	stored, err := l.GetProposal(ctx, p.ID)
	if err != nil {
		return false, err
	}
	if stored.TicketID != p.TicketID || stored.Reply != p.Reply || !slices.Equal(stored.CancelSubscriptions, subs) ||
		!sameTicketUpdate(stored.UpdateTicket, p.UpdateTicket) {
		return false, fmt.Errorf("%w: proposal %s was saved with different content", supportflow.ErrConflict, p.ID)
	}
	return false, nil
}

func sameTicketUpdate(a, b *supportflow.TicketUpdate) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Status == b.Status && slices.Equal(a.Tags, b.Tags)
}

// SetProposalState moves a proposal to a later state, recording who
// decided and any error: awaiting_approval to executing, rejected,
// superseded or expired; executing to done or failed. Any other move (a
// terminal state is never left) changes nothing and reports false.
func (l *Ledger) SetProposalState(ctx context.Context, proposalID, state, decidedBy, errMsg string) (bool, error) {
	if err := supportflow.ValidateProposalID(proposalID); err != nil {
		return false, err
	}
	switch state {
	case supportflow.DraftExecuting, supportflow.DraftDone, supportflow.DraftRejected,
		supportflow.DraftSuperseded, supportflow.DraftExpired, supportflow.DraftFailed:
	default:
		return false, fmt.Errorf("%w: proposal state %q", supportflow.ErrInvalidInput, state)
	}
	// The allowed moves: awaiting_approval -> executing | rejected |
	// superseded | expired; executing -> executing (a retried write) |
	// done | failed.
	tag, err := l.db.Exec(ctx, `
UPDATE proposal
SET state = $3, decided_by = COALESCE(NULLIF($4, ''), decided_by), error = NULLIF($5, ''), updated_at = now()
WHERE account = $1 AND proposal_id = $2
  AND CASE $3
        WHEN 'executing' THEN state IN ('awaiting_approval', 'executing')
        WHEN 'done' THEN state = 'executing'
        WHEN 'failed' THEN state = 'executing'
        ELSE state = 'awaiting_approval'
      END`,
		l.account, proposalID, state, decidedBy, errMsg)
	if err != nil {
		return false, fmt.Errorf("ledger: proposal %s -> %s: %w", proposalID, state, err)
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	if _, err := l.GetProposal(ctx, proposalID); err != nil {
		return false, err
	}
	return false, nil
}

// GetProposal reads a proposal; supportflow.ErrNotFound when there is none.
func (l *Ledger) GetProposal(ctx context.Context, proposalID string) (supportflow.ProposalRecord, error) {
	var p supportflow.ProposalRecord
	var decided, errMsg *string
	err := l.db.QueryRow(ctx, `
SELECT proposal_id, ticket_id, reply, cancel_subscriptions, model, conversation_through, update_ticket,
       prompt_tokens, completion_tokens, state, decided_by, error, created_at, updated_at
FROM proposal WHERE account = $1 AND proposal_id = $2`, l.account, proposalID).Scan(
		&p.ID, &p.TicketID, &p.Reply, &p.CancelSubscriptions, &p.Model, &p.ConversationThrough, &p.UpdateTicket,
		&p.PromptTokens, &p.CompletionTokens,
		&p.State, &decided, &errMsg, &p.CreatedAt, &p.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return supportflow.ProposalRecord{}, fmt.Errorf("%w: proposal %s", supportflow.ErrNotFound, proposalID)
	}
	if err != nil {
		return supportflow.ProposalRecord{}, fmt.Errorf("ledger: get proposal %s: %w", proposalID, err)
	}
	p.DecidedBy, p.Error = deref(decided), deref(errMsg)
	return p, nil
}

// NewerLiveProposal returns the ID of a proposal of the same ticket
// saved after proposalID that is awaiting approval, executing or done
// ("" when none): a redraft that has taken the old proposal's place.
func (l *Ledger) NewerLiveProposal(ctx context.Context, ticketID int64, proposalID string) (string, error) {
	var id string
	err := l.db.QueryRow(ctx, `
SELECT n.proposal_id FROM proposal n, proposal o
WHERE o.account = $1 AND o.proposal_id = $3 AND n.account = $1 AND n.ticket_id = $2
  AND n.proposal_id <> o.proposal_id AND n.created_at > o.created_at
  AND n.state IN ('awaiting_approval', 'executing', 'done')
ORDER BY n.created_at DESC LIMIT 1`, l.account, ticketID, proposalID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("ledger: newer proposals of ticket %d: %w", ticketID, err)
	}
	return id, nil
}

// CountProposals counts a ticket's proposals, for tests and operators.
// LatestProposal returns the ticket's newest proposal; supportflow.ErrNotFound when it
// has none.
func (l *Ledger) LatestProposal(ctx context.Context, ticketID int64) (supportflow.ProposalRecord, error) {
	var id string
	err := l.db.QueryRow(ctx, `SELECT proposal_id FROM proposal WHERE account = $1 AND ticket_id = $2
ORDER BY created_at DESC, proposal_id DESC LIMIT 1`, l.account, ticketID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return supportflow.ProposalRecord{}, fmt.Errorf("%w: ticket %d has no proposal", supportflow.ErrNotFound, ticketID)
	}
	if err != nil {
		return supportflow.ProposalRecord{}, fmt.Errorf("ledger: latest proposal of ticket %d: %w", ticketID, err)
	}
	return l.GetProposal(ctx, id)
}

func (l *Ledger) CountProposals(ctx context.Context, ticketID int64) (int, error) {
	var n int
	err := l.db.QueryRow(ctx, `SELECT count(*) FROM proposal WHERE account = $1 AND ticket_id = $2`, l.account, ticketID).Scan(&n)
	return n, err
}

// DraftCandidates lists mirrored tickets that need a draft, oldest
// customer comment first, at most limit: the ticket is new or open, the
// customer spoke last (their newest comment is newer than the agents'),
// no proposal has seen that comment, and the ticket is enriched or its
// customer's comment is older than enrichmentGrace (so a draft waits for
// the commerce data it proposes cancellations from, but not forever when
// the lookup finds nothing). Whether a draft is already running is not
// known here; the scan's start joins a running draft.
func (l *Ledger) DraftCandidates(ctx context.Context, limit int, enrichmentGrace time.Duration) ([]int64, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: limit %d must be positive", supportflow.ErrInvalidInput, limit)
	}
	rows, err := l.db.Query(ctx, `
SELECT m.ticket_id
FROM ticket_mirror m
WHERE m.account = $1
  AND m.status IN ('new', 'open')
  AND m.last_customer_comment_at IS NOT NULL
  AND m.last_customer_comment_at > COALESCE(m.last_agent_comment_at, '-infinity')
  AND NOT EXISTS (
      SELECT 1 FROM proposal p
      WHERE p.account = m.account AND p.ticket_id = m.ticket_id
        AND p.conversation_through >= m.last_customer_comment_at)
  AND (EXISTS (SELECT 1 FROM ticket_enrichment e WHERE e.account = m.account AND e.ticket_id = m.ticket_id)
       OR m.last_customer_comment_at < now() - $3::interval)
ORDER BY m.last_customer_comment_at, m.ticket_id
LIMIT $2`, l.account, limit, enrichmentGrace.String())
	if err != nil {
		return nil, fmt.Errorf("ledger: draft candidates: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("ledger: draft candidates: %w", err)
	}
	return ids, nil
}

// EvalResult is one ticket's outcome in an evaluation run.
type EvalResult struct {
	TicketID    int64
	Draft       string
	ActualReply string
	// Score is in [0, 1]; nil when the ticket could not be drafted.
	Score *float64
	Error string
}

// PutEvalResult stores a ticket's result in a run; a retried write
// replaces the earlier one.
func (l *Ledger) PutEvalResult(ctx context.Context, runID string, r EvalResult) error {
	_, err := l.db.Exec(ctx, `
INSERT INTO eval_result (account, run_id, ticket_id, draft, actual_reply, score, error)
VALUES ($1, $2, $3, $4, $5, $6, NULLIF($7, ''))
ON CONFLICT (account, run_id, ticket_id) DO UPDATE
SET draft = excluded.draft, actual_reply = excluded.actual_reply, score = excluded.score,
    error = excluded.error, created_at = now()`,
		l.account, runID, r.TicketID, r.Draft, r.ActualReply, r.Score, r.Error)
	if err != nil {
		return fmt.Errorf("ledger: eval result %s/%d: %w", runID, r.TicketID, err)
	}
	return nil
}

// EvalResults reads a run's per-ticket results, by ticket.
func (l *Ledger) EvalResults(ctx context.Context, runID string) ([]EvalResult, error) {
	rows, err := l.db.Query(ctx, `
SELECT ticket_id, draft, actual_reply, score, COALESCE(error, '')
FROM eval_result WHERE account = $1 AND run_id = $2 ORDER BY ticket_id`, l.account, runID)
	if err != nil {
		return nil, fmt.Errorf("ledger: eval results %s: %w", runID, err)
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (EvalResult, error) {
		var r EvalResult
		err := row.Scan(&r.TicketID, &r.Draft, &r.ActualReply, &r.Score, &r.Error)
		return r, err
	})
}

// PutEvalSummary stores (or replaces) a run's summary.
func (l *Ledger) PutEvalSummary(ctx context.Context, s supportflow.EvaluationStatus) error {
	_, err := l.db.Exec(ctx, `
INSERT INTO eval_run (account, run_id, set_name, tickets, drafted, failed, mean_score)
VALUES ($1, $2, $3, $4, $5, $6, $7)
ON CONFLICT (account, run_id) DO UPDATE
SET set_name = excluded.set_name, tickets = excluded.tickets, drafted = excluded.drafted,
    failed = excluded.failed, mean_score = excluded.mean_score, finished_at = now()`,
		l.account, s.RunID, s.Set, s.Total, s.Done-s.Failed, s.Failed, s.MeanScore)
	if err != nil {
		return fmt.Errorf("ledger: eval summary %s: %w", s.RunID, err)
	}
	return nil
}

// GetEvalSummary reads a run's summary; supportflow.ErrNotFound before it finished.
func (l *Ledger) GetEvalSummary(ctx context.Context, runID string) (supportflow.EvaluationStatus, error) {
	s := supportflow.EvaluationStatus{RunID: runID, Finished: true}
	var drafted int
	err := l.db.QueryRow(ctx, `
SELECT set_name, tickets, drafted, failed, mean_score FROM eval_run WHERE account = $1 AND run_id = $2`,
		l.account, runID).Scan(&s.Set, &s.Total, &drafted, &s.Failed, &s.MeanScore)
	if errors.Is(err, pgx.ErrNoRows) {
		return s, fmt.Errorf("%w: evaluation run %s", supportflow.ErrNotFound, runID)
	}
	s.Done = drafted + s.Failed
	return s, err
}
