package workflows_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/eval"
	"github.com/supportflow/supportflow/internal/standin"
)

// An evaluation drafts each past ticket as it stood before the agent's
// reply, scores it against that reply, and stores per-ticket results and a
// summary; a ticket without an agent reply is stored as failed and the run
// goes on.
func TestEvaluateDrafts_ScoresEachTicketAndStoresASummary(t *testing.T) {
	w := newDraftWorld(t)
	var tickets []int64
	replies := map[int64]string{}
	for _, body := range []string{"Where is my order?", "My box was damaged.", "Can I pause?"} {
		id := w.h.Zendesk.AddTicket(standin.Ticket{Subject: "Past ticket", Description: body, RequesterName: "Ada"})
		reply := "Hi Ada, thanks for writing about \"Past ticket\". We are looking into it."
		w.h.Zendesk.AddComment(id, standin.SeedComment{Body: reply, Agent: true})
		replies[id] = reply
		tickets = append(tickets, id)
	}
	unanswered := w.h.Zendesk.AddTicket(standin.Ticket{Subject: "Never answered", Description: "Hello?"})
	tickets = append(tickets, unanswered)

	req := supportflow.EvaluationRequest{RunID: "run-1", Set: "golden", TicketIDs: tickets, Concurrency: 2}
	w.env.ExecuteWorkflow(supportflow.EvaluateDraftsWorkflow, req)
	require.NoError(t, w.env.GetWorkflowError())
	var st supportflow.EvaluationStatus
	require.NoError(t, w.env.GetWorkflowResult(&st))

	assert.Equal(t, 4, st.Total)
	assert.Equal(t, 4, st.Done)
	assert.Equal(t, 1, st.Failed)
	assert.True(t, st.Finished)

	results, err := w.h.Evals.Results(context.Background(), "run-1")
	require.NoError(t, err)
	require.Len(t, results, 4)
	var sum float64
	for _, r := range results {
		if r.TicketID == unanswered {
			assert.Nil(t, r.Score)
			assert.Contains(t, r.Error, "no agent reply")
			continue
		}
		require.NotNil(t, r.Score, "ticket %d", r.TicketID)
		assert.Equal(t, replies[r.TicketID], r.ActualReply)
		assert.NotEmpty(t, r.Draft)
		assert.InDelta(t, eval.Score(r.Draft, r.ActualReply), *r.Score, 1e-9)
		assert.Greater(t, *r.Score, 0.5, "the stand-in's greeting shares most words with the seeded reply")
		sum += *r.Score
	}
	assert.InDelta(t, sum/3, st.MeanScore, 1e-9)
	summary, err := w.h.Evals.GetSummary(context.Background(), "run-1")
	require.NoError(t, err)
	assert.Equal(t, st.Total, summary.Total)
	assert.Equal(t, st.Failed, summary.Failed)
	assert.InDelta(t, st.MeanScore, summary.MeanScore, 1e-9)
	assert.Equal(t, 3, w.h.Model.Requests(), "the unanswered ticket never reached the model")
}

// At most Concurrency drafts are in flight at once.
func TestEvaluateDrafts_BoundsConcurrency(t *testing.T) {
	w := newDraftWorld(t)
	var tickets []int64
	for range 6 {
		id := w.h.Zendesk.AddTicket(standin.Ticket{Subject: "s", Description: "Hello?"})
		w.h.Zendesk.AddComment(id, standin.SeedComment{Body: "Hi!", Agent: true})
		tickets = append(tickets, id)
	}
	var mu sync.Mutex
	inFlight, most := 0, 0
	w.env.OnActivity("GenerateDraft", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in supportflow.GenerateInput) (supportflow.DraftProposal, error) {
			mu.Lock()
			inFlight++
			most = max(most, inFlight)
			mu.Unlock()
			time.Sleep(100 * time.Millisecond)
			mu.Lock()
			inFlight--
			mu.Unlock()
			return supportflow.DraftProposal{ID: in.ProposalID, TicketID: in.Ticket.Conversation.TicketID, Reply: "Hi!"}, nil
		})
	w.env.ExecuteWorkflow(supportflow.EvaluateDraftsWorkflow, supportflow.EvaluationRequest{RunID: "r", Set: "s", TicketIDs: tickets, Concurrency: 2})
	require.NoError(t, w.env.GetWorkflowError())
	assert.Equal(t, 2, most, "two drafts in flight at most, and the bound was reached")
}

func TestEvaluateDrafts_BadRequestStartsNothing(t *testing.T) {
	w := newDraftWorld(t)
	w.env.ExecuteWorkflow(supportflow.EvaluateDraftsWorkflow, supportflow.EvaluationRequest{RunID: "r", Set: "s", TicketIDs: []int64{1, 1}})
	var app *temporal.ApplicationError
	require.ErrorAs(t, w.env.GetWorkflowError(), &app)
	assert.Equal(t, supportflow.ErrTypeInvalidInput, app.Type())
	assert.Contains(t, app.Error(), "listed twice")
	assert.Zero(t, w.h.Model.Requests())
}
