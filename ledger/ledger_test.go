package ledger_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/testenv"
	"github.com/supportflow/supportflow/ledger"
	"github.com/supportflow/supportflow/migrations"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

const account = "acme"

// newLedger returns a ledger on a fresh, migrated database of its own.
func newLedger(t testing.TB) (*ledger.Ledger, *pgxpool.Pool) {
	t.Helper()
	url := testenv.DatabaseURL(t)
	_, err := migrations.MigrateURL(context.Background(), url)
	require.NoError(t, err)
	cfg, err := pgxpool.ParseConfig(url)
	require.NoError(t, err)
	cfg.MaxConns = 80
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return ledger.New(pool, account), pool
}

// req reserves an action on ticket 42 that cancels subs and then replies.
func req(key, claimant string, lease time.Duration, subs ...string) ledger.ReserveRequest {
	act := supportflow.Action{TicketID: 42, Comment: &supportflow.Comment{Body: "Done.", Public: true}, CancelSubscriptions: subs}
	return ledger.ReserveRequest{Key: key, TicketID: 42, Legs: act.Legs(), Claimant: claimant, Lease: lease}
}

// replied is the reply leg's outcome once its comment landed.
func replied(auditID, commentID int64) ledger.LegOutcome {
	return ledger.LegOutcome{Kind: supportflow.LegReply, Target: "42", State: ledger.LegDone,
		RequestID: fmt.Sprint(auditID), ExternalID: fmt.Sprint(commentID)}
}

// cancelled is one cancellation leg's outcome.
func cancelled(sub, state, errMsg string) ledger.LegOutcome {
	return ledger.LegOutcome{Kind: supportflow.LegCancelSubscription, Target: sub, State: state, Error: errMsg}
}

func TestReserve_FiftyConcurrentReserversExactlyOneWins(t *testing.T) {
	t.Parallel()
	l, _ := newLedger(t)
	ctx := context.Background()
	const n = 50
	var (
		wg            sync.WaitGroup
		mu            sync.Mutex
		winners, held int
		otherErrs     []error
	)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			_, err := l.Reserve(ctx, req("p1:0", fmt.Sprintf("attempt-%d", i), time.Minute, "sub-a"))
			mu.Lock()
			defer mu.Unlock()
			switch {
			case err == nil:
				winners++
			case errors.Is(err, ledger.ErrLeaseHeld):
				held++
			default:
				otherErrs = append(otherErrs, err)
			}
		}()
	}
	close(start)
	wg.Wait()
	assert.Empty(t, otherErrs)
	assert.Equal(t, 1, winners, "exactly one reserver claims the action")
	assert.Equal(t, n-1, held, "every other reserver finds a live lease")

	a, err := l.Get(ctx, "p1:0")
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplying, a.State)
	assert.Equal(t, 1, a.Attempts)
	require.Len(t, a.Legs, 2, "one row per leg, however many reservers")
	assert.Equal(t, []string{"sub-a"}, a.Legs.InState(supportflow.LegCancelSubscription, ledger.LegPending))
}

func TestReserve_LiveLeaseIsNotTakenOver_ExpiredOneIs(t *testing.T) {
	t.Parallel()
	l, _ := newLedger(t)
	ctx := context.Background()

	first, err := l.Reserve(ctx, req("p1:0", "A", time.Second))
	require.NoError(t, err)
	assert.Equal(t, 0, first.PriorAttempts)
	assert.False(t, first.TookOver)

	_, err = l.Reserve(ctx, req("p1:0", "B", time.Minute))
	var held *ledger.LeaseHeldError
	require.ErrorAs(t, err, &held, "a live lease of another claimant is not taken over")
	assert.Equal(t, "A", held.Claimant)
	assert.Greater(t, held.RetryAfterDelay(), time.Duration(0), "the retry waits for the lease to lapse")

	// A's heartbeat keeps its claim alive past the original expiry.
	time.Sleep(600 * time.Millisecond)
	won, err := l.ExtendLease(ctx, first.ID, "A", time.Second)
	require.NoError(t, err)
	require.True(t, won)
	time.Sleep(600 * time.Millisecond)
	_, err = l.Reserve(ctx, req("p1:0", "B", time.Minute))
	require.ErrorIs(t, err, ledger.ErrLeaseHeld, "an extended lease is still live")

	// A stops extending: its lease lapses and B takes over.
	time.Sleep(1100 * time.Millisecond)
	second, err := l.Reserve(ctx, req("p1:0", "B", time.Minute))
	require.NoError(t, err)
	assert.True(t, second.TookOver)
	assert.Equal(t, 1, second.PriorAttempts, "B learns an earlier attempt may have written")

	a, err := l.Get(ctx, "p1:0")
	require.NoError(t, err)
	assert.Equal(t, "B", a.Claimant)
	assert.Equal(t, 2, a.Attempts)
}

