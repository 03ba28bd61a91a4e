package workflows_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/workflow"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/ingest"
)

// A draft of a prefixed account (its ID {prefix}/draft/{ticket}) starts
// its execution under the same prefix, and the approval answers that ID:
// the prefix comes from the draft's own ID, not the worker's settings.
func TestDraftReply_ExecutionIDCarriesTheDraftsPrefix(t *testing.T) {
	w := newDraftWorld(t)
	ticket := w.seedTicket("Please cancel my subscription.", "sub-1")
	acme := supportflow.IDs{Prefix: "acme"}
	w.env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: acme.Draft(ticket)})
	var mu sync.Mutex
	var children []string
	w.env.SetOnChildWorkflowStartedListener(func(info *workflow.Info, _ workflow.Context, _ converter.EncodedValues) {
		mu.Lock()
		children = append(children, info.WorkflowExecution.ID)
		mu.Unlock()
	})
	var approved *updateOutcome
	var proposal string
	w.env.RegisterDelayedCallback(func() {
		st := w.status()
		require.NotNil(t, st.Proposal)
		proposal = st.Proposal.ID
		approved = w.approve("a", proposal, "")
	}, time.Hour)
	w.env.ExecuteWorkflow(supportflow.DraftReplyWorkflow, supportflow.DraftRequest{TicketID: ticket})
	st := w.result()
	require.NoError(t, w.env.GetWorkflowError())
	assert.Equal(t, supportflow.DraftDone, st.State)
	require.NotNil(t, approved)
	require.NoError(t, approved.err)
	assert.Equal(t, "acme/execute/"+proposal, approved.result.(supportflow.ApproveResult).ExecutionWorkflowID)
	assert.Equal(t, acme.Execute(proposal), st.ExecutionWorkflowID)
	assert.Equal(t, []string{acme.Execute(proposal)}, children)
	assert.Equal(t, 1, w.h.Zendesk.CommentCount(ticket))
}

// A scan its schedule started for a prefixed account
// ({prefix}/scan-tickets-{time}) starts that account's drafts.
func TestScanTickets_DraftIDsCarryTheScansPrefix(t *testing.T) {
	w := newDraftWorld(t)
	now := time.Now().UTC().Truncate(time.Second)
	_, err := w.h.Ingest.UpsertTicketMirror(context.Background(), ingest.TicketMirror{
		TicketID: 1, Subject: "s", Status: "open", UpdatedAt: now, LastCustomerCommentAt: now.Add(-time.Hour)})
	require.NoError(t, err)
	globex := supportflow.IDs{Prefix: "globex"}
	w.env.SetStartWorkflowOptions(client.StartWorkflowOptions{ID: globex.ScanAction() + "-" + now.Format(time.RFC3339)})
	var mu sync.Mutex
	var started []string
	w.env.OnWorkflow(supportflow.DraftReplyWorkflow, mock.Anything, mock.Anything).Return(
		func(ctx workflow.Context, req supportflow.DraftRequest) (supportflow.DraftStatus, error) {
			mu.Lock()
			started = append(started, workflow.GetInfo(ctx).WorkflowExecution.ID)
			mu.Unlock()
			return supportflow.DraftStatus{TicketID: req.TicketID, State: supportflow.DraftAwaitingApproval}, nil
		})
	w.env.ExecuteWorkflow(supportflow.ScanTicketsWorkflow, supportflow.ScanRequest{})
	require.NoError(t, w.env.GetWorkflowError())
	assert.Equal(t, []string{"globex/draft/1"}, started)
}
