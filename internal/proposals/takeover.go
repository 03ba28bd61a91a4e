package proposals

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/supportflow/supportflow"
)

// Takeover records who took a rejected proposal's reply to send it
// themselves (table reply_takeover): the API token that did, the person in
// the calling app it acted for, and when.
type Takeover struct {
	ProposalID string
	TicketID   int64
	TakenBy    string
	OnBehalfOf string
	TakenAt    time.Time
}

// ClaimTakeover records t unless the proposal's reply was already taken.
// Exactly one of any number of concurrent claims of one proposal reports
// claimed=true; every claim returns the takeover that holds (its own, or
// the earlier one). t.TakenAt is ignored: the database's clock stamps it.
func (s *Store) ClaimTakeover(ctx context.Context, t Takeover) (held Takeover, claimed bool, err error) {
	if err := supportflow.ValidateProposalID(t.ProposalID); err != nil {
		return Takeover{}, false, err
	}
	if err := supportflow.ValidateTicketID(t.TicketID); err != nil {
		return Takeover{}, false, err
	}
	if t.TakenBy == "" {
		return Takeover{}, false, fmt.Errorf("%w: a takeover needs who took it", supportflow.ErrInvalidInput)
	}
	// INSERT ... ON CONFLICT DO NOTHING: a claim racing another waits for
	// it on the primary key and then inserts nothing.
	err = s.db.QueryRow(ctx, `
INSERT INTO reply_takeover (account, proposal_id, ticket_id, taken_by, on_behalf_of)
VALUES ($1, $2, $3, $4, NULLIF($5, ''))
ON CONFLICT (account, proposal_id) DO NOTHING
RETURNING taken_at`, s.account, t.ProposalID, t.TicketID, t.TakenBy, t.OnBehalfOf).Scan(&t.TakenAt)
	if err == nil {
		return t, true, nil
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		return Takeover{}, false, fmt.Errorf("proposals: claim the reply of proposal %s: %w", t.ProposalID, err)
	}
	held, err = s.GetTakeover(ctx, t.ProposalID)
	return held, false, err
}

// ReleaseTakeover deletes the claim t, the one ClaimTakeover recorded,
// when the rejection it stood for did not happen (or is not known to
// have): only that very claim (same taker, same time) is deleted.
func (s *Store) ReleaseTakeover(ctx context.Context, t Takeover) error {
	_, err := s.db.Exec(ctx, `
DELETE FROM reply_takeover WHERE account = $1 AND proposal_id = $2 AND taken_by = $3 AND taken_at = $4`,
		s.account, t.ProposalID, t.TakenBy, t.TakenAt)
	if err != nil {
		return fmt.Errorf("proposals: release the reply of proposal %s: %w", t.ProposalID, err)
	}
	return nil
}

// GetTakeover reads who took a proposal's reply; supportflow.ErrNotFound
// when nobody has.
func (s *Store) GetTakeover(ctx context.Context, proposalID string) (Takeover, error) {
	var t Takeover
	var onBehalf *string
	err := s.db.QueryRow(ctx, `
SELECT proposal_id, ticket_id, taken_by, on_behalf_of, taken_at
FROM reply_takeover WHERE account = $1 AND proposal_id = $2`, s.account, proposalID).Scan(
		&t.ProposalID, &t.TicketID, &t.TakenBy, &onBehalf, &t.TakenAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Takeover{}, fmt.Errorf("%w: nobody took the reply of proposal %s", supportflow.ErrNotFound, proposalID)
	}
	if err != nil {
		return Takeover{}, fmt.Errorf("proposals: takeover of proposal %s: %w", proposalID, err)
	}
	t.OnBehalfOf = deref(onBehalf)
	return t, nil
}
