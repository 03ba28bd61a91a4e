package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/workflows"
)

// A ticket whose webhooks never arrived is repaired by one pass (mirrored,
// the customer's comment known, a ticket event recorded); a second pass
// finds nothing to repair. The pass runs under its deadline and heartbeat.
func TestReconcileTickets_RepairsOnceUnderItsDeadline(t *testing.T) {
	w := newDraftWorld(t)
	w.h.Zendesk.SetExports(standin.ExportConfig{Lag: -1})
	ticket := w.h.Zendesk.AddTicket(standin.Ticket{Subject: "Refund", Description: "Please refund me.", RequesterID: 4242})
	w.h.Zendesk.AddComment(ticket, standin.SeedComment{Body: "Hello?"})
	var infos []activity.Info
	w.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		infos = append(infos, *info)
	})

	w.env.ExecuteWorkflow(supportflow.ReconcileTicketsWorkflow, supportflow.ReconcileRequest{})
	require.NoError(t, w.env.GetWorkflowError())
	var res supportflow.ReconcileResult
	require.NoError(t, w.env.GetWorkflowResult(&res))
	assert.Equal(t, []int64{ticket}, res.RepairedTickets)
	assert.True(t, res.CaughtUp)
	m, err := w.h.Ingest.GetTicketMirror(context.Background(), ticket)
	require.NoError(t, err)
	assert.Equal(t, int64(4242), m.RequesterID)
	assert.False(t, m.LastCustomerCommentAt.IsZero())
	require.Len(t, infos, 1)
	assert.Equal(t, workflows.ReconcileDeadline, infos[0].Deadline.Sub(infos[0].StartedTime).Round(time.Second))
	assert.Equal(t, 60*time.Second, infos[0].HeartbeatTimeout)

	w2 := newDraftWorld(t)
	w2.h.Zendesk = w.h.Zendesk
	*w2.h.Reconciler = *w.h.Reconciler
	w2.env.ExecuteWorkflow(supportflow.ReconcileTicketsWorkflow, supportflow.ReconcileRequest{})
	require.NoError(t, w2.env.GetWorkflowError())
	var again supportflow.ReconcileResult
	require.NoError(t, w2.env.GetWorkflowResult(&again))
	assert.Zero(t, again.Repaired, "nothing left to repair")
}
