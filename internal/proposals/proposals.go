// Package proposals keeps the drafted proposals and the approvals of one
// account (tables proposal and approval): what a draft proposed, where it
// stands (awaiting approval, executing, done, ...), who approved what, and
// the check every leg of an execution makes before it writes
// (CheckApproval). It is the only writer of those tables. It reads the
// action ledger (package ledger) where an approval depends on an
// execution's progress, and the ticket mirror and enrichment to find draft
// candidates, but writes neither.
package proposals

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/ledger"
)

// Store reads and writes the proposals and approvals of one account.
type Store struct {
	db      ledger.DB
	account string
	ledger  *ledger.Ledger
}

// New returns the store of account (the ledger's account: the Zendesk
// subdomain) on db. An empty account is a programming error and panics.
func New(db ledger.DB, account string) *Store {
	if account == "" {
		panic("proposals: empty account")
	}
	return &Store{db: db, account: account, ledger: ledger.New(db, account)}
}

// Account returns the account the store writes for.
func (s *Store) Account() string { return s.account }

// ActionState reads the ledger state of one action (ledger.Ledger's
// ActionState), so that a Store is all starter.Retry needs.
func (s *Store) ActionState(ctx context.Context, key string) (string, error) {
	return s.ledger.ActionState(ctx, key)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// SaveProposal stores a draft's proposal in state awaiting_approval. It is
// idempotent: saving the same proposal again (an activity retried after its
// answer was lost) changes nothing and reports created=false. The same ID
// with a different reply, ticket, subscriptions or ticket update is supportflow.ErrConflict, since a
// proposal a human may have seen must never change under them.
func (s *Store) SaveProposal(ctx context.Context, p supportflow.DraftProposal) (created bool, err error) {
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
	tag, err := s.db.Exec(ctx, `
INSERT INTO proposal (account, proposal_id, ticket_id, reply, cancel_subscriptions, model, conversation_through, update_ticket,
                      prompt_tokens, completion_tokens)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)
ON CONFLICT (account, proposal_id) DO NOTHING`,
		s.account, p.ID, p.TicketID, p.Reply, subs, p.Model, p.ConversationThrough, p.UpdateTicket, p.PromptTokens, p.CompletionTokens)
	if err != nil {
		return false, fmt.Errorf("proposals: save proposal %s: %w", p.ID, err)
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	stored, err := s.GetProposal(ctx, p.ID)
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
func (s *Store) SetProposalState(ctx context.Context, proposalID, state, decidedBy, errMsg string) (bool, error) {
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
	tag, err := s.db.Exec(ctx, `
UPDATE proposal
SET state = $3, decided_by = COALESCE(NULLIF($4, ''), decided_by), error = NULLIF($5, ''), updated_at = now()
WHERE account = $1 AND proposal_id = $2
  AND CASE $3
        WHEN 'executing' THEN state IN ('awaiting_approval', 'executing')
        WHEN 'done' THEN state = 'executing'
        WHEN 'failed' THEN state = 'executing'
        ELSE state = 'awaiting_approval'
      END`,
		s.account, proposalID, state, decidedBy, errMsg)
	if err != nil {
		return false, fmt.Errorf("proposals: proposal %s -> %s: %w", proposalID, state, err)
	}
	if tag.RowsAffected() == 1 {
		return true, nil
	}
	if _, err := s.GetProposal(ctx, proposalID); err != nil {
		return false, err
	}
	return false, nil
}

// GetProposal reads a proposal; supportflow.ErrNotFound when there is none.
func (s *Store) GetProposal(ctx context.Context, proposalID string) (supportflow.ProposalRecord, error) {
	var p supportflow.ProposalRecord
	var decided, errMsg *string
	err := s.db.QueryRow(ctx, `
SELECT proposal_id, ticket_id, reply, cancel_subscriptions, model, conversation_through, update_ticket,
       prompt_tokens, completion_tokens, state, decided_by, error, created_at, updated_at
FROM proposal WHERE account = $1 AND proposal_id = $2`, s.account, proposalID).Scan(
		&p.ID, &p.TicketID, &p.Reply, &p.CancelSubscriptions, &p.Model, &p.ConversationThrough, &p.UpdateTicket,
		&p.PromptTokens, &p.CompletionTokens,
		&p.State, &decided, &errMsg, &p.CreatedAt, &p.UpdatedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return supportflow.ProposalRecord{}, fmt.Errorf("%w: proposal %s", supportflow.ErrNotFound, proposalID)
	}
	if err != nil {
		return supportflow.ProposalRecord{}, fmt.Errorf("proposals: get proposal %s: %w", proposalID, err)
	}
	p.DecidedBy, p.Error = deref(decided), deref(errMsg)
	return p, nil
}

// NewerLiveProposal returns the ID of a proposal of the same ticket
// saved after proposalID that is awaiting approval, executing or done
// ("" when none): a redraft that has taken the old proposal's place.
func (s *Store) NewerLiveProposal(ctx context.Context, ticketID int64, proposalID string) (string, error) {
	var id string
	err := s.db.QueryRow(ctx, `
SELECT n.proposal_id FROM proposal n, proposal o
WHERE o.account = $1 AND o.proposal_id = $3 AND n.account = $1 AND n.ticket_id = $2
  AND n.proposal_id <> o.proposal_id AND n.created_at > o.created_at
  AND n.state IN ('awaiting_approval', 'executing', 'done')
ORDER BY n.created_at DESC LIMIT 1`, s.account, ticketID, proposalID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("proposals: newer proposals of ticket %d: %w", ticketID, err)
	}
	return id, nil
}

// LatestProposal returns the ticket's newest proposal; supportflow.ErrNotFound when it
// has none.
func (s *Store) LatestProposal(ctx context.Context, ticketID int64) (supportflow.ProposalRecord, error) {
	var id string
	err := s.db.QueryRow(ctx, `SELECT proposal_id FROM proposal WHERE account = $1 AND ticket_id = $2
ORDER BY created_at DESC, proposal_id DESC LIMIT 1`, s.account, ticketID).Scan(&id)
	if errors.Is(err, pgx.ErrNoRows) {
		return supportflow.ProposalRecord{}, fmt.Errorf("%w: ticket %d has no proposal", supportflow.ErrNotFound, ticketID)
	}
	if err != nil {
		return supportflow.ProposalRecord{}, fmt.Errorf("proposals: latest proposal of ticket %d: %w", ticketID, err)
	}
	return s.GetProposal(ctx, id)
}

// CountProposals counts a ticket's proposals, for tests and operators.
func (s *Store) CountProposals(ctx context.Context, ticketID int64) (int, error) {
	var n int
	err := s.db.QueryRow(ctx, `SELECT count(*) FROM proposal WHERE account = $1 AND ticket_id = $2`, s.account, ticketID).Scan(&n)
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
func (s *Store) DraftCandidates(ctx context.Context, limit int, enrichmentGrace time.Duration) ([]int64, error) {
	if limit <= 0 {
		return nil, fmt.Errorf("%w: limit %d must be positive", supportflow.ErrInvalidInput, limit)
	}
	rows, err := s.db.Query(ctx, `
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
LIMIT $2`, s.account, limit, enrichmentGrace.String())
	if err != nil {
		return nil, fmt.Errorf("proposals: draft candidates: %w", err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("proposals: draft candidates: %w", err)
	}
	return ids, nil
}
