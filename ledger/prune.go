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

// Prune deletes this account's terminal actions last changed before
// cutoff: applied, failed, partial_failure or needs_attention, with their
// legs (ON DELETE CASCADE). An action still pending or applying is never
// deleted, however old. (Proposals and approvals are pruned by package
// proposals, after this: an approval stays while an action of its
// proposal is left.)
func (l *Ledger) Prune(ctx context.Context, cutoff time.Time) (Pruned, error) {
	out := Pruned{}
	n, err := pruneTable(ctx, l.db, "action", l.account, `state IN ('applied', 'failed', 'partial_failure', 'needs_attention')`, "updated_at", cutoff)
	out["action"] = n
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
