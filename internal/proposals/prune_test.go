package proposals_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/proposals"
	"github.com/supportflow/supportflow/ledger"
)

// The retention prune, as the PruneLedger activity runs it (the ledger's
// actions first, then the proposals and approvals): a terminal proposal
// goes unless it is its ticket's newest, one awaiting approval stays
// however old, and an approval goes only once neither its proposal nor an
// action of it is left.
func TestPrune_NewestProposalAndApprovalsOfLiveActionsStay(t *testing.T) {
	t.Parallel()
	s, l, _ := newStore(t)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	save := func(id string, ticket int64, through time.Time, states ...string) supportflow.DraftProposal {
		t.Helper()
		p := proposal(id)
		p.TicketID, p.ConversationThrough = ticket, through
		_, err := s.SaveProposal(ctx, p)
		require.NoError(t, err)
		for _, st := range states {
			ok, err := s.SetProposalState(ctx, id, st, "ada", "")
			require.NoError(t, err)
			require.True(t, ok, "%s -> %s", id, st)
		}
		return p
	}
	old := save("p-old", 7, t0, supportflow.DraftExecuting, supportflow.DraftDone)
	save("p-new", 7, t0.Add(time.Hour), supportflow.DraftRejected)
	save("p-8-waiting", 8, t0)
	save("p-8-newer", 8, t0.Add(time.Hour), supportflow.DraftRejected)
	for _, p := range []supportflow.Proposal{old.Proposal(), {ID: "p-app", Actions: []supportflow.Action{
		{TicketID: 9, Comment: &supportflow.Comment{Body: "Hello.", Public: true}}}}} {
		_, err := s.RecordApproval(ctx, p, "token-a", "", false)
		require.NoError(t, err)
	}
	// p-old's action applied; p-app's still applying.
	for _, a := range []struct {
		key    string
		act    supportflow.Action
		finish bool
	}{
		{"p-old:0", old.Proposal().Actions[0], true},
		{"p-app:0", supportflow.Action{TicketID: 9, Comment: &supportflow.Comment{Body: "Hello.", Public: true}}, false},
	} {
		r, err := l.Reserve(ctx, ledger.ReserveRequest{Key: a.key, TicketID: a.act.TicketID, Legs: a.act.Legs(), Claimant: "A", Lease: time.Minute})
		require.NoError(t, err)
		if !a.finish {
			continue
		}
		var outcomes []ledger.LegOutcome
		for _, leg := range a.act.Legs() {
			outcomes = append(outcomes, ledger.LegOutcome{Kind: leg.Kind, Target: leg.Target, State: ledger.LegDone, ExternalID: "1", RequestID: "1"})
		}
		state, won, err := l.Finish(ctx, r.ID, "A", "", outcomes...)
		require.NoError(t, err)
		require.True(t, won)
		require.Equal(t, supportflow.StateApplied, state)
	}

	// Replies taken into the editor: p-old's goes with its proposal,
	// p-new's stays while p-new does.
	for _, tk := range []proposals.Takeover{{ProposalID: "p-old", TicketID: 7, TakenBy: "token-a"}, {ProposalID: "p-new", TicketID: 7, TakenBy: "token-a"}} {
		_, claimed, err := s.ClaimTakeover(ctx, tk)
		require.NoError(t, err)
		require.True(t, claimed)
	}

	cutoff := time.Now().Add(time.Hour)
	actions, err := l.Prune(ctx, cutoff)
	require.NoError(t, err)
	assert.Equal(t, ledger.Pruned{"action": 1}, actions, "p-old's applied action; p-app's is not terminal")
	pruned, err := s.Prune(ctx, cutoff)
	require.NoError(t, err)
	assert.Equal(t, map[string]int64{"proposal": 1, "approval": 1, "reply_takeover": 1}, pruned)
	_, err = s.GetTakeover(ctx, "p-old")
	assert.ErrorIs(t, err, supportflow.ErrNotFound, "its proposal is gone")
	_, err = s.GetTakeover(ctx, "p-new")
	assert.NoError(t, err, "its proposal is kept")

	_, err = s.GetProposal(ctx, "p-old")
	assert.ErrorIs(t, err, supportflow.ErrNotFound, "a terminal proposal a newer one replaced")
	for _, id := range []string{"p-new", "p-8-waiting", "p-8-newer"} {
		_, err = s.GetProposal(ctx, id)
		assert.NoError(t, err, "%s: a ticket's newest, or awaiting approval", id)
	}
	_, err = s.GetApproval(ctx, "p-old")
	assert.ErrorIs(t, err, supportflow.ErrNotFound, "neither its proposal nor its action is left")
	_, err = s.GetApproval(ctx, "p-app")
	assert.NoError(t, err, "its action is still applying")
	_, err = l.Get(ctx, "p-app:0")
	assert.NoError(t, err)
}
