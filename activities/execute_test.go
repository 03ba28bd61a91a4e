package activities_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/activities"
	"github.com/supportflow/supportflow/activities/activitiestest"
	"github.com/supportflow/supportflow/internal/policy"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/internal/testenv"
	"github.com/supportflow/supportflow/internal/zendeskclient"
	"github.com/supportflow/supportflow/ledger"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

type fixture struct {
	h    *activitiestest.Harness
	acts *activities.Activities
	zd   *standin.Zendesk
	subs *standin.Subscriptions
	pool *pgxpool.Pool
	env  *testsuite.TestActivityEnvironment
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	// A short heartbeat interval lets a lost claim be noticed quickly.
	h := activitiestest.New(t, policy.Durations{HeartbeatInterval: 50 * time.Millisecond})
	f := &fixture{h: h, acts: h.Activities, zd: h.Zendesk, subs: h.Subscriptions, pool: h.Pool}
	var s testsuite.WorkflowTestSuite
	f.env = s.NewTestActivityEnvironment()
	f.env.RegisterActivity(f.acts)
	return f
}

func (f *fixture) action(t *testing.T, key string) ledger.Action {
	t.Helper()
	a, err := f.acts.Ledger.Get(context.Background(), key)
	require.NoError(t, err)
	return a
}

func appErr(t *testing.T, err error) *temporal.ApplicationError {
	t.Helper()
	var app *temporal.ApplicationError
	require.ErrorAs(t, err, &app)
	return app
}

// After each call returns or throws, its outcome is in the ledger before
// the activity reports the error.
func TestCancelSubscriptions_RecordsOutcomeWhenTheCallThrows(t *testing.T) {
	f := newFixture(t)
	f.h.Own(t, 1, standin.DefaultRequesterID, "c", "sub-1", "sub-2", "sub-3")
	f.subs.Inject(standin.Fault{Method: "POST", Path: "/v1/subscriptions/sub-2/cancel", DropAfterApply: true})
	in := supportflow.ActionInput{Key: "p1:0", Action: supportflow.Action{TicketID: 1, CancelSubscriptions: []string{"sub-1", "sub-2", "sub-3"}}}
	f.h.ApproveAction(t, in.Key, in.Action)

	_, err := f.env.ExecuteActivity(f.acts.CancelSubscriptions, in)
	require.Error(t, err)
	assert.False(t, appErr(t, err).NonRetryable(), "a lost answer is retried")

	a := f.action(t, "p1:0")
	require.Len(t, a.Legs.Of(supportflow.LegCancelSubscription), 3)
	assert.Equal(t, "done", a.Legs.Of(supportflow.LegCancelSubscription)[0].State)
	assert.Equal(t, "unknown", a.Legs.Of(supportflow.LegCancelSubscription)[1].State, "the lost answer's outcome was written: unknown, not failed")
	assert.NotEmpty(t, a.Legs.Of(supportflow.LegCancelSubscription)[1].LastError)
	assert.Equal(t, 1, a.Legs.Of(supportflow.LegCancelSubscription)[1].Calls)
	assert.Equal(t, "pending", a.Legs.Of(supportflow.LegCancelSubscription)[2].State, "the leg stopped at the first retryable failure")
	assert.Equal(t, supportflow.StateApplying, a.State)
	assert.NotNil(t, a.LeaseExpiresAt, "a call that may have landed keeps its lease until it lapses")

	assert.Equal(t, 1, f.subs.Cancellations("sub-2"), "the service did apply it")

	// The next attempt (once the lease lapsed) reads sub-2's status instead
	// of calling again, and finishes the leg.
	_, err = f.pool.Exec(context.Background(), `UPDATE action SET lease_expires_at = now() WHERE key = 'p1:0'`)
	require.NoError(t, err)
	_, err = f.env.ExecuteActivity(f.acts.CancelSubscriptions, in)
	require.NoError(t, err)
	a = f.action(t, "p1:0")
	assert.Equal(t, supportflow.StateApplied, a.State)
	assert.Equal(t, "done", a.Legs.Of(supportflow.LegCancelSubscription)[1].State)
	assert.Equal(t, 1, f.subs.CancelCalls("sub-2"), "no second cancel call for a cancellation that had landed")
	assert.Equal(t, 1, f.subs.Cancellations("sub-3"))
}

