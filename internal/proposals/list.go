package proposals

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"

	"github.com/supportflow/supportflow"
)

// States are the states a stored proposal can be in (the proposal table's
// CHECK), in the order a proposal passes through them.
var States = []string{
	supportflow.DraftAwaitingApproval, supportflow.DraftExecuting, supportflow.DraftDone,
	supportflow.DraftRejected, supportflow.DraftSuperseded, supportflow.DraftExpired, supportflow.DraftFailed,
}

// MaxListLimit is the most proposals one ListProposals call returns.
const MaxListLimit = 200

// ListFilter selects the proposals ListProposals returns.
type ListFilter struct {
	// State keeps only proposals in that state ("" for any).
	State string
	// TicketID keeps only that ticket's proposals (0 for any).
	TicketID int64
	// Limit bounds the answer: 1-MaxListLimit.
	Limit int
}

// Listed is one proposal as a list shows it: the stored proposal, and its
// approval when one is recorded.
type Listed struct {
	supportflow.ProposalRecord
	// ReplyChars is the reply's length in characters (Unicode code points).
	ReplyChars int
	// ApprovedBy, OnBehalfOf and ApprovedAt are the approval's, empty
	// (zero) when the proposal has none.
	ApprovedBy string
	OnBehalfOf string
	ApprovedAt time.Time
}

// ListProposals lists the account's proposals, newest first (created_at,
// then proposal_id, descending), with their approvals. Reply is left
// empty; ReplyChars has its length. A state that is not
// one of States, a ticket ID that is not positive or a limit outside
// 1-MaxListLimit is supportflow.ErrInvalidInput.
func (s *Store) ListProposals(ctx context.Context, f ListFilter) ([]Listed, error) {
	if f.State != "" && !slices.Contains(States, f.State) {
		return nil, fmt.Errorf("%w: state %q is not one of %v", supportflow.ErrInvalidInput, f.State, States)
	}
	if f.TicketID != 0 {
		if err := supportflow.ValidateTicketID(f.TicketID); err != nil {
			return nil, err
		}
	}
	if f.Limit < 1 || f.Limit > MaxListLimit {
		return nil, fmt.Errorf("%w: limit %d must be 1-%d", supportflow.ErrInvalidInput, f.Limit, MaxListLimit)
	}
	// The WHERE clause has only the filters given, so each shape of the
	// filter is served by its index of migration 14 (a "$2 = '' OR ..."
	// term would keep the planner from using them). Values stay parameters.
	where, args := "p.account = $1", []any{s.account}
	if f.State != "" {
		args = append(args, f.State)
		where += fmt.Sprintf(" AND p.state = $%d", len(args))
	}
	if f.TicketID != 0 {
		args = append(args, f.TicketID)
		where += fmt.Sprintf(" AND p.ticket_id = $%d", len(args))
	}
	args = append(args, f.Limit)
	// The list shows the reply's length, not the reply: char_length counts
	// characters (code points) in the database's UTF-8 encoding.
	rows, err := s.db.Query(ctx, `
SELECT p.proposal_id, p.ticket_id, char_length(p.reply), p.cancel_subscriptions, p.model, p.conversation_through, p.update_ticket,
       p.prompt_tokens, p.completion_tokens, p.state, COALESCE(p.decided_by, ''), COALESCE(p.error, ''),
       p.created_at, p.updated_at,
       COALESCE(a.approved_by, ''), COALESCE(a.on_behalf_of, ''), a.approved_at
FROM proposal p
LEFT JOIN approval a ON a.account = p.account AND a.proposal_id = p.proposal_id
WHERE `+where+`
ORDER BY p.created_at DESC, p.proposal_id DESC
LIMIT $`+fmt.Sprint(len(args)), args...)
	if err != nil {
		return nil, fmt.Errorf("proposals: list: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Listed, error) {
		var l Listed
		var approvedAt *time.Time
		err := row.Scan(&l.ID, &l.TicketID, &l.ReplyChars, &l.CancelSubscriptions, &l.Model, &l.ConversationThrough, &l.UpdateTicket,
			&l.PromptTokens, &l.CompletionTokens, &l.State, &l.DecidedBy, &l.Error, &l.CreatedAt, &l.UpdatedAt,
			&l.ApprovedBy, &l.OnBehalfOf, &approvedAt)
		if approvedAt != nil {
			l.ApprovedAt = *approvedAt
		}
		return l, err
	})
	if err != nil {
		return nil, fmt.Errorf("proposals: list: %w", err)
	}
	return out, nil
}

// GetListed reads one proposal with its approval, as ListProposals lists
// it; supportflow.ErrNotFound when there is none.
func (s *Store) GetListed(ctx context.Context, proposalID string) (Listed, error) {
	if err := supportflow.ValidateProposalID(proposalID); err != nil {
		return Listed{}, err
	}
	p, err := s.GetProposal(ctx, proposalID)
	if err != nil {
		return Listed{}, err
	}
	l := Listed{ProposalRecord: p, ReplyChars: utf8.RuneCountInString(p.Reply)}
	a, err := s.GetApproval(ctx, proposalID)
	switch {
	case err == nil:
		l.ApprovedBy, l.OnBehalfOf, l.ApprovedAt = a.ApprovedBy, a.OnBehalfOf, a.ApprovedAt
	case !errors.Is(err, supportflow.ErrNotFound):
		return Listed{}, err
	}
	return l, nil
}
