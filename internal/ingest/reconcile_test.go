package ingest_test

import (
	"cmp"
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow/internal/ingest"
	"github.com/supportflow/supportflow/internal/zendeskclient"
)

// fakeExports is Zendesk's incremental exports, Show Many Users and List
// Audits as the reconciler reads them, from an in-memory account: the
// event export pages by whole seconds (a full page ends at its last
// event's second, repeated by the next page; a page all of one second
// answers end_time == start_time), the ticket export by cursor.
type fakeExports struct {
	mu       sync.Mutex
	me       int64
	now      time.Time // the exports leave out what is newer
	tickets  []zendeskclient.ExportedTicket
	events   []zendeskclient.TicketEventRow
	roles    map[int64]string
	audits   map[int64][]zendeskclient.TicketAudit
	pageSize int // event and ticket pages

	// failEvents fails the event export's requests whose number (1-based,
	// counted over the fake's life) it lists.
	failEvents  map[int]error
	failTickets map[int]error
	rolesErr    error
	// auditErr fails List Audits for the tickets it names.
	auditErr map[int64]error
	// auditPageSize is List Audits' page (0 means Zendesk's 100).
	auditPageSize int

	eventCalls, ticketCalls, auditCalls int
	// auditPages counts List Audits' page requests, auditWaits the waits
	// the caller was asked for before them.
	auditPages, auditWaits    int
	eventStarts, ticketStarts []int64
}

func (f *fakeExports) Me(context.Context) (int64, error) { return f.me, nil }

func (f *fakeExports) ExportTickets(_ context.Context, cursor string, start time.Time, _ int) (zendeskclient.TicketPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.ticketCalls++
	if cursor == "" {
		f.ticketStarts = append(f.ticketStarts, start.Unix())
	}
	if err := f.failTickets[f.ticketCalls]; err != nil {
		return zendeskclient.TicketPage{}, err
	}
	rows := slices.Clone(f.tickets)
	slices.SortStableFunc(rows, func(a, b zendeskclient.ExportedTicket) int { return a.UpdatedAt.Compare(b.UpdatedAt) })
	from := 0
	if cursor != "" {
		from, _ = strconv.Atoi(cursor)
	} else {
		for from < len(rows) && rows[from].UpdatedAt.Unix() < start.Unix() {
			from++
		}
	}
	to := min(len(rows), from+f.pageSize)
	for to > from && !rows[to-1].UpdatedAt.Before(f.now) {
		to--
	}
	return zendeskclient.TicketPage{Tickets: rows[from:to], AfterCursor: strconv.Itoa(to),
		EndOfStream: to == len(rows) || !rows[to].UpdatedAt.Before(f.now)}, nil
}

func (f *fakeExports) ExportTicketEvents(_ context.Context, start int64, perPage int) (zendeskclient.EventPage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.eventCalls++
	f.eventStarts = append(f.eventStarts, start)
	if err := f.failEvents[f.eventCalls]; err != nil {
		return zendeskclient.EventPage{}, err
	}
	var rows []zendeskclient.TicketEventRow
	for _, e := range f.events {
		if e.Timestamp >= start && e.Timestamp < f.now.Unix() {
			rows = append(rows, e)
		}
	}
	slices.SortStableFunc(rows, func(a, b zendeskclient.TicketEventRow) int { return int(a.Timestamp - b.Timestamp) })
	limit := f.pageSize
	if perPage > 0 && perPage < limit {
		limit = perPage
	}
	// end_time is the most recent time present in the result set (the
	// start when it is empty), as Zendesk documents it.
	end := len(rows) <= limit
	if !end {
		rows = rows[:limit]
	}
	endTime := start
	if len(rows) > 0 {
		endTime = rows[len(rows)-1].Timestamp
	}
	return zendeskclient.EventPage{Events: rows, EndTime: endTime, EndOfStream: end}, nil
}

func (f *fakeExports) UserRoles(_ context.Context, ids []int64) (map[int64]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.rolesErr != nil {
		return nil, f.rolesErr
	}
	out := map[int64]string{}
	for _, id := range ids {
		if r, ok := f.roles[id]; ok {
			out[id] = r
		}
	}
	return out, nil
}

