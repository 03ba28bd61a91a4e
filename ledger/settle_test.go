package ledger_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/ledger"
)

// resolved is a cancellation's outcome as the subscription service says it
// (a status read), not a call.
func resolved(sub, state string) ledger.LegOutcome {
	return ledger.LegOutcome{Kind: supportflow.LegCancelSubscription, Target: sub, State: state, Resolved: true}
}

// Settle's modes: ResolveOnly records what the receivers say and leaves
// the action open (applying, unclaimed) so the execution can go on to the
// reply; Final refuses while a leg is still unknown; GiveUp ends the
// action needs_attention with the leg left unknown.
func TestSettle_Modes(t *testing.T) {
	t.Parallel()
	l, _ := newLedger(t)
	ctx := context.Background()
	lost := func(key string) {
		t.Helper()
		r, err := l.Reserve(ctx, req(key, "A", time.Minute, "sub-a", "sub-b"))
		require.NoError(t, err)
		_, _, err = l.Finish(ctx, r.ID, "A", "connection reset",
			cancelled("sub-a", ledger.LegDone, ""), cancelled("sub-b", ledger.LegUnknown, "connection reset"))
		require.NoError(t, err)
	}

	// ResolveOnly: sub-b's answer had landed. The action stays open, and
	// the reply's attempt claims it.
	lost("p1:0")
	a, err := l.Settle(ctx, ledger.SettleRequest{Key: "p1:0", TicketID: 42, Error: "a service kept failing",
		Outcomes: []ledger.LegOutcome{resolved("sub-b", ledger.LegDone)}, Mode: ledger.SettleResolveOnly, Run: "run-1"})
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplying, a.State, "left open")
	assert.Nil(t, a.SettledAt)
	assert.Nil(t, a.LeaseExpiresAt, "and unclaimed")
	assert.Equal(t, []string{"sub-a", "sub-b"}, a.Legs.InState(supportflow.LegCancelSubscription, ledger.LegDone))
	sub, ok := a.Legs.Find(supportflow.LegCancelSubscription, "sub-b")
	require.True(t, ok)
	assert.Equal(t, 1, sub.Calls, "a resolution is not a call")
	assert.NotNil(t, sub.DoneAt)
	assert.Equal(t, []string{"42"}, a.Legs.InState(supportflow.LegReply, ledger.LegPending))
	next := req("p1:0", "B", time.Minute, "sub-a", "sub-b")
	next.Run = "run-1"
	res, err := l.Reserve(ctx, next)
	require.NoError(t, err, "the same run goes on to the reply")
	assert.Equal(t, 1, res.PriorAttempts)
	assert.Equal(t, []string{"42"}, res.Legs.InState(supportflow.LegReply, ledger.LegPending), "only the reply is left to do")

	// Final while a leg is still unknown: refused, nothing changes.
	lost("p2:0")
	_, err = l.Settle(ctx, ledger.SettleRequest{Key: "p2:0", TicketID: 42, Error: "a service kept failing", Mode: ledger.SettleFinal})
	require.ErrorIs(t, err, ledger.ErrUnresolved)
	a, err = l.Get(ctx, "p2:0")
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplying, a.State)
	assert.Equal(t, []string{"sub-b"}, a.Legs.InState(supportflow.LegCancelSubscription, ledger.LegUnknown))
	assert.Nil(t, a.SettledAt)

	// GiveUp: terminal anyway, needs_attention, the leg still unknown.
	a, err = l.Settle(ctx, ledger.SettleRequest{Key: "p2:0", TicketID: 42, Error: "a service did not answer in time", Mode: ledger.SettleGiveUp})
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateNeedsAttention, a.State)
	assert.NotNil(t, a.SettledAt)
	assert.Equal(t, []string{"sub-b"}, a.Legs.InState(supportflow.LegCancelSubscription, ledger.LegUnknown), "nobody knows: it stays unknown")
	assert.Equal(t, "a service did not answer in time", a.LastError)

	// Final once the receiver said: sub-b never landed, sub-a did.
	lost("p3:0")
	a, err = l.Settle(ctx, ledger.SettleRequest{Key: "p3:0", TicketID: 42, Error: "a service kept failing",
		Outcomes: []ledger.LegOutcome{resolved("sub-b", ledger.LegFailed), resolved("sub-a", ledger.LegFailed)}, Mode: ledger.SettleFinal})
	require.NoError(t, err)
	assert.Equal(t, supportflow.StatePartialFailure, a.State)
	assert.Equal(t, []string{"sub-a"}, a.Legs.InState(supportflow.LegCancelSubscription, ledger.LegDone), "a done leg is never changed")
	assert.Equal(t, []string{"sub-b"}, a.Legs.InState(supportflow.LegCancelSubscription, ledger.LegFailed))
}

