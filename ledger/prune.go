package ledger

import (
	"context"
	"fmt"
	"time"
)

// PruneBatch bounds one DELETE of a retention prune, so pruning never
// holds locks on many rows at once.
const PruneBatch = 5000

// Pruned counts the rows a retention prune deleted, by table.
type Pruned map[string]int64

// Prune deletes this account's terminal actions last changed before
// cutoff: applied, failed, partial_failure or needs_attention, with their
// legs (ON DELETE CASCADE). An action still pending or applying is never
// deleted, however old. (Proposals and approvals are pruned by package
// proposals, after this: an approval stays while an action of its
// proposal is left.)
func (l *Ledger) Prune(ctx context.Context, cutoff time.Time) (Pruned, error) {
	n, err := PruneInBatches(ctx, l.db, "action", `DELETE FROM action WHERE ctid IN (SELECT ctid FROM action
WHERE account = $1 AND state IN ('applied', 'failed', 'partial_failure', 'needs_attention') AND updated_at < $2 LIMIT $3)`,
		l.account, cutoff)
	if err != nil {
		err = fmt.Errorf("ledger: %w", err)
	}
	return Pruned{"action": n}, err
}

// PruneInBatches runs a retention prune's DELETE of table again until it
// deletes fewer rows than a batch, and returns how many it deleted. stmt
// is spelled out by the package that owns the table (so each table's
// writer stays visible in its own package), with $1 the account, $2 the
// cutoff and $3 the batch size (PruneBatch) as the LIMIT of its subquery.
func PruneInBatches(ctx context.Context, db DB, table, stmt, account string, cutoff time.Time) (int64, error) {
	var total int64
	for {
		tag, err := db.Exec(ctx, stmt, account, cutoff, PruneBatch)
		if err != nil {
			return total, fmt.Errorf("prune %s: %w", table, err)
		}
		total += tag.RowsAffected()
		if tag.RowsAffected() < PruneBatch {
			return total, nil
		}
	}
}
