package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/ledger"
)

func run(ctx context.Context, sz Size, log io.Writer, topology string) (Results, error) {
	res := Results{Size: sz.Name, Machine: machine(), Started: time.Now().UTC(), Topology: topology}
	s, err := startStack(ctx, log, topology)
	if err != nil {
		return res, err
	}
	defer s.stop()

	// Phase A: one worker with the product's settings, except enrichment
	// delays of 10 ms so a lifecycle does not wait 10 minutes.
	if err := s.startWorker("SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY=10ms", "SUPPORTFLOW_ENRICH_UPDATE_DELAY=10ms"); err != nil {
		return res, err
	}
	step := func(name string) { fmt.Fprintf(log, "bench: %s\n", name) }
	if want("approve") {
		step("approve -> posted, one at a time")
		_, _ = measureApprove(ctx, s, "warm", 1, 3) // warm caches and connections
		if res.ApproveSequential, err = measureApprove(ctx, s, "seq", 1, sz.ApproveSequential); err != nil {
			return res, err
		}
		step(fmt.Sprintf("approve -> posted, %d at once", sz.ApproveConcurrent))
		if res.ApproveConcurrent, err = measureApprove(ctx, s, "conc", sz.ApproveConcurrent, sz.ApproveEach); err != nil {
			return res, err
		}
	}
	if want("lifecycle") {
		step("a ticket's lifecycle in history events")
		if res.Lifecycle, err = measureLifecycle(ctx, s); err != nil {
			return res, err
		}
	}
	if want("floor") {
		step("the Temporal floor: a no-op one-activity workflow")
		if res.TemporalFloorSequential, res.TemporalFloorConcurrent, err = measureTemporalFloor(ctx, s, sz); err != nil {
			return res, err
		}
	}
	s.stopWorker()

	if want("enrichment") {
		step(fmt.Sprintf("enrichment: %d events on %d tickets", sz.EnrichEvents, sz.EnrichTickets))
		if res.Enrichment, err = measureEnrichment(ctx, s, sz.EnrichEvents, sz.EnrichTickets); err != nil {
			return res, err
		}
	}
	if want("memory") {
		step(fmt.Sprintf("worker memory with %d open enrichments", sz.OpenWorkflows))
		if res.Memory, err = measureMemory(ctx, s, sz.OpenWorkflows); err != nil {
			return res, err
		}
	}
	if want("scan") {
		step(fmt.Sprintf("a scan of %d tickets under the resource limits", sz.ScanTickets))
		if res.Scan, err = measureScan(ctx, s, sz.ScanTickets); err != nil {
			return res, err
		}
	}
	if want("priority") {
		step(fmt.Sprintf("approve -> posted while a scan of %d tickets saturates the Zendesk queue", sz.ScanTickets))
		if res.Priority, err = measurePriority(ctx, s, sz.ScanTickets, sz.PriorityApprovals); err != nil {
			return res, err
		}
	}
	if topology != "dev" {
		// The ledger and River do not touch Temporal: measured once, on
		// the dev run.
		res.Elapsed = Duration(time.Since(res.Started))
		return res, nil
	}
	if want("ledger") {
		step("the ledger per action")
		if res.Ledger, err = measureLedger(ctx, s, sz.LedgerActions, sz.Contenders); err != nil {
			return res, err
		}
	}
	if want("river") {
		step("the Postgres-queue floor: River")
		if res.River, err = measureRiver(ctx, s.dbURL, sz.RiverSequential, sz.RiverInserters, sz.RiverTotal); err != nil {
			return res, err
		}
	}
	res.Elapsed = Duration(time.Since(res.Started))
	return res, nil
}

func summarize(ds []time.Duration, concurrency int, wall time.Duration) Latency {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	l := Latency{N: len(ds), Concurrency: concurrency}
	if len(ds) == 0 {
		return l
	}
	pick := func(p float64) Duration { return Duration(ds[min(len(ds)-1, int(p*float64(len(ds))))]) }
	l.P50, l.P95, l.P99, l.Max = pick(0.50), pick(0.95), pick(0.99), Duration(ds[len(ds)-1])
	if wall > 0 {
		l.PerSecond = float64(len(ds)) / wall.Seconds()
	}
	return l
}

