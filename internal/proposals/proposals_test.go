package proposals_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/enrichment"
	"github.com/supportflow/supportflow/internal/ingest"
	"github.com/supportflow/supportflow/internal/proposals"
	"github.com/supportflow/supportflow/internal/testdb"
	"github.com/supportflow/supportflow/internal/testenv"
	"github.com/supportflow/supportflow/ledger"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

const account = "acme"

// newStore returns the proposals and the ledger of account on a fresh,
// migrated database of its own.
func newStore(t testing.TB) (*proposals.Store, *ledger.Ledger, *pgxpool.Pool) {
	t.Helper()
	pool := testdb.MigratedPool(t)
	return proposals.New(pool, account), ledger.New(pool, account), pool
}

// req reserves an action on ticket 42 that cancels subs and then replies.
func req(key, claimant string, lease time.Duration, subs ...string) ledger.ReserveRequest {
	act := supportflow.Action{TicketID: 42, Comment: &supportflow.Comment{Body: "Done.", Public: true}, CancelSubscriptions: subs}
	return ledger.ReserveRequest{Key: key, TicketID: 42, Legs: act.Legs(), Claimant: claimant, Lease: lease}
}

func proposal(id string) supportflow.DraftProposal {
	return supportflow.DraftProposal{ID: id, TicketID: 7, Reply: "We cancelled it.", CancelSubscriptions: []string{"sub-1"},
		ConversationThrough: time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC), Model: "m"}
}

// Saving is idempotent: eight concurrent saves of one proposal (an
// activity retried after a lost answer) create one row; the same ID with
// other content is refused, and the stored proposal is unchanged.
func TestSaveProposal_IdempotentAndNeverChanges(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	created := make(chan bool, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := s.SaveProposal(ctx, proposal("p-1"))
			assert.NoError(t, err)
			created <- c
		}()
	}
	wg.Wait()
	close(created)
	n := 0
	for c := range created {
		if c {
			n++
		}
	}
	assert.Equal(t, 1, n, "exactly one save created the row")

	changed := proposal("p-1")
	changed.Reply = "Something else."
	_, err := s.SaveProposal(ctx, changed)
	require.ErrorIs(t, err, supportflow.ErrConflict)
	got, err := s.GetProposal(ctx, "p-1")
	require.NoError(t, err)
	assert.Equal(t, "We cancelled it.", got.Reply)
	assert.Equal(t, []string{"sub-1"}, got.CancelSubscriptions)
	assert.Equal(t, supportflow.DraftAwaitingApproval, got.State)
	count, err := s.CountProposals(ctx, 7)
	require.NoError(t, err)
	assert.Equal(t, 1, count)
}

func TestSaveProposal_BadInputWritesNothing(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	ctx := context.Background()
	for name, p := range map[string]supportflow.DraftProposal{
		"bad id":      proposal("p 1; DROP TABLE proposal"),
		"empty id":    proposal(""),
		"zero ticket": func() supportflow.DraftProposal { p := proposal("p-2"); p.TicketID = 0; return p }(),
	} {
		_, err := s.SaveProposal(ctx, p)
		assert.ErrorIs(t, err, supportflow.ErrInvalidInput, name)
	}
	n, err := s.CountProposals(ctx, 7)
	require.NoError(t, err)
	assert.Zero(t, n)
}

