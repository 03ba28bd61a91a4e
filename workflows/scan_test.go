package workflows_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/ingest"
)

// The scan starts one draft per eligible ticket and none for the others:
// a closed ticket, one where the agent spoke last, one whose proposal has
// already seen the customer's newest comment, and one nobody commented on.
func TestScanTickets_StartsOneDraftPerEligibleTicket(t *testing.T) {
	w := newDraftWorld(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Second)
	mirror := func(id int64, status string, customer, agent time.Time) {
		_, err := w.h.Ingest.UpsertTicketMirror(ctx, ingest.TicketMirror{
			TicketID: id, Subject: "s", Status: status, UpdatedAt: now,
			LastCustomerCommentAt: customer, LastAgentCommentAt: agent,
		})
		require.NoError(t, err)
	}
	mirror(1, "open", now.Add(-time.Hour), now.Add(-2*time.Hour)) // eligible: customer spoke last
	mirror(2, "new", now.Add(-time.Minute), time.Time{})          // eligible: never answered, enriched
	require.NoError(t, w.h.Enrichment.Store.PutEnrichment(ctx, 2, 902, supportflow.Enrichment{CustomerID: "c-2"}))
	mirror(10, "open", now.Add(-time.Minute), time.Time{})        // just written, not enriched yet: waits
	mirror(3, "solved", now.Add(-time.Hour), time.Time{})         // closed
	mirror(4, "open", now.Add(-2*time.Hour), now.Add(-time.Hour)) // agent spoke last
	mirror(5, "open", now.Add(-time.Hour), time.Time{})           // already drafted since
	mirror(6, "open", time.Time{}, time.Time{})                   // no customer comment
	_, err := w.h.Proposals.SaveProposal(ctx, supportflow.DraftProposal{ID: "p-5", TicketID: 5, Reply: "r", ConversationThrough: now.Add(-time.Hour)})
	require.NoError(t, err)
	// An older proposal does not count: ticket 1's customer wrote after it.
	_, err = w.h.Proposals.SaveProposal(ctx, supportflow.DraftProposal{ID: "p-1-old", TicketID: 1, Reply: "r", ConversationThrough: now.Add(-3 * time.Hour)})
	require.NoError(t, err)

	var mu sync.Mutex
	var started []int64
	w.env.OnWorkflow(supportflow.DraftReplyWorkflow, mock.Anything, mock.Anything).Return(
		func(ctx workflow.Context, req supportflow.DraftRequest) (supportflow.DraftStatus, error) {
			mu.Lock()
			started = append(started, req.TicketID)
			mu.Unlock()
			assert.Equal(t, supportflow.DraftWorkflowID(req.TicketID), workflow.GetInfo(ctx).WorkflowExecution.ID)
			assert.Equal(t, "scan", req.Reason)
			return supportflow.DraftStatus{TicketID: req.TicketID, State: supportflow.DraftAwaitingApproval}, nil
		})
	w.env.ExecuteWorkflow(supportflow.ScanTicketsWorkflow, supportflow.ScanRequest{})
	require.True(t, w.env.IsWorkflowCompleted())
	require.NoError(t, w.env.GetWorkflowError())
	var res supportflow.ScanResult
	require.NoError(t, w.env.GetWorkflowResult(&res))

	slices.Sort(started)
	assert.Equal(t, []int64{1, 2}, started, "one draft per eligible ticket, none for the others")
	assert.Equal(t, []int64{1, 2}, res.Candidates, "oldest customer comment first")
	assert.ElementsMatch(t, []int64{1, 2}, res.Started)
	assert.Empty(t, res.Running)
}

func TestScanTickets_RefusesAnOutOfRangeLimit(t *testing.T) {
	w := newDraftWorld(t)
	w.env.ExecuteWorkflow(supportflow.ScanTicketsWorkflow, supportflow.ScanRequest{Limit: supportflow.MaxScanLimit + 1})
	var app *temporal.ApplicationError
	require.ErrorAs(t, w.env.GetWorkflowError(), &app)
	assert.Equal(t, supportflow.ErrTypeInvalidInput, app.Type())
}
