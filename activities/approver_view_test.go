package activities_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/standin"
)

// The approver reads, per proposed cancellation, whose plan it is (the
// subscription service's plan, status and customer) and the comment that
// asked for it with its author's role; a citation of a comment that is not
// on the ticket is dropped, and a subscription the service cannot read
// shows no plan instead of failing the draft.
func TestGenerateDraft_ApproverSeesWhoseSubscriptionAndWhoAsked(t *testing.T) {
	f := newDraftFixture(t)
	ticket := f.h.Zendesk.AddTicket(standin.Ticket{Subject: "Plans", Description: "hello", RequesterName: "Ada"})
	asked := f.h.Zendesk.AddComment(ticket, standin.SeedComment{Body: "Please cancel my premium plan"})
	f.h.Subscriptions.AddSubscriptionWithPlan("sub-prem", "cust-ada", "Premium monthly")
	require.NoError(t, f.h.Enrichment.Store.PutEnrichment(context.Background(), ticket, standin.DefaultRequesterID,
		supportflow.Enrichment{CustomerID: "cust-ada", ActiveSubscriptions: []string{"sub-prem", "sub-gone"}}))
	tc := f.load(t, ticket)
	require.Len(t, tc.Conversation.Comments, 2)
	commentID := tc.Conversation.Comments[1].ID
	require.NotZero(t, commentID, "seeded comment %d", asked)

	f.h.Model.SetResponder(func(standin.ChatRequest) string {
		return `{"reply":"Done.","cancel_subscriptions":["sub-prem","sub-gone"],"asked_in":{"sub-prem":` +
			itoa(commentID) + `,"sub-gone":999999999}}`
	})
	v, err := f.env.ExecuteActivity("GenerateDraft", supportflow.GenerateInput{ProposalID: "p-view", Ticket: tc})
	require.NoError(t, err)
	var p supportflow.DraftProposal
	require.NoError(t, v.Get(&p))

	require.Len(t, p.Cancellations, 2)
	prem := p.Cancellations[0]
	assert.Equal(t, "sub-prem", prem.SubscriptionID)
	assert.Equal(t, "Premium monthly", prem.Plan)
	assert.Equal(t, "active", prem.Status)
	assert.Equal(t, "cust-ada", prem.CustomerID)
	require.NotNil(t, prem.AskedIn)
	assert.Equal(t, commentID, prem.AskedIn.ID)
	assert.Equal(t, "requester", prem.AskedIn.AuthorRole)
	assert.Equal(t, "Please cancel my premium plan", prem.AskedIn.Excerpt)

	gone := p.Cancellations[1]
	assert.Equal(t, "sub-gone", gone.SubscriptionID)
	assert.Empty(t, gone.Plan, "the service does not know it: no plan, and the draft still succeeds")
	assert.Nil(t, gone.AskedIn, "a cited comment that is not on the ticket is not shown")
	assert.Equal(t, []string{"sub-prem", "sub-gone"}, p.CancelSubscriptions, "what is approved is unchanged")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
