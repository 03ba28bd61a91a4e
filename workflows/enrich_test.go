package workflows_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/enrichment"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/workflows"
)

const requester = int64(9001)

// lookups records when each LookupCustomer attempt started (test clock).
type lookups struct {
	mu    sync.Mutex
	at    []time.Time
	infos []activity.Info
}

func (w *draftWorld) recordLookups() *lookups {
	l := &lookups{}
	w.env.SetOnActivityStartedListener(func(info *activity.Info, _ context.Context, _ converter.EncodedValues) {
		if info.ActivityType.Name == "LookupCustomer" {
			l.mu.Lock()
			l.at = append(l.at, w.env.Now())
			l.infos = append(l.infos, *info)
			l.mu.Unlock()
		}
	})
	return l
}

func (w *draftWorld) seedCustomer(subs ...string) {
	w.h.BigQuery.AddCustomer(requester, standin.BQCustomer{CustomerID: "cust-1", Email: "ada@example.test", Orders: 12, ActiveSubscriptions: subs})
}

func event(ticket int64, kind string, at time.Time) supportflow.TicketEvent {
	return supportflow.TicketEvent{TicketID: ticket, Kind: kind, At: at, RequesterID: requester}
}

// A new ticket and three updates within its first minute make one lookup,
// 10 minutes after the ticket was created (BigQuery's replication lag).
func TestEnrichTicket_NewTicketBurstMakesOneLookupAt10Minutes(t *testing.T) {
	w := newDraftWorld(t)
	w.seedCustomer("sub-1")
	l := w.recordLookups()
	start := w.env.Now()
	for _, after := range []time.Duration{20 * time.Second, 40 * time.Second, 60 * time.Second} {
		w.env.RegisterDelayedCallback(func() {
			w.env.SignalWorkflow(supportflow.TicketEventSignal, event(7, supportflow.TicketUpdated, w.env.Now()))
		}, after)
	}
	w.env.ExecuteWorkflow(supportflow.EnrichTicketWorkflow, supportflow.EnrichRequest{TicketID: 7,
		Pending: []supportflow.TicketEvent{event(7, supportflow.TicketCreated, start)}})
	require.NoError(t, w.env.GetWorkflowError())
	var st supportflow.EnrichmentStatus
	require.NoError(t, w.env.GetWorkflowResult(&st))

	require.Len(t, l.at, 1, "one lookup for the four events")
	assert.InDelta(t, float64(10*time.Minute), float64(l.at[0].Sub(start)), float64(time.Second))
	assert.Equal(t, supportflow.EnrichEnriched, st.State)
	assert.True(t, st.Found)
	e, found, err := w.h.Enrichment.Store.GetEnrichment(context.Background(), 7, requester)
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, int64(12), e.LifetimeOrders)
	assert.Equal(t, []string{"sub-1"}, e.ActiveSubscriptions)
}

// Updates to an existing ticket make one lookup, 2 minutes after the last
// of them: each event pushes the lookup back.
func TestEnrichTicket_UpdatesMakeOneLookup2MinutesAfterTheLast(t *testing.T) {
	w := newDraftWorld(t)
	w.seedCustomer()
	l := w.recordLookups()
	start := w.env.Now()
	for _, after := range []time.Duration{30 * time.Second, 90 * time.Second} {
		w.env.RegisterDelayedCallback(func() {
			w.env.SignalWorkflow(supportflow.TicketEventSignal, event(7, supportflow.TicketUpdated, w.env.Now()))
		}, after)
	}
	w.env.ExecuteWorkflow(supportflow.EnrichTicketWorkflow, supportflow.EnrichRequest{TicketID: 7,
		Pending: []supportflow.TicketEvent{event(7, supportflow.TicketUpdated, start)}})
	require.NoError(t, w.env.GetWorkflowError())
	require.Len(t, l.at, 1)
	assert.InDelta(t, float64(90*time.Second+2*time.Minute), float64(l.at[0].Sub(start)), float64(time.Second))
}

