package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/heartbeat"
	"github.com/supportflow/supportflow/internal/telemetry"
	"github.com/supportflow/supportflow/internal/zendeskclient"
)

// Exporter is what the reconciler reads from Zendesk.
type Exporter interface {
	Me(ctx context.Context) (int64, error)
	ExportTickets(ctx context.Context, cursor string, start time.Time, perPage int) (zendeskclient.TicketPage, error)
	ExportTicketEvents(ctx context.Context, start int64, perPage int) (zendeskclient.EventPage, error)
	// UserRoles returns the Zendesk role of each user it knows.
	UserRoles(ctx context.Context, ids []int64) (map[int64]string, error)
	// TicketAuditsPaced returns the ticket's audits since a time, newest
	// first, reading at most maxPages pages (over that, an error wrapping
	// zendeskclient.ErrTooManyAudits) and calling wait before each page
	// request.
	TicketAuditsPaced(ctx context.Context, ticketID int64, since time.Time, maxPages int,
		wait func(context.Context) error) ([]zendeskclient.TicketAudit, error)
}

// Reconciler holds the reconciliation activity and its clients.
type Reconciler struct {
	Store  *Store
	Export Exporter
	// RequestsPerMinute paces export requests; Zendesk allows 10 a minute
	// for the account's incremental exports. 0 means 10.
	RequestsPerMinute int
	// MaxRequests bounds one run's export requests (the next run goes on
	// from the saved cursor); 0 means 20.
	MaxRequests int
	// EventsPerPage is the per_page the event export is first asked
	// with; 0 means Zendesk's 1,000 (the most it allows). A second with
	// more events than that is read again with the most, then stepped
	// past.
	EventsPerPage int
	// MaxHeldPerRun is how many held tickets a run retries at least (one
	// audit read each, an allowance of its own); 0 means 50. A larger
	// backlog (a crowded second's listing holds every ticket changed from
	// that second on) raises it to a twelfth of the held tickets, so a
	// backlog drains in about an hour of 5-minute passes, but never past
	// two minutes of AuditsPerMinute (heldAllowance).
	MaxHeldPerRun int
	// AuditReadsPerPass bounds how many tickets' audits a pass reads to
	// judge whose a ticket export change was (ownChange); 0 means 50.
	AuditReadsPerPass int
	// AuditsPerMinute paces the audit reads, page by page (each page of
	// List Audits is a request that counts toward the account's Support
	// API rate limit, 200 a minute on the smallest plans, shared with
	// everything else); 0 means 120.
	// https://developer.zendesk.com/api-reference/introduction/rate-limits/
	AuditsPerMinute int
	// Backfill is how far before the first run a cold start reads; 0
	// means 24 h. BackfillFrom, when set, overrides it.
	Backfill     time.Duration
	BackfillFrom time.Time
	// HeartbeatInterval is the heartbeat ticker's period; 0 means 15 s.
	HeartbeatInterval time.Duration
	// Retention is how long finished ticket events and reconciliation
	// runs are kept; 0 means 30 days.
	Retention time.Duration
	Logger    *slog.Logger
	Metrics   *telemetry.Metrics
}

// maxListed bounds ReconcileResult.RepairedTickets.
const maxListed = 1000

// ReconcileTickets reads Zendesk's ticket event export from the saved
// start time and the ticket export from the saved cursor, page by page,
// and repairs what the webhooks missed: a public comment newer than the
// mirror knows, and a ticket missing from the mirror or older there than
// in Zendesk. Each page is applied, then its cursor saved, before the
// next is read: an error (a 429, a 5xx, a timeout, the worker's death)
// ends the pass keeping what it applied, and the next pass (or the
// activity's retry) goes on from there. Each repair records a ticket
// event (reconcile:{ticket}:...) that the relay hands to Temporal like a
// webhook's. A public comment by any end user is the customer's; staff's
// and supportflow's own are not. A comment the mirror lacks is
// supportflow's own only when supportflow wrote it (ownComments); a ticket
// change, when every update the mirror had not yet seen was made by its
// API user. Own changes are mirrored but start nothing. A ticket it cannot
// place is held (reconcile_held) and retried on later passes, even after a
// page failed; it never holds the cursor back.
func (r *Reconciler) ReconcileTickets(ctx context.Context, workflowID string) (supportflow.ReconcileResult, error) {
	interval := r.HeartbeatInterval
	if interval <= 0 {
		interval = 15 * time.Second
	}
	var progress reconcileProgress
	var res supportflow.ReconcileResult
	err := heartbeat.Run(ctx, interval, func() any {
		return map[string]int64{"requests": progress.requests.Load(), "rows": progress.rows.Load()}
	}, nil, func(ctx context.Context) error {
		var err error
		res, err = r.reconcile(ctx, workflowID, &progress)
		return err
	})
	return res, err
}

// reconcileProgress is what the heartbeat reports of a running pass.
type reconcileProgress struct {
	requests, rows atomic.Int64
}

// update is one ticket update the event export showed: when and by whom.
type update struct {
	at      int64 // Unix seconds
	updater int64
}

