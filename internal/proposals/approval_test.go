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
	s, _, _ := newStore(t)
	ctx := context.Background()
	p := appProposal("p-1")
	a0, a1 := p.Actions[0], p.Actions[1]

	err := s.CheckApproval(ctx, "p-1:0", ledger.ContentDigest(a0))
	require.ErrorIs(t, err, proposals.ErrNotApproved, "no approval recorded")
	_, err = s.GetApproval(ctx, "p-1")
	require.ErrorIs(t, err, supportflow.ErrNotFound)

	created, err := s.RecordApproval(ctx, p, "token-app", "ada@acme.test", false)
	require.NoError(t, err)
	assert.True(t, created)
	got, err := s.GetApproval(ctx, "p-1")
	require.NoError(t, err)
	assert.Equal(t, int64(42), got.TicketID)
	assert.Equal(t, "token-app", got.ApprovedBy)
	assert.Equal(t, "ada@acme.test", got.OnBehalfOf)
	assert.Equal(t, proposals.ProposalDigests(p), got.ActionDigests)
	assert.False(t, got.ApprovedAt.IsZero())

	assert.NoError(t, s.CheckApproval(ctx, "p-1:0", ledger.ContentDigest(a0)))
	assert.NoError(t, s.CheckApproval(ctx, "p-1:1", ledger.ContentDigest(a1)))

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
		err := s.CheckApproval(ctx, tc.key, ledger.ContentDigest(tc.action))
		assert.ErrorIs(t, err, proposals.ErrNotApproved, name)
	}
	assert.ErrorIs(t, s.CheckApproval(ctx, "p-1-0", ledger.ContentDigest(a0)), supportflow.ErrInvalidInput, "a malformed key")
}

// A repeated approval with the same content (a second click, a second
// token) keeps the first approver; one with other content is a conflict
// and changes nothing.
func TestRecordApproval_RepeatKeepsTheFirstApprover_OtherContentConflicts(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	ctx := context.Background()
	p := appProposal("p-1")
	created, err := s.RecordApproval(ctx, p, "token-a", "ada", false)
	require.NoError(t, err)
	require.True(t, created)

	created, err = s.RecordApproval(ctx, p, "token-b", "bo", false)
	require.NoError(t, err, "a repeat is not an error")
	assert.False(t, created)
	got, err := s.GetApproval(ctx, "p-1")
	require.NoError(t, err)
	assert.Equal(t, "token-a", got.ApprovedBy, "the first approver stands")
	assert.Equal(t, "ada", got.OnBehalfOf)

	changed := appProposal("p-1")
	changed.Actions[0].Comment = &supportflow.Comment{Body: "We did not cancel it.", Public: true}
	created, err = s.RecordApproval(ctx, changed, "token-b", "", false)
	require.ErrorIs(t, err, supportflow.ErrConflict)
	assert.False(t, created)
	got, err = s.GetApproval(ctx, "p-1")
	require.NoError(t, err)
	assert.Equal(t, "token-a", got.ApprovedBy)
	assert.Equal(t, proposals.ProposalDigests(p), got.ActionDigests, "the approved content is unchanged")
	assert.NoError(t, s.CheckApproval(ctx, "p-1:0", ledger.ContentDigest(p.Actions[0])))
	assert.ErrorIs(t, s.CheckApproval(ctx, "p-1:0", ledger.ContentDigest(changed.Actions[0])), proposals.ErrNotApproved)

	// Bad input records nothing.
	_, err = s.RecordApproval(ctx, appProposal("p-2"), "", "", false)
	assert.ErrorIs(t, err, supportflow.ErrInvalidInput, "an approval needs its approver")
	_, err = s.RecordApproval(ctx, supportflow.Proposal{ID: "p-3"}, "token-a", "", false)
	assert.ErrorIs(t, err, supportflow.ErrInvalidInput, "a proposal without actions")
	for _, id := range []string{"p-2", "p-3"} {
		_, err = s.GetApproval(ctx, id)
		assert.ErrorIs(t, err, supportflow.ErrNotFound, id)
	}
}