// An event that arrives during a lookup causes one more lookup after it.
func TestEnrichTicket_EventDuringALookupCausesOneMore(t *testing.T) {
	w := newDraftWorld(t)
	w.seedCustomer()
	l := w.recordLookups()
	calls := 0
	w.env.OnActivity("LookupCustomer", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in supportflow.LookupInput) (supportflow.LookupOutput, error) {
			calls++
			if calls == 1 {
				w.env.SignalWorkflow(supportflow.TicketEventSignal, event(7, supportflow.TicketUpdated, time.Time{}))
			}
			return w.h.Enrichment.LookupCustomer(ctx, in)
		})
	w.env.ExecuteWorkflow(supportflow.EnrichTicketWorkflow, supportflow.EnrichRequest{TicketID: 7,
		Pending: []supportflow.TicketEvent{event(7, supportflow.TicketUpdated, w.env.Now())}})
	require.NoError(t, w.env.GetWorkflowError())
	require.Len(t, l.at, 2)
	assert.InDelta(t, float64(2*time.Minute), float64(l.at[1].Sub(l.at[0])), float64(time.Second), "the second lookup waits for its own event's delay")
	runs, err := w.h.Enrichment.Store.Runs(context.Background(), 7)
	require.NoError(t, err)
	assert.Len(t, runs, 2)
}

// Five failed attempts dead-letter the ticket with the reason and the last
// error; the run ends in the visible dead_letter state, and every attempt
// wrote one lookup-log row.
func TestEnrichTicket_FiveFailedAttemptsDeadLetter(t *testing.T) {
	w := newDraftWorld(t)
	w.seedCustomer()
	l := w.recordLookups()
	w.env.OnActivity("LookupCustomer", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in supportflow.LookupInput) (supportflow.LookupOutput, error) {
			return supportflow.LookupOutput{}, errors.New("bigquery: backendError: the backend is unavailable")
		})
	w.env.ExecuteWorkflow(supportflow.EnrichTicketWorkflow, supportflow.EnrichRequest{TicketID: 7,
		Pending: []supportflow.TicketEvent{event(7, supportflow.TicketUpdated, w.env.Now())}})
	require.NoError(t, w.env.GetWorkflowError())
	var st supportflow.EnrichmentStatus
	require.NoError(t, w.env.GetWorkflowResult(&st))

	require.Len(t, l.at, 5, "the lookup's budget is 5 attempts")
	assert.Equal(t, supportflow.EnrichDeadLetter, st.State)
	assert.Contains(t, st.Error, "backendError")
	dl, err := w.h.Enrichment.Store.GetDeadLetter(context.Background(), 7)
	require.NoError(t, err)
	assert.Equal(t, 5, dl.Attempts)
	assert.Equal(t, "the lookup failed 5 attempts", dl.Reason)
	assert.Contains(t, dl.LastError, "backendError")
	assert.Nil(t, dl.ResolvedAt)
}

// A ticket whose requester nobody knows cannot be looked up: it is
// dead-lettered at once, saying why.
func TestEnrichTicket_UnknownRequesterIsDeadLetteredAtOnce(t *testing.T) {
	w := newDraftWorld(t)
	w.env.ExecuteWorkflow(supportflow.EnrichTicketWorkflow, supportflow.EnrichRequest{TicketID: 7,
		Pending: []supportflow.TicketEvent{{TicketID: 7, Kind: supportflow.TicketUpdated, At: w.env.Now()}}})
	require.NoError(t, w.env.GetWorkflowError())
	dl, err := w.h.Enrichment.Store.GetDeadLetter(context.Background(), 7)
	require.NoError(t, err)
	assert.Equal(t, 1, dl.Attempts)
	assert.Contains(t, dl.Reason, "not retried")
	assert.Contains(t, dl.LastError, "no known requester")
	assert.Zero(t, w.h.BigQuery.Queries())
}

// Heartbeats stop (the worker died while the job ran): after 60 s the
// attempt times out and the next one looks the ticket up.
func TestEnrichTicket_HeartbeatSilenceRetries(t *testing.T) {
	w := newDraftWorld(t)
	w.seedCustomer()
	l := w.recordLookups()
	calls := 0
	w.env.OnActivity("LookupCustomer", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in supportflow.LookupInput) (supportflow.LookupOutput, error) {
			calls++
			if calls == 1 {
				return supportflow.LookupOutput{}, temporal.NewTimeoutError(enumspb.TIMEOUT_TYPE_HEARTBEAT, nil)
			}
			return w.h.Enrichment.LookupCustomer(ctx, in)
		})
	w.env.ExecuteWorkflow(supportflow.EnrichTicketWorkflow, supportflow.EnrichRequest{TicketID: 7,
		Pending: []supportflow.TicketEvent{event(7, supportflow.TicketUpdated, w.env.Now())}})
	require.NoError(t, w.env.GetWorkflowError())
	require.Len(t, l.infos, 2)
	assert.Equal(t, 60*time.Second, l.infos[0].HeartbeatTimeout)
	assert.InDelta(t, float64(120*time.Second), float64(l.infos[0].Deadline.Sub(l.infos[0].StartedTime)), float64(time.Second), "start-to-close 120 s per attempt")
	var st supportflow.EnrichmentStatus
	require.NoError(t, w.env.GetWorkflowResult(&st))
	assert.Equal(t, supportflow.EnrichEnriched, st.State)
}

