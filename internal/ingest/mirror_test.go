package ingest_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/ingest"
	"github.com/supportflow/supportflow/internal/testdb"
	"github.com/supportflow/supportflow/internal/testenv"
	"github.com/supportflow/supportflow/ledger"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

const account = "acme"

// newStore returns the store and the ledger of account on a fresh,
// migrated database of its own.
func newStore(t testing.TB) (*ingest.Store, *ledger.Ledger, *pgxpool.Pool) {
	t.Helper()
	pool := testdb.MigratedPool(t)
	return ingest.NewStore(pool, account), ledger.New(pool, account), pool
}

// reserve reserves an action on ticket that replies.
func reserve(key string, ticket int64) ledger.ReserveRequest {
	act := supportflow.Action{TicketID: ticket, Comment: &supportflow.Comment{Body: "Done.", Public: true}}
	return ledger.ReserveRequest{Key: key, TicketID: ticket, Legs: act.Legs(), Claimant: "A", Lease: time.Minute}
}

func TestTicketLock_ReservationAndMirrorWriterSerialize(t *testing.T) {
	t.Parallel()
	s, l, pool := newStore(t)
	ctx := context.Background()

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	wrote, err := s.UpsertTicketMirrorTx(ctx, tx, ingest.TicketMirror{TicketID: 42, Subject: "Refund", Status: "open", UpdatedAt: time.Now()})
	require.NoError(t, err)
	require.True(t, wrote)

	reserved := make(chan error, 1)
	go func() {
		_, err := l.Reserve(ctx, reserve("p1:0", 42))
		reserved <- err
	}()
	select {
	case err := <-reserved:
		t.Fatalf("reservation finished (%v) while the mirror writer held the ticket's lock", err)
	case <-time.After(300 * time.Millisecond):
	}

	// Another ticket is not blocked by this one's lock.
	_, err = l.Reserve(ctx, reserve("p2:0", 43))
	require.NoError(t, err)

	require.NoError(t, tx.Commit(ctx))
	select {
	case err := <-reserved:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("reservation did not proceed after the mirror writer committed")
	}

	// Out-of-order webhooks: an older copy does not overwrite a newer one.
	wrote, err = s.UpsertTicketMirror(ctx, ingest.TicketMirror{TicketID: 42, Subject: "old", UpdatedAt: time.Now().Add(-time.Hour)})
	require.NoError(t, err)
	assert.False(t, wrote, "an older copy never overwrites a newer one")
	var subject string
	require.NoError(t, pool.QueryRow(ctx, `SELECT subject FROM ticket_mirror WHERE account = $1 AND ticket_id = 42`, account).Scan(&subject))
	assert.Equal(t, "Refund", subject)
}

// Events applied in any order leave the same mirror: a late event's
// customer comment still moves "customer spoke last" (and is news), while
// the ticket's fields keep the newest copy's; a copy of the same second
// with other fields is a change.
func TestApplyTicketMirror_LateCommentAndSameSecondCopies(t *testing.T) {
	t.Parallel()
	s, _, pool := newStore(t)
	ctx := context.Background()
	apply := func(m ingest.TicketMirror) ingest.MirrorChange {
		t.Helper()
		var c ingest.MirrorChange
		require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			var err error
			c, err = s.ApplyTicketMirrorTx(ctx, tx, m)
			return err
		}))
		return c
	}
	t0 := time.Date(2026, 12, 3, 10, 0, 0, 0, time.UTC)
	c := apply(ingest.TicketMirror{TicketID: 7, Status: "pending", Subject: "s", RequesterID: 5, UpdatedAt: t0.Add(2 * time.Second), LastAgentCommentAt: t0.Add(-time.Minute)})
	assert.True(t, c.Created && c.Newer && c.Changed)

	// The customer's comment of t0+1s arrives after the t0+2s update.
	c = apply(ingest.TicketMirror{TicketID: 7, Status: "open", Subject: "s", RequesterID: 5, UpdatedAt: t0.Add(time.Second), LastCustomerCommentAt: t0.Add(time.Second)})
	assert.True(t, c.Wrote && c.CustomerNews, "the late comment is news: %+v", c)
	assert.False(t, c.Newer || c.Changed)
	m, err := s.GetTicketMirror(ctx, 7)
	require.NoError(t, err)
	assert.Equal(t, "pending", m.Status, "fields keep the newest copy")
	assert.Equal(t, t0.Add(time.Second), m.LastCustomerCommentAt.UTC())

	// The same comment again: nothing new.
	c = apply(ingest.TicketMirror{TicketID: 7, Status: "open", Subject: "s", RequesterID: 5, UpdatedAt: t0.Add(time.Second), LastCustomerCommentAt: t0.Add(time.Second)})
	assert.False(t, c.Wrote || c.CustomerNews)

	// A copy of the same second with another status (Zendesk's times are
	// whole seconds) is a change, not news of a newer update.
	c = apply(ingest.TicketMirror{TicketID: 7, Status: "solved", Subject: "s", RequesterID: 5, UpdatedAt: t0.Add(2 * time.Second)})
	assert.True(t, c.Changed)
	assert.False(t, c.Newer)
	m, err = s.GetTicketMirror(ctx, 7)
	require.NoError(t, err)
	assert.Equal(t, "solved", m.Status)

	_, err = s.GetTicketMirror(ctx, 8)
	assert.ErrorIs(t, err, supportflow.ErrNotFound, "a ticket never mirrored")
}
