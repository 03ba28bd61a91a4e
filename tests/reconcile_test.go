package tests

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/internal/zendeskclient"
)

// reconcilePass runs one reconciliation pass as the schedule does (a
// ReconcileTickets workflow of its own) and waits for it; a pass that
// ends in error is returned as such.
func (s *stack) reconcilePass(name string) (supportflow.ReconcileResult, error) {
	s.t.Helper()
	return s.startReconcile(name)()
}

// startReconcile starts a reconciliation pass and returns how to wait
// for it.
func (s *stack) startReconcile(name string) (wait func() (supportflow.ReconcileResult, error)) {
	s.t.Helper()
	run, err := s.temporal.ExecuteWorkflow(ctxT(s.t), clientStart("reconcile-"+name+"-"+s.taskQueue, s.taskQueue),
		supportflow.ReconcileTicketsWorkflow, supportflow.ReconcileRequest{})
	require.NoError(s.t, err)
	return func() (supportflow.ReconcileResult, error) {
		var res supportflow.ReconcileResult
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		err := run.Get(ctx, &res)
		return res, err
	}
}

// eventCursor reads the reconciler's event export cursor (0 when none).
func (s *stack) eventCursor() int64 {
	var start *int64
	err := s.pool.QueryRow(context.Background(), `SELECT events_start FROM zendesk_export_cursor WHERE account = $1`,
		s.ledger.Account()).Scan(&start)
	if err != nil || start == nil {
		return 0
	}
	return *start
}

// watchCursor polls the event cursor until the test ends and reports a
// move backwards.
func (s *stack) watchCursor() (backwards func() []string) {
	var mu sync.Mutex
	var bad []string
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		last := int64(0)
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if c := s.eventCursor(); c < last {
				mu.Lock()
				bad = append(bad, fmt.Sprintf("%d after %d", c, last))
				mu.Unlock()
			} else {
				last = c
			}
		}
	}()
	s.t.Cleanup(func() { close(stop); <-done })
	return func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), bad...)
	}
}

// waitHeld waits until the held export request has arrived.
func waitHeld(t *testing.T, h *standin.ExportHold) {
	t.Helper()
	select {
	case <-h.Arrived():
	case <-time.After(waitBudget):
		t.Fatal("the held request never arrived")
	}
}