// Live mode puts the customer data on the ticket as one private note per
// lookup, through the action ledger; shadow mode (the default) never
// touches Zendesk.
func TestEnrichTicket_LiveModeNotesTheTicketOnceShadowModeNever(t *testing.T) {
	for _, mode := range []string{supportflow.EnrichmentShadow, supportflow.EnrichmentLive} {
		t.Run(mode, func(t *testing.T) {
			w := newDraftWorldWith(t, &workflows.Workflows{EnrichmentMode: mode})
			w.seedCustomer("sub-1")
			ticket := w.h.Zendesk.AddTicket(standin.Ticket{Subject: "s", Description: "Hello"})
			w.env.ExecuteWorkflow(supportflow.EnrichTicketWorkflow, supportflow.EnrichRequest{TicketID: ticket,
				Pending: []supportflow.TicketEvent{event(ticket, supportflow.TicketUpdated, w.env.Now())}})
			require.NoError(t, w.env.GetWorkflowError())
			if mode == supportflow.EnrichmentShadow {
				assert.Zero(t, w.h.Zendesk.TotalComments())
				assert.Zero(t, w.h.Zendesk.Requests("PUT", "/"), "shadow mode never writes to Zendesk")
				return
			}
			require.Equal(t, 1, w.h.Zendesk.CommentCount(ticket))
			c := w.h.Zendesk.Comments(ticket)[0]
			assert.False(t, c.Public, "a private note for agents")
			assert.Contains(t, c.Body, "12 lifetime orders")
			assert.Contains(t, c.Body, "sub-1")
		})
	}
}

// Live mode notes a ticket only when its data changed: an hour of updates
// every 90 s (a busy ticket, or our own note's echo before supportflow
// recognised it) makes a lookup at least every 10 minutes, yet one note;
// a change in BigQuery halfway makes exactly one more.
func TestEnrichTicket_LiveModeNotesOnlyWhenTheDataChanged(t *testing.T) {
	w := newDraftWorldWith(t, &workflows.Workflows{EnrichmentMode: supportflow.EnrichmentLive})
	w.seedCustomer("sub-1")
	l := w.recordLookups()
	ticket := w.h.Zendesk.AddTicket(standin.Ticket{Subject: "s", Description: "Hello"})
	for after := 90 * time.Second; after <= time.Hour; after += 90 * time.Second {
		w.env.RegisterDelayedCallback(func() {
			w.env.SignalWorkflow(supportflow.TicketEventSignal, event(ticket, supportflow.TicketUpdated, w.env.Now()))
		}, after)
	}
	w.env.RegisterDelayedCallback(func() {
		w.h.BigQuery.AddCustomer(requester, standin.BQCustomer{CustomerID: "cust-1", Email: "ada@example.test", Orders: 13, ActiveSubscriptions: []string{"sub-1"}})
	}, 30*time.Minute+time.Second)
	w.env.ExecuteWorkflow(supportflow.EnrichTicketWorkflow, supportflow.EnrichRequest{TicketID: ticket,
		Pending: []supportflow.TicketEvent{event(ticket, supportflow.TicketUpdated, w.env.Now())}})
	require.NoError(t, w.env.GetWorkflowError())
	assert.GreaterOrEqual(t, len(l.at), 6, "a lookup at least every 10 minutes over the hour")
	notes := w.h.Zendesk.Comments(ticket)
	require.Len(t, notes, 2, "one note, and one more when the data changed")
	assert.Contains(t, notes[0].Body, "12 lifetime orders")
	assert.Contains(t, notes[1].Body, "13 lifetime orders")
}

// A live note that Zendesk refuses for good (the ticket is gone) is
// settled in the ledger, not left 'applying'.
func TestEnrichTicket_FailedLiveNoteIsSettled(t *testing.T) {
	w := newDraftWorldWith(t, &workflows.Workflows{EnrichmentMode: supportflow.EnrichmentLive})
	w.seedCustomer("sub-1")
	const gone = int64(777001) // never created in Zendesk
	w.env.ExecuteWorkflow(supportflow.EnrichTicketWorkflow, supportflow.EnrichRequest{TicketID: gone,
		Pending: []supportflow.TicketEvent{event(gone, supportflow.TicketUpdated, w.env.Now())}})
	require.NoError(t, w.env.GetWorkflowError())
	var st supportflow.EnrichmentStatus
	require.NoError(t, w.env.GetWorkflowResult(&st))
	assert.Contains(t, st.Error, "note on the ticket failed")
	var key string
	require.NoError(t, w.h.Pool.QueryRow(context.Background(), `SELECT key FROM action WHERE ticket_id = $1`, gone).Scan(&key))
	row, err := w.h.Ledger.Get(context.Background(), key)
	require.NoError(t, err)
	assert.Equal(t, supportflow.StateFailed, row.State)
	assert.Nil(t, row.LeaseExpiresAt)
}

