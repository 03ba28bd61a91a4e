package activities_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/ledger"
)

// lapse ends the live lease a write that may have landed keeps, as its
// expiry would.
func (f *fixture) lapse(t *testing.T, key string) {
	t.Helper()
	_, err := f.pool.Exec(context.Background(), `UPDATE action SET lease_expires_at = now() WHERE key = $1`, key)
	require.NoError(t, err)
}

func (f *fixture) settleLegs(t *testing.T, in supportflow.SettleLegsInput) (supportflow.SettleLegsResult, error) {
	t.Helper()
	v, err := f.env.ExecuteActivity(f.acts.SettleLegs, in)
	if err != nil {
		return supportflow.SettleLegsResult{}, err
	}
	var res supportflow.SettleLegsResult
	require.NoError(t, v.Get(&res))
	return res, nil
}

// Every cancellation landed, but the last one's answer was lost: the quick
// look (ResolveOnly) reads the service's status, records it done without
// cancelling again, and leaves the action open, so the reply still goes
// out. While the lost call's lease is live it waits (LeaseHeld).
func TestSettleLegs_ResolveOnlyFindsEveryCancellationLanded(t *testing.T) {
	f := newFixture(t)
	ticket := f.zd.AddTicket(standin.Ticket{Subject: "x"})
	f.h.Own(t, ticket, standin.DefaultRequesterID, "cus-ada", "sub-1", "sub-2")
	f.subs.Inject(standin.Fault{Method: "POST", Path: "/v1/subscriptions/sub-2/cancel", DropAfterApply: true})
	in := supportflow.ActionInput{Key: "p1:0", ReplyLast: true, Action: supportflow.Action{TicketID: ticket,
		Comment: &supportflow.Comment{Body: "Both cancelled.", Public: true}, CancelSubscriptions: []string{"sub-1", "sub-2"}}}
	f.h.ApproveAction(t, in.Key, in.Action)
	_, err := f.env.ExecuteActivity(f.acts.CancelSubscriptions, in)
	require.Error(t, err)

	look := supportflow.SettleLegsInput{Key: in.Key, TicketID: ticket, ResolveOnly: true}
	_, err = f.settleLegs(t, look)
	app := appErr(t, err)
	assert.Equal(t, supportflow.ErrTypeLeaseHeld, app.Type(), "the lost call's lease is still live")
	assert.False(t, app.NonRetryable())

	f.lapse(t, in.Key)
	res, err := f.settleLegs(t, look)
	require.NoError(t, err)
	assert.True(t, res.AllCancelled)
	assert.Equal(t, []string{"sub-1", "sub-2"}, res.Cancelled)
	assert.Empty(t, res.Unknown)
	assert.Equal(t, supportflow.StateApplying, res.State, "left open for the reply")
	assert.False(t, res.ReplyLanded)
	assert.Equal(t, 1, f.subs.CancelCalls("sub-2"), "the status said cancelled: no second cancel")

	_, err = f.env.ExecuteActivity(f.acts.PostReply, in)
	require.NoError(t, err, "the reply goes out")
	assert.Equal(t, 1, f.zd.CommentCount(ticket))
	assert.Equal(t, supportflow.StateApplied, f.action(t, in.Key).State)
}

// A cancellation whose answer was lost and which the service still shows
// active is sent again under the same Idempotency-Key: the service's answer
// to that key is final, so the settle records it and the action is
// applied, not failed on a guess.
func TestSettleLegs_ResendsALostCancellationUnderItsKey(t *testing.T) {
	f := newFixture(t)
	const ticket = int64(7)
	f.h.Own(t, ticket, standin.DefaultRequesterID, "cus-ada", "sub-1")
	// A 502: the gateway may have passed it on; here it did not.
	f.subs.Inject(standin.Fault{Method: "POST", Path: "/v1/subscriptions/sub-1/cancel", Status: 502})
	in := supportflow.ActionInput{Key: "p1:0", ReplyLast: true, Action: supportflow.Action{TicketID: ticket, CancelSubscriptions: []string{"sub-1"}}}
	f.h.ApproveAction(t, in.Key, in.Action)
	_, err := f.env.ExecuteActivity(f.acts.CancelSubscriptions, in)
	require.Error(t, err)
	leg, _ := f.action(t, in.Key).Legs.Find(supportflow.LegCancelSubscription, "sub-1")
	require.Equal(t, ledger.LegUnknown, leg.State)
	require.Equal(t, standin.SubscriptionActive, f.subs.Status("sub-1"))

	f.lapse(t, in.Key)
	res, err := f.settleLegs(t, supportflow.SettleLegsInput{Key: in.Key, TicketID: ticket, Error: "a service kept failing"})
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateApplied, res.State, "every leg turned out done")
	assert.Equal(t, []string{"sub-1"}, res.Cancelled)
	assert.Equal(t, 1, f.subs.Cancellations("sub-1"))
	keys := f.subs.IdempotencyKeys("sub-1")
	require.Len(t, keys, 2)
	assert.Equal(t, keys[0], keys[1], "sent again under the same key")
	a := f.action(t, in.Key)
	assert.Equal(t, supportflow.StateApplied, a.State)
	assert.NotNil(t, a.SettledAt)
}