// TicketAuditsPaced reads the ticket's audits page by page (auditPageSize),
// waiting before each page, and fails as the client does past maxPages.
func (f *fakeExports) TicketAuditsPaced(ctx context.Context, ticketID int64, since time.Time, maxPages int,
	wait func(context.Context) error) ([]zendeskclient.TicketAudit, error) {
	f.mu.Lock()
	f.auditCalls++
	f.mu.Unlock()
	if maxPages <= 0 {
		maxPages = 100
	}
	var out []zendeskclient.TicketAudit
	for page := 0; ; page++ {
		if page == maxPages {
			return nil, &zendeskclient.Error{Op: "list audits", Err: zendeskclient.ErrTooManyAudits}
		}
		if wait != nil {
			if err := wait(ctx); err != nil {
				return nil, err
			}
		}
		f.mu.Lock()
		if wait != nil {
			f.auditWaits++
		}
		f.auditPages++
		if err := f.auditErr[ticketID]; err != nil {
			f.mu.Unlock()
			return nil, err
		}
		size := cmp.Or(f.auditPageSize, 100)
		all := f.audits[ticketID]
		from := page * size
		to := min(len(all), from+size)
		done := to == len(all)
		for _, a := range all[min(from, len(all)):to] {
			if a.CreatedAt.Before(since) {
				done = true // newest first: the rest are older
				break
			}
			out = append(out, a)
		}
		f.mu.Unlock()
		if done {
			return out, nil
		}
	}
}

// update records one ticket update in the fake account: the event export's
// row, the ticket's audit, and the ticket's export row.
func (f *fakeExports) update(ticketID, requester, updater int64, at time.Time, status string, comment *zendeskclient.AuditComment) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := int64(len(f.events) + 1000)
	row := zendeskclient.TicketEventRow{ID: id, TicketID: ticketID, Timestamp: at.Unix(), UpdaterID: updater}
	audit := zendeskclient.TicketAudit{ID: id, AuthorID: updater, CreatedAt: at}
	if comment != nil {
		public := comment.Public
		row.ChildEvents = append(row.ChildEvents, zendeskclient.ChildEvent{ID: id + 500000, EventType: "Comment", AuthorID: comment.AuthorID, Public: &public, CreatedAt: at})
		audit.Comments = append(audit.Comments, *comment)
	}
	f.events = append(f.events, row)
	if f.audits == nil {
		f.audits = map[int64][]zendeskclient.TicketAudit{}
	}
	f.audits[ticketID] = append([]zendeskclient.TicketAudit{audit}, f.audits[ticketID]...)
	for i, t := range f.tickets {
		if t.ID == ticketID {
			f.tickets[i].UpdatedAt, f.tickets[i].Status = at, status
			return
		}
	}
	f.tickets = append(f.tickets, zendeskclient.ExportedTicket{ID: ticketID, Subject: "Where is my order?", Status: status,
		RequesterID: requester, CreatedAt: at, UpdatedAt: at})
}

const (
	me       int64 = 900
	agent    int64 = 901
	ccUser   int64 = 902
	stranger int64 = 903 // no role known: lookups fail for it only when told
)

func newFake(now time.Time) *fakeExports {
	return &fakeExports{me: me, now: now, pageSize: 3,
		roles: map[int64]string{me: "admin", agent: "agent", ccUser: "end-user"}}
}

func newReconciler(store *ingest.Store, f *fakeExports, from time.Time) *ingest.Reconciler {
	return &ingest.Reconciler{Store: store, Export: f, RequestsPerMinute: 6000, AuditsPerMinute: 60000, MaxRequests: 40, BackfillFrom: from}
}

func requesterOf(ticket int64) int64 { return ticket * 10 }

func public(author int64) *zendeskclient.AuditComment {
	return &zendeskclient.AuditComment{AuthorID: author, Public: true}
}

func count(t *testing.T, pool *pgxpool.Pool, q string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, pool.QueryRow(context.Background(), q, args...).Scan(&n))
	return n
}