// Every webhook is lost; the reconciler repairs the tickets while its
// pass meets a 5xx, 429s (another integration spending the account's
// export budget) and a SIGKILLed worker. Each page it applied is kept: the
// cursor never moves backwards, and within two passes every ticket is
// mirrored with its customer's comment.
func TestReconcile_ProgressesThroughErrorsAndRestarts(t *testing.T) {
	t.Parallel()
	const tickets = 40
	s := newStack(t)
	// Two export requests a second, pages of eight events: a pass reads for
	// several seconds, long enough to be hit mid-way.
	s.extraEnv = []string{"SUPPORTFLOW_RECONCILE_START=2m", "SUPPORTFLOW_EXPORT_REQUESTS_PER_MINUTE=120"}
	s.zd.SetExports(standin.ExportConfig{Lag: time.Second, Limit: 6, Window: 2 * time.Second, EventsPageLimit: 8})
	s.startWorker()
	// No webhook is subscribed: every delivery is lost.
	base := 80000 + ticketIDs.Add(tickets*2)
	ids := make([]int64, tickets)
	for i := range ids {
		ids[i] = base + int64(i)
		s.zd.AddTicket(standin.Ticket{ID: ids[i], Subject: "Where is my order?", Description: "It has not arrived.", RequesterID: base*10 + int64(i)})
	}
	// The customers write again, four a second: the event export pages
	// through them a second or so a page.
	from := time.Now().Truncate(time.Second).Add(2 * time.Second)
	for i, id := range ids {
		s.zd.AddComment(id, standin.SeedComment{Body: "Any news?", At: from.Add(time.Duration(i) * time.Second / 4)})
	}
	time.Sleep(time.Until(from.Add(time.Duration(tickets)*time.Second/4 + 1500*time.Millisecond))) // past the exports' lag
	last := from.Add(time.Duration(tickets-1) * time.Second / 4).Unix()
	backwards := s.watchCursor()

	// The faults are armed before the pass starts, in the order the event
	// export's requests meet them: the first page is applied (a1), the
	// second request gets a 5xx; the stand-in holds the third (the second
	// its handler sees) until another integration has spent the account's
	// export budget, so it is answered 429 with Retry-After; it holds the
	// fourth until the worker is SIGKILLed. Nothing depends on the test
	// acting within a delay.
	events := "/api/v2/incremental/ticket_events.json"
	a1 := arrived()
	s.zd.Inject(standin.Fault{Path: events, Arrived: a1})
	s.zd.Inject(standin.Fault{Path: events, Status: http.StatusBadGateway})
	throttle, kill := s.zd.HoldEventRequest(2), s.zd.HoldEventRequest(3)
	t.Cleanup(func() { throttle.Release(); kill.Release() })
	wait := s.startReconcile("1")
	waitArrived(t, a1)
	waitHeld(t, throttle)
	s.zd.ConsumeExportBudget(100)
	throttle.Release()
	waitHeld(t, kill)
	s.killWorker()
	kill.Release()
	s.startWorker()
	first, err1 := wait()
	t.Logf("pass 1: %+v err=%v", first, err1)
	second, err2 := s.reconcilePass("2")
	t.Logf("pass 2: %+v err=%v", second, err2)
	require.NoError(t, err2, "the second pass ends well")

	_, throttled := s.zd.ExportStats()
	assert.Positive(t, throttled, "the pass met 429s")
	assert.Empty(t, backwards(), "the event cursor never moved backwards")
	for _, id := range ids {
		m, err := s.mirror.GetTicketMirror(ctxT(t), id)
		require.NoError(t, err, "ticket %d is mirrored", id)
		assert.False(t, m.LastCustomerCommentAt.IsZero(), "ticket %d: the customer's comment is known", id)
	}
	assert.GreaterOrEqual(t, s.eventCursor(), last, "the cursor reached the newest comment's second (end_time): it did not stall")
	assert.Positive(t, s.count(`SELECT count(*) FROM reconcile_run WHERE account = $1 AND error LIKE '%HTTP 502%'`, s.ledger.Account()),
		"the attempt the 5xx ended was recorded with its error")
	assert.Positive(t, s.count(`SELECT count(*) FROM reconcile_run WHERE account = $1 AND error LIKE '%HTTP 429%'`, s.ledger.Account()),
		"the attempt the 429 ended was recorded with its error")
	assert.Equal(t, 1, s.count(`SELECT count(*) FROM (SELECT caught_up, held, lag_seconds FROM reconcile_run WHERE account = $1
ORDER BY finished_at DESC LIMIT 1) r WHERE caught_up AND held = 0 AND lag_seconds < 120`, s.ledger.Account()), "the last pass caught up")
}