// measureApprove starts the execution of an approved one-reply proposal
// (what an approval does) and times it until the Zendesk stand-in applied
// the comment; concurrency goroutines do each in turn.
func measureApprove(ctx context.Context, s *stack, label string, concurrency, each int) (Latency, error) {
	var mu sync.Mutex
	var ds []time.Duration
	errs := make(chan error, concurrency)
	began := time.Now()
	var wg sync.WaitGroup
	for g := range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ticket := s.zd.AddTicket(standin.Ticket{Subject: "bench", Description: "hi"})
			for i := range each {
				id := fmt.Sprintf("%s-%d-%d-%d", label, began.UnixNano(), g, i)
				p := supportflow.Proposal{ID: id, Actions: []supportflow.Action{{TicketID: ticket, Comment: &supportflow.Comment{Body: "Done.", Public: true}}}}
				t0 := time.Now()
				if _, err := s.starter.ExecuteProposal(ctx, p, "bench"); err != nil {
					errs <- err
					return
				}
				if _, err := s.starter.WaitExecution(ctx, id); err != nil {
					errs <- err
					return
				}
				cs := s.zd.Comments(ticket)
				if len(cs) != i+1 {
					errs <- fmt.Errorf("ticket %d has %d comments after %d approvals", ticket, len(cs), i+1)
					return
				}
				mu.Lock()
				ds = append(ds, cs[i].At.Sub(t0))
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return Latency{}, err
	}
	return summarize(ds, concurrency, time.Since(began)), nil
}

// Noop is the floor's workflow: one no-op activity.
func Noop(ctx workflow.Context) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
	return workflow.ExecuteActivity(ctx, NoopActivity).Get(ctx, nil)
}

// NoopActivity does nothing.
func NoopActivity(context.Context) error { return nil }

func measureTemporalFloor(ctx context.Context, s *stack, sz Size) (Latency, Latency, error) {
	w := worker.New(s.temporal, "bench-floor", worker.Options{})
	w.RegisterWorkflow(Noop)
	w.RegisterActivity(NoopActivity)
	if err := w.Start(); err != nil {
		return Latency{}, Latency{}, err
	}
	defer w.Stop()
	one := func(id string) (time.Duration, error) {
		t0 := time.Now()
		run, err := s.temporal.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: "bench-floor"}, Noop)
		if err != nil {
			return 0, err
		}
		return time.Since(t0), run.Get(ctx, nil)
	}
	timed := func(concurrency, each int) (Latency, error) {
		var mu sync.Mutex
		var ds []time.Duration
		var firstErr error
		began := time.Now()
		var wg sync.WaitGroup
		for g := range concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range each {
					t0 := time.Now()
					if _, err := one(fmt.Sprintf("noop-%d-%d-%d-%d", began.UnixNano(), concurrency, g, i)); err != nil {
						mu.Lock()
						firstErr = err
						mu.Unlock()
						return
					}
					mu.Lock()
					ds = append(ds, time.Since(t0))
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return summarize(ds, concurrency, time.Since(began)), firstErr
	}
	_, _ = timed(1, 3)
	seq, err := timed(1, sz.FloorSequential)
	if err != nil {
		return seq, Latency{}, err
	}
	conc, err := timed(sz.FloorConcurrent, sz.FloorEach)
	return seq, conc, err
}

// Enrichment is the enrichment figures.
type Enrichment struct {
	// PerSecond is lookups completed per second by one worker draining
	// Tickets enrichments of one event each.
	PerSecond float64 `json:"lookups_per_second"`
	Events    int     `json:"burst_events"`
	Tickets   int     `json:"tickets"`
	// SendSeconds is how long the events took to send (signal-with-start,
	// 32 senders), while no worker polled, as after a deploy.
	SendSeconds float64 `json:"send_seconds"`
	// Lookups is the lookups the burst made; exactly Tickets when every
	// ticket's events merged.
	Lookups int `json:"burst_lookups"`
	// BurstPerSecond is lookups per second while draining the burst (each
	// workflow also takes in its ten signals).
	BurstPerSecond float64 `json:"burst_lookups_per_second"`
}

func measureEnrichment(ctx context.Context, s *stack, events, tickets int) (Enrichment, error) {
	e := Enrichment{Events: events, Tickets: tickets}
	_, rate, _, err := enrichBurst(ctx, s, tickets, tickets)
	if err != nil {
		return e, err
	}
	e.PerSecond = rate
	e.Lookups, e.BurstPerSecond, e.SendSeconds, err = enrichBurst(ctx, s, events, tickets)
	return e, err
}