// A proposal moves forward only: awaiting -> executing -> done; a terminal
// state is never left, and an unknown state or proposal is an error.
func TestSetProposalState_OnlyMovesForward(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	ctx := context.Background()
	_, err := s.SaveProposal(ctx, proposal("p-1"))
	require.NoError(t, err)

	ok, err := s.SetProposalState(ctx, "p-1", supportflow.DraftExecuting, "ada", "")
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = s.SetProposalState(ctx, "p-1", supportflow.DraftExecuting, "", "")
	require.NoError(t, err)
	assert.True(t, ok, "re-recording executing (a retried activity) is allowed")
	ok, err = s.SetProposalState(ctx, "p-1", supportflow.DraftDone, "", "")
	require.NoError(t, err)
	assert.True(t, ok)
	ok, err = s.SetProposalState(ctx, "p-1", supportflow.DraftExpired, "", "")
	require.NoError(t, err)
	assert.False(t, ok, "done is final")
	got, err := s.GetProposal(ctx, "p-1")
	require.NoError(t, err)
	assert.Equal(t, supportflow.DraftDone, got.State)
	assert.Equal(t, "ada", got.DecidedBy, "the approver is kept")

	// Moves that skip a step or go back are refused.
	for _, tc := range []struct{ from, to string }{
		{supportflow.DraftAwaitingApproval, supportflow.DraftDone},
		{supportflow.DraftAwaitingApproval, supportflow.DraftFailed},
		{supportflow.DraftExecuting, supportflow.DraftRejected},
		{supportflow.DraftExecuting, supportflow.DraftSuperseded},
		{supportflow.DraftExecuting, supportflow.DraftExpired},
		{supportflow.DraftRejected, supportflow.DraftExecuting},
	} {
		id := "p-" + tc.from + "-" + tc.to
		_, err := s.SaveProposal(ctx, proposal(id))
		require.NoError(t, err)
		if tc.from != supportflow.DraftAwaitingApproval {
			ok, err := s.SetProposalState(ctx, id, tc.from, "", "")
			require.NoError(t, err)
			require.True(t, ok)
		}
		ok, err := s.SetProposalState(ctx, id, tc.to, "", "")
		require.NoError(t, err)
		assert.False(t, ok, "%s -> %s", tc.from, tc.to)
		got, err := s.GetProposal(ctx, id)
		require.NoError(t, err)
		assert.Equal(t, tc.from, got.State)
	}

	_, err = s.SetProposalState(ctx, "p-1", "approved-ish", "", "")
	assert.ErrorIs(t, err, supportflow.ErrInvalidInput)
	_, err = s.SetProposalState(ctx, "no-such", supportflow.DraftDone, "", "")
	assert.ErrorIs(t, err, supportflow.ErrNotFound)
}

// The mirror keeps the newest comment times even when an older copy of the
// ticket arrives later, and the scan's candidates follow who spoke last.
func TestDraftCandidates_FollowWhoSpokeLast(t *testing.T) {
	t.Parallel()
	s, _, pool := newStore(t)
	mirror, enriched := ingest.NewStore(pool, account), enrichment.NewStore(pool, account)
	ctx := context.Background()
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	put := func(updated, customer, agent time.Time) {
		_, err := mirror.UpsertTicketMirror(ctx, ingest.TicketMirror{TicketID: 7, Status: "open", UpdatedAt: updated,
			LastCustomerCommentAt: customer, LastAgentCommentAt: agent})
		require.NoError(t, err)
	}
	candidates := func() []int64 {
		ids, err := s.DraftCandidates(ctx, 10, time.Minute)
		require.NoError(t, err)
		return ids
	}
	put(t0, t0, time.Time{})
	assert.Equal(t, []int64{7}, candidates(), "the customer wrote and nobody answered")
	put(t0.Add(time.Minute), t0, t0.Add(time.Minute))
	assert.Empty(t, candidates(), "an agent answered")
	put(t0.Add(2*time.Minute), t0.Add(2*time.Minute), time.Time{})
	assert.Equal(t, []int64{7}, candidates(), "the customer wrote again; the agent's time is kept")
	p := proposal("p-7")
	p.ConversationThrough = t0.Add(2 * time.Minute)
	_, err := s.SaveProposal(ctx, p)
	require.NoError(t, err)
	assert.Empty(t, candidates(), "a proposal has seen the newest comment")

	// A ticket the customer just wrote on waits for its enrichment; once
	// enriched (or after the grace period) it is a candidate.
	fresh := time.Now().UTC().Add(-10 * time.Second)
	_, err = mirror.UpsertTicketMirror(ctx, ingest.TicketMirror{TicketID: 9, Status: "open", RequesterID: 900, UpdatedAt: fresh, LastCustomerCommentAt: fresh})
	require.NoError(t, err)
	assert.NotContains(t, candidates(), int64(9), "waits for its enrichment")
	require.NoError(t, enriched.PutEnrichment(ctx, 9, 900, supportflow.Enrichment{CustomerID: "c"}))
	assert.Contains(t, candidates(), int64(9), "enriched: drafted with its data")

	_, err = s.DraftCandidates(ctx, 0, time.Minute)
	assert.ErrorIs(t, err, supportflow.ErrInvalidInput)
}
