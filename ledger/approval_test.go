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

// appProposal is a proposal an app composed: a public reply with a
// cancellation on ticket 42, then a private note on ticket 43.
func appProposal(id string) supportflow.Proposal {
	return supportflow.Proposal{ID: id, Actions: []supportflow.Action{
		{TicketID: 42, Comment: &supportflow.Comment{Body: "We cancelled it.", Public: true}, CancelSubscriptions: []string{"sub-1"}},
		{TicketID: 43, Comment: &supportflow.Comment{Body: "customer churned", Public: false}},
	}}
}

// An approval admits exactly the actions approved, each under its own key:
// no approval, another reply, another ticket, other subscriptions, another
// action's content or an action the proposal does not have are refused
// with ErrNotApproved.
func TestApproval_CheckAdmitsOnlyWhatWasApproved(t *testing.T) {
	t.Parallel()
	l, _ := newLedger(t)
	ctx := context.Background()
	p := appProposal("p-1")
	a0, a1 := p.Actions[0], p.Actions[1]

	err := l.CheckApproval(ctx, "p-1:0", ledger.ContentDigest(a0))
	require.ErrorIs(t, err, ledger.ErrNotApproved, "no approval recorded")
	_, err = l.GetApproval(ctx, "p-1")
	require.ErrorIs(t, err, supportflow.ErrNotFound)

	created, err := l.RecordApproval(ctx, p, "token-app", "ada@acme.test", false)
	require.NoError(t, err)
	assert.True(t, created)
	got, err := l.GetApproval(ctx, "p-1")
	require.NoError(t, err)
	assert.Equal(t, int64(42), got.TicketID)
	assert.Equal(t, "token-app", got.ApprovedBy)
	assert.Equal(t, "ada@acme.test", got.OnBehalfOf)
	assert.Equal(t, ledger.ProposalDigests(p), got.ActionDigests)
	assert.False(t, got.ApprovedAt.IsZero())

	assert.NoError(t, l.CheckApproval(ctx, "p-1:0", ledger.ContentDigest(a0)))
	assert.NoError(t, l.CheckApproval(ctx, "p-1:1", ledger.ContentDigest(a1)))

	otherReply := a0
	otherReply.Comment = &supportflow.Comment{Body: "Something else.", Public: true}
	otherTicket := a0
	otherTicket.TicketID = 99
	otherSubs := a0
	otherSubs.CancelSubscriptions = []string{"sub-1", "sub-2"}
	withUpdate := a0
	withUpdate.UpdateTicket = &supportflow.TicketUpdate{Status: "solved"}
	for name, tc := range map[string]struct {
		key    string
		action supportflow.Action
	}{
		"another reply":                {"p-1:0", otherReply},
		"another ticket":               {"p-1:0", otherTicket},
		"other subscriptions":          {"p-1:0", otherSubs},
		"a ticket update":              {"p-1:0", withUpdate},
		"another action's content":     {"p-1:1", a0},
		"an action it does not have":   {"p-1:2", a1},
		"another proposal's key":       {"p-2:0", a0},
		"a private note as the public": {"p-1:0", a1},
	} {
		err := l.CheckApproval(ctx, tc.key, ledger.ContentDigest(tc.action))
		assert.ErrorIs(t, err, ledger.ErrNotApproved, name)
	}
	assert.ErrorIs(t, l.CheckApproval(ctx, "p-1-0", ledger.ContentDigest(a0)), supportflow.ErrInvalidInput, "a malformed key")
}

