package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/policy"
)

// pruneDeadline bounds one prune activity; it deletes in batches and is
// retried (the ledger kind has no attempt budget) if it runs out.
const pruneDeadline = 10 * time.Minute

// PruneRetention deletes terminal rows older than the retention (30 days
// by default): ledger actions and proposals, then enrichment's lookup
// logs, runs and resolved dead letters, then finished ticket events and
// reconciliation runs. Nothing pending, applying, running
// or awaiting approval is ever deleted. A Temporal Schedule runs it daily;
// workflow histories themselves are bounded by the namespace's retention.
func (w *Workflows) PruneRetention(ctx workflow.Context) (map[string]int64, error) {
	out := map[string]int64{}
	// describe sets the run's current details, which the Web UI shows:
	// "prune · ticket events · 120 rows deleted so far".
	var total int64
	describe := func(state string) {
		setDetails(ctx, "prune", state, fmt.Sprintf("%d rows deleted", total))
	}
	step := func(act supportflow.Activity[supportflow.None, map[string]int64], what string) error {
		describe(what)
		actx := w.activityOptions(ctx, policy.KindLedger, pruneDeadline, false, "prune "+what)
		var n map[string]int64
		if err := call(actx, act, supportflow.None{}).Get(ctx, &n); err != nil {
			return err
		}
		// Adding counts comes to the same in any order.
		//workflowcheck:ignore
		for k, v := range n {
			out[k] += v
			total += v
		}
		return nil
	}
	if err := step(supportflow.PruneLedger, "ledger"); err != nil {
		return out, err
	}
	if err := step(supportflow.PruneEnrichment, "enrichment"); err != nil {
		return out, err
	}
	// Ticket events and reconciliation runs joined the prune later;
	// histories from before run without it.
	if workflow.GetVersion(ctx, versionPruneTicketEvents, workflow.DefaultVersion, 1) == 1 {
		if err := step(supportflow.PruneTicketEvents, "ticket events"); err != nil {
			return out, err
		}
	}
	describe("done")
	return out, nil
}