// Every attempt writes exactly one lookup-log row, failed or not: two
// attempts against a BigQuery that answers 500 (the client retries those
// internally until the call's deadline), then one that succeeds.
func TestEnrichTicket_EachAttemptWritesOneLookupLogRow(t *testing.T) {
	w := newDraftWorld(t)
	w.seedCustomer()
	w.h.Enrichment.CallTimeout = 300 * time.Millisecond
	w.h.BigQuery.Inject(standin.BigQueryFault{Status: 500, Reason: "backendError", Times: -1})
	l := w.recordLookups()
	attempts := 0
	w.env.OnActivity("LookupCustomer", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in supportflow.LookupInput) (supportflow.LookupOutput, error) {
			attempts++
			if attempts == 3 {
				w.h.BigQuery.ClearFaults()
			}
			return w.h.Enrichment.LookupCustomer(ctx, in)
		})
	w.env.ExecuteWorkflow(supportflow.EnrichTicketWorkflow, supportflow.EnrichRequest{TicketID: 7,
		Pending: []supportflow.TicketEvent{event(7, supportflow.TicketUpdated, w.env.Now())}})
	require.NoError(t, w.env.GetWorkflowError())
	require.Len(t, l.at, 3)

	log, err := w.h.Enrichment.Store.LookupLog(context.Background(), 7)
	require.NoError(t, err)
	require.Len(t, log, 3, "one row per attempt")
	for i, want := range []string{enrichment.OutcomeError, enrichment.OutcomeError, enrichment.OutcomeFound} {
		assert.Equal(t, int32(i+1), log[i].Attempt)
		assert.Equal(t, want, log[i].Outcome, "attempt %d", i+1)
	}
	assert.NotEmpty(t, log[0].Error)
	assert.NotEmpty(t, log[2].JobID)
	assert.GreaterOrEqual(t, w.h.BigQuery.Queries(), 3)
}

// A ticket that never goes quiet (an automation updates it every 90 s) is
// still looked up: no later than 10 minutes past its oldest pending
// event's due time, and again for the events after that.
func TestEnrichTicket_BusyTicketIsNotPutOffForever(t *testing.T) {
	w := newDraftWorld(t)
	w.seedCustomer()
	l := w.recordLookups()
	start := w.env.Now()
	for i := 1; i <= 40; i++ { // an hour of updates
		w.env.RegisterDelayedCallback(func() {
			w.env.SignalWorkflow(supportflow.TicketEventSignal, event(7, supportflow.TicketUpdated, w.env.Now()))
		}, time.Duration(i)*90*time.Second)
	}
	w.env.ExecuteWorkflow(supportflow.EnrichTicketWorkflow, supportflow.EnrichRequest{TicketID: 7,
		Pending: []supportflow.TicketEvent{event(7, supportflow.TicketCreated, start)}})
	require.NoError(t, w.env.GetWorkflowError())
	require.GreaterOrEqual(t, len(l.at), 3, "lookups kept happening during the hour")
	// The earliest due time is the first update's (90 s + 2 min); the
	// lookup is deferred at most 10 min past it, and never earlier than
	// the new ticket's 10 min.
	assert.InDelta(t, float64(90*time.Second+2*time.Minute+10*time.Minute), float64(l.at[0].Sub(start)), float64(time.Second))
	assert.GreaterOrEqual(t, l.at[0].Sub(start), 10*time.Minute, "BigQuery's replication lag is still respected")
}