// More events in one second than a page, comments by end users who are
// not the requester on tickets the mirror has never seen, and a user
// lookup that fails: the cursor moves on through all of them, the second
// is stepped past and recorded, the ticket whose author could not be
// placed is held and placed on a later pass, and every customer comment is
// known. The listing of the crowded second's tickets (one ticket a page)
// outlasts a pass's requests: the next pass resumes it before stepping.
// One ticket's comment in the crowded second is off its page and the
// ticket changed again later (the ticket export shows only its later
// time): it is held and its comment read all the same.
func TestReconcile_StuckSecondAndUnknownRequesterDoNotStall(t *testing.T) {
	t.Parallel()
	const tickets = 9
	const later = 12 // tickets changed after the crowded second: the listing outlasts a pass
	s := newStack(t)
	s.extraEnv = fastReconcile
	s.zd.SetExports(standin.ExportConfig{Lag: time.Second, Limit: 1000, EventsPageLimit: 5, TicketsPageLimit: 1})
	s.startWorker()
	base := 90000 + ticketIDs.Add((tickets+later)*2)
	agentID := base*10 + 98
	s.zd.AddUser(standin.User{ID: agentID, Name: "An agent", Role: standin.RoleAgent})
	cc := base*10 + 99
	s.zd.AddUser(standin.User{ID: cc, Name: "A colleague", Role: standin.RoleEndUser})
	ids := make([]int64, tickets)
	for i := range ids {
		ids[i] = base + int64(i)
		s.zd.AddTicket(standin.Ticket{ID: ids[i], Subject: "Invoice", Description: "Please send it.", RequesterID: base*10 + int64(i)})
	}
	// Nine comments in one second by the CC'd colleague: a page of five
	// ends where it started.
	second := time.Now().Truncate(time.Second).Add(2 * time.Second)
	time.Sleep(time.Until(second))
	for _, id := range ids {
		s.zd.AddComment(id, standin.SeedComment{Body: "Any news?", AuthorID: cc, At: second})
	}
	// The last ticket (its comment off the page) is changed again later by
	// an agent, without a comment; other tickets change later too.
	changed := ids[len(ids)-1]
	s.zd.ChangeStatus(changed, standin.StatusChange{Status: "pending", ActorID: agentID, At: second.Add(2 * time.Second)})
	for i := range later {
		id := base + int64(tickets+i)
		s.zd.AddTicket(standin.Ticket{ID: id, Subject: "Later", Description: "Another question.", RequesterID: base*10 + int64(tickets+i)})
	}
	time.Sleep(time.Until(second.Add(3500 * time.Millisecond)))
	// The first user lookups fail.
	s.zd.Inject(standin.Fault{Path: "/api/v2/users/show_many.json", Status: http.StatusServiceUnavailable, Times: 3})

	caught, stoppedInside := false, false
	for pass := range 12 {
		res, err := s.reconcilePass(fmt.Sprint(pass))
		require.NoError(t, err)
		t.Logf("pass %d: %+v", pass, res)
		// A pass that ran out inside the listing leaves the cursor on the
		// crowded second, with the listing's place saved.
		if s.count(`SELECT count(*) FROM zendesk_export_cursor WHERE account = $1 AND events_start = $2
  AND crowded_second = $2 AND crowded_cursor IS NOT NULL`, s.ledger.Account(), second.Unix()) == 1 {
			stoppedInside = true
		}
		if caught = res.CaughtUp; caught {
			break
		}
	}
	require.True(t, caught, "the reconciler caught up")
	assert.True(t, stoppedInside, "a pass ran out of requests inside the crowded second's listing and saved where it got to")
	assert.Greater(t, s.eventCursor(), second.Unix(), "the cursor moved past the crowded second")
	assert.Equal(t, 1, s.count(`SELECT count(*) FROM reconcile_run WHERE account = $1 AND $2 = ANY(stepped_seconds)`,
		s.ledger.Account(), second.Unix()), "the stepped second is recorded")
	assert.Positive(t, s.count(`SELECT count(*) FROM reconcile_run WHERE account = $1 AND held > 0`, s.ledger.Account()),
		"a ticket was held while its author could not be placed")
	assert.Zero(t, s.count(`SELECT count(*) FROM reconcile_held WHERE account = $1`, s.ledger.Account()), "and placed since")
	assert.Positive(t, s.count(`SELECT count(*) FROM reconcile_run WHERE account = $1 AND finished_at <
  (SELECT finished_at FROM reconcile_run WHERE account = $1 AND $2 = ANY(stepped_seconds))`, s.ledger.Account(), second.Unix()),
		"a pass ran out of requests inside the listing and did not step: a later one did")
	m, err := s.mirror.GetTicketMirror(ctxT(t), changed)
	require.NoError(t, err)
	assert.Equal(t, "pending", m.Status, "the later change is mirrored")
	for _, id := range ids {
		m, err := s.mirror.GetTicketMirror(ctxT(t), id)
		require.NoError(t, err)
		assert.Equal(t, second.Unix(), m.LastCustomerCommentAt.Unix(), "ticket %d: the colleague's comment is the customer's", id)
	}
}