// enrichBurst sends events over tickets while no worker polls (as after a
// deploy), then starts one worker and measures how fast it drains them; it
// returns the lookups made, lookups per second and the send time.
func enrichBurst(ctx context.Context, s *stack, events, tickets int) (lookups int, perSecond, sendSeconds float64, err error) {
	e := Enrichment{}
	base := time.Now().UnixNano()%1e9*100 + int64(events)
	for i := range int64(tickets) {
		s.bq.AddCustomer(base+i, standin.BQCustomer{CustomerID: "c", Orders: i})
	}
	before := s.bq.CompletedLookups()
	work := make(chan supportflow.TicketEvent, 64)
	errs := make(chan error, 32)
	var wg sync.WaitGroup
	began := time.Now()
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ev := range work {
				ev.At = time.Now()
				if _, err := s.starter.RecordTicketEvent(ctx, ev); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for k := range events {
		ticket := base + int64(k%tickets)
		kind := supportflow.TicketUpdated
		if k < tickets {
			kind = supportflow.TicketCreated
		}
		work <- supportflow.TicketEvent{TicketID: ticket, Kind: kind, RequesterID: ticket}
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return 0, 0, 0, err
	default:
	}
	e.SendSeconds = time.Since(began).Seconds()
	// Every event is already in its workflow's history when the worker
	// starts, so each ticket's events merge into one lookup.
	start := time.Now()
	if err := s.startWorker("SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY=1ms", "SUPPORTFLOW_ENRICH_UPDATE_DELAY=1ms"); err != nil {
		return 0, 0, 0, err
	}
	defer s.stopWorker()
	deadline := time.Now().Add(10 * time.Minute)
	for s.bq.CompletedLookups()-before < tickets {
		if time.Now().After(deadline) {
			return 0, 0, 0, fmt.Errorf("only %d of %d lookups after 10 minutes", s.bq.CompletedLookups()-before, tickets)
		}
		time.Sleep(20 * time.Millisecond)
	}
	e.PerSecond = float64(tickets) / time.Since(start).Seconds()
	time.Sleep(2 * time.Second) // a lookup too many would show up by now
	return s.bq.CompletedLookups() - before, e.PerSecond, e.SendSeconds, nil
}

// Memory is the worker's resident memory.
type Memory struct {
	OpenWorkflows int     `json:"open_workflows"`
	IdleRSSMB     float64 `json:"idle_rss_mb"`
	RSSMB         float64 `json:"rss_mb"`
	PeakRSSMB     float64 `json:"peak_rss_mb"`
}

func rss(pid int) (cur, peak float64, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(f[1], 64)
		switch f[0] {
		case "VmRSS:":
			cur = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		}
	}
	return cur, peak, nil
}

