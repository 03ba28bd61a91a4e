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

// Order within a second: webhooks' copies of one updated_at follow their
// envelope times, so a late delivery of an older event loses; the
// export's copy (no event time) is final for its second and wins the tie
// either way; comments still move forward whatever the order.
func TestApplyTicketMirror_SameSecondOrder(t *testing.T) {
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
	status := func(id int64) string {
		t.Helper()
		m, err := s.GetTicketMirror(ctx, id)
		require.NoError(t, err)
		return m.Status
	}
	sec := time.Date(2026, 12, 3, 10, 0, 5, 0, time.UTC)
	older := func(id int64, st string) ingest.TicketMirror {
		return ingest.TicketMirror{TicketID: id, Status: st, Subject: "s", RequesterID: 5, UpdatedAt: sec, EventTime: sec.Add(200 * time.Millisecond)}
	}
	newer := func(id int64, st string) ingest.TicketMirror {
		return ingest.TicketMirror{TicketID: id, Status: st, Subject: "s", RequesterID: 5, UpdatedAt: sec, EventTime: sec.Add(700 * time.Millisecond)}
	}

	// Newest first, then the older one late: the older loses.
	assert.True(t, apply(newer(1, "solved")).Created)
	c := apply(older(1, "open"))
	assert.False(t, c.Wrote || c.Changed, "the late older delivery changed nothing: %+v", c)
	assert.Equal(t, "solved", status(1))

	// In order: the newer one replaces the older (a change, not news of a
	// newer update).
	apply(older(2, "pending"))
	c = apply(newer(2, "open"))
	assert.True(t, c.Wrote && c.Changed)
	assert.False(t, c.Newer)
	assert.Equal(t, "open", status(2))

	// The export's copy of that second is final: it overrides a webhook's
	// copy of the same second, and no webhook of that second overrides it.
	exportCopy := ingest.TicketMirror{TicketID: 2, Status: "hold", Subject: "s", RequesterID: 5, UpdatedAt: sec}
	c = apply(exportCopy)
	assert.True(t, c.Changed)
	assert.Equal(t, "hold", status(2))
	c = apply(ingest.TicketMirror{TicketID: 2, Status: "open", Subject: "s", RequesterID: 5, UpdatedAt: sec, EventTime: sec.Add(999 * time.Millisecond)})
	assert.False(t, c.Wrote, "a webhook of a second the export has settled loses")
	assert.Equal(t, "hold", status(2))
	// A webhook of a later second wins as always.
	c = apply(ingest.TicketMirror{TicketID: 2, Status: "open", Subject: "s", RequesterID: 5, UpdatedAt: sec.Add(time.Second), EventTime: sec.Add(1100 * time.Millisecond)})
	assert.True(t, c.Newer)
	assert.Equal(t, "open", status(2))

	// The late older delivery still brings its comment.
	apply(newer(3, "pending"))
	c = apply(ingest.TicketMirror{TicketID: 3, Status: "open", Subject: "s", RequesterID: 5, UpdatedAt: sec,
		EventTime: sec.Add(100 * time.Millisecond), LastCustomerCommentAt: sec})
	assert.True(t, c.Wrote && c.CustomerNews)
	m, err := s.GetTicketMirror(ctx, 3)
	require.NoError(t, err)
	assert.Equal(t, "pending", m.Status, "fields keep the newer event's")
	assert.Equal(t, sec, m.LastCustomerCommentAt.UTC())

	// A row of comment times only (a messaging event came first) takes
	// the fields of any copy, even one older than the message.
	require.NoError(t, pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		_, err := s.AdvanceCommentsTx(ctx, tx, 4, sec.Add(time.Minute), time.Time{})
		return err
	}))
	c = apply(older(4, "open"))
	assert.True(t, c.Changed)
	assert.Equal(t, "open", status(4))

	// An event that does not know the status (an undeleted ticket) keeps
	// the stored one.
	apply(ingest.TicketMirror{TicketID: 4, Status: "", Subject: "s2", RequesterID: 5, UpdatedAt: sec.Add(2 * time.Minute), EventTime: sec.Add(2 * time.Minute)})
	m, err = s.GetTicketMirror(ctx, 4)
	require.NoError(t, err)
	assert.Equal(t, "open", m.Status)
	assert.Equal(t, "s2", m.Subject)
}

// Newest as a table, without a database.
func TestNewest(t *testing.T) {
	sec := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return sec.Add(time.Duration(ms) * time.Millisecond) }
	fields := func(upd time.Time, ev time.Time) ingest.TicketMirror {
		return ingest.TicketMirror{Status: "open", UpdatedAt: upd, EventTime: ev}
	}
	assert.True(t, ingest.Newest(fields(sec, at(100)), fields(sec.Add(time.Second), at(1100))), "a later second")
	assert.False(t, ingest.Newest(fields(sec.Add(time.Second), at(1100)), fields(sec, at(900))), "an earlier second")
	assert.True(t, ingest.Newest(fields(sec, at(100)), fields(sec, at(300))), "a later event of the second")
	assert.False(t, ingest.Newest(fields(sec, at(300)), fields(sec, at(100))), "an earlier event of the second")
	assert.False(t, ingest.Newest(fields(sec, at(300)), fields(sec, at(300))), "two events of one action: the first stays")
	assert.True(t, ingest.Newest(fields(sec, at(300)), fields(sec, time.Time{})), "the export's copy is final")
	assert.True(t, ingest.Newest(fields(sec, time.Time{}), fields(sec, at(300))), "a stored copy of unknown order is replaced")
	assert.True(t, ingest.Newest(ingest.TicketMirror{UpdatedAt: sec.Add(time.Hour)}, fields(sec, at(1))), "a row without fields takes any")
}
