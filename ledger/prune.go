package ledger

import (
	"context"
	"fmt"
	"time"
)

// pruneBatch bounds one DELETE, so pruning never holds locks on many rows
// at once.
const pruneBatch = 5000

// Pruned counts the rows a retention prune deleted, by table.
type Pruned map[string]int64

// Prune deletes this account's terminal rows last changed before cutoff:
// actions that are applied, failed, partial_failure or needs_attention
// (with their legs) and proposals that are done, rejected, superseded,
// expired or failed, except a ticket's newest proposal; and approvals of
// which neither the proposal nor an action is left. A row still
// pending or applying, or a proposal awaiting approval or executing, is
// never deleted, however old.
func (l *Ledger) Prune(ctx context.Context, cutoff time.Time) (Pruned, error) {
	out := Pruned{}
	for table, where := range map[string]string{
		"action": `state IN ('applied', 'failed', 'partial_failure', 'needs_attention')`,
		// A ticket's newest proposal is kept however old: the scan reads it
		// as "this comment was already drafted", and deleting it would
		// draft a month-old message again.
		"proposal": `state IN ('done', 'rejected', 'superseded', 'expired', 'failed')
      AND EXISTS (SELECT 1 FROM proposal newer WHERE newer.account = proposal.account
                  AND newer.ticket_id = proposal.ticket_id
                  AND (newer.conversation_through, newer.created_at) > (proposal.conversation_through, proposal.created_at))`,
	} {
		n, err := pruneTable(ctx, l.db, table, l.account, where, "updated_at", cutoff)
		out[table] = n
		if err != nil {
			return out, err
		}
	}
	// An approval goes once nothing of its proposal is left to run or
	// retry: its proposal and its actions are gone.
	n, err := pruneTable(ctx, l.db, "approval", l.account, `
NOT EXISTS (SELECT 1 FROM proposal p WHERE p.account = approval.account AND p.proposal_id = approval.proposal_id)
AND NOT EXISTS (SELECT 1 FROM action a WHERE a.account = approval.account AND a.proposal_id = approval.proposal_id)`, "approved_at", cutoff)
	out["approval"] = n
	return out, err
}

// pruneTable deletes matching rows in batches until none are left. table,
// where and column are constants of this package, never input.
func pruneTable(ctx context.Context, db DB, table, account, where, column string, cutoff time.Time) (int64, error) {
	var total int64
	for {
		tag, err := db.Exec(ctx, fmt.Sprintf(`
DELETE FROM %[1]s WHERE ctid IN (
  SELECT ctid FROM %[1]s WHERE account = $1 AND %[2]s AND %[3]s < $2 LIMIT %[4]d)`, table, where, column, pruneBatch),
			account, cutoff)
		if err != nil {
			return total, fmt.Errorf("ledger: prune %s: %w", table, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < pruneBatch {
			return total, nil
		}
	}
}
