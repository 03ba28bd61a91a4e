package ingest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
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
	ExportTicketEvents(ctx context.Context, start int64) (zendeskclient.EventPage, error)
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

// ReconcileTickets reads the ticket export from the saved cursor and the
// ticket event export from the saved start time, then, ticket by ticket
// under the mirror's lock, repairs what the webhooks missed: a ticket
// missing from the mirror or older there than in Zendesk, and a public
// comment newer than the mirror knows. Each repair records a ticket event
// (reconcile:{ticket}:...) that the relay hands to Temporal like a
// webhook's, so a customer comment a webhook lost still supersedes a
// stale draft and gets a lookup, and the scan drafts from a mirror that is
// whole again. Changes made by supportflow's own API user are mirrored
// but start nothing. The cursors are saved after their rows are applied:
// a crash re-reads, and re-reading repairs nothing twice.
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

func (r *Reconciler) reconcile(ctx context.Context, workflowID string, progress *reconcileProgress) (supportflow.ReconcileResult, error) {
	var res supportflow.ReconcileResult
	start := r.BackfillFrom
	if start.IsZero() {
		start = time.Now().Add(-max(cmp.Or(r.Backfill, 24*time.Hour), 0))
	}
	// Zendesk refuses a start_time inside the most recent minute.
	if latest := time.Now().Add(-time.Minute - time.Second); start.After(latest) {
		start = latest
	}
	pace := newPacer(r.RequestsPerMinute)
	budget := r.MaxRequests
	if budget <= 0 {
		budget = 20
	}
	// The pace must fit the attempt's deadline: at most ten minutes of
	// requests.
	budget = min(budget, max(1, 10*perMinute(r.RequestsPerMinute)))
	me, err := r.Export.Me(ctx)
	if err != nil {
		return res, err
	}
	// One pass at a time per account, whoever started it (the schedule, an
	// operator): two would double the export rate and race on the cursor.
	release, ok, err := r.Store.TryLockReconcile(ctx)
	if err != nil {
		return res, err
	}
	if !ok {
		r.logger().Info("another reconciliation is running; this one does nothing")
		return res, nil
	}
	defer release()
	cur, err := r.Store.Cursor(ctx) // as the previous pass left it
	if err != nil {
		return res, err
	}
	if cur.EventsStart == 0 {
		// Cold start: both exports read from the same start, saved now, so
		// a pass cut short leaves no gap between them.
		cur.EventsStart = start.Unix()
		if err := r.Store.SaveCursor(ctx, cur); err != nil {
			return res, err
		}
	}

	// Read both exports first: who made a ticket's changes (the event
	// export) decides whether its repair is our own write.
	tickets := map[int64]zendeskclient.ExportedTicket{}
	ticketsDone := false
	for !ticketsDone && res.Requests < budget {
		if err := pace.wait(ctx); err != nil {
			return res, err
		}
		page, err := r.Export.ExportTickets(ctx, cur.Tickets, start, 0)
		res.Requests++
		progress.requests.Add(1)
		if err != nil {
			return res, err
		}
		for _, t := range page.Tickets {
			if old, ok := tickets[t.ID]; !ok || !t.UpdatedAt.Before(old.UpdatedAt) {
				tickets[t.ID] = t
			}
		}
		res.TicketsRead += len(page.Tickets)
		progress.rows.Add(int64(len(page.Tickets)))
		if page.AfterCursor != "" {
			cur.Tickets = page.AfterCursor
		}
		ticketsDone = page.EndOfStream
	}
	acts := map[int64]*activityOf{}
	eventsStart := cur.EventsStart
	eventsDone := false
	seen := map[int64]bool{}
	for ticketsDone && !eventsDone && res.Requests < budget {
		if err := pace.wait(ctx); err != nil {
			return res, err
		}
		page, err := r.Export.ExportTicketEvents(ctx, eventsStart)
		res.Requests++
		progress.requests.Add(1)
		if err != nil {
			return res, err
		}
		for _, ev := range page.Events {
			if seen[ev.ID] || ev.TicketID <= 0 {
				continue // pages may repeat the rows of their last second
			}
			seen[ev.ID] = true
			res.EventsRead++
			progress.rows.Add(1)
			a := acts[ev.TicketID]
			if a == nil {
				a = &activityOf{ownOnly: true}
				acts[ev.TicketID] = a
			}
			a.add(ev, me)
		}
		if page.EndTime <= eventsStart && !page.EndOfStream {
			// Zendesk returns every event of a page's last second, so
			// end_time always moves; if it does not, stop rather than spend
			// the budget on the same page.
			r.logger().Warn("the ticket event export did not move past its start time", "start_time", eventsStart)
			break
		}
		if page.EndTime > eventsStart {
			eventsStart = page.EndTime
		}
		eventsDone = page.EndOfStream || page.EndTime <= 0
	}

	repaired := map[int64]bool{}
	for _, id := range slices.Sorted(maps.Keys(tickets)) {
		t := tickets[id]
		a := acts[id]
		own := a != nil && a.ownOnly && a.updates > 0
		rec, err := r.repairTicket(ctx, t, own)
		if err != nil {
			return res, err
		}
		if rec.Mirror.Changed && !rec.Duplicate {
			repaired[id] = true
			r.Metrics.Repair("ticket")
			r.logger().Info("reconciler repaired a ticket a webhook missed", "ticket_id", id, "updated_at", t.UpdatedAt,
				"created", rec.Mirror.Created, "own_write", own, "dispatched", rec.Dispatch)
		}
	}
	if err := r.Store.SaveCursor(ctx, ExportCursor{Tickets: cur.Tickets, EventsStart: cur.EventsStart}); err != nil {
		return res, err
	}
	heldBack := false
	for _, id := range slices.Sorted(maps.Keys(acts)) {
		a := acts[id]
		if len(a.authors) == 0 {
			continue // no public comment in this stretch
		}
		rec, err := r.repairComments(ctx, id, a)
		if errors.Is(err, errRequesterUnknown) {
			heldBack = true
			continue
		}
		if err != nil {
			return res, err
		}
		if rec.Mirror.CommentNews && !rec.Duplicate {
			repaired[id] = true
			r.Metrics.Repair("comment")
			r.logger().Info("reconciler repaired who spoke last on a ticket", "ticket_id", id,
				"customer_comment_at", a.customerAt, "agent_comment_at", a.agentAt, "customer_activity", rec.Event.CustomerActivity)
		}
	}
	if ticketsDone && !heldBack {
		if err := r.Store.SaveCursor(ctx, ExportCursor{Tickets: cur.Tickets, EventsStart: eventsStart}); err != nil {
			return res, err
		}
	}
	res.CaughtUp = ticketsDone && eventsDone && !heldBack
	ids := slices.Sorted(maps.Keys(repaired))
	res.Repaired = len(ids)
	res.RepairedTickets = ids[:min(len(ids), maxListed)]
	if err := r.Store.RecordRun(ctx, workflowID, res.TicketsRead, res.EventsRead, ids); err != nil {
		return res, err
	}
	r.logger().Info("reconciliation finished", "tickets_read", res.TicketsRead, "events_read", res.EventsRead,
		"requests", res.Requests, "repaired", res.Repaired, "caught_up", res.CaughtUp)
	return res, nil
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

// activityOf is what the event export says about one ticket.
type activityOf struct {
	updates int
	// ownOnly is true while every update was made by supportflow's user.
	ownOnly    bool
	customerAt time.Time // newest public comment by the requester
	agentAt    time.Time // newest public comment by anyone else
	authors    map[int64]time.Time
}

func (a *activityOf) add(ev zendeskclient.TicketEventRow, me int64) {
	a.updates++
	if ev.UpdaterID != me {
		a.ownOnly = false
	}
	for _, c := range ev.ChildEvents {
		if !strings.EqualFold(c.EventType, "Comment") || c.Public == nil || !*c.Public || c.CreatedAt.IsZero() {
			continue
		}
		if a.authors == nil {
			a.authors = map[int64]time.Time{}
		}
		if c.CreatedAt.After(a.authors[c.AuthorID]) {
			a.authors[c.AuthorID] = c.CreatedAt
		}
	}
}

// repairTicket mirrors an exported ticket; news (a ticket the mirror
// lacks or holds older) is recorded as a ticket event.
func (r *Reconciler) repairTicket(ctx context.Context, t zendeskclient.ExportedTicket, own bool) (Recorded, error) {
	m := TicketMirror{TicketID: t.ID, Subject: t.Subject, Status: strings.ToLower(t.Status), RequesterID: t.RequesterID, UpdatedAt: t.UpdatedAt}
	rowFor := func(mc MirrorChange) row {
		// A ticket new to the mirror and barely touched since it was
		// created is a new ticket to its enrichment.
		if mc.Created && t.UpdatedAt.Sub(t.CreatedAt) < time.Minute {
			return row{eventType: "reconcile.ticket", source: SourceReconcile, kind: supportflow.TicketCreated, at: t.CreatedAt, own: own}
		}
		return row{eventType: "reconcile.ticket", source: SourceReconcile, kind: supportflow.TicketUpdated, at: t.UpdatedAt, own: own}
	}
	return r.recordIfNews(ctx, reconcileEventID(t.ID, "ticket", t.UpdatedAt), t.ID, t.RequesterID, rowFor, func(tx pgx.Tx) (MirrorChange, error) {
		mc, err := r.Store.ApplyTicketMirrorTx(ctx, tx, m)
		mc.CustomerNews = false // comments are the event export's to judge
		return mc, err
	}, func(mc MirrorChange) bool { return mc.Changed })
}

// repairComments moves the mirror's comment times forward to what the
// event export shows; a newer customer comment is customer activity.
func (r *Reconciler) repairComments(ctx context.Context, ticketID int64, a *activityOf) (Recorded, error) {
	var requester int64
	if m, err := r.Store.GetTicketMirror(ctx, ticketID); err == nil {
		requester = m.RequesterID
	}
	if requester == 0 {
		// Without the requester nobody can tell the customer's comment from
		// an agent's; the ticket export brings it (then the next pass, which
		// reads these events again from the saved start, repairs this).
		r.logger().Warn("reconciler skipped a ticket's comments: its requester is not known yet", "ticket_id", ticketID)
		return Recorded{}, errRequesterUnknown
	}
	a.customerAt, a.agentAt = time.Time{}, time.Time{}
	for author, at := range a.authors {
		if author != 0 && author == requester {
			a.customerAt = at
		} else if at.After(a.agentAt) {
			a.agentAt = at
		}
	}
	newest := a.customerAt
	if a.agentAt.After(newest) {
		newest = a.agentAt
	}
	if newest.IsZero() {
		return Recorded{}, nil
	}
	own := a.ownOnly
	rowFor := func(MirrorChange) row {
		return row{eventType: "reconcile.comment", source: SourceReconcile, kind: supportflow.TicketUpdated, at: newest, own: own}
	}
	return r.recordIfNews(ctx, reconcileEventID(ticketID, "comment", newest), ticketID, requester, rowFor, func(tx pgx.Tx) (MirrorChange, error) {
		return r.Store.AdvanceCommentsTx(ctx, tx, ticketID, a.customerAt, a.agentAt)
	}, func(mc MirrorChange) bool { return mc.CommentNews })
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

// errRequesterUnknown holds the event export's start back for a pass.
var errRequesterUnknown = errors.New("requester unknown")

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