// A Zendesk write whose answer was lost may have landed or still land:
// the settle first asks for a fence (and changes nothing), then, fenced,
// reads the ticket's audits. Found: done, with the comment's ID, and the
// reply is not posted again.
func TestSettleLegs_FencesThenReadsTheAudits(t *testing.T) {
	f := newFixture(t)
	ticket := f.zd.AddTicket(standin.Ticket{Subject: "x"})
	f.zd.Inject(standin.Fault{Method: "PUT", Path: "/api/v2/tickets/*", DropAfterApply: true})
	in := supportflow.ActionInput{Key: "p1:0", ReplyLast: true, Action: supportflow.Action{TicketID: ticket,
		Comment: &supportflow.Comment{Body: "Answered.", Public: true}}}
	f.h.ApproveAction(t, in.Key, in.Action)
	_, err := f.env.ExecuteActivity(f.acts.PostReply, in)
	require.Error(t, err)
	require.Equal(t, 1, f.zd.CommentCount(ticket), "the write landed; its answer did not")

	settle := supportflow.SettleLegsInput{Key: in.Key, TicketID: ticket, Error: "a service kept failing", ZendeskMayHaveLanded: true}
	res, err := f.settleLegs(t, settle)
	require.NoError(t, err)
	assert.True(t, res.NeedsFence)
	a := f.action(t, in.Key)
	assert.Equal(t, supportflow.StateApplying, a.State, "nothing settled before the fence")
	assert.Equal(t, []string{"reply " + fmt.Sprint(ticket)}, res.Unknown)

	f.lapse(t, in.Key)
	settle.Fenced = true
	res, err = f.settleLegs(t, settle)
	require.NoError(t, err)
	assert.False(t, res.NeedsFence)
	assert.Equal(t, supportflow.StateApplied, res.State)
	assert.True(t, res.ReplyLanded)
	assert.Equal(t, f.zd.Comments(ticket)[0].ID, res.CommentID)
	assert.Equal(t, 1, f.zd.CommentCount(ticket), "never posted twice")
}

// A write Zendesk answered 500 without applying it: after the fence the
// audits show no trace of the key, so it never landed and cannot any more:
// failed, with nothing left unknown.
func TestSettleLegs_FencedWithoutAnAuditIsFailed(t *testing.T) {
	f := newFixture(t)
	ticket := f.zd.AddTicket(standin.Ticket{Subject: "x"})
	f.zd.Inject(standin.Fault{Method: "PUT", Path: "/api/v2/tickets/*", Status: 500, Times: -1})
	in := supportflow.ActionInput{Key: "p1:0", ReplyLast: true, Action: supportflow.Action{TicketID: ticket,
		Comment: &supportflow.Comment{Body: "Answered.", Public: true}}}
	f.h.ApproveAction(t, in.Key, in.Action)
	_, err := f.env.ExecuteActivity(f.acts.PostReply, in)
	require.Error(t, err)
	f.zd.ClearFaults()

	f.lapse(t, in.Key)
	res, err := f.settleLegs(t, supportflow.SettleLegsInput{Key: in.Key, TicketID: ticket, Error: "a service kept failing",
		ZendeskMayHaveLanded: true, Fenced: true})
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateFailed, res.State)
	assert.Empty(t, res.Unknown)
	assert.False(t, res.ReplyLanded)
	a := f.action(t, in.Key)
	reply, _ := a.Legs.Find(supportflow.LegReply, fmt.Sprint(ticket))
	assert.Equal(t, ledger.LegFailed, reply.State)
	assert.Equal(t, "a service kept failing", a.LastError)
	assert.Zero(t, f.zd.TotalComments())
}
