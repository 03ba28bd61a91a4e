package proposals_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/proposals"
)

// The list is newest first, filtered by state and ticket, bounded by its
// limit, with each proposal's approval and its reply's length in
// characters; another account's proposals are never listed; a bad filter
// is refused.
func TestListProposals_NewestFirstFilteredWithApprovals(t *testing.T) {
	t.Parallel()
	s, _, pool := newStore(t)
	other := proposals.New(pool, "other-account")
	ctx := context.Background()
	save := func(st *proposals.Store, id string, ticket int64, reply string) {
		p := proposal(id)
		p.TicketID, p.Reply = ticket, reply
		_, err := st.SaveProposal(ctx, p)
		require.NoError(t, err)
		time.Sleep(5 * time.Millisecond) // distinct created_at
	}
	save(s, "p-old", 7, "Old.")
	save(s, "p-mid", 8, "Café ✓") // 6 characters, 9 bytes
	save(s, "p-new", 7, "New.")
	save(other, "p-elsewhere", 7, "Not ours.")
	_, err := s.SetProposalState(ctx, "p-old", supportflow.DraftSuperseded, "", "")
	require.NoError(t, err)
	approved := proposal("p-mid")
	approved.TicketID, approved.Reply = 8, "Café ✓"
	_, err = s.RecordApproval(ctx, approved.Proposal(), "alice-token", "alice@acme.test", true)
	require.NoError(t, err)
	_, err = s.SetProposalState(ctx, "p-mid", supportflow.DraftExecuting, "alice-token", "")
	require.NoError(t, err)

	ids := func(ls []proposals.Listed) []string {
		var out []string
		for _, l := range ls {
			out = append(out, l.ID)
		}
		return out
	}
	all, err := s.ListProposals(ctx, proposals.ListFilter{Limit: 50})
	require.NoError(t, err)
	assert.Equal(t, []string{"p-new", "p-mid", "p-old"}, ids(all))
	mid := all[1]
	assert.Equal(t, 6, mid.ReplyChars, "counted in characters by the database")
	assert.Empty(t, mid.Reply, "the list does not read the reply")
	assert.Equal(t, "alice-token", mid.ApprovedBy)
	assert.Equal(t, "alice@acme.test", mid.OnBehalfOf)
	assert.False(t, mid.ApprovedAt.IsZero())
	assert.Equal(t, supportflow.DraftExecuting, mid.State)
	assert.Empty(t, all[0].ApprovedBy)
	assert.True(t, all[0].ApprovedAt.IsZero())

	got, err := s.ListProposals(ctx, proposals.ListFilter{State: supportflow.DraftAwaitingApproval, Limit: 50})
	require.NoError(t, err)
	assert.Equal(t, []string{"p-new"}, ids(got))
	got, err = s.ListProposals(ctx, proposals.ListFilter{TicketID: 7, Limit: 50})
	require.NoError(t, err)
	assert.Equal(t, []string{"p-new", "p-old"}, ids(got))
	got, err = s.ListProposals(ctx, proposals.ListFilter{State: supportflow.DraftSuperseded, TicketID: 7, Limit: 50})
	require.NoError(t, err)
	assert.Equal(t, []string{"p-old"}, ids(got), "both filters at once")
	got, err = s.ListProposals(ctx, proposals.ListFilter{State: supportflow.DraftSuperseded, TicketID: 8, Limit: 50})
	require.NoError(t, err)
	assert.Empty(t, got)
	got, err = s.ListProposals(ctx, proposals.ListFilter{Limit: 1})
	require.NoError(t, err)
	assert.Equal(t, []string{"p-new"}, ids(got))

	one, err := s.GetListed(ctx, "p-mid")
	require.NoError(t, err)
	assert.Equal(t, "alice-token", one.ApprovedBy)
	assert.Equal(t, 6, one.ReplyChars)
	assert.Equal(t, "Café ✓", one.Reply, "one proposal has its reply")
	_, err = s.GetListed(ctx, "p-elsewhere")
	assert.ErrorIs(t, err, supportflow.ErrNotFound)

	for _, f := range []proposals.ListFilter{{State: "pending", Limit: 1}, {Limit: 0}, {Limit: proposals.MaxListLimit + 1}, {TicketID: -1, Limit: 1}} {
		_, err := s.ListProposals(ctx, f)
		assert.ErrorIs(t, err, supportflow.ErrInvalidInput, "%+v", f)
	}
}
