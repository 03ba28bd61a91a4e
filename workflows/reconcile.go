package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/policy"
)

// ReconcileDeadline bounds one reconciliation attempt: at most 20 export
// requests paced to Zendesk's 10 a minute, and the mirror writes.
const ReconcileDeadline = 15 * time.Minute

// ReconcileTickets runs one reconciliation pass (ingest.Reconciler): it
// reads Zendesk's incremental exports from the saved cursor and repairs
// every ticket the webhooks missed. A Temporal Schedule runs it every
// ReconcileInterval (5 min) with overlap SKIP; the reconcile query and
// the result say what it read and repaired.
func (w *Workflows) ReconcileTickets(ctx workflow.Context, _ supportflow.ReconcileRequest) (supportflow.ReconcileResult, error) {
	var res supportflow.ReconcileResult
	if err := workflow.SetQueryHandler(ctx, supportflow.ReconcileQuery, func() (supportflow.ReconcileResult, error) {
		return res, nil
	}); err != nil {
		return res, err
	}
	setDetails(ctx, "reconcile", "reading Zendesk's incremental exports")
	actx := w.activityOptions(ctx, policy.KindZendeskRead, ReconcileDeadline, true, "reconcile from Zendesk's incremental exports")
	err := call(actx, supportflow.ReconcileTickets, workflow.GetInfo(ctx).WorkflowExecution.ID).Get(ctx, &res)
	if err != nil {
		setDetails(ctx, "reconcile", "failed", errorKind(err))
		return res, err
	}
	caught := "caught up"
	if !res.CaughtUp {
		caught = "not caught up: the next run continues"
	}
	setDetails(ctx, "reconcile", "done", fmt.Sprintf("%d tickets and %d events read", res.TicketsRead, res.EventsRead),
		fmt.Sprintf("%d repaired", res.Repaired), caught)
	return res, nil
}