// A drafted proposal is approved only while it awaits approval and no
// other proposal of its ticket answers it: while an older one executes (a
// retry), its approval is refused with ErrAnswerConflict and nothing is
// recorded; once that one failed, it may be approved.
func TestRecordApproval_DraftedRefusedWhileAnotherProposalOfTheTicketExecutes(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	ctx := context.Background()
	old, redraft := proposal("p-old"), proposal("p-new")
	redraft.Reply = "We cancelled it; the refund follows."
	for _, p := range []supportflow.DraftProposal{old, redraft} {
		_, err := s.SaveProposal(ctx, p)
		require.NoError(t, err)
	}
	_, err := s.SetProposalState(ctx, "p-old", supportflow.DraftExecuting, "ada", "")
	require.NoError(t, err)

	_, err = s.RecordApproval(ctx, redraft.Proposal(), "token-a", "", true)
	require.ErrorIs(t, err, supportflow.ErrAnswerConflict, "p-old is executing on the same ticket")
	assert.Contains(t, err.Error(), "p-old")
	_, err = s.GetApproval(ctx, "p-new")
	require.ErrorIs(t, err, supportflow.ErrNotFound, "nothing was recorded")

	// The executing proposal itself no longer awaits approval.
	_, err = s.RecordApproval(ctx, old.Proposal(), "token-a", "", true)
	require.ErrorIs(t, err, supportflow.ErrNotAwaitingApproval, "p-old is executing, no longer awaiting approval")

	ok, err := s.SetProposalState(ctx, "p-old", supportflow.DraftFailed, "", "a service refused it for good")
	require.NoError(t, err)
	require.True(t, ok)
	created, err := s.RecordApproval(ctx, redraft.Proposal(), "token-a", "", true)
	require.NoError(t, err, "a failed proposal answers nothing")
	assert.True(t, created)
	assert.NoError(t, s.CheckApproval(ctx, "p-new:0", ledger.ContentDigest(redraft.Proposal().Actions[0])))

	_, err = s.RecordApproval(ctx, proposal("p-unsaved").Proposal(), "token-a", "", true)
	assert.ErrorIs(t, err, supportflow.ErrNotFound, "a drafted proposal must be saved")
}

// A failed proposal is retried only while nothing newer of its ticket
// awaits approval (a redraft took its place): MarkRetrying refuses with
// ErrAnswerConflict and leaves it failed; once the redraft is rejected, the
// retry marks it executing.
func TestMarkRetrying_RefusedWhileANewerProposalAwaitsApproval(t *testing.T) {
	t.Parallel()
	s, _, _ := newStore(t)
	ctx := context.Background()
	_, err := s.SaveProposal(ctx, proposal("p-old"))
	require.NoError(t, err)
	for _, state := range []string{supportflow.DraftExecuting, supportflow.DraftFailed} {
		ok, err := s.SetProposalState(ctx, "p-old", state, "ada", "")
		require.NoError(t, err)
		require.True(t, ok)
	}
	redraft := proposal("p-new")
	redraft.Reply = "Let us try again."
	_, err = s.SaveProposal(ctx, redraft)
	require.NoError(t, err)

	err = s.MarkRetrying(ctx, "p-old")
	require.ErrorIs(t, err, supportflow.ErrAnswerConflict)
	assert.Contains(t, err.Error(), "p-new")
	got, err := s.GetProposal(ctx, "p-old")
	require.NoError(t, err)
	assert.Equal(t, supportflow.DraftFailed, got.State, "the refused retry changed nothing")

	ok, err := s.SetProposalState(ctx, "p-new", supportflow.DraftRejected, "bo", "wrong tone")
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, s.MarkRetrying(ctx, "p-old"), "a rejected redraft lets the old proposal be retried")
	got, err = s.GetProposal(ctx, "p-old")
	require.NoError(t, err)
	assert.Equal(t, supportflow.DraftExecuting, got.State)
	assert.Equal(t, "ada", got.DecidedBy, "the approver stays decided_by")
	assert.Empty(t, got.Error)

	assert.ErrorIs(t, s.MarkRetrying(ctx, "p-nope"), supportflow.ErrNotFound)
}

