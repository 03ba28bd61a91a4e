package proposals

import (
	"context"
	"fmt"
	"time"
)

// pruneBatch bounds one DELETE, so pruning never holds locks on many rows
// at once.
const pruneBatch = 5000

// Prune deletes this account's proposals last changed before cutoff that
// are done, rejected, superseded, expired or failed, except a ticket's
// newest proposal; then approvals approved before cutoff of which neither
// the proposal nor an action is left. A proposal awaiting approval or
// executing is never deleted, however old. Run it after ledger.Prune,
// which deletes the actions an approval waits for (the PruneLedger
// activity runs both). It returns the rows deleted, by table.
func (s *Store) Prune(ctx context.Context, cutoff time.Time) (map[string]int64, error) {
	out := map[string]int64{}
	// A ticket's newest proposal is kept however old: the scan reads it
	// as "this comment was already drafted", and deleting it would draft a
	// month-old message again.
	n, err := s.pruneTable(ctx, "proposal", `state IN ('done', 'rejected', 'superseded', 'expired', 'failed')
      AND EXISTS (SELECT 1 FROM proposal newer WHERE newer.account = proposal.account
                  AND newer.ticket_id = proposal.ticket_id
                  AND (newer.conversation_through, newer.created_at) > (proposal.conversation_through, proposal.created_at))`,
		"updated_at", cutoff)
	out["proposal"] = n
	if err != nil {
		return out, err
	}
	// An approval goes once nothing of its proposal is left to run or
	// retry: its proposal and its actions are gone.
	n, err = s.pruneTable(ctx, "approval", `
NOT EXISTS (SELECT 1 FROM proposal p WHERE p.account = approval.account AND p.proposal_id = approval.proposal_id)
AND NOT EXISTS (SELECT 1 FROM action a WHERE a.account = approval.account AND a.proposal_id = approval.proposal_id)`, "approved_at", cutoff)
	out["approval"] = n
	return out, err
}

// pruneTable deletes matching rows in batches until none are left. table,
// where and column are constants of this package, never input.
func (s *Store) pruneTable(ctx context.Context, table, where, column string, cutoff time.Time) (int64, error) {
	var total int64
	for {
		tag, err := s.db.Exec(ctx, fmt.Sprintf(`
DELETE FROM %[1]s WHERE ctid IN (
  SELECT ctid FROM %[1]s WHERE account = $1 AND %[2]s AND %[3]s < $2 LIMIT %[4]d)`, table, where, column, pruneBatch),
			s.account, cutoff)
		if err != nil {
			return total, fmt.Errorf("proposals: prune %s: %w", table, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < pruneBatch {
			return total, nil
		}
	}
}