// pass is one reconciliation pass's state.
type pass struct {
	r        *Reconciler
	me       int64
	progress *reconcileProgress
	res      supportflow.ReconcileResult
	pace     *pacer
	budget   int
	cur      ExportCursor
	repaired map[int64]bool
	stepped  []int64
	givenUp  []int64
	// eventShare is how many requests the event export (and a crowded
	// second's listing) may use while the ticket export is not done.
	eventShare int
	// auditPace paces audit page requests; auditsLeft is ownChange's
	// allowance (reads), auditsSkipped how many changes it judged not own
	// once the allowance was spent.
	auditPace     *pacer
	auditsLeft    int
	auditsSkipped int
	// roles caches users' Zendesk roles for the pass.
	roles map[int64]string
	// updates are the ticket updates the event export showed this pass,
	// by ticket; evFrom and evTo bound the seconds they cover
	// ([evFrom, evTo)) but for the uncovered ones (a crowded second,
	// whose updates were read only as far as a page), so a ticket repair
	// knows whether they tell every update since the mirror's copy.
	updates      map[int64][]update
	evFrom, evTo int64
	uncovered    map[int64]bool
	seen         map[int64]bool
	eventReqs    int
	// eventsDone: the event export has nothing more for this pass;
	// eventsEnd: it was read to its end (end_of_stream).
	eventsDone, eventsEnd bool
	ticketsDone           bool
}