// Each page is applied and its cursor saved before the next is read: a
// failure on the third event page keeps the first two, the cursor only
// moves forward, and the next pass goes on from it.
func TestReconcile_EachPageIsSavedBeforeTheNext(t *testing.T) {
	t.Parallel()
	store, _, pool := newStore(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	f := newFake(time.Now().Add(-time.Minute))
	for i := range int64(9) {
		id := 100 + i
		f.update(id, requesterOf(id), requesterOf(id), base.Add(time.Duration(i)*time.Second), "open", public(requesterOf(id)))
	}
	f.failEvents = map[int]error{3: &zendeskclient.Error{Op: "export ticket events", Status: http.StatusInternalServerError, Err: errors.New("boom")}}
	r := newReconciler(store, f, base.Add(-time.Minute))

	_, err := r.ReconcileTickets(ctx, "wf-1")
	require.Error(t, err, "the 5xx ends the pass")
	cur, err := store.Cursor(ctx)
	require.NoError(t, err)
	assert.Equal(t, base.Add(4*time.Second).Unix(), cur.EventsStart, "two pages applied and saved: the cursor is at the second page's end")
	applied := count(t, pool, `SELECT count(*) FROM ticket_mirror WHERE account = $1 AND last_customer_comment_at IS NOT NULL`, account)
	assert.Equal(t, 5, applied, "the two pages' comments are applied (the second page's last second is read again)")
	assert.Equal(t, 1, count(t, pool, `SELECT count(*) FROM reconcile_run WHERE account = $1 AND error IS NOT NULL AND NOT caught_up`, account),
		"the failed pass is recorded")

	res, err := r.ReconcileTickets(ctx, "wf-2")
	require.NoError(t, err)
	assert.True(t, res.CaughtUp)
	for i := 1; i < len(f.eventStarts); i++ {
		assert.GreaterOrEqual(t, f.eventStarts[i], f.eventStarts[i-1], "the event cursor never moves backwards")
	}
	assert.Equal(t, 9, count(t, pool, `SELECT count(*) FROM ticket_mirror WHERE account = $1 AND last_customer_comment_at IS NOT NULL AND status = 'open'`, account))
	assert.Equal(t, 9, count(t, pool, `SELECT count(*) FROM ticket_event WHERE account = $1 AND customer_activity`, account),
		"each customer comment is customer activity once")
}

// A cold start that fails keeps the start it saved: the next pass, later,
// reads the ticket export from the same start_time.
func TestReconcile_FailedColdStartKeepsItsStart(t *testing.T) {
	t.Parallel()
	store, _, _ := newStore(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	f := newFake(time.Now().Add(-time.Minute))
	f.update(1, requesterOf(1), requesterOf(1), base, "new", public(requesterOf(1)))
	f.failTickets = map[int]error{1: &zendeskclient.Error{Op: "export tickets", Status: http.StatusTooManyRequests, RetryAfter: time.Second, Err: errors.New("slow down")}}
	r := &ingest.Reconciler{Store: store, Export: f, RequestsPerMinute: 6000, AuditsPerMinute: 60000, Backfill: 2 * time.Hour}

	_, err := r.ReconcileTickets(ctx, "wf-1")
	require.Error(t, err)
	time.Sleep(1100 * time.Millisecond) // a later pass: now-backfill has moved on
	_, err = r.ReconcileTickets(ctx, "wf-2")
	require.NoError(t, err)
	require.Len(t, f.ticketStarts, 2)
	assert.Equal(t, f.ticketStarts[0], f.ticketStarts[1], "the second pass reads from the start the first saved")
}

// More events in one second than a page: the page is applied, the tickets
// of that second are held and placed from their audits, the export steps
// past the second, and the run records it.
func TestReconcile_StuckSecondIsSteppedPast(t *testing.T) {
	t.Parallel()
	store, _, pool := newStore(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	f := newFake(time.Now().Add(-time.Minute))
	stuck := base.Add(10 * time.Second)
	for i := range int64(7) { // seven events in one second, pages of three
		id := 200 + i
		f.update(id, requesterOf(id), requesterOf(id), stuck, "open", public(requesterOf(id)))
	}
	f.update(300, requesterOf(300), requesterOf(300), stuck.Add(5*time.Second), "open", public(requesterOf(300)))
	r := newReconciler(store, f, base)

	var res struct{ caught bool }
	for pass := range 3 {
		out, err := r.ReconcileTickets(ctx, "wf-"+strconv.Itoa(pass))
		require.NoError(t, err)
		if res.caught = out.CaughtUp; res.caught {
			break
		}
	}
	assert.True(t, res.caught, "the pass catches up: the stuck second does not stall it")
	cur, err := store.Cursor(ctx)
	require.NoError(t, err)
	assert.Greater(t, cur.EventsStart, stuck.Unix())
	assert.Equal(t, 8, count(t, pool, `SELECT count(*) FROM ticket_mirror WHERE account = $1 AND last_customer_comment_at IS NOT NULL`, account),
		"every ticket of the stuck second is placed, those beyond the page from their audits")
	assert.Equal(t, 1, count(t, pool, `SELECT count(*) FROM reconcile_run WHERE account = $1 AND $2 = ANY(stepped_seconds)`, account, stuck.Unix()),
		"the stepped second is recorded once")
	assert.Zero(t, count(t, pool, `SELECT count(*) FROM reconcile_held WHERE account = $1`, account), "nothing is left held")
	assert.Less(t, f.eventCalls, 12, "the same page is not asked for again and again")
}

// A comment whose author cannot be placed holds its ticket, not the
// cursor; the ticket is placed on a later pass.
func TestReconcile_HeldTicketDoesNotHoldTheCursor(t *testing.T) {
	t.Parallel()
	store, _, pool := newStore(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	f := newFake(time.Now().Add(-time.Minute))
	f.update(400, requesterOf(400), requesterOf(400), base, "open", public(requesterOf(400)))
	f.update(401, requesterOf(401), requesterOf(401), base.Add(2*time.Second), "open", public(requesterOf(401)))
	f.rolesErr = &zendeskclient.Error{Op: "show many users", Status: http.StatusServiceUnavailable, Err: errors.New("down")}
	r := newReconciler(store, f, base.Add(-time.Minute))

	res, err := r.ReconcileTickets(ctx, "wf-1")
	require.NoError(t, err)
	assert.False(t, res.CaughtUp, "held tickets: not caught up")
	cur, err := store.Cursor(ctx)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, cur.EventsStart, base.Add(2*time.Second).Unix(), "the cursor reached the end all the same")
	lag, held, err := store.ReconcileHealth(ctx)
	require.NoError(t, err)
	assert.Equal(t, 2, held)
	assert.Less(t, lag, 600.0)
	var reason string
	require.NoError(t, pool.QueryRow(ctx, `SELECT reason FROM reconcile_held WHERE account = $1 AND ticket_id = 400`, account).Scan(&reason))
	assert.Contains(t, reason, "HTTP 503")
	assert.Equal(t, 1, count(t, pool, `SELECT count(*) FROM reconcile_run WHERE account = $1 AND held = 2`, account))

	f.mu.Lock()
	f.rolesErr = nil
	f.mu.Unlock()
	res, err = r.ReconcileTickets(ctx, "wf-2")
	require.NoError(t, err)
	assert.True(t, res.CaughtUp)
	_, held, err = store.ReconcileHealth(ctx)
	require.NoError(t, err)
	assert.Zero(t, held)
	assert.Equal(t, 2, count(t, pool, `SELECT count(*) FROM ticket_event WHERE account = $1 AND customer_activity`, account))
}

// Own writes are judged on the changes the mirror has not seen: our reply
// whose webhook was lost, on a ticket the customer wrote on earlier, is our
// own (no dispatch, no customer activity); a CC'd end user's comment is the
// customer's; an agent's is not.
func TestReconcile_OwnWriteWindowAndEndUsers(t *testing.T) {
	t.Parallel()
	store, _, pool := newStore(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	f := newFake(time.Now().Add(-time.Minute))
	f.pageSize = 20 // one page: each ticket's changes are judged together
	// Ticket 500: the customer wrote (mirrored by its webhook), then our
	// reply's webhook was lost.
	f.update(500, requesterOf(500), requesterOf(500), base, "open", public(requesterOf(500)))
	_, err := store.UpsertTicketMirror(ctx, ingest.TicketMirror{TicketID: 500, Subject: "Where is my order?", Status: "open",
		RequesterID: requesterOf(500), UpdatedAt: base, LastCustomerCommentAt: base})
	require.NoError(t, err)
	f.update(500, requesterOf(500), me, base.Add(3*time.Second), "pending", public(me))
	// Ticket 501: an agent answered, then a CC'd colleague wrote.
	f.update(501, requesterOf(501), requesterOf(501), base, "open", public(requesterOf(501)))
	f.update(501, requesterOf(501), agent, base.Add(2*time.Second), "pending", public(agent))
	f.update(501, requesterOf(501), ccUser, base.Add(4*time.Second), "open", public(ccUser))
	// Ticket 502: the customer, then a human agent answered (not us).
	f.update(502, requesterOf(502), requesterOf(502), base, "open", public(requesterOf(502)))
	f.update(502, requesterOf(502), agent, base.Add(5*time.Second), "pending", public(agent))
	r := newReconciler(store, f, base.Add(-time.Minute))

	res, err := r.ReconcileTickets(ctx, "wf-1")
	require.NoError(t, err)
	assert.True(t, res.CaughtUp)

	assert.Zero(t, count(t, pool, `SELECT count(*) FROM ticket_event WHERE account = $1 AND ticket_id = 500 AND NOT own_write`, account),
		"our reply's repair is our own write")
	assert.Positive(t, count(t, pool, `SELECT count(*) FROM ticket_event WHERE account = $1 AND ticket_id = 500 AND own_write`, account))
	m, err := store.GetTicketMirror(ctx, 500)
	require.NoError(t, err)
	assert.Equal(t, "pending", m.Status)
	assert.True(t, m.LastAgentCommentAt.After(m.LastCustomerCommentAt), "our reply is the last word")

	assert.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ticket_event WHERE account = $1 AND ticket_id = 501 AND customer_activity`, account),
		"the CC'd end user's comment is customer activity")
	m, err = store.GetTicketMirror(ctx, 501)
	require.NoError(t, err)
	assert.True(t, m.LastCustomerCommentAt.After(m.LastAgentCommentAt), "the customer spoke last")

	assert.Zero(t, count(t, pool, `SELECT count(*) FROM ticket_event WHERE account = $1 AND ticket_id = 502 AND customer_activity`, account))
	m, err = store.GetTicketMirror(ctx, 502)
	require.NoError(t, err)
	assert.True(t, m.LastAgentCommentAt.After(m.LastCustomerCommentAt), "the agent spoke last")
	assert.Positive(t, count(t, pool, `SELECT count(*) FROM ticket_event WHERE account = $1 AND ticket_id = 502 AND NOT own_write`, account),
		"a human agent's change is not ours")
	assert.Zero(t, f.auditCalls, "the event export told whose every change was: no audit was read")
}

// A crowded second whose listing the requests run out in is not stepped
// past: the next pass resumes the listing where it got to, and only then
// steps. Every ticket the listing shows from that second is held, also one
// changed in it and again later (the ticket export shows only its later
// time): its customer's comment in the crowded second is read from its
// audits.
func TestReconcile_CrowdedSecondListingResumesAndHoldsLaterChanges(t *testing.T) {
	t.Parallel()
	store, _, pool := newStore(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	f := newFake(time.Now().Add(-time.Minute))
	stuck := base.Add(10 * time.Second)
	for i := range int64(7) { // seven events in one second, pages of three
		id := 200 + i
		f.update(id, requesterOf(id), requesterOf(id), stuck, "open", public(requesterOf(id)))
	}
	// Ticket 207: the customer wrote in the crowded second (off its page),
	// then an agent changed the status without a comment, later.
	f.update(207, requesterOf(207), requesterOf(207), stuck, "open", public(requesterOf(207)))
	f.update(207, requesterOf(207), agent, stuck.Add(20*time.Second), "pending", nil)
	f.update(300, requesterOf(300), requesterOf(300), stuck.Add(5*time.Second), "open", public(requesterOf(300)))
	r := newReconciler(store, f, base)
	r.MaxRequests = 3 // the budget runs out inside the listing

	caught, stoppedInside := false, false
	for pass := range 12 {
		out, err := r.ReconcileTickets(ctx, "wf-"+strconv.Itoa(pass))
		require.NoError(t, err)
		cur, err := store.Cursor(ctx)
		require.NoError(t, err)
		if cur.EventsStart > stuck.Unix() {
			assert.Zero(t, cur.CrowdedSecond, "the listing ended before the cursor stepped")
		}
		if cur.EventsStart == stuck.Unix() && cur.CrowdedSecond == stuck.Unix() && cur.CrowdedCursor != "" {
			stoppedInside = true
		}
		if caught = out.CaughtUp; caught {
			break
		}
	}
	require.True(t, caught, "the passes catch up")
	assert.True(t, stoppedInside, "a pass ran out inside the listing and saved where it got to")
	assert.Equal(t, 1, count(t, pool, `SELECT count(*) FROM reconcile_run WHERE account = $1 AND $2 = ANY(stepped_seconds)`, account, stuck.Unix()),
		"the crowded second is stepped past once")
	assert.Positive(t, count(t, pool, `SELECT count(*) FROM reconcile_run WHERE account = $1 AND finished_at <
  (SELECT finished_at FROM reconcile_run WHERE account = $1 AND $2 = ANY(stepped_seconds))`, account, stuck.Unix()),
		"a pass ran out inside the listing without stepping: a later one did")
	for id := int64(200); id <= 207; id++ {
		m, err := store.GetTicketMirror(ctx, id)
		require.NoError(t, err, "ticket %d", id)
		assert.Equal(t, stuck.Unix(), m.LastCustomerCommentAt.Unix(), "ticket %d: its customer's comment in the crowded second is known", id)
	}
	assert.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ticket_event WHERE account = $1 AND ticket_id = 207 AND customer_activity`, account),
		"the comment of the ticket changed again later is customer activity")
	assert.Zero(t, count(t, pool, `SELECT count(*) FROM reconcile_held WHERE account = $1`, account))
}

// A customer's comment whose webhook was lost, then supportflow's reply
// whose webhook arrived (the mirror has seen it): the customer's comment
// is news and customer activity, not supportflow's own write.
func TestReconcile_LostCustomerCommentBeforeOwnReplyIsNotOwn(t *testing.T) {
	t.Parallel()
	store, _, pool := newStore(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	f := newFake(time.Now().Add(-time.Minute))
	f.pageSize = 20
	f.update(600, requesterOf(600), requesterOf(600), base, "open", public(requesterOf(600)))
	f.update(600, requesterOf(600), requesterOf(600), base.Add(5*time.Second), "open", public(requesterOf(600))) // webhook lost
	f.update(600, requesterOf(600), me, base.Add(8*time.Second), "pending", public(me))                          // webhook arrived
	_, err := store.UpsertTicketMirror(ctx, ingest.TicketMirror{TicketID: 600, Subject: "Where is my order?", Status: "pending",
		RequesterID: requesterOf(600), UpdatedAt: base.Add(8 * time.Second), LastCustomerCommentAt: base, LastAgentCommentAt: base.Add(8 * time.Second)})
	require.NoError(t, err)
	r := newReconciler(store, f, base.Add(-time.Minute))

	_, err = r.ReconcileTickets(ctx, "wf-1")
	require.NoError(t, err)
	m, err := store.GetTicketMirror(ctx, 600)
	require.NoError(t, err)
	assert.Equal(t, base.Add(5*time.Second).Unix(), m.LastCustomerCommentAt.Unix(), "the lost comment is repaired")
	assert.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ticket_event WHERE account = $1 AND ticket_id = 600 AND NOT own_write`, account),
		"the customer's comment is not supportflow's own write")
	assert.Zero(t, count(t, pool, `SELECT count(*) FROM ticket_event WHERE account = $1 AND ticket_id = 600 AND own_write`, account))
}

// Held tickets are let go when they can never be placed: a ticket Zendesk
// no longer has (404), one with more audits than a read takes, one tried
// too often; each is recorded in the run. Held tickets are retried even
// when the pass's export page failed.
func TestReconcile_HeldTicketsAreReleasedOrGivenUp(t *testing.T) {
	t.Parallel()
	store, _, pool := newStore(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	f := newFake(time.Now().Add(-time.Minute))
	f.update(700, requesterOf(700), requesterOf(700), base, "open", public(requesterOf(700)))
	for _, id := range []int64{700, 701, 702, 703} {
		require.NoError(t, store.HoldTicket(ctx, id, "test", base))
	}
	_, err := pool.Exec(ctx, `UPDATE reconcile_held SET attempts = 60 WHERE account = $1 AND ticket_id = 703`, account)
	require.NoError(t, err)
	f.auditErr = map[int64]error{
		701: &zendeskclient.Error{Op: "list audits", Status: http.StatusNotFound, Err: errors.New("gone")},
		702: &zendeskclient.Error{Op: "list audits", Err: zendeskclient.ErrTooManyAudits},
		703: &zendeskclient.Error{Op: "list audits", Status: http.StatusBadGateway, Err: errors.New("boom")},
	}
	f.failEvents = map[int]error{1: &zendeskclient.Error{Op: "export ticket events", Status: http.StatusBadGateway, Err: errors.New("boom")}}
	r := newReconciler(store, f, base.Add(-time.Minute))

	_, err = r.ReconcileTickets(ctx, "wf-1")
	require.Error(t, err, "the page error ends the pass")
	assert.Zero(t, count(t, pool, `SELECT count(*) FROM reconcile_held WHERE account = $1`, account),
		"700 placed from its audits, the others let go, although the page failed")
	m, err := store.GetTicketMirror(ctx, 700)
	require.NoError(t, err)
	assert.Equal(t, base.Unix(), m.LastCustomerCommentAt.Unix())
	var givenUp []int64
	require.NoError(t, pool.QueryRow(ctx, `SELECT given_up FROM reconcile_run WHERE account = $1`, account).Scan(&givenUp))
	assert.ElementsMatch(t, []int64{701, 702, 703}, givenUp)
}

// A ticket that fails its audit read now and then stays held, with its
// attempts counted.
func TestReconcile_HeldTicketStaysHeldOnATransientError(t *testing.T) {
	t.Parallel()
	store, _, pool := newStore(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	f := newFake(time.Now().Add(-time.Minute))
	require.NoError(t, store.HoldTicket(ctx, 710, "test", base))
	f.auditErr = map[int64]error{710: &zendeskclient.Error{Op: "list audits", Status: http.StatusBadGateway, Err: errors.New("boom")}}
	r := newReconciler(store, f, base.Add(-time.Minute))
	_, err := r.ReconcileTickets(ctx, "wf-1")
	require.NoError(t, err)
	assert.Equal(t, 1, count(t, pool, `SELECT count(*) FROM reconcile_held WHERE account = $1 AND ticket_id = 710 AND attempts = 2`, account))
}

// The lag is how long ago the event export was last read to its end, not
// how old its cursor is: on a quiet account (the last event an hour ago)
// a pass that caught up reports almost no lag.
func TestReconcile_LagIsNotQuietTime(t *testing.T) {
	t.Parallel()
	store, _, pool := newStore(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	f := newFake(time.Now().Add(-time.Minute))
	f.update(800, requesterOf(800), requesterOf(800), base, "open", public(requesterOf(800)))
	r := newReconciler(store, f, base.Add(-time.Minute))
	res, err := r.ReconcileTickets(ctx, "wf-1")
	require.NoError(t, err)
	require.True(t, res.CaughtUp)
	cur, err := store.Cursor(ctx)
	require.NoError(t, err)
	assert.Equal(t, base.Unix(), cur.EventsStart, "the cursor stays at the last event's second (end_time)")
	lag, _, err := store.ReconcileHealth(ctx)
	require.NoError(t, err)
	assert.Less(t, lag, 600.0, "an hour of quiet is not lag")
	assert.Equal(t, 1, count(t, pool, `SELECT count(*) FROM reconcile_run WHERE account = $1 AND lag_seconds < 600`, account))
}

// Audit reads are bounded per pass: tickets the event export does not
// cover are judged from their audits only within the allowance.
func TestReconcile_AuditReadsAreBounded(t *testing.T) {
	t.Parallel()
	store, _, _ := newStore(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	f := newFake(time.Now().Add(-time.Minute))
	f.pageSize = 20
	for i := range int64(6) {
		// In the ticket export only: the event export does not tell whose
		// their changes were.
		at := base.Add(time.Duration(i) * time.Second)
		f.tickets = append(f.tickets, zendeskclient.ExportedTicket{ID: 850 + i, Subject: "s", Status: "open", RequesterID: requesterOf(850 + i),
			CreatedAt: at.Add(-time.Hour), UpdatedAt: at})
	}
	r := newReconciler(store, f, base.Add(-time.Minute))
	r.AuditReadsPerPass = 2
	_, err := r.ReconcileTickets(ctx, "wf-1")
	require.NoError(t, err)
	assert.Equal(t, 2, f.auditCalls, "two audit reads, the rest judged not own")
}

// A crowded second's updates were read only as far as a page: a ticket
// change in it is judged from the ticket's audits, not from the page (our
// own update on the page, a human agent's off it).
func TestReconcile_CrowdedSecondIsNotCoveredForOwnWrites(t *testing.T) {
	t.Parallel()
	store, _, pool := newStore(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	f := newFake(time.Now().Add(-time.Minute))
	stuck := base.Add(10 * time.Second)
	f.update(210, requesterOf(210), me, stuck, "pending", nil) // on the page
	for i := range int64(6) {
		id := 200 + i
		f.update(id, requesterOf(id), requesterOf(id), stuck, "open", public(requesterOf(id)))
	}
	f.update(210, requesterOf(210), agent, stuck, "solved", nil) // off the page
	r := newReconciler(store, f, base)
	caught := false
	for pass := range 3 {
		out, err := r.ReconcileTickets(ctx, "wf-"+strconv.Itoa(pass))
		require.NoError(t, err)
		if caught = out.CaughtUp; caught {
			break
		}
	}
	require.True(t, caught)
	assert.Positive(t, count(t, pool, `SELECT count(*) FROM ticket_event WHERE account = $1 AND ticket_id = 210 AND NOT own_write`, account),
		"the human agent's change in the crowded second is not ours")
}

// Our reply and the customer's comment in the same second, read on
// different pages (the page ends inside that second): our reply is
// recorded first, as our own; the customer's comment, read on the next
// page, is a repair of its own (not a duplicate of ours), recorded as the
// customer's and dispatched.
func TestReconcile_CustomerCommentInTheSecondOfAnEarlierRepairIsRecorded(t *testing.T) {
	t.Parallel()
	store, _, pool := newStore(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	f := newFake(time.Now().Add(-time.Minute))
	sec := base.Add(10 * time.Second)
	f.update(700, requesterOf(700), requesterOf(700), base, "open", public(requesterOf(700)))
	_, err := store.UpsertTicketMirror(ctx, ingest.TicketMirror{TicketID: 700, Subject: "Where is my order?", Status: "open",
		RequesterID: requesterOf(700), UpdatedAt: base, LastCustomerCommentAt: base})
	require.NoError(t, err)
	f.update(701, requesterOf(701), requesterOf(701), sec.Add(-2*time.Second), "open", public(requesterOf(701)))
	f.update(702, requesterOf(702), requesterOf(702), sec.Add(-time.Second), "open", public(requesterOf(702)))
	f.update(700, requesterOf(700), me, sec, "pending", public(me))                          // ends the first page
	f.update(700, requesterOf(700), requesterOf(700), sec, "open", public(requesterOf(700))) // on the next
	r := newReconciler(store, f, base.Add(time.Second))

	caught := false
	for pass := range 3 {
		out, err := r.ReconcileTickets(ctx, "wf-"+strconv.Itoa(pass))
		require.NoError(t, err)
		if caught = out.CaughtUp; caught {
			break
		}
	}
	require.True(t, caught)
	m, err := store.GetTicketMirror(ctx, 700)
	require.NoError(t, err)
	assert.Equal(t, sec.Unix(), m.LastCustomerCommentAt.Unix(), "the customer's comment is known")
	assert.Equal(t, sec.Unix(), m.LastAgentCommentAt.Unix(), "our reply is known")
	assert.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ticket_event WHERE account = $1 AND ticket_id = 700
  AND event_type = 'reconcile.comment' AND own_write`, account), "our reply's repair is our own")
	// Who spoke last within one second the mirror cannot tell (it takes
	// the agent's), so this asks only that the comment is recorded as not
	// ours and waits for the relay to hand it on.
	assert.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ticket_event WHERE account = $1 AND ticket_id = 700
  AND event_type = 'reconcile.comment' AND NOT own_write AND dispatched_at IS NULL`, account),
		"the customer's comment is recorded as the customer's and dispatched, not dropped as a duplicate")
}

// Audit reads are paced page by page, and ownChange reads at most
// ownAuditPages pages for a ticket: one with more audits since the
// mirror's copy is judged not our own.
func TestReconcile_AuditPagesArePacedAndCapped(t *testing.T) {
	t.Parallel()
	store, _, pool := newStore(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	f := newFake(time.Now().Add(-time.Minute))
	f.pageSize = 20
	f.auditPageSize = 2
	f.audits = map[int64][]zendeskclient.TicketAudit{}
	for i, n := range []int{5, 7} { // three pages of two; four
		id := int64(860 + i)
		at := base.Add(time.Duration(i) * time.Second)
		f.tickets = append(f.tickets, zendeskclient.ExportedTicket{ID: id, Subject: "s", Status: "open", RequesterID: requesterOf(id),
			CreatedAt: at.Add(-time.Hour), UpdatedAt: at})
		for j := range n { // all ours, newest first
			f.audits[id] = append(f.audits[id], zendeskclient.TicketAudit{ID: id*100 + int64(j), AuthorID: me,
				CreatedAt: at.Add(-time.Duration(j) * time.Minute)})
		}
	}
	r := newReconciler(store, f, base.Add(-time.Minute))
	_, err := r.ReconcileTickets(ctx, "wf-1")
	require.NoError(t, err)
	assert.Equal(t, 2, f.auditCalls)
	assert.Equal(t, 6, f.auditPages, "three pages each: the second ticket's reading stops at the cap")
	assert.Equal(t, f.auditPages, f.auditWaits, "every page request was paced")
	assert.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ticket_event WHERE account = $1 AND ticket_id = 860 AND own_write`, account),
		"within the cap: every change was ours")
	assert.Equal(t, 1, count(t, pool, `SELECT count(*) FROM ticket_event WHERE account = $1 AND ticket_id = 861 AND NOT own_write`, account),
		"past the cap: judged not our own")
}

// The held retry's allowance grows with the backlog: a twelfth of the held
// tickets a pass when that is more than MaxHeldPerRun.
func TestReconcile_HeldAllowanceGrowsWithTheBacklog(t *testing.T) {
	t.Parallel()
	store, _, _ := newStore(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour).Truncate(time.Second)
	f := newFake(time.Now().Add(-time.Minute))
	for id := int64(1000); id < 1060; id++ {
		require.NoError(t, store.HoldTicket(ctx, id, "crowded_second", base))
	}
	r := newReconciler(store, f, base)
	r.MaxHeldPerRun = 2
	_, err := r.ReconcileTickets(ctx, "wf-1")
	require.NoError(t, err)
	assert.Equal(t, 5, f.auditCalls, "sixty held: five tried, not two")
	_, held, err := store.ReconcileHealth(ctx)
	require.NoError(t, err)
	assert.Equal(t, 55, held)
}
