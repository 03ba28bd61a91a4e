package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

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
	actx := w.activityOptions(ctx, policy.KindLedger, pruneDeadline, false)
	out := map[string]int64{}
	for _, act := range []any{a.PruneLedger, en.PruneEnrichment} {
		var n map[string]int64
		if err := workflow.ExecuteActivity(actx, act).Get(ctx, &n); err != nil {
			return out, err
		}
		for k, v := range n {
			out[k] += v
		}
	}
	// Ticket events and reconciliation runs joined the prune later;
	// histories from before run without it.
	if workflow.GetVersion(ctx, versionPruneTicketEvents, workflow.DefaultVersion, 1) == 1 {
		var n map[string]int64
		if err := workflow.ExecuteActivity(actx, rc.PruneTicketEvents).Get(ctx, &n); err != nil {
			return out, err
		}
		for k, v := range n {
			out[k] += v
		}
	}
	return out, nil
}

// versionPruneTicketEvents marks the prune's ticket-event step.
const versionPruneTicketEvents = "prune-ticket-events"