func (r *Reconciler) reconcile(ctx context.Context, workflowID string, progress *reconcileProgress) (supportflow.ReconcileResult, error) {
	me, err := r.Export.Me(ctx)
	if err != nil {
		r.Metrics.ReconcileRun("error")
		return supportflow.ReconcileResult{}, err
	}
	// One pass at a time per account, whoever started it (the schedule, an
	// operator): two would double the export rate and race on the cursor.
	release, ok, err := r.Store.TryLockReconcile(ctx)
	if err != nil {
		r.Metrics.ReconcileRun("error")
		return supportflow.ReconcileResult{}, err
	}
	if !ok {
		r.logger().Info("another reconciliation is running; this one does nothing")
		return supportflow.ReconcileResult{}, nil
	}
	defer release()
	budget := r.MaxRequests
	if budget <= 0 {
		budget = 20
	}
	// The pace must fit the attempt's deadline: at most ten minutes of
	// requests.
	budget = min(budget, max(1, 10*perMinute(r.RequestsPerMinute)))
	p := &pass{r: r, me: me, progress: progress, pace: newPacer(r.RequestsPerMinute), budget: budget,
		auditPace:  &pacer{every: time.Minute / time.Duration(cmp.Or(max(r.AuditsPerMinute, 0), 120))},
		auditsLeft: cmp.Or(max(r.AuditReadsPerPass, 0), 50),
		repaired:   map[int64]bool{}, roles: map[int64]string{}, updates: map[int64][]update{}, uncovered: map[int64]bool{}, seen: map[int64]bool{}}
	runErr := p.run(ctx)
	// Held tickets are retried even when a page failed (a 429 or a 5xx of
	// the exports says nothing about List Audits), with their own
	// allowance; not once the attempt's context is done.
	if ctx.Err() == nil {
		if err := p.retryHeld(ctx); err != nil && runErr == nil {
			runErr = err
		}
	}
	if p.auditsSkipped > 0 {
		r.logger().Info("reconciler's audit reads for this pass were spent; the changes it could not read are taken as not its own",
			"audit_reads", cmp.Or(max(r.AuditReadsPerPass, 0), 50), "changes_not_read", p.auditsSkipped)
	}

	// The run is recorded however it ended, on a context of its own: an
	// attempt that timed out still says how far it got.
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	lag, held, herr := r.Store.ReconcileHealth(rctx)
	if herr != nil && runErr == nil {
		runErr = herr
	}
	res := p.res
	res.CaughtUp = runErr == nil && p.eventsEnd && p.ticketsDone && held == 0
	ids := slices.Sorted(maps.Keys(p.repaired))
	res.Repaired = len(ids)
	res.RepairedTickets = ids[:min(len(ids), maxListed)]
	run := ReconcileRun{WorkflowID: workflowID, TicketsRead: res.TicketsRead, EventsRead: res.EventsRead, Requests: res.Requests,
		Repaired: ids, CaughtUp: res.CaughtUp, Lag: seconds(lag), Held: held, Stepped: p.stepped, GivenUp: p.givenUp}
	if runErr != nil {
		run.Error = runErr.Error()
	}
	if err := r.Store.RecordRun(rctx, run); err != nil && runErr == nil {
		runErr = err
	}
	result := "behind"
	switch {
	case runErr != nil:
		result = "error"
	case res.CaughtUp:
		result = "caught_up"
	}
	r.Metrics.ReconcileRun(result)
	r.logger().Info("reconciliation finished", "result", result, "tickets_read", res.TicketsRead, "events_read", res.EventsRead,
		"requests", res.Requests, "repaired", res.Repaired, "caught_up", res.CaughtUp, "lag_seconds", int64(lag),
		"held", held, "stepped_seconds", len(p.stepped), "given_up", len(p.givenUp), "error", errString(runErr))
	return res, runErr
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// run reads both exports page by page within the budget, the event
// export first (its updates tell the ticket repairs whose the changes
// were). Held tickets are retried after it (reconcile).
func (p *pass) run(ctx context.Context) error {
	r := p.r
	cur, err := r.Store.Cursor(ctx) // as the previous pass left it
	if err != nil {
		return err
	}
	if cur.EventsStart == 0 || (cur.Tickets == "" && cur.TicketsStart == 0) {
		// Cold start: both exports read from one start, saved before the
		// first read, so a cold start that fails resumes from the same
		// point and leaves no gap.
		start := r.BackfillFrom
		if start.IsZero() {
			start = time.Now().Add(-max(cmp.Or(r.Backfill, 24*time.Hour), 0))
		}
		// Zendesk refuses a start_time inside the most recent minute.
		if latest := time.Now().Add(-time.Minute - time.Second); start.After(latest) {
			start = latest
		}
		if cur.EventsStart == 0 {
			cur.EventsStart = start.Unix()
		}
		if cur.Tickets == "" && cur.TicketsStart == 0 {
			cur.TicketsStart = min(start.Unix(), cur.EventsStart)
		}
		if err := r.Store.SaveCursor(ctx, cur); err != nil {
			return err
		}
	}
	p.cur = cur
	p.evFrom, p.evTo = cur.EventsStart, cur.EventsStart
	if cur.CrowdedSecond != 0 {
		p.uncovered[cur.CrowdedSecond] = true
	}
	// Most of the budget goes to the event export first; the ticket export
	// gets the rest, then the event export any left over.
	p.eventShare = max(1, p.budget*3/4)
	for p.res.Requests < p.budget && !(p.eventsDone && p.ticketsDone) {
		if !p.eventsDone && (p.ticketsDone || p.eventReqs < p.eventShare) {
			if err := p.eventPage(ctx); err != nil {
				return err
			}
			continue
		}
		if err := p.ticketPage(ctx); err != nil {
			return err
		}
	}
	return nil
}

// request paces and counts one export request.
func (p *pass) request(ctx context.Context) error {
	if err := p.pace.wait(ctx); err != nil {
		return err
	}
	p.res.Requests++
	p.progress.requests.Add(1)
	return nil
}

// eventPage reads, applies and saves one page of the ticket event export;
// while a crowded second is being listed, it goes on with the listing
// instead.
func (p *pass) eventPage(ctx context.Context) error {
	r := p.r
	start := p.cur.EventsStart
	if p.cur.CrowdedSecond != 0 {
		if p.cur.CrowdedSecond == start {
			// A listing a previous pass (or this one) left unfinished: its
			// page was applied then; go on listing from where it got to.
			return p.stepCrowded(ctx, start)
		}
		// A marker the cursor has moved past: nothing to resume.
		p.cur.CrowdedSecond, p.cur.CrowdedCursor = 0, ""
	}
	asked := time.Now()
	if err := p.request(ctx); err != nil {
		return err
	}
	p.eventReqs++
	perPage := r.EventsPerPage
	page, err := r.Export.ExportTicketEvents(ctx, start, perPage)
	if err != nil {
		return err
	}
	stuck := !page.EndOfStream && page.EndTime <= start
	if stuck && perPage > 0 && perPage < zendeskclient.MaxExportPerPage && p.res.Requests < p.budget {
		// The second holds more events than the page we asked for: read it
		// again with the largest page Zendesk gives.
		asked = time.Now()
		if err := p.request(ctx); err != nil {
			return err
		}
		p.eventReqs++
		if page, err = r.Export.ExportTicketEvents(ctx, start, zendeskclient.MaxExportPerPage); err != nil {
			return err
		}
		stuck = !page.EndOfStream && page.EndTime <= start
	}
	if stuck {
		// Its updates were read only as far as the page: no ticket change
		// is judged own from them.
		p.uncovered[start] = true
	}
	if err := p.applyEvents(ctx, page); err != nil {
		return err
	}
	if stuck {
		// More events in one second than a page: asking again returns the
		// same page for ever. Zendesk's time-based exports page by whole
		// seconds and the event export has no cursor variant, so the
		// second is read to its end another way: every ticket the
		// cursor-based ticket export lists from that second is held and
		// placed from its audits (stepCrowded); then the export steps to
		// the next second.
		// https://developer.zendesk.com/documentation/ticketing/managing-tickets/using-the-incremental-export-api/#time-based-incremental-exports
		r.logger().Warn("the ticket event export has more events in one second than a page; its tickets are listed from the ticket export and placed from their audits",
			"second", start, "events_on_page", len(page.Events))
		p.cur.CrowdedSecond, p.cur.CrowdedCursor = start, ""
		if err := r.Store.SaveCursor(ctx, p.cur); err != nil {
			return err
		}
		return p.stepCrowded(ctx, start)
	}
	next := start
	if page.EndTime > start {
		next = page.EndTime
	}
	p.eventsDone = page.EndOfStream || page.EndTime <= 0
	if next > start {
		p.cur.EventsStart = next
		p.evTo = max(p.evTo, next)
		if err := r.Store.SaveCursor(ctx, p.cur); err != nil {
			return err
		}
	} else if !p.eventsDone {
		// Nothing moved and not the end: never ask for the same page again
		// in this pass.
		p.eventsDone = true
	}
	if page.EndOfStream {
		// Zendesk's end_time is the most recent time present in the result
		// set, so the cursor says nothing of how recent the read was; this
		// does (ReconcileHealth).
		// https://developer.zendesk.com/api-reference/ticketing/ticket-management/incremental_exports/#incremental-ticket-event-export
		p.eventsEnd = true
		p.evTo = max(p.evTo, asked.Add(-time.Minute).Unix())
		if err := r.Store.MarkCaughtUp(ctx, asked); err != nil {
			return err
		}
	}
	return nil
}

// stepCrowded goes on listing the crowded second sec and, once the
// listing has ended, steps the event export past it. A listing the
// requests run out in is saved where it got to; the event cursor stays on
// sec, so the next pass resumes the listing before reading any later
// second.
func (p *pass) stepCrowded(ctx context.Context, sec int64) error {
	r := p.r
	p.uncovered[sec] = true
	done, err := p.holdSecond(ctx, sec)
	if err != nil || !done {
		if err == nil {
			r.logger().Info("the requests ran out while listing the tickets of a crowded second; the next pass goes on from where the listing got to",
				"second", sec)
		}
		return err
	}
	p.cur.EventsStart, p.cur.CrowdedSecond, p.cur.CrowdedCursor = sec+1, 0, ""
	if err := r.Store.SaveCursor(ctx, p.cur); err != nil {
		return err
	}
	p.stepped = append(p.stepped, sec)
	r.logger().Warn("stepped the ticket event export past a crowded second; its tickets are held and placed from their audits", "second", sec)
	return nil
}

// holdSecond lists the cursor-based ticket export from the second sec
// (Unix), from where the listing got to (p.cur.CrowdedCursor), to its end,
// and holds every ticket it shows (since sec). Every one, not only those
// whose updated_at is sec: the export shows a ticket's latest change only,
// so a ticket changed in sec and again later is listed at its later time,
// and its audits read from sec show what it had in sec. The listing's
// position is saved after each page; done is false when the requests ran
// out before its end.
// https://developer.zendesk.com/api-reference/ticketing/ticket-management/incremental_exports/#incremental-ticket-export-cursor-based
func (p *pass) holdSecond(ctx context.Context, sec int64) (done bool, err error) {
	r := p.r
	for {
		if p.res.Requests >= p.budget || (p.eventReqs >= p.eventShare && !p.ticketsDone) {
			return false, nil
		}
		if err := p.request(ctx); err != nil {
			return false, err
		}
		p.eventReqs++
		page, err := r.Export.ExportTickets(ctx, p.cur.CrowdedCursor, time.Unix(sec, 0), 0)
		if err != nil {
			return false, err
		}
		for _, t := range page.Tickets {
			if t.UpdatedAt.Unix() >= sec {
				if err := r.Store.HoldTicket(ctx, t.ID, "crowded_second", time.Unix(sec, 0)); err != nil {
					return false, err
				}
			}
		}
		if page.EndOfStream || page.AfterCursor == "" || page.AfterCursor == p.cur.CrowdedCursor {
			return true, nil
		}
		p.cur.CrowdedCursor = page.AfterCursor
		if err := r.Store.SaveCursor(ctx, p.cur); err != nil {
			return false, err
		}
	}
}

// ticketChanges is what one event page says about one ticket.
type ticketChanges struct {
	comments []pageComment
}

type pageComment struct {
	author int64
	at     time.Time
}

// applyEvents applies a page of the event export: per ticket, its public
// comments newer than the mirror knows, placed by their authors' roles.
func (p *pass) applyEvents(ctx context.Context, page zendeskclient.EventPage) error {
	byTicket := map[int64]*ticketChanges{}
	var authors []int64
	for _, ev := range page.Events {
		if p.seen[ev.ID] || ev.TicketID <= 0 {
			continue // pages repeat the rows of their last second
		}
		p.seen[ev.ID] = true
		p.res.EventsRead++
		p.progress.rows.Add(1)
		tc := byTicket[ev.TicketID]
		if tc == nil {
			tc = &ticketChanges{}
			byTicket[ev.TicketID] = tc
		}
		p.updates[ev.TicketID] = append(p.updates[ev.TicketID], update{at: ev.Timestamp, updater: ev.UpdaterID})
		for _, c := range ev.ChildEvents {
			if !strings.EqualFold(c.EventType, "Comment") || c.Public == nil || !*c.Public {
				continue
			}
			at := c.CreatedAt
			if at.IsZero() {
				at = time.Unix(ev.Timestamp, 0)
			}
			tc.comments = append(tc.comments, pageComment{author: c.AuthorID, at: at.UTC()})
			authors = append(authors, c.AuthorID)
		}
	}
	lookupErr := p.learnRoles(ctx, authors)
	for _, id := range slices.Sorted(maps.Keys(byTicket)) {
		tc := byTicket[id]
		if len(tc.comments) == 0 {
			continue // the ticket export repairs its fields
		}
		if err := p.placeComments(ctx, id, tc.comments, p.updates[id], nil, lookupErr); err != nil {
			return err
		}
	}
	return nil
}

// learnRoles looks up the roles of the authors the pass does not know yet.
func (p *pass) learnRoles(ctx context.Context, authors []int64) error {
	var ask []int64
	for _, a := range authors {
		if a <= 0 || a == p.me {
			continue
		}
		if _, ok := p.roles[a]; !ok && !slices.Contains(ask, a) {
			ask = append(ask, a)
		}
	}
	if len(ask) == 0 {
		return nil
	}
	roles, err := p.r.Export.UserRoles(ctx, ask)
	if err != nil {
		return err
	}
	for _, a := range ask {
		// A user Zendesk does not return (deleted) is placed as an end
		// user: nobody unknown passes for staff.
		p.roles[a] = cmp.Or(roles[a], "end-user")
	}
	return nil
}

// Who wrote a comment.
const (
	byCustomer = iota
	byStaff
	bySystem
	byUnknown
)

// authorKind places a comment's author by the webhook's rule (Speaker),
// with is_staff read from the user's role: an end user (the requester, a
// CC, the customer writing from another address) is the customer; agents,
// admins and supportflow's own user are staff; a system actor (no user)
// is neither.
// https://developer.zendesk.com/api-reference/ticketing/users/users/ (role)
func (p *pass) authorKind(author int64) int {
	if author <= 0 {
		return bySystem
	}
	role, ok := p.roles[author]
	if !ok && author != p.me {
		return byUnknown
	}
	isStaff := role == "agent" || role == "admin"
	if Speaker(author, &isStaff, 0, p.me) == SpeakerCustomer {
		return byCustomer
	}
	return byStaff
}

// placeComments moves a ticket's comment times forward to what comments
// show and records the change as a ticket event when it is news; whose
// the news is, ownComments judges (audits, when set, instead of updates). A ticket
// whose authors cannot be placed is held.
func (p *pass) placeComments(ctx context.Context, ticketID int64, comments []pageComment, updates []update,
	audits []zendeskclient.TicketAudit, lookupErr error) error {
	r := p.r
	var customerAt, agentAt, oldest time.Time
	for _, c := range comments {
		switch p.authorKind(c.author) {
		case byUnknown:
			reason := "user lookup failed"
			if lookupErr != nil {
				reason += ": " + zendeskReason(lookupErr)
			}
			since := c.at
			for _, o := range comments {
				if o.at.Before(since) {
					since = o.at
				}
			}
			r.logger().Warn("reconciler held a ticket: a comment's author could not be placed", "ticket_id", ticketID, "reason", reason)
			return r.Store.HoldTicket(ctx, ticketID, reason, since)
		case byCustomer:
			if c.at.After(customerAt) {
				customerAt = c.at
			}
		case byStaff:
			if c.at.After(agentAt) {
				agentAt = c.at
			}
		}
		if oldest.IsZero() || c.at.Before(oldest) {
			oldest = c.at
		}
	}
	newest := customerAt
	if agentAt.After(newest) {
		newest = agentAt
	}
	if newest.IsZero() {
		return nil // system comments only
	}
	m, _, err := p.mirrorOf(ctx, ticketID)
	if err != nil {
		return err
	}
	if !customerAt.After(m.LastCustomerCommentAt) && !agentAt.After(m.LastAgentCommentAt) {
		return nil // the mirror knows them
	}
	own := p.ownComments(comments, m, updates, audits)
	rowFor := func(MirrorChange) row {
		return row{eventType: "reconcile.comment", source: SourceReconcile, kind: supportflow.TicketUpdated, at: newest, own: own}
	}
	// The event's ID carries both comment times the repair moves the
	// mirror to, not only the newest: a repair with a time the mirror
	// lacks is a new event even when its newest second is that of an
	// earlier repair (our reply and the customer's comment of one second,
	// read on different pages or passes).
	rec, err := r.recordIfNews(ctx, reconcileCommentEventID(ticketID, customerAt, agentAt), ticketID, m.RequesterID, rowFor, func(tx pgx.Tx) (MirrorChange, error) {
		return r.Store.AdvanceCommentsTx(ctx, tx, ticketID, customerAt, agentAt)
	}, func(mc MirrorChange) bool { return mc.CommentNews })
	if err != nil {
		return err
	}
	if rec.Mirror.CommentNews && !rec.Duplicate {
		p.repaired[ticketID] = true
		r.Metrics.Repair("comment")
		r.logger().Info("reconciler repaired who spoke last on a ticket", "ticket_id", ticketID,
			"customer_comment_at", customerAt, "agent_comment_at", agentAt, "own_write", own, "customer_activity", rec.Event.CustomerActivity)
	}
	return nil
}

// ownComments judges whether the comments the mirror lacks (news) are
// supportflow's own write. A news comment by anyone but supportflow's user
// makes them not its own: a customer's comment the mirror lacks is news for
// the ticket's workflows whatever came after it (the mirror may have seen a
// later own write of ours, whose webhook arrived while the customer's was
// lost). When every news comment is ours, they are our own if every update
// from the oldest news comment's second on was ours too (audits, when set,
// tell the updates instead of the event export's; without them, a second
// from the oldest on that was read only in part, p.uncovered, makes them
// not our own).
func (p *pass) ownComments(comments []pageComment, m TicketMirror, updates []update, audits []zendeskclient.TicketAudit) bool {
	var oldest time.Time
	for _, c := range comments {
		var news bool
		switch p.authorKind(c.author) {
		case byCustomer:
			news = c.at.After(m.LastCustomerCommentAt)
		case byStaff:
			news = c.at.After(m.LastAgentCommentAt)
		}
		if !news {
			continue
		}
		if c.author != p.me {
			return false
		}
		if oldest.IsZero() || c.at.Before(oldest) {
			oldest = c.at
		}
	}
	if oldest.IsZero() {
		return false
	}
	if audits != nil {
		updates = auditUpdates(audits, p.me)
	} else {
		for sec := range p.uncovered {
			if sec >= oldest.Unix() {
				// A crowded second read only as far as a page: an update
				// of someone else's there may be on the part not read.
				return false
			}
		}
	}
	n := 0
	for _, u := range updates {
		if u.at < oldest.Unix() {
			continue
		}
		if u.updater != p.me {
			return false
		}
		n++
	}
	return n > 0
}

// auditUpdates are a ticket's audits as updates: an audit that carries
// supportflow's action key is its own whoever Zendesk names.
func auditUpdates(audits []zendeskclient.TicketAudit, me int64) []update {
	us := make([]update, 0, len(audits))
	for _, a := range audits {
		updater := a.AuthorID
		if a.ActionKey != "" {
			updater = me
		}
		us = append(us, update{at: a.CreatedAt.Unix(), updater: updater})
	}
	return us
}

// mirrorOf reads a ticket's mirror and the updated_at of the copy it
// holds (zero when it holds none: not mirrored, or only comment times).
func (p *pass) mirrorOf(ctx context.Context, ticketID int64) (TicketMirror, time.Time, error) {
	m, err := p.r.Store.GetTicketMirror(ctx, ticketID)
	if errors.Is(err, supportflow.ErrNotFound) {
		return m, time.Time{}, nil
	}
	if err != nil {
		return m, time.Time{}, err
	}
	if m.Status == "" && m.Subject == "" && m.RequesterID == 0 {
		return m, time.Time{}, nil
	}
	return m, m.UpdatedAt, nil
}

// zendeskReason names a failed call without its body: the operation and
// the HTTP status.
func zendeskReason(err error) string {
	var ze *zendeskclient.Error
	if errors.As(err, &ze) {
		if ze.Status != 0 {
			return fmt.Sprintf("%s: HTTP %d", ze.Op, ze.Status)
		}
		return ze.Op + ": no answer"
	}
	return "error"
}

// unseen returns the updates after the mirror's copy (seen: its
// updated_at, zero when not mirrored) up to until (zero: no bound); when
// none is strictly after, those of seen's second (an update of the same
// second the mirror may not have seen).
func unseen(updates []update, seen, until time.Time) []update {
	var after, same []update
	for _, u := range updates {
		if !until.IsZero() && u.at > until.Unix() {
			continue
		}
		switch {
		case seen.IsZero() || u.at > seen.Unix():
			after = append(after, u)
		case u.at == seen.Unix():
			same = append(same, u)
		}
	}
	if len(after) > 0 {
		return after
	}
	return same
}

// ownByUpdates reports whether every update after the mirror's copy was
// made by supportflow's API user (false when there is none to tell).
func (p *pass) ownByUpdates(updates []update, seen, until time.Time) bool {
	us := unseen(updates, seen, until)
	if len(us) == 0 {
		return false
	}
	for _, u := range us {
		if u.updater != p.me {
			return false
		}
	}
	return true
}

// ownByAudits is ownByUpdates over a ticket's audits, where an audit that
// carries supportflow's action key is its own whoever Zendesk names.
func (p *pass) ownByAudits(audits []zendeskclient.TicketAudit, seen, until time.Time) bool {
	return p.ownByUpdates(auditUpdates(audits, p.me), seen, until)
}

// ticketPage reads, applies and saves one page of the ticket export.
func (p *pass) ticketPage(ctx context.Context) error {
	r := p.r
	if err := p.request(ctx); err != nil {
		return err
	}
	page, err := r.Export.ExportTickets(ctx, p.cur.Tickets, time.Unix(p.cur.TicketsStart, 0), 0)
	if err != nil {
		return err
	}
	tickets := map[int64]zendeskclient.ExportedTicket{}
	for _, t := range page.Tickets {
		if old, ok := tickets[t.ID]; !ok || !t.UpdatedAt.Before(old.UpdatedAt) {
			tickets[t.ID] = t
		}
	}
	p.res.TicketsRead += len(page.Tickets)
	p.progress.rows.Add(int64(len(page.Tickets)))
	for _, id := range slices.Sorted(maps.Keys(tickets)) {
		if err := p.repairTicket(ctx, tickets[id]); err != nil {
			return err
		}
	}
	if page.AfterCursor != "" && page.AfterCursor != p.cur.Tickets {
		p.cur.Tickets = page.AfterCursor
		if err := r.Store.SaveCursor(ctx, p.cur); err != nil {
			return err
		}
	}
	p.ticketsDone = page.EndOfStream
	return nil
}

// repairTicket mirrors an exported ticket; news (a ticket the mirror
// lacks or holds older) is recorded as a ticket event, supportflow's own
// when every update since the mirror's copy was its own.
func (p *pass) repairTicket(ctx context.Context, t zendeskclient.ExportedTicket) error {
	r := p.r
	m := TicketMirror{TicketID: t.ID, Subject: t.Subject, Status: strings.ToLower(t.Status), RequesterID: t.RequesterID, UpdatedAt: t.UpdatedAt}
	prev, seen, err := p.mirrorOf(ctx, t.ID)
	if err != nil {
		return err
	}
	if !seen.IsZero() && prev.UpdatedAt.After(t.UpdatedAt) {
		return nil // the mirror is newer
	}
	news := seen.IsZero() || t.UpdatedAt.After(prev.UpdatedAt) || m.Status != prev.Status || m.Subject != prev.Subject ||
		(m.RequesterID != 0 && m.RequesterID != prev.RequesterID)
	own := false
	if news {
		own = p.ownChange(ctx, t, seen)
	}
	rowFor := func(mc MirrorChange) row {
		// A ticket new to the mirror and barely touched since it was
		// created is a new ticket to its enrichment.
		if mc.Created && t.UpdatedAt.Sub(t.CreatedAt) < time.Minute {
			return row{eventType: "reconcile.ticket", source: SourceReconcile, kind: supportflow.TicketCreated, at: t.CreatedAt, own: own}
		}
		return row{eventType: "reconcile.ticket", source: SourceReconcile, kind: supportflow.TicketUpdated, at: t.UpdatedAt, own: own}
	}
	rec, err := r.recordIfNews(ctx, reconcileEventID(t.ID, "ticket", t.UpdatedAt), t.ID, t.RequesterID, rowFor, func(tx pgx.Tx) (MirrorChange, error) {
		mc, err := r.Store.ApplyTicketMirrorTx(ctx, tx, m)
		mc.CustomerNews = false // comments are the event export's to judge
		return mc, err
	}, func(mc MirrorChange) bool { return mc.Changed })
	if err != nil {
		return err
	}
	if rec.Mirror.Changed && !rec.Duplicate {
		p.repaired[t.ID] = true
		r.Metrics.Repair("ticket")
		r.logger().Info("reconciler repaired a ticket a webhook missed", "ticket_id", t.ID, "updated_at", t.UpdatedAt,
			"created", rec.Mirror.Created, "own_write", own, "dispatched", rec.Dispatch)
	}
	return nil
}

// ownChange judges whether the changes of t after seen (the mirror's
// updated_at, zero when not mirrored) were all supportflow's: from the
// updates this pass read from the event export when they cover that
// stretch, else from the ticket's audits (updater, or our action key). A
// change nobody can judge is not our own: the worst it costs is a lookup.
// Audit reads are paced page by page and bounded per pass
// (AuditReadsPerPass reads of at most ownAuditPages pages: a ticket with
// more audits since the mirror's copy is judged not our own); once the
// allowance is spent, a change is judged not our own rather than held:
// a possible extra lookup is the cheap failure, a held ticket would wait
// for a later pass and keep the run from catching up.
func (p *pass) ownChange(ctx context.Context, t zendeskclient.ExportedTicket, seen time.Time) bool {
	from := seen
	if from.IsZero() {
		from = t.CreatedAt
	}
	covered := from.Unix() >= p.evFrom && t.UpdatedAt.Unix() < p.evTo
	for sec := range p.uncovered {
		if sec >= from.Unix() && sec <= t.UpdatedAt.Unix() {
			covered = false // a crowded second: its updates were read only in part
		}
	}
	if covered && len(unseen(p.updates[t.ID], seen, t.UpdatedAt)) > 0 {
		return p.ownByUpdates(p.updates[t.ID], seen, t.UpdatedAt)
	}
	if p.auditsLeft <= 0 {
		p.auditsSkipped++ // logged once, at the pass's end
		return false
	}
	p.auditsLeft--
	audits, err := p.r.Export.TicketAuditsPaced(ctx, t.ID, seen, ownAuditPages, p.auditPace.wait)
	if err != nil {
		if ctx.Err() == nil {
			p.r.logger().Warn("reconciler could not read a ticket's audits to tell whose its change was; taken as not its own",
				"ticket_id", t.ID, "error", zendeskReason(err), "too_many_audits", errors.Is(err, zendeskclient.ErrTooManyAudits))
		}
		return false
	}
	return p.ownByAudits(audits, seen, t.UpdatedAt)
}

// A held ticket is let go without being placed after this many attempts
// or this long: it is logged and recorded in reconcile_run.given_up.
const (
	maxHeldAttempts = 50
	maxHeldAge      = 7 * 24 * time.Hour
)

// ownAuditPages bounds the audit pages ownChange reads for one ticket (100
// audits a page): a change after that many updates is judged not our own.
const ownAuditPages = 3

// heldAllowance is how many held tickets a pass retries: MaxHeldPerRun (0
// means 50), raised to a twelfth of the held (a backlog drains in about an
// hour of 5-minute passes), but to no more than two minutes of the audit
// pace.
func (r *Reconciler) heldAllowance(held int) int {
	floor := cmp.Or(max(r.MaxHeldPerRun, 0), 50)
	ceiling := max(floor, 2*cmp.Or(max(r.AuditsPerMinute, 0), 120))
	return min(max(floor, held/12), ceiling)
}

// retryHeld places held tickets from their audits: who wrote each public
// comment since the hold, and whose the changes were. A ticket placed is
// released; one that still cannot be placed stays held, until it has been
// tried maxHeldAttempts times or held for maxHeldAge. A ticket Zendesk
// answers 404 or 410 for (deleted) is released, and one with more audits
// since the hold than a read takes is given up at once: asking again
// would only find more. At most heldAllowance tickets are tried a pass
// (one audit read each, every page paced like ownChange's).
func (p *pass) retryHeld(ctx context.Context) error {
	r := p.r
	_, n, err := r.Store.ReconcileHealth(ctx)
	if err != nil {
		return err
	}
	held, err := r.Store.HeldTickets(ctx, r.heldAllowance(n))
	if err != nil {
		return err
	}
	for _, h := range held {
		exhausted := h.Attempts+1 >= maxHeldAttempts || time.Since(h.FirstSeen) > maxHeldAge
		audits, err := r.Export.TicketAuditsPaced(ctx, h.TicketID, h.Since, 0, p.auditPace.wait)
		if err != nil {
			var ze *zendeskclient.Error
			switch {
			case ctx.Err() != nil:
				return err
			case errors.As(err, &ze) && (ze.Status == http.StatusNotFound || ze.Status == http.StatusGone):
				if err := p.giveUp(ctx, h, "the ticket is gone from Zendesk: "+zendeskReason(err)); err != nil {
					return err
				}
			case errors.Is(err, zendeskclient.ErrTooManyAudits):
				if err := p.giveUp(ctx, h, "more audits since the hold than a read takes"); err != nil {
					return err
				}
			case exhausted:
				if err := p.giveUp(ctx, h, "audits unreadable: "+zendeskReason(err)); err != nil {
					return err
				}
			default:
				if err := r.Store.HoldTicket(ctx, h.TicketID, "audits unreadable: "+zendeskReason(err), h.Since); err != nil {
					return err
				}
			}
			continue
		}
		var comments []pageComment
		var authors []int64
		for _, a := range audits {
			for _, c := range a.Comments {
				if c.Public {
					comments = append(comments, pageComment{author: c.AuthorID, at: a.CreatedAt.UTC()})
					authors = append(authors, c.AuthorID)
				}
			}
		}
		lookupErr := p.learnRoles(ctx, authors)
		placed := true
		for _, c := range comments {
			if p.authorKind(c.author) == byUnknown {
				placed = false
			}
		}
		if err := p.placeComments(ctx, h.TicketID, comments, nil, audits, lookupErr); err != nil {
			return err
		}
		switch {
		case placed:
			if err := r.Store.ReleaseHeld(ctx, h.TicketID, h.Attempts); err != nil {
				return err
			}
			r.logger().Info("reconciler placed a held ticket", "ticket_id", h.TicketID, "held_for", time.Since(h.FirstSeen).Round(time.Second))
		case exhausted:
			if err := p.giveUp(ctx, h, "a comment's author could not be placed"); err != nil {
				return err
			}
		}
	}
	return nil
}

// giveUp lets a held ticket go unplaced, logs why and records it in the
// run.
func (p *pass) giveUp(ctx context.Context, h HeldTicket, why string) error {
	if err := p.r.Store.DropHeld(ctx, h.TicketID); err != nil {
		return err
	}
	p.givenUp = append(p.givenUp, h.TicketID)
	p.r.logger().Warn("reconciler let a held ticket go without placing it", "ticket_id", h.TicketID, "reason", why,
		"attempts", h.Attempts, "held_for", time.Since(h.FirstSeen).Round(time.Second))
	return nil
}

// PruneTicketEvents deletes finished ticket events and reconciliation runs
// older than the retention (PruneRetention runs it daily).
func (r *Reconciler) PruneTicketEvents(ctx context.Context) (map[string]int64, error) {
	keep := r.Retention
	if keep <= 0 {
		keep = 30 * 24 * time.Hour
	}
	return r.Store.Prune(ctx, time.Now().Add(-keep))
}

// recordIfNews applies a mirror change and, when news says it was news,
// records its ticket event (eventID) in the same transaction; otherwise the
// transaction is rolled back and no event is recorded.
func (r *Reconciler) recordIfNews(ctx context.Context, eventID string, ticketID, requesterID int64, rowFor func(MirrorChange) row,
	mirror func(pgx.Tx) (MirrorChange, error), news func(MirrorChange) bool) (Recorded, error) {
	var change MirrorChange
	rec, err := r.Store.record(ctx, eventID, rowFor, func(tx pgx.Tx) (MirrorChange, error) {
		mc, err := mirror(tx)
		change = mc
		if err == nil && !news(mc) {
			return mc, errNotNews
		}
		return mc, err
	}, ticketID, requesterID)
	if errors.Is(err, errNotNews) {
		// Nothing new: commit nothing either (the write would only repeat
		// what the mirror holds).
		return Recorded{Mirror: change}, nil
	}
	if err != nil {
		return rec, fmt.Errorf("ingest: reconcile ticket %d: %w", ticketID, err)
	}
	return rec, nil
}

var errNotNews = errors.New("not news")

func (r *Reconciler) logger() *slog.Logger {
	if r.Logger == nil {
		return slog.Default()
	}
	return r.Logger
}

// pacer spaces requests evenly so a run never exceeds the rate.
type pacer struct {
	every time.Duration
	next  time.Time
}

func newPacer(rpm int) *pacer {
	return &pacer{every: time.Minute / time.Duration(perMinute(rpm))}
}

// perMinute is the configured pace; 0 means Zendesk's 10.
func perMinute(rpm int) int {
	if rpm <= 0 {
		return 10
	}
	return rpm
}

func (p *pacer) wait(ctx context.Context) error {
	if d := time.Until(p.next); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	p.next = time.Now().Add(p.every)
	return nil
}