func TestPostReply_BadInputIsNonRetryableAndWritesNothing(t *testing.T) {
	f := newFixture(t)
	ticket := f.zd.AddTicket(standin.Ticket{Subject: "x"})
	for name, in := range map[string]supportflow.ActionInput{
		"malformed key":   {Key: "p1-0", Action: supportflow.Action{TicketID: ticket, Comment: &supportflow.Comment{Body: "hi"}}},
		"key with path":   {Key: "../p1:0", Action: supportflow.Action{TicketID: ticket, Comment: &supportflow.Comment{Body: "hi"}}},
		"empty body":      {Key: "p1:0", Action: supportflow.Action{TicketID: ticket, Comment: &supportflow.Comment{Body: ""}}},
		"no comment":      {Key: "p1:0", Action: supportflow.Action{TicketID: ticket, CancelSubscriptions: []string{"s"}}},
		"over size limit": {Key: "p1:0", Action: supportflow.Action{TicketID: ticket, Comment: &supportflow.Comment{Body: string(make([]byte, supportflow.MaxCommentBytes+1))}}},
		"negative ticket": {Key: "p1:0", Action: supportflow.Action{TicketID: -1, Comment: &supportflow.Comment{Body: "hi"}}},
	} {
		_, err := f.env.ExecuteActivity(f.acts.PostReply, in)
		app := appErr(t, err)
		assert.Equal(t, supportflow.ErrTypeInvalidInput, app.Type(), name)
		assert.True(t, app.NonRetryable(), name)
	}
	var rows int
	require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT count(*) FROM action`).Scan(&rows))
	assert.Zero(t, rows)
	assert.Zero(t, f.zd.TotalComments())
}

func TestPostReply_UnknownTicketIsRejectedWithTheError(t *testing.T) {
	f := newFixture(t)
	in := supportflow.ActionInput{Key: "p1:0", Action: supportflow.Action{TicketID: 999, Comment: &supportflow.Comment{Body: "hi"}}}
	f.h.ApproveAction(t, in.Key, in.Action)
	_, err := f.env.ExecuteActivity(f.acts.PostReply, in)
	app := appErr(t, err)
	assert.Equal(t, supportflow.ErrTypeRejected, app.Type())
	assert.True(t, app.NonRetryable())
	a := f.action(t, "p1:0")
	assert.Contains(t, a.LastError, "404")
	assert.Nil(t, a.LeaseExpiresAt, "a definite refusal releases the claim at once")
	assert.Zero(t, f.zd.TotalComments())
}

// A live predecessor's lease is waited out inside the attempt (heartbeating),
// not failed and retried: the attempt then takes the action over, looks
// for the predecessor's write, and posts once.
func TestPostReply_WaitsOutALivePredecessorInsideTheAttempt(t *testing.T) {
	f := newFixture(t)
	ticket := f.zd.AddTicket(standin.Ticket{Subject: "x"})
	ctx := context.Background()
	// The predecessor holds a lease far longer than any stall of this
	// machine, renewed (as its heartbeat does) every renew: it cannot lapse
	// while the predecessor lives, however busy the machine. When the
	// predecessor stops, its last renewal leaves lastLease to run, and the
	// lapse ends the wait. Nothing here depends on how fast anything runs:
	// the predecessor stops once the attempt is seen waiting, not after a
	// time.
	const lease, renew, lastLease = 2 * time.Minute, 100 * time.Millisecond, 300 * time.Millisecond
	res, err := f.acts.Ledger.Reserve(ctx, ledger.ReserveRequest{Key: "p1:0", TicketID: ticket, Legs: []supportflow.Leg{{Kind: supportflow.LegReply, Target: fmt.Sprint(ticket)}}, Claimant: "other", Lease: lease})
	require.NoError(t, err)
	// The attempt's first heartbeat reaches the listener at once (later
	// ones are batched): it is the one the attempt records while it waits
	// for the predecessor.
	waiting := make(chan string, 1)
	f.env.SetOnActivityHeartbeatListener(func(_ *activity.Info, details converter.EncodedValues) {
		var p activities.Progress
		if details.HasValues() && details.Get(&p) == nil && strings.HasPrefix(p.Step, "waiting for other") {
			select {
			case waiting <- p.Step:
			default:
			}
		}
	})
	var (
		renewals  int
		lost      error // a renewal the predecessor lost: it was not live throughout
		seen      string
		stoppedAt time.Time
	)
	done := make(chan struct{}) // the attempt returned
	live := make(chan struct{})
	go func() {
		defer close(live)
		extend := func(d time.Duration) bool {
			won, err := f.acts.Ledger.ExtendLease(ctx, res.ID, "other", d)
			if err == nil && !won {
				err = errors.New("the predecessor's claim was taken over while it was live")
			}
			lost = err
			return err == nil
		}
		tick := time.NewTicker(renew)
		defer tick.Stop()
		giveUp := time.After(time.Minute)
		for extend(lease) {
			renewals++
			select {
			case <-tick.C:
				continue
			case seen = <-waiting:
			case <-done:
			case <-giveUp:
			}
			// Stop: the attempt may claim only after this last renewal,
			// so only after stoppedAt.
			stoppedAt = time.Now()
			extend(lastLease)
			return
		}
	}()
	in := supportflow.ActionInput{Key: "p1:0", Action: supportflow.Action{TicketID: ticket, Comment: &supportflow.Comment{Body: "hi"}}}
	f.h.ApproveAction(t, in.Key, in.Action)
	v, err := f.env.ExecuteActivity(f.acts.PostReply, in)
	finished := time.Now()
	close(done)
	<-live
	require.NoError(t, err)
	var r supportflow.PostReplyResult
	require.NoError(t, v.Get(&r))
	require.NoError(t, lost, "the predecessor held its claim until it stopped")
	require.Positive(t, renewals, "the predecessor extended its lease")
	assert.NotEmpty(t, seen, "the attempt waited for the live predecessor, heartbeating")
	assert.GreaterOrEqual(t, finished.Sub(stoppedAt), lastLease, "it waited out the predecessor's lease (which lapsed lastLease after the predecessor stopped)")
	assert.Equal(t, "posted", r.Source)
	assert.Equal(t, 1, f.zd.TotalComments())
	assert.Equal(t, 1, f.zd.Requests("GET", fmt.Sprintf("/api/v2/tickets/%d/audits", ticket)), "it looked for the predecessor's write first")
	a := f.action(t, "p1:0")
	assert.Equal(t, supportflow.StateApplied, a.State)
}

// A claimant whose claim is taken over while its Zendesk call is in flight
// learns it from its heartbeat's fenced lease extension, stops the work,
// and writes nothing more.
func TestPostReply_StopsWhenItsClaimIsLost(t *testing.T) {
	f := newFixture(t)
	ticket := f.zd.AddTicket(standin.Ticket{Subject: "x"})
	hit := make(chan string, 1)
	f.zd.Inject(standin.Fault{Method: "PUT", Path: "/api/v2/tickets/*", Delay: 2 * time.Second, Arrived: hit})
	go func() {
		<-hit
		// Another claimant takes the action over (as after a lease expiry).
		_, _ = f.pool.Exec(context.Background(), `UPDATE action SET claimant = 'successor' WHERE key = 'p1:0'`)
	}()
	in := supportflow.ActionInput{Key: "p1:0", Action: supportflow.Action{TicketID: ticket, Comment: &supportflow.Comment{Body: "hi"}}}
	f.h.ApproveAction(t, in.Key, in.Action)
	start := time.Now()
	_, err := f.env.ExecuteActivity(f.acts.PostReply, in)
	app := appErr(t, err)
	assert.Equal(t, supportflow.ErrTypeLostClaim, app.Type())
	assert.Less(t, time.Since(start), 2*time.Second, "the work was cancelled, not waited out")
	a := f.action(t, "p1:0")
	assert.Equal(t, "successor", a.Claimant)
	assert.Zero(t, a.CommentID(), "the stale attempt recorded nothing")
}

// The ticket update adds our tags to the ticket's: Zendesk's update
// replaces the whole list, so the list is read just before and sent as a
// safe update. An agent who tags the ticket between our read and our write
// makes Zendesk refuse ours (409); we read again and keep their tag.
func TestPostReply_TicketUpdateKeepsATagAddedMeanwhile(t *testing.T) {
	f := newFixture(t)
	ticket := f.zd.AddTicket(standin.Ticket{Subject: "x", Status: "open", Tags: []string{"vip"}})
	hit := make(chan string, 1)
	f.zd.Inject(standin.Fault{Method: "PUT", Path: "/api/v2/tickets/*", Delay: 2 * time.Second, Arrived: hit, Times: 1})
	agentDone := make(chan error, 1)
	go func() {
		<-hit
		// Zendesk's updated_stamp has whole seconds: edit in a later one.
		time.Sleep(1100 * time.Millisecond)
		_, err := f.acts.Zendesk.UpdateTicket(context.Background(), ticket, zendeskclient.Update{Tags: []string{"vip", "escalated"}}, "an-agent", "")
		agentDone <- err
	}()
	in := supportflow.ActionInput{Key: "p1:0", ReplyLast: true, Action: supportflow.Action{TicketID: ticket,
		Comment: &supportflow.Comment{Body: "Answered.", Public: true}, UpdateTicket: &supportflow.TicketUpdate{Status: "pending", Tags: []string{"supportflow"}}}}
	f.h.ApproveAction(t, in.Key, in.Action)
	v, err := f.env.ExecuteActivity(f.acts.PostReply, in)
	require.NoError(t, err)
	require.NoError(t, <-agentDone)
	var r supportflow.PostReplyResult
	require.NoError(t, v.Get(&r))
	assert.Equal(t, "posted", r.Source)
	assert.Equal(t, 1, f.zd.Conflicts(), "our first write was refused")
	tk, _ := f.zd.Ticket(ticket)
	assert.Equal(t, []string{"vip", "escalated", "supportflow"}, tk.Tags, "the agent's tag survived ours")
	assert.Equal(t, "pending", tk.Status)
	assert.Equal(t, 1, f.zd.CommentCount(ticket))
	a := f.action(t, "p1:0")
	assert.Equal(t, supportflow.StateApplied, a.State)
	upd, ok := a.Legs.Find(supportflow.LegTicketUpdate, fmt.Sprint(ticket))
	require.True(t, ok)
	assert.Equal(t, ledger.LegDone, upd.State)
	assert.Equal(t, fmt.Sprint(r.AuditID), upd.ExternalID)
}

// A leg refuses, before any write or call, an action that was never
// approved or is not what was approved: NotApproved, never retried. The
// same action approved as it is runs.
func TestLegs_RefuseWhatWasNotApproved(t *testing.T) {
	f := newFixture(t)
	ticket := f.zd.AddTicket(standin.Ticket{Subject: "x"})
	f.h.Own(t, ticket, standin.DefaultRequesterID, "cus-ada", "sub-1")
	act := supportflow.Action{TicketID: ticket, Comment: &supportflow.Comment{Body: "Cancelled.", Public: true}, CancelSubscriptions: []string{"sub-1"}}
	refused := func(name string, in supportflow.ActionInput) {
		t.Helper()
		for leg, run := range map[string]any{"CancelSubscriptions": f.acts.CancelSubscriptions, "PostReply": f.acts.PostReply} {
			_, err := f.env.ExecuteActivity(run, in)
			app := appErr(t, err)
			assert.Equal(t, supportflow.ErrTypeNotApproved, app.Type(), "%s: %s", name, leg)
			assert.True(t, app.NonRetryable(), "%s: %s", name, leg)
		}
	}
	refused("never approved", supportflow.ActionInput{Key: "p1:0", Action: act, ReplyLast: true})
	other := act
	other.Comment = &supportflow.Comment{Body: "Cancelled, and refunded.", Public: true}
	f.h.ApproveAction(t, "p1:0", other)
	refused("other content", supportflow.ActionInput{Key: "p1:0", Action: act, ReplyLast: true})
	elsewhere := other
	elsewhere.TicketID = f.zd.AddTicket(standin.Ticket{Subject: "y"})
	refused("another ticket", supportflow.ActionInput{Key: "p1:0", Action: elsewhere, ReplyLast: true})

	var rows int
	require.NoError(t, f.pool.QueryRow(context.Background(), `SELECT count(*) FROM action`).Scan(&rows))
	assert.Zero(t, rows, "nothing was reserved")
	assert.Zero(t, f.zd.TotalComments())
	assert.Zero(t, f.zd.Requests("GET", "/api/v2/tickets/"), "Zendesk was not asked")
	assert.Zero(t, f.subs.Requests("", "/v1/subscriptions/"), "nor the subscription service")

	in := supportflow.ActionInput{Key: "p2:0", Action: act, ReplyLast: true}
	f.h.ApproveAction(t, in.Key, in.Action)
	_, err := f.env.ExecuteActivity(f.acts.CancelSubscriptions, in)
	require.NoError(t, err)
	_, err = f.env.ExecuteActivity(f.acts.PostReply, in)
	require.NoError(t, err)
	assert.Equal(t, 1, f.subs.Cancellations("sub-1"))
	assert.Equal(t, 1, f.zd.CommentCount(ticket))
	assert.Equal(t, supportflow.StateApplied, f.action(t, "p2:0").State)
}

// supportflow's own private notes to the agents (keys under
// supportflow.AttentionPrefix) need no approval; anything else under that
// prefix, a public comment say, does.
func TestPostReply_AgentsNoteNeedsNoApproval(t *testing.T) {
	f := newFixture(t)
	ticket := f.zd.AddTicket(standin.Ticket{Subject: "x"})
	note := supportflow.ActionInput{Key: supportflow.AttentionPrefix + "0123abcd:0",
		Action: supportflow.Action{TicketID: ticket, Comment: &supportflow.Comment{Body: "The reply was held back.", Public: false}}}
	_, err := f.env.ExecuteActivity(f.acts.PostReply, note)
	require.NoError(t, err)
	require.Equal(t, 1, f.zd.CommentCount(ticket))
	assert.False(t, f.zd.Comments(ticket)[0].Public)

	public := supportflow.ActionInput{Key: supportflow.AttentionPrefix + "4567ef:0",
		Action: supportflow.Action{TicketID: ticket, Comment: &supportflow.Comment{Body: "Hello customer.", Public: true}}}
	_, err = f.env.ExecuteActivity(f.acts.PostReply, public)
	assert.Equal(t, supportflow.ErrTypeNotApproved, appErr(t, err).Type(), "a public comment is no note to the agents")
	assert.Equal(t, 1, f.zd.CommentCount(ticket))
}

// A cancellation runs only on the ticket's requester's subscriptions: one
// the service says is another customer's is refused before any call and
// recorded failed with the reason, the requester's own is still
// cancelled, and the activity fails Rejected carrying what was cancelled
// (so the workflow holds the reply back and says so).
func TestCancelSubscriptions_RefusesAnotherCustomersSubscription(t *testing.T) {
	f := newFixture(t)
	const ticket = int64(5)
	f.h.Own(t, ticket, standin.DefaultRequesterID, "cus-ada", "sub-ada")
	f.subs.AddSubscription("sub-bo", "cus-bo")
	in := supportflow.ActionInput{Key: "p1:0", ReplyLast: true, Action: supportflow.Action{TicketID: ticket,
		Comment: &supportflow.Comment{Body: "Both cancelled.", Public: true}, CancelSubscriptions: []string{"sub-bo", "sub-ada"}}}
	f.h.ApproveAction(t, in.Key, in.Action)

	_, err := f.env.ExecuteActivity(f.acts.CancelSubscriptions, in)
	app := appErr(t, err)
	assert.Equal(t, supportflow.ErrTypeRejected, app.Type())
	assert.True(t, app.NonRetryable())
	assert.Contains(t, app.Error(), "sub-bo")
	var res supportflow.CancelResult
	require.True(t, app.HasDetails(), "the refusal carries what was cancelled")
	require.NoError(t, app.Details(&res))
	assert.Equal(t, []string{"sub-ada"}, res.Cancelled)
	assert.Equal(t, []string{"sub-ada"}, res.Called, "sub-bo was never sent")

	assert.Zero(t, f.subs.CancelCalls("sub-bo"))
	assert.Equal(t, standin.SubscriptionActive, f.subs.Status("sub-bo"))
	assert.Equal(t, 1, f.subs.Cancellations("sub-ada"))
	a := f.action(t, "p1:0")
	bo, ok := a.Legs.Find(supportflow.LegCancelSubscription, "sub-bo")
	require.True(t, ok)
	assert.Equal(t, ledger.LegFailed, bo.State)
	assert.Contains(t, bo.LastError, "belongs to customer cus-bo, not to customer cus-ada")
	assert.Zero(t, bo.Calls, "a refusal is not a call")
	ada, _ := a.Legs.Find(supportflow.LegCancelSubscription, "sub-ada")
	assert.Equal(t, ledger.LegDone, ada.State)
	assert.Equal(t, []string{fmt.Sprint(ticket)}, a.Legs.InState(supportflow.LegReply, ledger.LegPending), "the reply is held back")
	assert.Nil(t, a.LeaseExpiresAt, "a refusal releases the claim")
}