// measureMemory opens n enrichments that wait on their 1-hour timers in a
// fresh worker and reads its resident memory.
func measureMemory(ctx context.Context, s *stack, n int) (Memory, error) {
	m := Memory{OpenWorkflows: n}
	if err := s.startWorker("SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY=1h", "SUPPORTFLOW_ENRICH_UPDATE_DELAY=1h"); err != nil {
		return m, err
	}
	defer s.stopWorker()
	time.Sleep(3 * time.Second)
	var err error
	if m.IdleRSSMB, _, err = rss(s.worker.Process.Pid); err != nil {
		return m, err
	}
	base := time.Now().UnixNano()%1e9*100 + 5e10
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	for i := range int64(n) {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			_, _ = s.starter.RecordTicketEvent(ctx, supportflow.TicketEvent{TicketID: base + i, Kind: supportflow.TicketCreated, RequesterID: 1})
		}()
	}
	wg.Wait()
	query := fmt.Sprintf("WorkflowType = '%s' AND %s = '%s' AND ExecutionStatus = 'Running'", supportflow.EnrichTicketWorkflow, supportflow.SearchAttrState, supportflow.EnrichWaiting)
	deadline := time.Now().Add(5 * time.Minute)
	for {
		c, err := s.temporal.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: query})
		if err == nil && c.GetCount() >= int64(n) {
			break
		}
		if time.Now().After(deadline) {
			return m, fmt.Errorf("only %d of %d enrichments waiting on their timers", c.GetCount(), n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	time.Sleep(2 * time.Second)
	m.RSSMB, m.PeakRSSMB, err = rss(s.worker.Process.Pid)
	return m, err
}

// LedgerCost is what the ledger adds per action (Reserve + RecordComment).
type LedgerCost struct {
	Actions             int     `json:"actions"`
	CommitsPerAction    float64 `json:"commits_per_action"`
	RoundTripsPerAction float64 `json:"round_trips_per_action"`
	Alone               Latency `json:"alone"`
	Contended           Latency `json:"contended"`
}

// counter counts what a pool sends to PostgreSQL: every statement and
// every batch is one round trip; a COMMIT, or a statement or batch sent
// outside a transaction (which PostgreSQL commits on its own), is a commit.
type counter struct {
	roundTrips, commits atomic.Int64
	mu                  sync.Mutex
	inTx                map[*pgx.Conn]bool
}

func (c *counter) TraceQueryStart(ctx context.Context, conn *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.roundTrips.Add(1)
	sql := strings.ToLower(strings.TrimSpace(d.SQL))
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case strings.HasPrefix(sql, "begin"):
		c.inTx[conn] = true
	case sql == "commit":
		c.inTx[conn] = false
		c.commits.Add(1)
	case sql == "rollback":
		c.inTx[conn] = false
	case !c.inTx[conn]:
		c.commits.Add(1)
	}
	return ctx
}
func (c *counter) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}
func (c *counter) TraceBatchStart(ctx context.Context, conn *pgx.Conn, _ pgx.TraceBatchStartData) context.Context {
	c.roundTrips.Add(1)
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.inTx[conn] {
		c.commits.Add(1)
	}
	return ctx
}
func (c *counter) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}
func (c *counter) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData)     {}

