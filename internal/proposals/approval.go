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

// ErrNotApproved is returned by CheckApproval when an action has no
// recorded approval, or its content is not what was approved: the leg must
// not write.
var ErrNotApproved = errors.New("proposals: not approved")

// ProposalDigests returns ledger.ContentDigest of each of p's actions.
func ProposalDigests(p supportflow.Proposal) []string {
	out := make([]string, len(p.Actions))
	for i, a := range p.Actions {
		out[i] = ledger.ContentDigest(a)
	}
	return out
}

// RecordApproval records that by (a token's or an operator's name)
// approved p, for onBehalfOf when not empty. It must be called before the
// execution starts: every leg checks it (CheckApproval).
//
// drafted says p is a drafted proposal (SaveProposal): it must then be
// awaiting approval (else supportflow.ErrNotAwaitingApproval), and no other proposal of
// its ticket may be executing or have finished after it was drafted (else
// supportflow.ErrAnswerConflict), under the ticket's advisory lock, so a retry and an
// approval cannot both answer one ticket. An approval already recorded
// with the same content is kept (created=false: the first approver
// stands); with other content it is supportflow.ErrConflict.
func (s *Store) RecordApproval(ctx context.Context, p supportflow.Proposal, by, onBehalfOf string, drafted bool) (created bool, err error) {
	if err := p.Validate(); err != nil {
		return false, err
	}
	if by == "" {
		return false, fmt.Errorf("%w: an approval needs the approver's name", supportflow.ErrInvalidInput)
	}
	digests := ProposalDigests(p)
	ticketID := p.Actions[0].TicketID
	err = pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		if err := lockTickets(ctx, tx, s.account, p); err != nil {
			return err
		}
		var have []string
		err := tx.QueryRow(ctx, `SELECT action_digests FROM approval WHERE account = $1 AND proposal_id = $2`,
			s.account, p.ID).Scan(&have)
		switch {
		case err == nil:
			if have != nil && !slices.Equal(have, digests) {
				return fmt.Errorf("%w: proposal %s was approved with other content", supportflow.ErrConflict, p.ID)
			}
			return nil // a repeat: the first approval stands
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		if drafted {
			if err := checkAnswerable(ctx, tx, s.account, p.ID); err != nil {
				return err
			}
		}
		_, err = tx.Exec(ctx, `
INSERT INTO approval (account, proposal_id, ticket_id, action_digests, approved_by, on_behalf_of)
VALUES ($1, $2, $3, $4, $5, NULLIF($6, ''))`, s.account, p.ID, ticketID, digests, by, onBehalfOf)
		created = err == nil
		return err
	})
	if err != nil {
		return false, fmt.Errorf("proposals: record approval of %s: %w", p.ID, err)
	}
	return created, nil
}

// lockTickets takes the advisory lock of each of p's tickets, in order,
// inside tx.
func lockTickets(ctx context.Context, tx pgx.Tx, account string, p supportflow.Proposal) error {
	var tickets []int64
	for _, a := range p.Actions {
		tickets = append(tickets, a.TicketID)
	}
	slices.Sort(tickets)
	for _, t := range slices.Compact(tickets) {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, ledger.TicketLockKey(account, t)); err != nil {
			return err
		}
	}
	return nil
}

// checkAnswerable refuses a drafted proposal that is not awaiting
// approval, or whose ticket another proposal answers or is answering.
func checkAnswerable(ctx context.Context, tx pgx.Tx, account, proposalID string) error {
	var (
		state   string
		ticket  int64
		created time.Time
	)
	err := tx.QueryRow(ctx, `SELECT state, ticket_id, created_at FROM proposal WHERE account = $1 AND proposal_id = $2 FOR UPDATE`,
		account, proposalID).Scan(&state, &ticket, &created)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w: proposal %s", supportflow.ErrNotFound, proposalID)
	}
	if err != nil {
		return err
	}
	if state != supportflow.DraftAwaitingApproval {
		return fmt.Errorf("%w: proposal %s is %s", supportflow.ErrNotAwaitingApproval, proposalID, state)
	}
	var other, otherState string
	err = tx.QueryRow(ctx, `
SELECT proposal_id, state FROM proposal
WHERE account = $1 AND ticket_id = $2 AND proposal_id <> $3
  AND (state = 'executing' OR (state = 'done' AND updated_at > $4))
ORDER BY updated_at DESC LIMIT 1`, account, ticket, proposalID, created).Scan(&other, &otherState)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil
	case err != nil:
		return err
	case otherState == supportflow.DraftExecuting:
		return fmt.Errorf("%w: proposal %s of ticket %d is executing (a retry); wait for it, then draft the ticket again", supportflow.ErrAnswerConflict, other, ticket)
	}
	return fmt.Errorf("%w: proposal %s answered ticket %d after this proposal was drafted; draft the ticket again", supportflow.ErrAnswerConflict, other, ticket)
}