// A stale attempt of the run that settled an action (one that was waiting
// out a lease when the run gave up) does not reopen it (ErrSettled);
// another run (an operator's retry) does.
func TestReserve_SettledRunRefusesItsStaleAttempt_AnotherRunReopens(t *testing.T) {
	t.Parallel()
	l, _ := newLedger(t)
	ctx := context.Background()
	attempt := func(run, claimant string) ledger.ReserveRequest {
		r := req("p1:0", claimant, time.Minute, "sub-a")
		r.Run = run
		return r
	}
	r, err := l.Reserve(ctx, attempt("run-1", "run-1/5#1"))
	require.NoError(t, err)
	_, _, err = l.Finish(ctx, r.ID, "run-1/5#1", "HTTP 422", cancelled("sub-a", ledger.LegFailed, "HTTP 422"))
	require.NoError(t, err)
	a, err := l.Settle(ctx, ledger.SettleRequest{Key: "p1:0", TicketID: 42, Error: "a service refused it for good", HeldBack: true, Run: "run-1"})
	require.NoError(t, err)
	require.Equal(t, supportflow.StateNeedsAttention, a.State)

	_, err = l.Reserve(ctx, attempt("run-1", "run-1/5#2"))
	require.ErrorIs(t, err, ledger.ErrSettled, "the settling run's stale attempt")
	a, err = l.Get(ctx, "p1:0")
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateNeedsAttention, a.State, "not reopened")
	assert.Equal(t, 1, a.Attempts)
	assert.NotNil(t, a.SettledAt)

	res, err := l.Reserve(ctx, attempt("run-2", "run-2/5#1"))
	require.NoError(t, err, "a later run reopens it")
	assert.Equal(t, 1, res.PriorAttempts)
	a, err = l.Get(ctx, "p1:0")
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplying, a.State)
	assert.Equal(t, "run-2/5#1", a.Claimant)
	assert.Nil(t, a.SettledAt)
}

// A leg whose answer was lost stays unknown when a later call of it
// failed: the earlier call may still land. Only done (from a call or the
// receiver) moves it on.
func TestRecordLegs_UnknownStaysUnknownWhenALaterCallFailed(t *testing.T) {
	t.Parallel()
	l, _ := newLedger(t)
	ctx := context.Background()
	r, err := l.Reserve(ctx, req("p1:0", "A", time.Minute, "sub-a"))
	require.NoError(t, err)
	leg := func() ledger.LegRow {
		t.Helper()
		a, err := l.Get(ctx, "p1:0")
		require.NoError(t, err)
		row, ok := a.Legs.Find(supportflow.LegCancelSubscription, "sub-a")
		require.True(t, ok)
		return row
	}

	won, err := l.RecordLegs(ctx, r.ID, "A", cancelled("sub-a", ledger.LegUnknown, "connection reset"))
	require.NoError(t, err)
	require.True(t, won)
	won, err = l.RecordLegs(ctx, r.ID, "A", cancelled("sub-a", ledger.LegFailed, "HTTP 503"))
	require.NoError(t, err)
	require.True(t, won)
	got := leg()
	assert.Equal(t, ledger.LegUnknown, got.State, "a later failure says nothing of the earlier call")
	assert.Equal(t, 2, got.Calls)
	assert.Equal(t, "HTTP 503", got.LastError, "the latest error is kept")

	state, won, err := l.Finish(ctx, r.ID, "A", "HTTP 503", cancelled("sub-a", ledger.LegFailed, "HTTP 503"))
	require.NoError(t, err)
	require.True(t, won)
	assert.Equal(t, supportflow.StateApplying, state)
	assert.Equal(t, ledger.LegUnknown, leg().State, "nor does Finish make it failed")
	_, err = l.Settle(ctx, ledger.SettleRequest{Key: "p1:0", TicketID: 42, Mode: ledger.SettleFinal})
	require.ErrorIs(t, err, ledger.ErrUnresolved, "so the action cannot be settled on a guess")

	r, err = l.Reserve(ctx, req("p1:0", "B", time.Minute, "sub-a"))
	require.NoError(t, err)
	done := cancelled("sub-a", ledger.LegDone, "")
	done.AlreadyDone = true
	_, err = l.RecordLegs(ctx, r.ID, "B", done)
	require.NoError(t, err)
	got = leg()
	assert.Equal(t, ledger.LegDone, got.State, "done moves it on")
	assert.True(t, got.AlreadyDone)
	assert.Empty(t, got.LastError)
}