// A ticket with events after every lookup continues as new after 25
// lookups, carrying its pending event and its lookup count, so its history
// stays bounded.
func TestEnrichTicket_ContinuesAsNewAfter25LookupsCarryingEvents(t *testing.T) {
	w := newDraftWorld(t)
	w.seedCustomer()
	calls := 0
	w.env.OnActivity("LookupCustomer", mock.Anything, mock.Anything).Return(
		func(ctx context.Context, in supportflow.LookupInput) (supportflow.LookupOutput, error) {
			calls++
			w.env.SignalWorkflow(supportflow.TicketEventSignal, event(7, supportflow.TicketUpdated, time.Time{}))
			return supportflow.LookupOutput{RunID: int64(calls), RequesterID: requester, Found: true}, nil
		})
	w.env.ExecuteWorkflow(supportflow.EnrichTicketWorkflow, supportflow.EnrichRequest{TicketID: 7, Lookups: 3,
		Pending: []supportflow.TicketEvent{event(7, supportflow.TicketUpdated, w.env.Now())}})
	require.True(t, w.env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, w.env.GetWorkflowError(), &can)
	assert.Equal(t, 25, calls)
	var next supportflow.EnrichRequest
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	assert.Equal(t, int64(7), next.TicketID)
	assert.Equal(t, 3+25, next.Lookups, "the count carries over")
	require.Len(t, next.Pending, 1, "the event that arrived during the last lookup is carried, not lost")
	assert.Equal(t, supportflow.TicketUpdated, next.Pending[0].Kind)
}

// Events buffered when Temporal suggests continuing as new are carried
// into the next run, not dropped with this one: three events arrive in one
// workflow task while the run waits (its selector takes the first, the
// other two stay in the channel) just as the suggestion comes; the next
// run's input holds all of them, and its one lookup covers all of them.
func TestEnrichTicket_ContinueAsNewKeepsBufferedSignals(t *testing.T) {
	w := newDraftWorld(t)
	start := w.env.Now()
	sent := []supportflow.TicketEvent{
		{TicketID: 7, Kind: supportflow.TicketUpdated, RequesterID: 9101},
		{TicketID: 7, Kind: supportflow.TicketUpdated, RequesterID: 9102},
		{TicketID: 7, Kind: supportflow.TicketUpdated, RequesterID: 9103},
	}
	w.env.RegisterDelayedCallback(func() {
		w.env.SetContinueAsNewSuggested(true)
		// Delivered in one workflow task, as the server does with signals
		// that arrived together: the first two without a task of their
		// own, the last with it.
		for i := range sent {
			sent[i].At = w.env.Now()
			if i < len(sent)-1 {
				w.env.SignalWorkflowSkippingWorkflowTask(supportflow.TicketEventSignal, sent[i])
			} else {
				w.env.SignalWorkflow(supportflow.TicketEventSignal, sent[i])
			}
		}
	}, time.Minute)
	w.env.OnActivity("LookupCustomer", mock.Anything, mock.Anything).Return(
		func(context.Context, supportflow.LookupInput) (supportflow.LookupOutput, error) {
			t.Error("the first run must continue as new before its lookup is due")
			return supportflow.LookupOutput{}, nil
		}).Maybe()
	w.env.ExecuteWorkflow(supportflow.EnrichTicketWorkflow, supportflow.EnrichRequest{TicketID: 7,
		Pending: []supportflow.TicketEvent{event(7, supportflow.TicketCreated, start)}})
	require.True(t, w.env.IsWorkflowCompleted())
	var can *workflow.ContinueAsNewError
	require.ErrorAs(t, w.env.GetWorkflowError(), &can, "the suggestion was taken")
	var next supportflow.EnrichRequest
	require.NoError(t, converter.GetDefaultDataConverter().FromPayloads(can.Input, &next))
	require.Len(t, next.Pending, 1+len(sent), "the pending event and every signalled one are carried")
	var carried []int64
	for _, ev := range next.Pending[1:] {
		carried = append(carried, ev.RequesterID)
	}
	assert.Equal(t, []int64{9101, 9102, 9103}, carried, "in the order they arrived")

	// The next run looks the ticket up once, covering every carried event
	// (the newest event's requester is the one looked up).
	w2 := newDraftWorld(t)
	var inputs []supportflow.LookupInput
	w2.env.OnActivity("LookupCustomer", mock.Anything, mock.Anything).Return(
		func(_ context.Context, in supportflow.LookupInput) (supportflow.LookupOutput, error) {
			inputs = append(inputs, in)
			return supportflow.LookupOutput{RunID: 1, RequesterID: in.RequesterID, Found: true}, nil
		})
	w2.env.ExecuteWorkflow(supportflow.EnrichTicketWorkflow, next)
	require.NoError(t, w2.env.GetWorkflowError())
	var st supportflow.EnrichmentStatus
	require.NoError(t, w2.env.GetWorkflowResult(&st))
	require.Len(t, inputs, 1, "one lookup for the carried events")
	assert.Equal(t, int64(9103), inputs[0].RequesterID)
	assert.Equal(t, 1+len(sent), st.Merged, "the lookup covered every carried event")
	assert.Equal(t, supportflow.EnrichEnriched, st.State)
}