// A repeated approval with the same content (a second click, a second
// token) keeps the first approver; one with other content is a conflict
// and changes nothing.
func TestRecordApproval_RepeatKeepsTheFirstApprover_OtherContentConflicts(t *testing.T) {
	t.Parallel()
	l, _ := newLedger(t)
	ctx := context.Background()
	p := appProposal("p-1")
	created, err := l.RecordApproval(ctx, p, "token-a", "ada", false)
	require.NoError(t, err)
	require.True(t, created)

	created, err = l.RecordApproval(ctx, p, "token-b", "bo", false)
	require.NoError(t, err, "a repeat is not an error")
	assert.False(t, created)
	got, err := l.GetApproval(ctx, "p-1")
	require.NoError(t, err)
	assert.Equal(t, "token-a", got.ApprovedBy, "the first approver stands")
	assert.Equal(t, "ada", got.OnBehalfOf)

	changed := appProposal("p-1")
	changed.Actions[0].Comment = &supportflow.Comment{Body: "We did not cancel it.", Public: true}
	created, err = l.RecordApproval(ctx, changed, "token-b", "", false)
	require.ErrorIs(t, err, supportflow.ErrConflict)
	assert.False(t, created)
	got, err = l.GetApproval(ctx, "p-1")
	require.NoError(t, err)
	assert.Equal(t, "token-a", got.ApprovedBy)
	assert.Equal(t, ledger.ProposalDigests(p), got.ActionDigests, "the approved content is unchanged")
	assert.NoError(t, l.CheckApproval(ctx, "p-1:0", ledger.ContentDigest(p.Actions[0])))
	assert.ErrorIs(t, l.CheckApproval(ctx, "p-1:0", ledger.ContentDigest(changed.Actions[0])), ledger.ErrNotApproved)

	// Bad input records nothing.
	_, err = l.RecordApproval(ctx, appProposal("p-2"), "", "", false)
	assert.ErrorIs(t, err, supportflow.ErrInvalidInput, "an approval needs its approver")
	_, err = l.RecordApproval(ctx, supportflow.Proposal{ID: "p-3"}, "token-a", "", false)
	assert.ErrorIs(t, err, supportflow.ErrInvalidInput, "a proposal without actions")
	for _, id := range []string{"p-2", "p-3"} {
		_, err = l.GetApproval(ctx, id)
		assert.ErrorIs(t, err, supportflow.ErrNotFound, id)
	}
}

// A drafted proposal is approved only while it awaits approval and no
// other proposal of its ticket answers it: while an older one executes (a
// retry), its approval is refused with ErrAnswerConflict and nothing is
// recorded; once that one failed, it may be approved.
func TestRecordApproval_DraftedRefusedWhileAnotherProposalOfTheTicketExecutes(t *testing.T) {
	t.Parallel()
	l, _ := newLedger(t)
	ctx := context.Background()
	old, redraft := proposal("p-old"), proposal("p-new")
	redraft.Reply = "We cancelled it; the refund follows."
	for _, p := range []supportflow.DraftProposal{old, redraft} {
		_, err := l.SaveProposal(ctx, p)
		require.NoError(t, err)
	}
	_, err := l.SetProposalState(ctx, "p-old", supportflow.DraftExecuting, "ada", "")
	require.NoError(t, err)

	_, err = l.RecordApproval(ctx, redraft.Proposal(), "token-a", "", true)
	require.ErrorIs(t, err, supportflow.ErrAnswerConflict, "p-old is executing on the same ticket")
	assert.Contains(t, err.Error(), "p-old")
	_, err = l.GetApproval(ctx, "p-new")
	require.ErrorIs(t, err, supportflow.ErrNotFound, "nothing was recorded")

	// The executing proposal itself no longer awaits approval.
	_, err = l.RecordApproval(ctx, old.Proposal(), "token-a", "", true)
	require.ErrorIs(t, err, supportflow.ErrNotAwaitingApproval, "p-old is executing, no longer awaiting approval")

	ok, err := l.SetProposalState(ctx, "p-old", supportflow.DraftFailed, "", "a service refused it for good")
	require.NoError(t, err)
	require.True(t, ok)
	created, err := l.RecordApproval(ctx, redraft.Proposal(), "token-a", "", true)
	require.NoError(t, err, "a failed proposal answers nothing")
	assert.True(t, created)
	assert.NoError(t, l.CheckApproval(ctx, "p-new:0", ledger.ContentDigest(redraft.Proposal().Actions[0])))

	_, err = l.RecordApproval(ctx, proposal("p-unsaved").Proposal(), "token-a", "", true)
	assert.ErrorIs(t, err, supportflow.ErrNotFound, "a drafted proposal must be saved")
}