// The customer wrote (its webhook delivered: mirrored, looked up), then
// supportflow replied and the reply's webhook was lost. The reconciler
// repairs the reply as supportflow's own write: no lookup, no supersede,
// no customer activity.
func TestIngestion_OwnReplyRepairedIsNotCustomerActivity(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.extraEnv = append([]string{"SUPPORTFLOW_ENRICHMENT_MODE=live", "SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY=200ms",
		"SUPPORTFLOW_ENRICH_UPDATE_DELAY=200ms"}, fastReconcile...)
	s.zd.SetExports(standin.ExportConfig{Lag: time.Second, Limit: 1000})
	s.startWorker()
	c := s.api()
	c.subscribe(standin.WebhookConfig{})

	requester := 95000 + ticketIDs.Add(1)
	tk := standin.Ticket{ID: 95000 + ticketIDs.Add(1), Subject: "Refund", Description: "Where is my refund?", RequesterID: requester}
	s.bq.AddCustomer(requester, standin.BQCustomer{CustomerID: "c-own", Orders: 1})
	s.zd.AddTicket(tk)
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	s.zd.AddComment(tk.ID, standin.SeedComment{Body: "Any news?"})
	waitCtx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()
	require.NoError(t, s.zd.WaitWebhooks(waitCtx))
	require.Eventually(t, func() bool {
		m, err := s.mirror.GetTicketMirror(ctxT(t), tk.ID)
		return err == nil && !m.LastCustomerCommentAt.IsZero()
	}, waitBudget, 50*time.Millisecond, "the customer's comment is mirrored")
	require.Eventually(t, func() bool {
		return s.count(`SELECT count(*) FROM ticket_event WHERE ticket_id = $1 AND dispatched_at IS NULL AND NOT own_write`, tk.ID) == 0 &&
			s.count(`SELECT count(*) FROM enrichment_run WHERE ticket_id = $1`, tk.ID) > 0
	}, waitBudget, 50*time.Millisecond, "the customer's events were dispatched and looked up")
	activity := s.count(`SELECT count(*) FROM ticket_event WHERE ticket_id = $1 AND customer_activity`, tk.ID)

	// supportflow replies (as its API user, with its action key); the
	// reply's webhook is lost.
	s.zd.InjectWebhookFault(standin.WebhookFault{Drop: true, Times: -1})
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second))) // the reply in a second of its own
	zc, err := zendeskclient.New(zendeskclient.Config{URL: s.zdSrv.URL(), Email: zdEmail, APIToken: zdToken})
	require.NoError(t, err)
	_, err = zc.UpdateTicket(ctxT(t), tk.ID, zendeskclient.Update{Comment: &supportflow.Comment{Body: "Your refund is on its way.", Public: true},
		Status: "pending"}, "test-own-reply", "")
	require.NoError(t, err)
	require.NoError(t, s.zd.WaitWebhooks(waitCtx))
	time.Sleep(1500 * time.Millisecond) // past the exports' one-second lag (the stand-in refuses a start inside it)

	res, err := s.reconcilePass("own")
	require.NoError(t, err)
	assert.Contains(t, res.RepairedTickets, tk.ID, "the reconciler repaired the reply the webhook lost")
	m, err := s.mirror.GetTicketMirror(ctxT(t), tk.ID)
	require.NoError(t, err)
	assert.Equal(t, "pending", m.Status)
	assert.True(t, m.LastAgentCommentAt.After(m.LastCustomerCommentAt), "our reply is the last word")
	// Every repair is recorded as our own write, which the relay never
	// hands to Temporal: no workflow hears of it, so no lookup, no
	// supersede, no new draft.
	assert.Positive(t, s.count(`SELECT count(*) FROM ticket_event WHERE ticket_id = $1 AND source = 'reconcile' AND own_write
AND NOT customer_activity`, tk.ID))
	assert.Zero(t, s.count(`SELECT count(*) FROM ticket_event WHERE ticket_id = $1 AND source = 'reconcile' AND NOT own_write`, tk.ID),
		"every repair is our own write")
	assert.Equal(t, activity, s.count(`SELECT count(*) FROM ticket_event WHERE ticket_id = $1 AND customer_activity`, tk.ID),
		"no customer activity")
}