// GetApproval reads a proposal's approval; supportflow.ErrNotFound when none is
// recorded.
func (s *Store) GetApproval(ctx context.Context, proposalID string) (supportflow.Approval, error) {
	if err := supportflow.ValidateProposalID(proposalID); err != nil {
		return supportflow.Approval{}, err
	}
	a := supportflow.Approval{ProposalID: proposalID}
	var onBehalf *string
	err := s.db.QueryRow(ctx, `
SELECT ticket_id, action_digests, approved_by, on_behalf_of, approved_at
FROM approval WHERE account = $1 AND proposal_id = $2`, s.account, proposalID).Scan(
		&a.TicketID, &a.ActionDigests, &a.ApprovedBy, &onBehalf, &a.ApprovedAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return supportflow.Approval{}, fmt.Errorf("%w: no approval of proposal %s", supportflow.ErrNotFound, proposalID)
	}
	if err != nil {
		return supportflow.Approval{}, fmt.Errorf("proposals: get approval of %s: %w", proposalID, err)
	}
	a.OnBehalfOf = deref(onBehalf)
	return a, nil
}

// RevokeApproval deletes an approval that the draft refused (its proposal
// was stale by the time the approval reached it), unless an action of the
// proposal was already reserved: then it has started and stays approved.
func (s *Store) RevokeApproval(ctx context.Context, proposalID string) error {
	_, err := s.db.Exec(ctx, `
DELETE FROM approval WHERE account = $1 AND proposal_id = $2
  AND NOT EXISTS (SELECT 1 FROM action WHERE account = $1 AND proposal_id = $2)`, s.account, proposalID)
	if err != nil {
		return fmt.Errorf("proposals: revoke approval of %s: %w", proposalID, err)
	}
	return nil
}

