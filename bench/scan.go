package main

import (
	"context"
	"fmt"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/standin"
)

// ScanLoad is a scan's burst of drafts under the resource limits: how fast
// it drained and how close the services came to their limits.
type ScanLoad struct {
	Tickets         int     `json:"tickets"`
	Seconds         float64 `json:"seconds"`
	DraftsPerSecond float64 `json:"drafts_per_second"`
	// ZendeskPerMinute is the configured limit; ZendeskMaxPerMinute the
	// most requests the stand-in saw in any 60 s window.
	ZendeskPerMinute    int `json:"zendesk_limit_per_minute"`
	ZendeskMaxPerMinute int `json:"zendesk_max_per_minute"`
	// ModelConcurrency is the worker's cap; ModelPeak the most the
	// stand-in streamed at once.
	ModelConcurrency int `json:"model_concurrency"`
	ModelPeak        int `json:"model_peak_in_flight"`
	// Throttled counts 429s from both stand-ins, which refuse anything over
	// the limits.
	Throttled int `json:"throttled"`
}

// scanZendeskPerMinute and scanModelConcurrency are the limits the scan
// runs under: a Professional plan's 400 a minute would take an hour for
// 2,000 tickets, so the bench uses a higher plan-like figure; the model
// answers in 300 ms, so its concurrency cap binds too.
const (
	scanZendeskPerMinute = 3000
	scanModelConcurrency = 4
)

// measureScan seeds tickets that all need a draft, starts a worker under
// the limits and scans until every draft has started, then waits for every
// proposal.
func measureScan(ctx context.Context, s *stack, tickets int) (ScanLoad, error) {
	res := ScanLoad{Tickets: tickets, ZendeskPerMinute: scanZendeskPerMinute, ModelConcurrency: scanModelConcurrency}
	base := time.Now().UnixNano()%1e9*1000 + 500_000_000_000
	if err := seedScanTickets(ctx, s, base, tickets); err != nil {
		return res, err
	}
	stop, err := startLimitedWorker(s, scanZendeskPerMinute)
	if err != nil {
		return res, err
	}
	defer stop()
	start := time.Now()
	started := 0
	for round := 0; started < tickets; round++ {
		if round == 20 {
			return res, fmt.Errorf("scan: %d of %d drafts started after 20 scans", started, tickets)
		}
		// As the schedule starts it (priority 4; its drafts run at 3).
		run, err := s.temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: fmt.Sprintf("bench-scan-%d-%d", base, round), TaskQueue: benchQueue,
			Priority: temporal.Priority{PriorityKey: supportflow.PriorityBackground}},
			supportflow.ScanTicketsWorkflow, supportflow.ScanRequest{Limit: supportflow.MaxScanLimit})
		if err != nil {
			return res, err
		}
		var sr supportflow.ScanResult
		if err := run.Get(ctx, &sr); err != nil {
			return res, err
		}
		started += len(sr.Started)
	}
	for {
		var n int
		if err := s.pool.QueryRow(ctx, `SELECT count(*) FROM proposal WHERE ticket_id >= $1 AND ticket_id < $2`, base, base+int64(tickets)).Scan(&n); err != nil {
			return res, err
		}
		if n == tickets {
			break
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
	res.Seconds = time.Since(start).Seconds()
	res.DraftsPerSecond = float64(tickets) / res.Seconds
	zd, mdl := s.zd.Load(), s.model.Load()
	res.ZendeskMaxPerMinute, res.ModelPeak, res.Throttled = zd.MaxInWindow, mdl.PeakInFlight, zd.Throttled+mdl.Throttled
	return res, nil
}

// seedScanTickets adds tickets base..base+n-1 to the Zendesk stand-in and
// the ticket mirror, each one needing a draft (open, the customer spoke
// last, no proposal).
func seedScanTickets(ctx context.Context, s *stack, base int64, n int) error {
	ids := make([]int64, n)
	for i := range ids {
		ids[i] = base + int64(i)
		s.zd.AddTicket(standin.Ticket{ID: ids[i], Subject: "Where is my order?", Description: "It has not arrived.", RequesterName: "Ada"})
	}
	_, err := s.pool.Exec(ctx, `
INSERT INTO ticket_mirror (account, ticket_id, subject, status, zendesk_updated_at, last_customer_comment_at)
SELECT $1, id, 'Where is my order?', 'open', now() - interval '1 day', now() - interval '1 day' FROM unnest($2::bigint[]) AS id`,
		s.account(), ids)
	return err
}

// startLimitedWorker puts the stand-ins under the scan's limits (Zendesk
// refuses over zendeskPerMinute, the model answers in 300 ms) and starts a
// worker configured for them, plus extra settings; stop stops it and lifts
// them.
func startLimitedWorker(s *stack, zendeskPerMinute int, extra ...string) (stop func(), err error) {
	s.zd.SetRateLimit(zendeskPerMinute, time.Minute)
	s.model.SetRateLimit(0, time.Minute)
	s.model.Inject(standin.ModelFault{Delay: 300 * time.Millisecond, Times: -1})
	lift := func() {
		s.zd.SetRateLimit(0, time.Minute)
		s.model.ClearFaults()
	}
	if err := s.startWorker(append([]string{fmt.Sprintf("SUPPORTFLOW_ZENDESK_REQUESTS_PER_MINUTE=%d", zendeskPerMinute),
		fmt.Sprintf("SUPPORTFLOW_MODEL_CONCURRENCY=%d", scanModelConcurrency)}, extra...)...); err != nil {
		lift()
		return nil, err
	}
	return func() { s.stopWorker(); lift() }, nil
}
