package tests

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/standin"
)

// A burst of 2,000 eligible tickets, two worker processes, and services
// that refuse (429) anything over their limits, counted in a shortened
// "minute" of 10 s: the scans start every draft, the resource queues keep
// Zendesk under its requests-per-window and the model under the fleet's
// concurrency, and nothing is ever refused.
//
// It runs alone (not in parallel): it saturates the Temporal server, and
// the other tests' timings are not its subject.
func TestLoad_ScanRespectsFleetWideLimits(t *testing.T) {
	s := newStack(t)
	const (
		tickets = 2000
		window  = 10 * time.Second
		// Per minute, as configured; the stand-ins count a sixth of it per
		// 10 s window.
		zendeskPerMinute = 3600
		modelPerMinute   = 12000
		modelConcurrency = 3
		zendeskWorkerCap = 8
	)
	s.zd.SetRateLimit(zendeskPerMinute/6, window)
	s.model.SetRateLimit(modelPerMinute/6, window)
	// A slow model, so its concurrency cap is what holds it back.
	s.model.Inject(standin.ModelFault{Delay: 400 * time.Millisecond, Times: -1})
	s.extraEnv = []string{
		fmt.Sprintf("SUPPORTFLOW_ZENDESK_REQUESTS_PER_MINUTE=%d", zendeskPerMinute),
		fmt.Sprintf("SUPPORTFLOW_ZENDESK_CONCURRENCY=%d", zendeskWorkerCap),
		fmt.Sprintf("SUPPORTFLOW_MODEL_REQUESTS_PER_MINUTE=%d", modelPerMinute),
		fmt.Sprintf("SUPPORTFLOW_MODEL_CONCURRENCY=%d", modelConcurrency),
	}

	base := ticketIDs.Add(tickets) - tickets
	ids := make([]int64, tickets)
	for i := range ids {
		ids[i] = base + int64(i) + 1
		s.zd.AddTicket(standin.Ticket{ID: ids[i], Subject: "Where is my order?", Description: "It has not arrived.", RequesterName: "Ada"})
	}
	// Mirrored as open with the customer waiting since yesterday (past the
	// enrichment grace): every one is a draft candidate.
	_, err := s.pool.Exec(context.Background(), `
INSERT INTO ticket_mirror (account, ticket_id, subject, status, zendesk_updated_at, last_customer_comment_at)
SELECT $1, id, 'Where is my order?', 'open', now() - interval '1 day', now() - interval '1 day' FROM unnest($2::bigint[]) AS id`,
		s.ledger.Account(), ids)
	require.NoError(t, err)

	s.startWorker()
	s.startExtraWorker()
	start := time.Now()
	// Scans start at most MaxScanLimit drafts each; a ticket whose draft
	// is still running is left to it. Scan, as the schedule would, until
	// every ticket's draft has started.
	started := 0
	for round := 0; started < tickets; round++ {
		require.Less(t, round, 10, "scans keep starting drafts")
		run, err := s.temporal.ExecuteWorkflow(ctxT(t), clientStart(fmt.Sprintf("load-scan-%d-%s-%s", round, t.Name(), runNonce), s.taskQueue),
			supportflow.ScanTicketsWorkflow, supportflow.ScanRequest{Limit: supportflow.MaxScanLimit})
		require.NoError(t, err)
		var res supportflow.ScanResult
		// A bound for a loaded 2-core machine (a scan starts its drafts in
		// well under a minute on a quiet one).
		scanCtx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
		require.NoError(t, run.Get(scanCtx, &res))
		cancel()
		require.LessOrEqual(t, len(res.Candidates), supportflow.MaxScanLimit, "a scan takes at most its limit")
		require.Empty(t, res.Failed)
		started += len(res.Started)
	}
	lastLog := time.Now()
	require.Eventually(t, func() bool {
		n := s.count(`SELECT count(*) FROM proposal`)
		if time.Since(lastLog) > 10*time.Second {
			lastLog = time.Now()
			t.Logf("%s: %d of %d drafted; Zendesk %+v; model %+v", time.Since(start).Round(time.Second), n, tickets, s.zd.Load(), s.model.Load())
		}
		return n == tickets
	}, 12*time.Minute, time.Second, "every ticket was drafted")
	took := time.Since(start)

	zd, mdl := s.zd.Load(), s.model.Load()
	t.Logf("%d drafts in %s (%.0f/s); Zendesk: %d requests, at most %d in a %s window (limit %d), %d in flight at once, %d refused; model: %d requests, at most %d in a window (limit %d), %d streaming at once, %d refused",
		tickets, took.Round(time.Second), tickets/took.Seconds(), zd.Requests, zd.MaxInWindow, window, zendeskPerMinute/6, zd.PeakInFlight, zd.Throttled,
		mdl.Requests, mdl.MaxInWindow, modelPerMinute/6, mdl.PeakInFlight, mdl.Throttled)
	assert.Zero(t, zd.Throttled, "Zendesk never answered 429")
	assert.Zero(t, mdl.Throttled, "the model never answered 429")
	assert.LessOrEqual(t, zd.MaxInWindow, zendeskPerMinute/6)
	assert.LessOrEqual(t, mdl.PeakInFlight, 2*modelConcurrency, "two workers, %d model calls each at most", modelConcurrency)
	assert.LessOrEqual(t, zd.PeakInFlight, 2*zendeskWorkerCap)
	// One model call a draft; on a starved machine an attempt whose
	// heartbeat (2 s in the tests) was missed is retried, so a few more.
	assert.GreaterOrEqual(t, mdl.Requests, tickets, "every draft called the model")
	assert.LessOrEqual(t, mdl.Requests, tickets+tickets/100, "one model call a draft, give or take a retried attempt")
	// The model's cap held it back (a slow model, a queue of drafts).
	assert.Equal(t, 2*modelConcurrency, mdl.PeakInFlight, "the model's concurrency was the bound")
}
