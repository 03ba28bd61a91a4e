package tests

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/enrichment"
	"github.com/supportflow/supportflow/internal/standin"
)

func (s *stack) enrichStore() *enrichment.Store {
	return enrichment.NewStore(s.pool, zdHost(s.zdSrv.URL()))
}

func (s *stack) count(sql string, args ...any) int {
	s.t.Helper()
	var n int
	require.NoError(s.t, s.pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// A burst of 1,000 events over 100 tickets (a created event, then nine
// updates each, interleaved) makes exactly 100 lookups: each ticket's
// events merge into one.
func TestEnrichment_BurstMerges(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	const tickets, perTicket = 100, 10
	// The merge window: wide enough for 1,000 events sent by a loaded
	// 2-core machine to land inside it.
	delay := 30 * time.Second
	s.extraEnv = []string{"SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY=" + delay.String(), "SUPPORTFLOW_ENRICH_UPDATE_DELAY=" + delay.String()}
	s.startWorker()
	base := 20000 + ticketIDs.Add(tickets)
	var events []supportflow.TicketEvent
	for i := range int64(tickets) {
		s.bq.AddCustomer(base+i, standin.BQCustomer{CustomerID: "c", Orders: i})
	}
	for k := range perTicket {
		for i := range int64(tickets) {
			kind := supportflow.TicketUpdated
			if k == 0 {
				kind = supportflow.TicketCreated
			}
			events = append(events, supportflow.TicketEvent{TicketID: base + i, Kind: kind, RequesterID: base + i})
		}
	}
	// Interleave, keeping each ticket's created event first.
	rand.Shuffle(len(events)-tickets, func(i, j int) { events[tickets+i], events[tickets+j] = events[tickets+j], events[tickets+i] })

	began := time.Now()
	var wg sync.WaitGroup
	work := make(chan supportflow.TicketEvent)
	errs := make(chan error, len(events))
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range work {
				ev.At = time.Now()
				_, err := s.starter.RecordTicketEvent(context.Background(), ev)
				errs <- err
			}
		}()
	}
	for _, ev := range events {
		work <- ev
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	burst := time.Since(began)
	t.Logf("1,000 events sent in %s", burst.Round(time.Millisecond))
	require.Less(t, burst, delay, "the burst must fit in the merge window for this test to mean anything")

	require.Eventually(t, func() bool { return s.bq.CompletedLookups() >= tickets }, waitBudget, 100*time.Millisecond)
	time.Sleep(2 * time.Second) // nothing more may follow
	assert.Equal(t, tickets, s.bq.CompletedLookups(), "exactly one lookup per ticket")
	assert.Equal(t, tickets, s.count(`SELECT count(*) FROM enrichment_run`))
	assert.Equal(t, tickets, s.count(`SELECT count(*) FROM lookup_log`), "one lookup-log row per attempt")
	assert.Equal(t, tickets, s.count(`SELECT count(*) FROM ticket_enrichment`))
	st, err := s.starter.EnrichmentStatus(ctxT(t), base)
	require.NoError(t, err)
	assert.Equal(t, supportflow.EnrichEnriched, st.State)
	assert.Equal(t, 1, st.Lookups)
}

// A ticket BigQuery refuses is dead-lettered with its reason and ends in
// the visible dead_letter state; the operator's re-drive looks it up at
// once and resolves the dead letter.
func TestEnrichment_DeadLetterAndRedrive(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.extraEnv = []string{"SUPPORTFLOW_ENRICH_UPDATE_DELAY=100ms"}
	s.startWorker()
	ticket := 30000 + ticketIDs.Add(1)
	s.bq.AddCustomer(ticket, standin.BQCustomer{CustomerID: "c-9", Orders: 4})
	s.bq.Inject(standin.BigQueryFault{Status: 400, Reason: "invalidQuery", Times: -1})

	firstRun, err := s.starter.RecordTicketEvent(ctxT(t), supportflow.TicketEvent{TicketID: ticket, Kind: supportflow.TicketUpdated, RequesterID: ticket})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := s.starter.EnrichmentStatus(context.Background(), ticket)
		return err == nil && st.State == supportflow.EnrichDeadLetter
	}, waitBudget, 100*time.Millisecond)
	dl, err := s.enrichStore().GetDeadLetter(ctxT(t), ticket)
	require.NoError(t, err)
	assert.Contains(t, dl.Reason, "not retried")
	assert.Contains(t, dl.LastError, "invalidQuery")

	s.bq.ClearFaults()
	require.NoError(t, s.starter.RedriveEnrichment(ctxT(t), ticket))
	s.waitEnriched(ticket)
	dl, err = s.enrichStore().GetDeadLetter(ctxT(t), ticket)
	require.NoError(t, err)
	assert.NotNil(t, dl.RedrivenAt)
	assert.NotNil(t, dl.ResolvedAt)
	assert.Equal(t, 2, s.count(`SELECT count(*) FROM lookup_log WHERE ticket_id = $1`, ticket))
	s.recordHistory(supportflow.EnrichWorkflowID(ticket), firstRun, "enrich_ticket_dead_letter")
	s.recordHistory(supportflow.EnrichWorkflowID(ticket), "", "enrich_ticket_redriven_enriched")
}
