package workflows

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/policy"
)

// lookupsPerRun bounds an enrichment run's history: after this many
// lookups it continues as new, carrying its pending events.
const lookupsPerRun = 25

// EnrichTicket keeps one ticket's customer data fresh. Its ID is
// EnrichWorkflowID(ticket); the starter feeds it ticket events by
// signal-with-start, so every event of a ticket reaches the same run.
//
// A lookup runs no earlier than EnrichNewTicketDelay (10 min) after a new
// ticket, or EnrichUpdateDelay (2 min) after activity on an existing one.
// Events that arrive while it waits merge into that one lookup, the wait
// recomputed from the newest event, but never more than another
// EnrichNewTicketDelay past the oldest pending event's due time; events
// that arrive during a lookup cause one more lookup after it. With nothing pending, the run ends
// (enriched); the next event starts a new run. After lookupsPerRun lookups
// it continues as new, so history stays bounded.
//
// LookupCustomer retries under the one policy (5 attempts). When the last
// attempt fails, the ticket is dead-lettered (a row with its attempts, last
// error and reason) and the run ends in state dead_letter; a redrive event
// (starter.RedriveEnrichment) looks it up again at once.
//
// In live mode (EnrichmentMode, fixed per lookup through a side effect so
// a configuration change never breaks replay) a found customer is also put
// on the ticket as a private note, through PostReply and the action ledger
// (key enrich-{runID}:0), so each lookup's note is posted once.
func (w *Workflows) EnrichTicket(ctx workflow.Context, req supportflow.EnrichRequest) (supportflow.EnrichmentStatus, error) {
	st := supportflow.EnrichmentStatus{TicketID: req.TicketID, State: supportflow.EnrichWaiting, Lookups: req.Lookups}
	if err := workflow.SetQueryHandler(ctx, supportflow.EnrichmentQuery, func() (supportflow.EnrichmentStatus, error) {
		return st, nil
	}); err != nil {
		return st, err
	}
	if err := supportflow.ValidateTicketID(req.TicketID); err != nil {
		setDetails(ctx, "invalid input")
		return st, policy.AppError(err.Error(), supportflow.ErrTypeInvalidInput, err)
	}
	// The delays are read once per run and recorded in history (a side
	// effect), so a configuration change never makes a replay take a
	// different path than the run did.
	d := w.durations()
	var delays enrichDelays
	if err := workflow.SideEffect(ctx, func(workflow.Context) any {
		return enrichDelays{NewTicket: d.EnrichNewTicketDelay, Update: d.EnrichUpdateDelay}
	}).Get(&delays); err != nil {
		return st, err
	}
	// failedWith classifies the last lookup's failure (errorKind).
	var failedWith string
	// describe sets the run's current details, which the Web UI shows:
	// "ticket 123 · waiting · 2 events pending · next lookup at … · 1 lookup".
	describe := func() {
		state := stateWords(enrichStateWords, st.State)
		var pending, found string
		switch st.State {
		case supportflow.EnrichWaiting:
			if st.Merged > 0 {
				pending = plural(st.Merged, "event") + " pending" + detailSep + "next lookup at " + st.NextLookupAt.UTC().Format(time.RFC3339)
			}
		case supportflow.EnrichDeadLetter:
			if failedWith != "" {
				state += " (" + failedWith + ")"
			}
		case supportflow.EnrichEnriched:
			found = "no customer found"
			if st.Found {
				found = "customer found"
			}
		}
		setDetails(ctx, ticketPart(req.TicketID), state, pending, found, plural(st.Lookups, "lookup"))
	}
	setState := func(s string) {
		st.State = s
		_ = workflow.UpsertTypedSearchAttributes(ctx, stateKey.ValueSet(s), ticketKey.ValueSet(strconv.FormatInt(req.TicketID, 10)))
		describe()
	}
	events := req.Pending
	ch := workflow.GetSignalChannel(ctx, supportflow.TicketEventSignal)
	receive := func(ev supportflow.TicketEvent) {
		now := workflow.Now(ctx)
		if ev.At.IsZero() || ev.At.After(now) {
			ev.At = now
		}
		if ev.Validate() != nil || ev.TicketID != req.TicketID {
			workflow.GetLogger(ctx).Warn("ignoring a malformed ticket event", "event", ev)
			return
		}
		events = append(events, ev)
	}
	drain := func() {
		var ev supportflow.TicketEvent
		for ch.ReceiveAsync(&ev) {
			receive(ev)
			ev = supportflow.TicketEvent{}
		}
	}
	// continueAsNew ends the run, carrying every event not yet looked up
	// into the next one: first it drains the signal channel, so an event
	// buffered at this moment (delivered in the same workflow task, or
	// while a selector took only the first of several) is carried, not
	// dropped with the run. Draining reads only what history already holds,
	// so it adds no command and replays unchanged.
	continueAsNew := func() error {
		drain()
		return workflow.NewContinueAsNewError(ctx, supportflow.EnrichTicketWorkflow, supportflow.EnrichRequest{
			TicketID: req.TicketID, Pending: events, Lookups: st.Lookups,
		})
	}
	runLookups := 0
	for {
		drain()
		if len(events) == 0 {
			if st.State != supportflow.EnrichDeadLetter {
				setState(supportflow.EnrichEnriched)
			}
			return st, nil
		}
		if runLookups >= lookupsPerRun {
			return st, continueAsNew()
		}
		// Wait until the newest event's delay has passed, merging events
		// that arrive meanwhile; a ticket that never goes quiet is looked
		// up no later than maxDefer after its oldest pending event's due
		// time. A long wait with many events continues as new when Temporal
		// suggests it, carrying the events.
		setState(supportflow.EnrichWaiting)
		for {
			if workflow.GetInfo(ctx).GetContinueAsNewSuggested() {
				return st, continueAsNew()
			}
			due := dueAt(events, delays)
			st.NextLookupAt, st.Merged = due, len(events)
			describe()
			wait := due.Sub(workflow.Now(ctx))
			if wait <= 0 {
				break
			}
			tctx, cancel := workflow.WithCancel(ctx)
			fired := false
			sel := workflow.NewSelector(ctx)
			sel.AddFuture(workflow.NewTimer(tctx, wait), func(workflow.Future) { fired = true })
			sel.AddReceive(ch, func(c workflow.ReceiveChannel, _ bool) {
				var ev supportflow.TicketEvent
				c.Receive(ctx, &ev)
				receive(ev)
			})
			sel.Select(ctx)
			cancel()
			if fired {
				break
			}
		}
		in := supportflow.LookupInput{TicketID: req.TicketID}
		for _, ev := range events {
			if ev.RequesterID != 0 {
				in.RequesterID = ev.RequesterID
			}
			in.Redrive = in.Redrive || ev.Kind == supportflow.TicketRedrive
		}
		events = nil
		setState(supportflow.EnrichLookingUp)
		var out supportflow.LookupOutput
		lctx := w.activityOptions(ctx, policy.KindBigQuery, d.LookupAttemptTimeout, true, onTicket("BigQuery lookup", req.TicketID))
		err := call(lctx, supportflow.LookupCustomer, in).Get(ctx, &out)
		runLookups++
		st.Lookups++
		if err != nil {
			st.Error, failedWith = errorMessage(err), errorKind(err)
			attempts := int(policy.Budgets[policy.KindBigQuery])
			reason := fmt.Sprintf("the lookup failed %d attempts", attempts)
			var app *temporal.ApplicationError
			if errors.As(err, &app) && app.NonRetryable() {
				attempts, reason = 1, "the lookup cannot succeed as it stands ("+app.Type()+"); not retried"
			}
			dl := supportflow.DeadLetterInput{TicketID: req.TicketID, RequesterID: in.RequesterID, Attempts: attempts, LastError: st.Error, Reason: reason}
			dctx := w.activityOptions(ctx, policy.KindLedger, d.Lease, false, fmt.Sprintf("dead-letter ticket %d", req.TicketID))
			if derr := call(dctx, supportflow.DeadLetterTicket, dl).Get(ctx, nil); derr != nil {
				return st, derr
			}
			setState(supportflow.EnrichDeadLetter)
			continue // events that arrived meanwhile still get their lookup
		}
		st.Error, st.Found, failedWith = "", out.Found, ""
		// Live mode notes each distinct content of a ticket's enrichment
		// once: the note's ledger key is derived from the content, so a
		// lookup that found what the last one found (our own note's echo, a
		// busy ticket) writes nothing, a note that failed is tried again by
		// the next lookup, and a ticket enriched in shadow mode is noted on
		// its first live lookup. Histories from before note every lookup.
		if out.Found && w.mode(ctx) == supportflow.EnrichmentLive {
			key := noteKey(out.RunID)
			if workflow.GetVersion(ctx, versionNoteOnChange, workflow.DefaultVersion, 1) == 1 {
				key = contentNoteKey(req.TicketID, out.Customer)
			}
			if err := w.noteEnrichment(ctx, d, req.TicketID, key, out); err != nil {
				st.Error = "the lookup was recorded, but its note on the ticket failed: " + errorMessage(err)
				if workflow.GetVersion(ctx, versionSettleFailedNote, workflow.DefaultVersion, 1) == 1 {
					// The note's ledger row must not stay 'applying'.
					settle := supportflow.SettleInput{Key: key, TicketID: req.TicketID, Error: st.Error}
					sctx := w.activityOptions(ctx, policy.KindLedger, d.Lease, false, onTicket("settle enrichment note", req.TicketID))
					if serr := call(sctx, supportflow.SettleAction, settle).Get(ctx, nil); serr != nil {
						return st, serr
					}
				}
			}
		}
	}
}