// An approval the draft refused is revoked, unless an action of the
// proposal was already reserved: then it has started and stays approved.
func TestRevokeApproval_OnlyBeforeAnActionStarted(t *testing.T) {
	t.Parallel()
	s, l, _ := newStore(t)
	ctx := context.Background()
	for _, id := range []string{"p-1", "p-2"} {
		_, err := s.RecordApproval(ctx, appProposal(id), "token-a", "", false)
		require.NoError(t, err)
	}
	_, err := l.Reserve(ctx, req("p-2:0", "A", time.Minute, "sub-1"))
	require.NoError(t, err)
	require.NoError(t, s.RevokeApproval(ctx, "p-1"))
	require.NoError(t, s.RevokeApproval(ctx, "p-2"))
	_, err = s.GetApproval(ctx, "p-1")
	assert.ErrorIs(t, err, supportflow.ErrNotFound, "revoked")
	_, err = s.GetApproval(ctx, "p-2")
	assert.NoError(t, err, "started: stays approved")
}

// An approval carried over from before approvals were recorded (no
// digests) admits an action whose content matches its ledger row (an
// execution under way) or its stored proposal, and nothing else.
func TestCheckApproval_CarriedOverApproval(t *testing.T) {
	t.Parallel()
	s, l, pool := newStore(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `INSERT INTO approval (account, proposal_id, ticket_id, approved_by)
VALUES ($1, 'p-row', 42, 'before-approvals'), ($1, 'p-drafted', 7, 'ada')`, account)
	require.NoError(t, err)

	running := supportflow.Action{TicketID: 42, Comment: &supportflow.Comment{Body: "Done.", Public: true}, CancelSubscriptions: []string{"sub-1"}}
	r := req("p-row:0", "A", time.Minute, "sub-1")
	r.Digest = ledger.ContentDigest(running)
	_, err = l.Reserve(ctx, r)
	require.NoError(t, err)
	assert.NoError(t, s.CheckApproval(ctx, "p-row:0", ledger.ContentDigest(running)), "the ledger row's content")
	other := running
	other.CancelSubscriptions = []string{"sub-2"}
	assert.ErrorIs(t, s.CheckApproval(ctx, "p-row:0", ledger.ContentDigest(other)), proposals.ErrNotApproved)
	assert.NoError(t, s.CheckApproval(ctx, "p-row:1", ledger.ContentDigest(running)),
		"a later action of an execution under way at the upgrade (no row yet, no stored proposal) finishes")
	_, err = pool.Exec(ctx, `INSERT INTO approval (account, proposal_id, ticket_id, approved_by) VALUES ($1, 'p-none', 42, 'before-approvals')`, account)
	require.NoError(t, err)
	assert.ErrorIs(t, s.CheckApproval(ctx, "p-none:1", ledger.ContentDigest(running)), proposals.ErrNotApproved,
		"no row of the proposal and no stored proposal")

	stored := proposal("p-drafted")
	_, err = s.SaveProposal(ctx, stored)
	require.NoError(t, err)
	assert.NoError(t, s.CheckApproval(ctx, "p-drafted:0", ledger.ContentDigest(stored.Proposal().Actions[0])), "the stored proposal's content")
	changed := stored
	changed.Reply = "Something else."
	assert.ErrorIs(t, s.CheckApproval(ctx, "p-drafted:0", ledger.ContentDigest(changed.Proposal().Actions[0])), proposals.ErrNotApproved)
}