func measureLedger(ctx context.Context, s *stack, n, contenders int) (LedgerCost, error) {
	cfg, err := pgxpool.ParseConfig(s.dbURL)
	if err != nil {
		return LedgerCost{}, err
	}
	cfg.MaxConns = int32(contenders + 4)
	cnt := &counter{inTx: map[*pgx.Conn]bool{}}
	cfg.ConnConfig.Tracer = cnt
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return LedgerCost{}, err
	}
	defer pool.Close()
	l := ledger.New(pool, "bench-ledger")
	var seq atomic.Int64
	seq.Store(time.Now().UnixNano() % 1e9 * 1000)
	action := func() (time.Duration, error) {
		k := seq.Add(1)
		t0 := time.Now()
		reply := supportflow.Leg{Kind: supportflow.LegReply, Target: strconv.FormatInt(k, 10)}
		r, err := l.Reserve(ctx, ledger.ReserveRequest{Key: fmt.Sprintf("bench-%d:0", k), TicketID: k, Legs: []supportflow.Leg{reply}, Claimant: "bench", Lease: time.Minute})
		if err != nil {
			return 0, err
		}
		done := ledger.LegOutcome{Kind: reply.Kind, Target: reply.Target, State: ledger.LegDone, ExternalID: reply.Target, RequestID: reply.Target}
		if _, won, err := l.Finish(ctx, r.ID, "bench", "", done); err != nil || !won {
			return 0, fmt.Errorf("record comment: won=%v err=%v", won, err)
		}
		return time.Since(t0), nil
	}
	timed := func(concurrency, total int) (Latency, error) {
		var mu sync.Mutex
		var ds []time.Duration
		var firstErr error
		began := time.Now()
		var wg sync.WaitGroup
		for range concurrency {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range total / concurrency {
					d, err := action()
					mu.Lock()
					if err != nil {
						firstErr = err
					}
					ds = append(ds, d)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return summarize(ds, concurrency, time.Since(began)), firstErr
	}
	if _, err := timed(1, 20); err != nil { // warm up
		return LedgerCost{}, err
	}
	rt0, c0 := cnt.roundTrips.Load(), cnt.commits.Load()
	alone, err := timed(1, n)
	if err != nil {
		return LedgerCost{}, err
	}
	lc := LedgerCost{Actions: n, Alone: alone,
		RoundTripsPerAction: float64(cnt.roundTrips.Load()-rt0) / float64(n),
		CommitsPerAction:    float64(cnt.commits.Load()-c0) / float64(n)}
	lc.Contended, err = timed(contenders, n)
	return lc, err
}

// Lifecycle is what one ticket's lifecycle costs in Temporal history:
// event -> enrichment -> draft -> approval -> one reply + one cancellation.
type Lifecycle struct {
	HistoryEvents map[string]int `json:"history_events"`
	TotalEvents   int            `json:"total_history_events"`
	// Actions estimates Temporal Cloud billable actions from the history:
	// workflow starts, signals, activity attempts, timers, child starts,
	// search-attribute upserts, updates and side effects. Heartbeats and
	// queries, which are not in history, come on top.
	Actions  int      `json:"actions"`
	Duration Duration `json:"duration"`
}

func measureLifecycle(ctx context.Context, s *stack) (Lifecycle, error) {
	lc := Lifecycle{HistoryEvents: map[string]int{}}
	requester := time.Now().UnixNano()%1e9 + 7e9
	ticket := s.zd.AddTicket(standin.Ticket{Subject: "Cancel", Description: "Please cancel my subscription.", RequesterID: requester, RequesterName: "Ada"})
	s.bq.AddCustomer(requester, standin.BQCustomer{CustomerID: "c-life", ActiveSubscriptions: []string{"life-sub"}})
	s.subs.AddSubscription("life-sub", "c-life")
	began := time.Now()
	wait := func(what string, cond func() bool) error {
		deadline := time.Now().Add(2 * time.Minute)
		for !cond() {
			if time.Now().After(deadline) {
				return fmt.Errorf("lifecycle: %s never happened", what)
			}
			time.Sleep(20 * time.Millisecond)
		}
		return nil
	}
	if _, err := s.starter.RecordTicketEvent(ctx, supportflow.TicketEvent{TicketID: ticket, Kind: supportflow.TicketCreated, RequesterID: requester}); err != nil {
		return lc, err
	}
	if err := wait("enrichment", func() bool {
		st, err := s.starter.EnrichmentStatus(ctx, ticket)
		return err == nil && st.State == supportflow.EnrichEnriched
	}); err != nil {
		return lc, err
	}
	if _, err := s.starter.StartDraft(ctx, ticket, "bench"); err != nil {
		return lc, err
	}
	var d supportflow.DraftStatus
	if err := wait("awaiting approval", func() bool {
		var err error
		d, err = s.starter.DraftStatus(ctx, ticket)
		return err == nil && d.State == supportflow.DraftAwaitingApproval
	}); err != nil {
		return lc, err
	}
	if _, err := s.starter.Approve(ctx, ticket, supportflow.ApproveRequest{ProposalID: d.Proposal.ID, ApprovedBy: "bench"}); err != nil {
		return lc, err
	}
	if err := wait("done", func() bool {
		st, err := s.starter.DraftStatus(ctx, ticket)
		return err == nil && st.State == supportflow.DraftDone
	}); err != nil {
		return lc, err
	}
	lc.Duration = Duration(time.Since(began))
	if s.zd.CommentCount(ticket) != 1 || s.subs.Cancellations("life-sub") != 1 {
		return lc, fmt.Errorf("lifecycle: %d comments, %d cancellations", s.zd.CommentCount(ticket), s.subs.Cancellations("life-sub"))
	}
	for name, id := range map[string]string{
		"enrich": supportflow.EnrichWorkflowID(ticket), "draft": supportflow.DraftWorkflowID(ticket),
		"execute": supportflow.ExecuteWorkflowID(d.Proposal.ID),
	} {
		it := s.temporal.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			e, err := it.Next()
			if err != nil {
				return lc, err
			}
			lc.HistoryEvents[name]++
			lc.TotalEvents++
			lc.Actions += actions(e, name == "execute")
		}
	}
	return lc, nil
}

// actions is an event's share of Temporal Cloud's billable actions.
func actions(e *historypb.HistoryEvent, child bool) int {
	switch e.GetEventType() {
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
		if child {
			return 0 // counted as the parent's child start
		}
		return 1
	case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
		return int(e.GetActivityTaskStartedEventAttributes().GetAttempt())
	case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED, enumspb.EVENT_TYPE_TIMER_STARTED,
		enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED, enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES,
		enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED, enumspb.EVENT_TYPE_MARKER_RECORDED:
		return 1
	}
	return 0
}
