package enrichment_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
)

// The projection round-trips through PutEnrichment and GetEnrichment
// (what tests and the local run seed, and what drafts read).
func TestEnrichment_RoundTrip(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s := f.store
	ctx := context.Background()
	_, found, err := s.GetEnrichment(ctx, 7, 70)
	require.NoError(t, err)
	assert.False(t, found)
	require.NoError(t, s.PutEnrichment(ctx, 7, 70, supportflow.Enrichment{CustomerID: "c-1", LifetimeOrders: 3_000_000_000, ActiveSubscriptions: []string{"s-1", "s-2"}}))
	e, found, err := s.GetEnrichment(ctx, 7, 70)
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, int64(3_000_000_000), e.LifetimeOrders, "bigint, not int4")
	assert.Equal(t, []string{"s-1", "s-2"}, e.ActiveSubscriptions)
}

// The enrichment belongs to the requester it was looked up for: read for
// another requester (the ticket's requester changed) or for an unknown
// one, it is not found; the new requester's lookup replaces it.
func TestEnrichment_BelongsToTheRequester(t *testing.T) {
	t.Parallel()
	f := newFixture(t)
	s, pool := f.store, f.pool
	ctx := context.Background()
	require.NoError(t, s.PutEnrichment(ctx, 7, 70, supportflow.Enrichment{CustomerID: "c-ada", ActiveSubscriptions: []string{"s-ada"}}))

	_, found, err := s.GetEnrichment(ctx, 7, 71)
	require.NoError(t, err)
	assert.False(t, found, "a requester change drops what was known")
	_, found, err = s.GetEnrichment(ctx, 7, 0)
	require.NoError(t, err)
	assert.False(t, found, "an unknown requester matches nothing")

	require.NoError(t, s.PutEnrichment(ctx, 7, 71, supportflow.Enrichment{CustomerID: "c-bo", ActiveSubscriptions: []string{"s-bo"}}))
	e, found, err := s.GetEnrichment(ctx, 7, 71)
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, "c-bo", e.CustomerID)
	_, found, err = s.GetEnrichment(ctx, 7, 70)
	require.NoError(t, err)
	assert.False(t, found, "the previous requester's data is gone")

	// A row from before requesters were recorded (NULL) matches no one.
	_, err = pool.Exec(ctx, `UPDATE ticket_enrichment SET requester_id = NULL WHERE ticket_id = 7`)
	require.NoError(t, err)
	_, found, err = s.GetEnrichment(ctx, 7, 71)
	require.NoError(t, err)
	assert.False(t, found)

	assert.ErrorIs(t, s.PutEnrichment(ctx, 8, 0, supportflow.Enrichment{CustomerID: "c"}), supportflow.ErrInvalidInput)
}