// noteKey is the ledger key of a lookup's live note (before
// versionNoteOnChange: one note per lookup).
func noteKey(runID int64) string {
	return supportflow.ActionKey("enrich-"+strconv.FormatInt(runID, 10), 0)
}

// contentNoteKey is the ledger key of the note of one content of a
// ticket's enrichment: the same content, the same key, one note.
func contentNoteKey(ticketID int64, c supportflow.Customer) string {
	h := sha256.New()
	h.Write([]byte(fmt.Sprintf("%s\x00%s\x00%d\x00%s", c.CustomerID, c.Email, c.LifetimeOrders, strings.Join(c.ActiveSubscriptions, "\x00"))))
	return supportflow.ActionKey(fmt.Sprintf("enrich-%d-%x", ticketID, h.Sum(nil)[:8]), 0)
}

// enrichDelays are the waits an enrichment run uses, recorded at its start.
type enrichDelays struct {
	NewTicket time.Duration `json:"new_ticket"`
	Update    time.Duration `json:"update"`
}

// dueAt is when a lookup covering events may run: each event's time plus
// its kind's delay, the latest of them, but no later than maxDefer (the
// new-ticket delay) after the earliest of them, so a ticket updated every
// minute is still looked up.
func dueAt(events []supportflow.TicketEvent, d enrichDelays) time.Time {
	var latest, earliest time.Time
	for i, ev := range events {
		t := ev.At
		switch ev.Kind {
		case supportflow.TicketCreated:
			t = t.Add(d.NewTicket)
		case supportflow.TicketUpdated:
			t = t.Add(d.Update)
		}
		if i == 0 || t.After(latest) {
			latest = t
		}
		if i == 0 || t.Before(earliest) {
			earliest = t
		}
	}
	if limit := earliest.Add(d.NewTicket); latest.After(limit) {
		return limit
	}
	return latest
}