func TestFencedWrites_LostClaimantGetsFalseAndChangesNothing(t *testing.T) {
	t.Parallel()
	l, _ := newLedger(t)
	ctx := context.Background()

	stale, err := l.Reserve(ctx, req("p1:0", "A", 50*time.Millisecond, "sub-a"))
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond)
	_, err = l.Reserve(ctx, req("p1:0", "B", time.Minute, "sub-a"))
	require.NoError(t, err)
	before, err := l.Get(ctx, "p1:0")
	require.NoError(t, err)

	won, err := l.ExtendLease(ctx, stale.ID, "A", time.Minute)
	require.NoError(t, err)
	assert.False(t, won, "extend lease")
	_, won, err = l.Finish(ctx, stale.ID, "A", "", replied(7, 8))
	require.NoError(t, err)
	assert.False(t, won, "record comment")
	won, err = l.RecordLegs(ctx, stale.ID, "A", cancelled("sub-a", ledger.LegDone, ""))
	require.NoError(t, err)
	assert.False(t, won, "record cancellation")
	_, won, err = l.Finish(ctx, stale.ID, "A", "boom")
	require.NoError(t, err)
	assert.False(t, won, "finish")

	after, err := l.Get(ctx, "p1:0")
	require.NoError(t, err)
	assert.Equal(t, before, after, "a lost claimant's writes change nothing")
}

func TestAppliedDeduplicates_PartialFailureRerunsOnlyWhatIsLeft(t *testing.T) {
	t.Parallel()
	l, _ := newLedger(t)
	ctx := context.Background()

	r, err := l.Reserve(ctx, req("p1:0", "A", time.Minute, "sub-a", "sub-b"))
	require.NoError(t, err)
	state, won, err := l.Finish(ctx, r.ID, "A", "", replied(100, 101))
	require.NoError(t, err)
	require.True(t, won)
	assert.Equal(t, supportflow.StateApplying, state, "cancellations are still to do")

	r2, err := l.Reserve(ctx, req("p1:0", "A2", time.Minute, "sub-a", "sub-b"))
	require.NoError(t, err, "a released claim is taken at once")
	assert.Equal(t, []string{"42"}, r2.Legs.InState(supportflow.LegReply, ledger.LegDone))
	won, err = l.RecordLegs(ctx, r2.ID, "A2", cancelled("sub-a", ledger.LegDone, ""))
	require.NoError(t, err)
	require.True(t, won)
	won, err = l.RecordLegs(ctx, r2.ID, "A2", cancelled("sub-b", ledger.LegFailed, "HTTP 422: subscription is locked"))
	require.NoError(t, err)
	require.True(t, won)
	_, _, err = l.Finish(ctx, r2.ID, "A2", "subscription sub-b refused")
	require.NoError(t, err)
	state, err = l.SettleFailed(ctx, "p1:0", 42, "subscription sub-b refused", nil, false)
	require.NoError(t, err)
	assert.Equal(t, supportflow.StatePartialFailure, state)

	// A re-approval re-runs: the comment and sub-a are skipped.
	r3, err := l.Reserve(ctx, req("p1:0", "C", time.Minute, "sub-a", "sub-b"))
	require.NoError(t, err)
	assert.False(t, r3.Applied, "only applied deduplicates")
	reply, _ := r3.Legs.Find(supportflow.LegReply, "42")
	assert.Equal(t, "101", reply.ExternalID)
	assert.Equal(t, "100", reply.RequestID)
	assert.Equal(t, []string{"sub-a"}, r3.Legs.InState(supportflow.LegCancelSubscription, ledger.LegDone))
	won, err = l.RecordLegs(ctx, r3.ID, "C", cancelled("sub-b", ledger.LegDone, ""))
	require.NoError(t, err)
	require.True(t, won)
	state, won, err = l.Finish(ctx, r3.ID, "C", "")
	require.NoError(t, err)
	require.True(t, won)
	assert.Equal(t, supportflow.StateApplied, state)

	r4, err := l.Reserve(ctx, req("p1:0", "D", time.Minute, "sub-a", "sub-b"))
	require.NoError(t, err)
	assert.True(t, r4.Applied, "applied deduplicates every later run")
	a, err := l.Get(ctx, "p1:0")
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplied, a.State)
	assert.Equal(t, 3, a.Attempts, "the deduplicated run did not claim")
	assert.Empty(t, a.LastError)
}