// A failed proposal is retried only while nothing newer of its ticket
// awaits approval (a redraft took its place): MarkRetrying refuses with
// ErrAnswerConflict and leaves it failed; once the redraft is rejected, the
// retry marks it executing.
func TestMarkRetrying_RefusedWhileANewerProposalAwaitsApproval(t *testing.T) {
	t.Parallel()
	l, _ := newLedger(t)
	ctx := context.Background()
	_, err := l.SaveProposal(ctx, proposal("p-old"))
	require.NoError(t, err)
	for _, state := range []string{supportflow.DraftExecuting, supportflow.DraftFailed} {
		ok, err := l.SetProposalState(ctx, "p-old", state, "ada", "")
		require.NoError(t, err)
		require.True(t, ok)
	}
	redraft := proposal("p-new")
	redraft.Reply = "Let us try again."
	_, err = l.SaveProposal(ctx, redraft)
	require.NoError(t, err)

	err = l.MarkRetrying(ctx, "p-old")
	require.ErrorIs(t, err, supportflow.ErrAnswerConflict)
	assert.Contains(t, err.Error(), "p-new")
	got, err := l.GetProposal(ctx, "p-old")
	require.NoError(t, err)
	assert.Equal(t, supportflow.DraftFailed, got.State, "the refused retry changed nothing")

	ok, err := l.SetProposalState(ctx, "p-new", supportflow.DraftRejected, "bo", "wrong tone")
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, l.MarkRetrying(ctx, "p-old"), "a rejected redraft lets the old proposal be retried")
	got, err = l.GetProposal(ctx, "p-old")
	require.NoError(t, err)
	assert.Equal(t, supportflow.DraftExecuting, got.State)
	assert.Equal(t, "ada", got.DecidedBy, "the approver stays decided_by")
	assert.Empty(t, got.Error)

	assert.ErrorIs(t, l.MarkRetrying(ctx, "p-nope"), supportflow.ErrNotFound)
}

// An approval the draft refused is revoked, unless an action of the
// proposal was already reserved: then it has started and stays approved.
func TestRevokeApproval_OnlyBeforeAnActionStarted(t *testing.T) {
	t.Parallel()
	l, _ := newLedger(t)
	ctx := context.Background()
	for _, id := range []string{"p-1", "p-2"} {
		_, err := l.RecordApproval(ctx, appProposal(id), "token-a", "", false)
		require.NoError(t, err)
	}
	_, err := l.Reserve(ctx, req("p-2:0", "A", time.Minute, "sub-1"))
	require.NoError(t, err)
	require.NoError(t, l.RevokeApproval(ctx, "p-1"))
	require.NoError(t, l.RevokeApproval(ctx, "p-2"))
	_, err = l.GetApproval(ctx, "p-1")
	assert.ErrorIs(t, err, supportflow.ErrNotFound, "revoked")
	_, err = l.GetApproval(ctx, "p-2")
	assert.NoError(t, err, "started: stays approved")
}

// An approval carried over from before approvals were recorded (no
// digests) admits an action whose content matches its ledger row (an
// execution under way) or its stored proposal, and nothing else.
func TestCheckApproval_CarriedOverApproval(t *testing.T) {
	t.Parallel()
	l, pool := newLedger(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO approval (account, proposal_id, ticket_id, approved_by)
VALUES ($1, 'p-row', 42, 'before-approvals'), ($1, 'p-drafted', 7, 'ada')`, account)
	require.NoError(t, err)

	running := supportflow.Action{TicketID: 42, Comment: &supportflow.Comment{Body: "Done.", Public: true}, CancelSubscriptions: []string{"sub-1"}}
	r := req("p-row:0", "A", time.Minute, "sub-1")
	r.Digest = ledger.ContentDigest(running)
	_, err = l.Reserve(ctx, r)
	require.NoError(t, err)
	assert.NoError(t, l.CheckApproval(ctx, "p-row:0", ledger.ContentDigest(running)), "the ledger row's content")
	other := running
	other.CancelSubscriptions = []string{"sub-2"}
	assert.ErrorIs(t, l.CheckApproval(ctx, "p-row:0", ledger.ContentDigest(other)), ledger.ErrNotApproved)
	assert.NoError(t, l.CheckApproval(ctx, "p-row:1", ledger.ContentDigest(running)),
		"a later action of an execution under way at the upgrade (no row yet, no stored proposal) finishes")
	_, err = pool.Exec(ctx, `INSERT INTO approval (account, proposal_id, ticket_id, approved_by) VALUES ($1, 'p-none', 42, 'before-approvals')`, account)
	require.NoError(t, err)
	assert.ErrorIs(t, l.CheckApproval(ctx, "p-none:1", ledger.ContentDigest(running)), ledger.ErrNotApproved,
		"no row of the proposal and no stored proposal")

	stored := proposal("p-drafted")
	_, err = l.SaveProposal(ctx, stored)
	require.NoError(t, err)
	assert.NoError(t, l.CheckApproval(ctx, "p-drafted:0", ledger.ContentDigest(stored.Proposal().Actions[0])), "the stored proposal's content")
	changed := stored
	changed.Reply = "Something else."
	assert.ErrorIs(t, l.CheckApproval(ctx, "p-drafted:0", ledger.ContentDigest(changed.Proposal().Actions[0])), ledger.ErrNotApproved)
}

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