// CheckApproval reports whether the action keyed key, with content digest
// (ledger.ContentDigest, which covers its ticket), was approved: nil when it was, an error
// wrapping ErrNotApproved (saying why) when it was not, any other error
// when the database could not say. Every leg calls it before its first
// write.
//
// An approval carried over from before approvals were recorded has no
// digests; it admits an action whose content matches its ledger row (an
// execution already under way) or its stored proposal.
func (s *Store) CheckApproval(ctx context.Context, key string, digest string) error {
	proposalID, index, err := supportflow.ParseActionKey(key)
	if err != nil {
		return err
	}
	a, err := s.GetApproval(ctx, proposalID)
	if errors.Is(err, supportflow.ErrNotFound) {
		return fmt.Errorf("%w: proposal %s has no recorded approval (approve it through the API or the starter, which record one)", ErrNotApproved, proposalID)
	}
	if err != nil {
		return err
	}
	// A drafted proposal that ended without running (rejected after all,
	// superseded, expired: its approval never reached the draft) admits
	// nothing, whatever approval row is left.
	p, perr := s.GetProposal(ctx, proposalID)
	stored := perr == nil
	if perr != nil && !errors.Is(perr, supportflow.ErrNotFound) {
		return perr
	}
	if stored {
		if err := refuseEnded(p, key); err != nil {
			return err
		}
	}
	// The digest covers the ticket, so a proposal approved for one ticket
	// never admits a write to another.
	if a.ActionDigests != nil {
		if index >= len(a.ActionDigests) || a.ActionDigests[index] != digest {
			return fmt.Errorf("%w: action %s is not what was approved (ticket, reply, subscriptions or ticket update differ)", ErrNotApproved, key)
		}
		return nil
	}
	var rowDigest *string
	err = s.db.QueryRow(ctx, `SELECT content_digest FROM action WHERE account = $1 AND key = $2`, s.account, key).Scan(&rowDigest)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("proposals: check approval of %s: %w", key, err)
	}
	if rowDigest != nil {
		if *rowDigest == digest {
			return nil
		}
		return fmt.Errorf("%w: action %s is not what was approved (ticket, reply, subscriptions or ticket update differ)", ErrNotApproved, key)
	}
	if !stored {
		// A proposal an app composed, carried over while its execution
		// was under way: an earlier action reserved before the upgrade
		// means this one was approved with it (its first reserve pins its
		// content, checked above from then on).
		var underWay bool
		if err := s.db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM action WHERE account = $1 AND proposal_id = $2)`,
			s.account, proposalID).Scan(&underWay); err != nil {
			return fmt.Errorf("proposals: check approval of %s: %w", key, err)
		}
		if underWay {
			return nil
		}
		return fmt.Errorf("%w: action %s was never started before approvals were recorded, and no proposal is stored for it", ErrNotApproved, key)
	}
	actions := p.DraftProposal.Proposal().Actions
	if index < len(actions) && ledger.ContentDigest(actions[index]) == digest {
		return nil
	}
	return fmt.Errorf("%w: action %s is not what was approved (ticket, reply, subscriptions or ticket update differ)", ErrNotApproved, key)
}

// MarkRetrying moves a failed drafted proposal back to executing for a
// retry, under its ticket's advisory lock, refusing (supportflow.ErrAnswerConflict)
// when another proposal of the ticket drafted after it awaits approval,
// is executing or went out, or any other is executing, so a retry and a
// redraft never both answer the ticket (a rejected redraft lets the old
// proposal be retried). The approver stays decided_by.
func (s *Store) MarkRetrying(ctx context.Context, proposalID string) error {
	if err := supportflow.ValidateProposalID(proposalID); err != nil {
		return err
	}
	err := pgx.BeginFunc(ctx, s.db, func(tx pgx.Tx) error {
		var (
			ticket  int64
			state   string
			created time.Time
		)
		err := tx.QueryRow(ctx, `SELECT ticket_id, state, created_at FROM proposal WHERE account = $1 AND proposal_id = $2`,
			s.account, proposalID).Scan(&ticket, &state, &created)
		if errors.Is(err, pgx.ErrNoRows) {
			return fmt.Errorf("%w: proposal %s", supportflow.ErrNotFound, proposalID)
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, ledger.TicketLockKey(s.account, ticket)); err != nil {
			return err
		}
		var other, otherState string
		err = tx.QueryRow(ctx, `
SELECT proposal_id, state FROM proposal
WHERE account = $1 AND ticket_id = $2 AND proposal_id <> $3
  AND ((created_at > $4 AND (state IN ('awaiting_approval', 'executing', 'done')
        -- a newer proposal that failed with its reply on the ticket, or
        -- perhaps on it, answered the customer too
        OR (state = 'failed' AND EXISTS (
              SELECT 1 FROM action a JOIN action_leg l ON l.action_id = a.id
              WHERE a.account = proposal.account AND a.proposal_id = proposal.proposal_id
                AND l.kind = 'reply' AND l.state IN ('done', 'unknown')))))
       OR state = 'executing')
ORDER BY created_at DESC LIMIT 1`, s.account, ticket, proposalID, created).Scan(&other, &otherState)
		switch {
		case err == nil:
			return fmt.Errorf("%w: proposal %s of ticket %d (%s) has taken this one's place; approve or reject that one instead", supportflow.ErrAnswerConflict, other, ticket, otherState)
		case !errors.Is(err, pgx.ErrNoRows):
			return err
		}
		tag, err := tx.Exec(ctx, `UPDATE proposal SET state = 'executing', error = NULL, updated_at = now()
WHERE account = $1 AND proposal_id = $2 AND state IN ('failed', 'executing')`, s.account, proposalID)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("%w: proposal %s is %s", supportflow.ErrNotAwaitingApproval, proposalID, state)
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("proposals: retry %s: %w", proposalID, err)
	}
	return nil
}

// refuseEnded refuses an action of a drafted proposal that ended without
// running.
func refuseEnded(p supportflow.ProposalRecord, key string) error {
	switch p.State {
	case supportflow.DraftRejected, supportflow.DraftSuperseded, supportflow.DraftExpired:
		return fmt.Errorf("%w: action %s: proposal %s was %s, not executed", ErrNotApproved, key, p.ID, p.State)
	}
	return nil
}