func TestRecordLegs_FailureIsRecordedAndSuccessNeverDowngraded(t *testing.T) {
	t.Parallel()
	l, _ := newLedger(t)
	ctx := context.Background()
	legs := supportflow.Action{TicketID: 42, CancelSubscriptions: []string{"sub-a"}}.Legs()
	r, err := l.Reserve(ctx, ledger.ReserveRequest{Key: "p1:0", TicketID: 42, Legs: legs, Claimant: "A", Lease: time.Minute})
	require.NoError(t, err)

	won, err := l.RecordLegs(ctx, r.ID, "A", cancelled("sub-a", ledger.LegFailed, "connection reset"))
	require.NoError(t, err)
	require.True(t, won)
	a, err := l.Get(ctx, "p1:0")
	require.NoError(t, err)
	require.Len(t, a.Legs, 1)
	assert.Equal(t, ledger.LegFailed, a.Legs[0].State)
	assert.Equal(t, "connection reset", a.Legs[0].LastError)
	assert.Equal(t, 1, a.Legs[0].Calls)

	done := cancelled("sub-a", ledger.LegDone, "")
	done.AlreadyDone = true
	_, err = l.RecordLegs(ctx, r.ID, "A", done)
	require.NoError(t, err)
	_, err = l.RecordLegs(ctx, r.ID, "A", cancelled("sub-a", ledger.LegFailed, "late failure"))
	require.NoError(t, err)
	a, err = l.Get(ctx, "p1:0")
	require.NoError(t, err)
	assert.Equal(t, ledger.LegDone, a.Legs[0].State, "a success is never overwritten")
	assert.Empty(t, a.Legs[0].LastError, "nor given a late failure's error")
	assert.True(t, a.Legs[0].AlreadyDone)
	assert.Equal(t, 3, a.Legs[0].Calls)
	assert.NotNil(t, a.Legs[0].DoneAt)

	_, err = l.RecordLegs(ctx, r.ID, "A", cancelled("sub-zz", ledger.LegDone, ""))
	assert.ErrorIs(t, err, supportflow.ErrInvalidInput, "a leg the action does not have")

	state, won, err := l.Finish(ctx, r.ID, "A", "")
	require.NoError(t, err)
	require.True(t, won)
	assert.Equal(t, supportflow.StateApplied, state, "an action without a comment is applied once its cancellations are")
}

func TestSettleFailed(t *testing.T) {
	t.Parallel()
	l, _ := newLedger(t)
	ctx := context.Background()

	// Nothing landed: failed.
	r, err := l.Reserve(ctx, req("p1:0", "A", time.Minute))
	require.NoError(t, err)
	_, err = l.SettleFailed(ctx, "p1:0", 42, "HTTP 404", nil, false)
	require.ErrorIs(t, err, ledger.ErrLeaseHeld, "a live claimant is never settled under its feet")
	_, _, err = l.Finish(ctx, r.ID, "A", "HTTP 404: ticket not found")
	require.NoError(t, err)
	state, err := l.SettleFailed(ctx, "p1:0", 42, "HTTP 404: ticket not found", nil, false)
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateFailed, state)
	a, err := l.Get(ctx, "p1:0")
	require.NoError(t, err)
	assert.Equal(t, "HTTP 404: ticket not found", a.LastError)
	assert.NotNil(t, a.SettledAt)

	// Settling again is a no-op that reports the terminal state.
	state, err = l.SettleFailed(ctx, "p1:0", 42, "other", nil, false)
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateFailed, state)

	// Never reserved (the first attempt failed before its claim): a row
	// still records the failure.
	state, err = l.SettleFailed(ctx, "p2:3", 43, "deadline exceeded", nil, false)
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateFailed, state)
	a, err = l.Get(ctx, "p2:3")
	require.NoError(t, err)
	assert.Equal(t, int64(43), a.TicketID)
}

func TestBadInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	l, pool := newLedger(t)
	ctx := context.Background()
	for _, key := range []string{"", "p1", "p1:", "p1:-1", "p1:01", "p1:x", ":0", "a/b:0", "p1:0;DROP TABLE action"} {
		_, err := l.Reserve(ctx, req(key, "A", time.Minute))
		assert.ErrorIs(t, err, supportflow.ErrInvalidInput, "key %q", key)
		_, err = l.Get(ctx, key)
		assert.ErrorIs(t, err, supportflow.ErrInvalidInput, "key %q", key)
	}
	_, err := l.Reserve(ctx, req("p1:0", "", time.Minute))
	assert.ErrorIs(t, err, supportflow.ErrInvalidInput, "no claimant")

	_, err = l.Reserve(ctx, req("p1:0", "A", time.Minute))
	require.NoError(t, err)
	other := req("p1:0", "B", time.Minute)
	other.TicketID = 99
	_, err = l.Reserve(ctx, other)
	assert.ErrorIs(t, err, supportflow.ErrConflict, "one key, two different actions")

	_, err = l.Get(ctx, "p9:0")
	assert.ErrorIs(t, err, supportflow.ErrNotFound)

	var rows int
	require.NoError(t, pool.QueryRow(ctx, `SELECT count(*) FROM action`).Scan(&rows))
	assert.Equal(t, 1, rows, "only the one valid reservation wrote a row")
}

func TestTicketLockKey_IsStableAndDistinct(t *testing.T) {
	assert.Equal(t, ledger.TicketLockKey("acme", 42), ledger.TicketLockKey("acme", 42))
	assert.NotEqual(t, ledger.TicketLockKey("acme", 42), ledger.TicketLockKey("acme", 43))
	assert.NotEqual(t, ledger.TicketLockKey("acme", 42), ledger.TicketLockKey("acme4", 2))
}

// A key reused with other content (another reply, other subscriptions)
// is refused, even once the first action is applied: it is another
// action, not a repeat.
func TestReserve_SameKeyOtherContentIsAConflict(t *testing.T) {
	t.Parallel()
	l, _ := newLedger(t)
	ctx := context.Background()
	first := supportflow.Action{TicketID: 42, Comment: &supportflow.Comment{Body: "Cancelled.", Public: true}}
	r := req("p9:0", "A", time.Minute)
	r.Digest = ledger.ContentDigest(first)
	res, err := l.Reserve(ctx, r)
	require.NoError(t, err)
	_, won, err := l.Finish(ctx, res.ID, "A", "", replied(1, 2))
	require.NoError(t, err)
	require.True(t, won)

	again := req("p9:0", "B", time.Minute)
	again.Digest = ledger.ContentDigest(first)
	res, err = l.Reserve(ctx, again)
	require.NoError(t, err)
	assert.True(t, res.Applied, "the same content is a repeat: deduplicated")

	other := first
	other.Comment = &supportflow.Comment{Body: "Refunded.", Public: true}
	r2 := req("p9:0", "C", time.Minute)
	r2.Digest = ledger.ContentDigest(other)
	_, err = l.Reserve(ctx, r2)
	assert.ErrorIs(t, err, supportflow.ErrConflict)
	assert.NotEqual(t, ledger.ContentDigest(first), ledger.ContentDigest(supportflow.Action{TicketID: 42, Comment: first.Comment, CancelSubscriptions: []string{"s"}}))
}

// A key reserved with other legs (another subscription, a ticket update
// added) is another action: refused, whatever the digest says.
func TestReserve_OtherLegsAreAConflict(t *testing.T) {
	t.Parallel()
	l, _ := newLedger(t)
	ctx := context.Background()
	_, err := l.Reserve(ctx, req("p1:0", "A", time.Minute, "sub-a"))
	require.NoError(t, err)
	for name, other := range map[string]ledger.ReserveRequest{
		"other subscription": req("p1:0", "B", time.Minute, "sub-b"),
		"one more":           req("p1:0", "B", time.Minute, "sub-a", "sub-b"),
		"ticket update added": func() ledger.ReserveRequest {
			r := req("p1:0", "B", time.Minute, "sub-a")
			r.Legs = supportflow.Action{TicketID: 42, Comment: &supportflow.Comment{Body: "x"}, CancelSubscriptions: []string{"sub-a"},
				UpdateTicket: &supportflow.TicketUpdate{Status: "pending"}}.Legs()
			return r
		}(),
	} {
		_, err := l.Reserve(ctx, other)
		assert.ErrorIs(t, err, supportflow.ErrConflict, name)
	}
	bad := req("p2:0", "A", time.Minute)
	bad.Legs = []supportflow.Leg{{Kind: "refund", Target: "r-1"}}
	_, err = l.Reserve(ctx, bad)
	assert.ErrorIs(t, err, supportflow.ErrInvalidInput, "an unknown leg kind")
	bad.Legs = nil
	_, err = l.Reserve(ctx, bad)
	assert.ErrorIs(t, err, supportflow.ErrInvalidInput, "no legs")
}