// The customer wrote and that webhook was lost; supportflow then replied
// and its reply's webhook arrived (the mirror has seen the reply). The
// reconciler repairs the customer's comment as news that is not
// supportflow's own write, and dispatches it to the ticket's workflows.
func TestIngestion_LostCustomerCommentBeforeOwnReplyIsDispatched(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.extraEnv = fastReconcile
	s.zd.SetExports(standin.ExportConfig{Lag: time.Second, Limit: 1000})
	s.startWorker()
	c := s.api()
	c.subscribe(standin.WebhookConfig{})

	requester := 96000 + ticketIDs.Add(1)
	tk := standin.Ticket{ID: 96000 + ticketIDs.Add(1), Subject: "Refund", Description: "Where is my refund?", RequesterID: requester, Status: "open"}
	s.zd.AddTicket(tk)
	waitCtx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()
	require.NoError(t, s.zd.WaitWebhooks(waitCtx))
	// The customer's comment (on an open ticket: one comment_added
	// event): its webhook is lost.
	s.zd.InjectWebhookFault(standin.WebhookFault{Type: "comment_added", Drop: true, Times: 1})
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	s.zd.AddComment(tk.ID, standin.SeedComment{Body: "Any news?"})
	require.NoError(t, s.zd.WaitWebhooks(waitCtx))
	// supportflow's reply, a second later: its webhook arrives.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	zc, err := zendeskclient.New(zendeskclient.Config{URL: s.zdSrv.URL(), Email: zdEmail, APIToken: zdToken})
	require.NoError(t, err)
	_, err = zc.UpdateTicket(ctxT(t), tk.ID, zendeskclient.Update{Comment: &supportflow.Comment{Body: "Looking into it.", Public: true},
		Status: "pending"}, "test-own-reply-2", "")
	require.NoError(t, err)
	require.NoError(t, s.zd.WaitWebhooks(waitCtx))
	require.Eventually(t, func() bool {
		m, err := s.mirror.GetTicketMirror(ctxT(t), tk.ID)
		return err == nil && !m.LastAgentCommentAt.IsZero()
	}, waitBudget, 50*time.Millisecond, "the reply's webhook is mirrored")
	m, err := s.mirror.GetTicketMirror(ctxT(t), tk.ID)
	require.NoError(t, err)
	require.True(t, m.LastCustomerCommentAt.IsZero() || m.LastCustomerCommentAt.Before(m.LastAgentCommentAt.Add(-time.Second)),
		"the mirror has not seen the customer's comment")
	time.Sleep(1500 * time.Millisecond) // past the exports' one-second lag

	_, err = s.reconcilePass("lost-customer")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		return s.count(`SELECT count(*) FROM ticket_event WHERE ticket_id = $1 AND source = 'reconcile' AND NOT own_write
AND event_type = 'reconcile.comment' AND dispatched_at IS NOT NULL`, tk.ID) == 1
	}, waitBudget, 50*time.Millisecond, "the customer's comment is repaired, not as our own write, and dispatched")
	assert.Zero(t, s.count(`SELECT count(*) FROM ticket_event WHERE ticket_id = $1 AND source = 'reconcile' AND own_write
AND event_type = 'reconcile.comment'`, tk.ID), "the customer's comment is not recorded as our own write")
	m, err = s.mirror.GetTicketMirror(ctxT(t), tk.ID)
	require.NoError(t, err)
	assert.False(t, m.LastCustomerCommentAt.IsZero(), "the customer's comment is known")
}
