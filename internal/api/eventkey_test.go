package api

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/supportflow/supportflow"
)

// A draft awaiting approval whose worker dies (or comes back) changes
// only WorkerUnavailable; the stream must still send it.
func TestEventKey_WorkerUnavailableIsNews(t *testing.T) {
	live := supportflow.DraftStatus{TicketID: 7, State: supportflow.DraftAwaitingApproval,
		Proposal: &supportflow.DraftProposal{ID: "7-run-1"}, Generation: 1}
	fromDB := live
	fromDB.WorkerUnavailable = true
	assert.NotEqual(t, eventKey(live), eventKey(fromDB), "a worker going away is sent")
	back := fromDB
	back.WorkerUnavailable = false
	assert.Equal(t, eventKey(live), eventKey(back), "and coming back is the status as before")
	// The same status is not sent twice.
	again := fromDB
	again.Proposal = &supportflow.DraftProposal{ID: "7-run-1"}
	assert.Equal(t, eventKey(fromDB), eventKey(again))
}