// Settling: a refused cancellation that held the reply back ends
// needs_attention; an unknown leg blocks settling until resolved, and one
// resolved as landed can complete the action.
func TestSettleFailed_NeedsAttentionAndUnknownLegs(t *testing.T) {
	t.Parallel()
	l, _ := newLedger(t)
	ctx := context.Background()

	r, err := l.Reserve(ctx, req("p1:0", "A", time.Minute, "sub-a", "sub-b"))
	require.NoError(t, err)
	_, _, err = l.Finish(ctx, r.ID, "A", "sub-b refused", cancelled("sub-a", ledger.LegDone, ""), cancelled("sub-b", ledger.LegFailed, "HTTP 422"))
	require.NoError(t, err)
	state, err := l.SettleFailed(ctx, "p1:0", 42, "sub-b refused", nil, true)
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateNeedsAttention, state)

	// Under the old order the reply landed first; a retry whose
	// cancellation is refused again held nothing back.
	r, err = l.Reserve(ctx, req("p4:0", "A", time.Minute, "sub-e"))
	require.NoError(t, err)
	_, _, err = l.Finish(ctx, r.ID, "A", "sub-e refused", replied(1, 2), cancelled("sub-e", ledger.LegFailed, "HTTP 404"))
	require.NoError(t, err)
	state, err = l.SettleFailed(ctx, "p4:0", 42, "sub-e refused", nil, true)
	require.NoError(t, err)
	assert.Equal(t, supportflow.StatePartialFailure, state, "the customer was answered: not needs_attention")

	r, err = l.Reserve(ctx, req("p2:0", "A", time.Minute, "sub-c"))
	require.NoError(t, err)
	_, _, err = l.Finish(ctx, r.ID, "A", "lost", cancelled("sub-c", ledger.LegUnknown, "connection reset"))
	require.NoError(t, err)
	_, err = l.SettleFailed(ctx, "p2:0", 42, "lost", nil, false)
	require.ErrorIs(t, err, ledger.ErrUnresolved, "unknown is not failed")
	state, err = l.SettleFailed(ctx, "p2:0", 42, "lost", map[supportflow.Leg]bool{{Kind: supportflow.LegCancelSubscription, Target: "sub-c"}: true}, false)
	require.NoError(t, err)
	assert.Equal(t, supportflow.StatePartialFailure, state, "the cancellation landed; the reply did not")

	r, err = l.Reserve(ctx, ledger.ReserveRequest{Key: "p3:0", TicketID: 42, Claimant: "A", Lease: time.Minute,
		Legs: []supportflow.Leg{{Kind: supportflow.LegCancelSubscription, Target: "sub-d"}}})
	require.NoError(t, err)
	_, _, err = l.Finish(ctx, r.ID, "A", "lost", cancelled("sub-d", ledger.LegUnknown, "timeout"))
	require.NoError(t, err)
	state, err = l.SettleFailed(ctx, "p3:0", 42, "lost", map[supportflow.Leg]bool{{Kind: supportflow.LegCancelSubscription, Target: "sub-d"}: true}, false)
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplied, state, "every leg turned out done")
}

// The content digest of an action without a ticket update is what it was
// before ticket updates existed: rows recorded by the previous release
// still match their own re-runs. A ticket update changes it.
func TestContentDigest_StableForOldActions(t *testing.T) {
	old := supportflow.Action{TicketID: 42, Comment: &supportflow.Comment{Body: "Cancelled.", Public: true}, CancelSubscriptions: []string{"s"}}
	assert.Equal(t, "da6bbe08adc6b6f0c736a82a4c4ed8b78d0d6e529a4f5162fb4ca855a67f0b0d", ledger.ContentDigest(old), "the digest the previous release recorded")
	with := old
	with.UpdateTicket = &supportflow.TicketUpdate{Status: "pending"}
	assert.NotEqual(t, ledger.ContentDigest(old), ledger.ContentDigest(with))
	tagged := old
	tagged.UpdateTicket = &supportflow.TicketUpdate{Status: "pending", Tags: []string{"x"}}
	assert.NotEqual(t, ledger.ContentDigest(with), ledger.ContentDigest(tagged))
}