// mode reads the worker's enrichment mode once per lookup, recorded in
// history so a replay sees the mode the lookup ran with.
func (w *Workflows) mode(ctx workflow.Context) string {
	var mode string
	_ = workflow.SideEffect(ctx, func(workflow.Context) any {
		if w.EnrichmentMode == supportflow.EnrichmentLive {
			return supportflow.EnrichmentLive
		}
		return supportflow.EnrichmentShadow
	}).Get(&mode)
	return mode
}

// noteEnrichment puts the customer data on the ticket as a private note,
// once per recorded lookup, through the action ledger.
func (w *Workflows) noteEnrichment(ctx workflow.Context, d policy.Durations, ticketID int64, key string, out supportflow.LookupOutput) error {
	subs := "none"
	if len(out.Customer.ActiveSubscriptions) > 0 {
		subs = strings.Join(out.Customer.ActiveSubscriptions, ", ")
	}
	body := fmt.Sprintf("Customer %s: %d lifetime orders; active subscriptions: %s.", out.Customer.CustomerID, out.Customer.LifetimeOrders, subs)
	in := supportflow.ActionInput{
		Key:    key,
		Action: supportflow.Action{TicketID: ticketID, Comment: &supportflow.Comment{Body: body, Public: false}},
	}
	actx := w.activityOptions(ctx, policy.KindZendesk, PostReplyDeadline(d), true, onTicket("post enrichment note", ticketID))
	var r supportflow.PostReplyResult
	return call(actx, supportflow.PostReply, in).Get(ctx, &r)
}
