package proposals

import (
	"context"
	"fmt"
	"time"

	"github.com/supportflow/supportflow/ledger"
)

// Prune deletes this account's proposals last changed before cutoff that
// are done, rejected, superseded, expired or failed, except a ticket's
// newest proposal; then approvals approved before cutoff of which neither
// the proposal nor an action is left, and replies taken into the editor
// (reply_takeover) before cutoff whose proposal is gone. A proposal awaiting approval or
// executing is never deleted, however old. Run it after ledger.Prune,
// which deletes the actions an approval waits for (the PruneLedger
// activity runs both). It returns the rows deleted, by table.
func (s *Store) Prune(ctx context.Context, cutoff time.Time) (map[string]int64, error) {
	out := map[string]int64{}
	// A ticket's newest proposal is kept however old: the scan reads it
	// as "this comment was already drafted", and deleting it would draft a
	// month-old message again.
	n, err := ledger.PruneInBatches(ctx, s.db, "proposal", `DELETE FROM proposal WHERE ctid IN (SELECT ctid FROM proposal
WHERE account = $1 AND state IN ('done', 'rejected', 'superseded', 'expired', 'failed')
      AND EXISTS (SELECT 1 FROM proposal newer WHERE newer.account = proposal.account
                  AND newer.ticket_id = proposal.ticket_id
                  AND (newer.conversation_through, newer.created_at) > (proposal.conversation_through, proposal.created_at))
      AND updated_at < $2 LIMIT $3)`, s.account, cutoff)
	out["proposal"] = n
	if err != nil {
		return out, fmt.Errorf("proposals: %w", err)
	}
	// An approval goes once nothing of its proposal is left to run or
	// retry: its proposal and its actions are gone.
	n, err = ledger.PruneInBatches(ctx, s.db, "approval", `DELETE FROM approval WHERE ctid IN (SELECT ctid FROM approval
WHERE account = $1
AND NOT EXISTS (SELECT 1 FROM proposal p WHERE p.account = approval.account AND p.proposal_id = approval.proposal_id)
AND NOT EXISTS (SELECT 1 FROM action a WHERE a.account = approval.account AND a.proposal_id = approval.proposal_id)
AND approved_at < $2 LIMIT $3)`, s.account, cutoff)
	out["approval"] = n
	if err != nil {
		return out, fmt.Errorf("proposals: %w", err)
	}
	// A reply taken into the editor goes with its proposal: while the
	// proposal is kept, the row still refuses a second taker.
	n, err = ledger.PruneInBatches(ctx, s.db, "reply_takeover", `DELETE FROM reply_takeover WHERE ctid IN (SELECT ctid FROM reply_takeover
WHERE account = $1
AND NOT EXISTS (SELECT 1 FROM proposal p WHERE p.account = reply_takeover.account AND p.proposal_id = reply_takeover.proposal_id)
AND taken_at < $2 LIMIT $3)`, s.account, cutoff)
	out["reply_takeover"] = n
	if err != nil {
		return out, fmt.Errorf("proposals: %w", err)
	}
	return out, nil
}
