package tests

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/starter"
)

// The starter calls not exercised elsewhere: a rejection, the answers for a
// ticket that has no draft, and bad input refused before anything is sent.
func TestStarter_RejectNoDraftAndBadInput(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.startWorker()
	ctx := ctxT(t)
	ticket := s.seedTicket("Where is my order?")
	_, err := s.starter.StartDraft(ctx, ticket, "click")
	require.NoError(t, err)
	st := s.waitState(ticket, supportflow.DraftAwaitingApproval)

	require.NoError(t, s.starter.Reject(ctx, ticket, supportflow.RejectRequest{ProposalID: st.Proposal.ID, RejectedBy: "bo", Reason: "off topic"}))
	final := s.waitState(ticket, supportflow.DraftRejected)
	assert.Equal(t, "off topic", final.Error)
	// The draft's state changes first (so no approval can slip in), then
	// the proposal row follows.
	require.Eventually(t, func() bool {
		p, err := s.proposalStore.GetProposal(ctx, st.Proposal.ID)
		return err == nil && p.State == supportflow.DraftRejected && p.DecidedBy == "bo"
	}, 10*time.Second, 20*time.Millisecond)
	s.recordHistory(supportflow.DraftWorkflowID(ticket), "", "draft_reply_rejected")
	// The row is written before the draft's last steps: wait for the run
	// to close (on a server persisting to PostgreSQL that takes a while).
	s.waitClosed(supportflow.DraftWorkflowID(ticket))
	require.ErrorIs(t, s.starter.Reject(ctx, ticket, supportflow.RejectRequest{ProposalID: st.Proposal.ID}), starter.ErrStaleProposal, "a closed draft")

	const never = int64(99999)
	_, err = s.starter.DraftStatus(ctx, never)
	assert.ErrorIs(t, err, starter.ErrNoDraft)
	_, err = s.starter.Approve(ctx, never, supportflow.ApproveRequest{ProposalID: "p-1", ApprovedBy: "tests"})
	assert.ErrorIs(t, err, starter.ErrNoDraft)
	ok, err := s.starter.Supersede(ctx, never, supportflow.TicketActivity{At: time.Now()})
	require.NoError(t, err)
	assert.False(t, ok, "no draft running: nothing to supersede")

	for name, err := range map[string]error{
		"draft of ticket 0":   func() error { _, err := s.starter.StartDraft(ctx, 0, "x"); return err }(),
		"status of ticket -1": func() error { _, err := s.starter.DraftStatus(ctx, -1); return err }(),
		"approve a bad id": func() error {
			_, err := s.starter.Approve(ctx, ticket, supportflow.ApproveRequest{ProposalID: "a b"})
			return err
		}(),
		"reject a bad id":    s.starter.Reject(ctx, ticket, supportflow.RejectRequest{ProposalID: ""}),
		"supersede ticket 0": func() error { _, err := s.starter.Supersede(ctx, 0, supportflow.TicketActivity{}); return err }(),
		"event of a bad kind": func() error {
			_, err := s.starter.RecordTicketEvent(ctx, supportflow.TicketEvent{TicketID: ticket, Kind: "deleted"})
			return err
		}(),
		"redrive ticket 0":       s.starter.RedriveEnrichment(ctx, 0),
		"enrichment of ticket 0": func() error { _, err := s.starter.EnrichmentStatus(ctx, 0); return err }(),
		"evaluation with a bad run": func() error {
			_, err := s.starter.StartEvaluation(ctx, supportflow.EvaluationRequest{RunID: "a/b", Set: "s", TicketIDs: []int64{1}})
			return err
		}(),
		"status of a bad run": func() error { _, err := s.starter.EvaluationStatus(ctx, "a b"); return err }(),
		"a schedule every 0s": s.starter.EnsureScanSchedule(ctx, 0),
		"an execution without acts": func() error {
			_, err := s.starter.ExecuteProposal(ctx, supportflow.Proposal{ID: "p"}, "tests")
			return err
		}(),
		"action states of a bad id": func() error { _, err := s.starter.ActionStates(ctx, "a b"); return err }(),
	} {
		assert.ErrorIs(t, err, supportflow.ErrInvalidInput, name)
	}
	assert.Equal(t, 1, s.model.Requests(), "only the one real draft reached the model")
}
