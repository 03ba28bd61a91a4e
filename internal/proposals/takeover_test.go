package proposals_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/proposals"
)

// Of eight concurrent claims of one proposal's reply exactly one wins;
// every claim answers with the winner's takeover, and a later claim (or
// another account's store) never replaces it.
func TestTakeover_ExactlyOneClaimWins(t *testing.T) {
	t.Parallel()
	s, _, pool := newStore(t)
	ctx := context.Background()

	_, err := s.GetTakeover(ctx, "p-take")
	require.ErrorIs(t, err, supportflow.ErrNotFound, "nobody took it yet")

	type result struct {
		held    proposals.Takeover
		claimed bool
	}
	results := make([]result, 8)
	var wg sync.WaitGroup
	for i := range results {
		wg.Add(1)
		go func() {
			defer wg.Done()
			held, claimed, err := s.ClaimTakeover(ctx, proposals.Takeover{ProposalID: "p-take", TicketID: 7,
				TakenBy: "zendesk-app", OnBehalfOf: fmt.Sprintf("agent-%d", i)})
			assert.NoError(t, err)
			results[i] = result{held, claimed}
		}()
	}
	wg.Wait()
	var winners []int
	for i, r := range results {
		if r.claimed {
			winners = append(winners, i)
		}
	}
	require.Len(t, winners, 1, "exactly one claim inserted: %+v", results)
	won := results[winners[0]].held
	assert.Equal(t, fmt.Sprintf("agent-%d", winners[0]), won.OnBehalfOf)
	assert.False(t, won.TakenAt.IsZero())
	for _, r := range results {
		assert.Equal(t, won, r.held, "every claim names the winner")
	}

	held, claimed, err := s.ClaimTakeover(ctx, proposals.Takeover{ProposalID: "p-take", TicketID: 7, TakenBy: "other"})
	require.NoError(t, err)
	assert.False(t, claimed, "a later claim loses")
	assert.Equal(t, won, held)
	got, err := s.GetTakeover(ctx, "p-take")
	require.NoError(t, err)
	assert.Equal(t, won, got)

	// Accounts are apart: another account's same proposal ID is its own.
	_, claimed, err = proposals.New(pool, "other-account").ClaimTakeover(ctx, proposals.Takeover{ProposalID: "p-take", TicketID: 7, TakenBy: "x"})
	require.NoError(t, err)
	assert.True(t, claimed)

	// No one is named: an empty on_behalf_of reads back empty.
	held, claimed, err = s.ClaimTakeover(ctx, proposals.Takeover{ProposalID: "p-anon", TicketID: 7, TakenBy: "zendesk-app"})
	require.NoError(t, err)
	assert.True(t, claimed)
	assert.Empty(t, held.OnBehalfOf)
}

// A claim with a malformed proposal ID, ticket ID or no taker writes
// nothing.
func TestTakeover_BadInputWritesNothing(t *testing.T) {
	t.Parallel()
	s, _, pool := newStore(t)
	ctx := context.Background()
	for _, tk := range []proposals.Takeover{
		{ProposalID: "x' OR '1'='1", TicketID: 7, TakenBy: "a"},
		{ProposalID: "p-1", TicketID: 0, TakenBy: "a"},
		{ProposalID: "p-1", TicketID: 7},
	} {
		_, claimed, err := s.ClaimTakeover(ctx, tk)
		require.ErrorIs(t, err, supportflow.ErrInvalidInput, "%+v", tk)
		assert.False(t, claimed)
	}
	var n int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM reply_takeover`).Scan(&n))
	assert.Zero(t, n)
}
