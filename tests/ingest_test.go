package tests

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/client"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/api"
	"github.com/supportflow/supportflow/internal/ingest"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/internal/testenv"
	"github.com/supportflow/supportflow/ledger"
)

// fastReconcile makes the worker's reconciler read the exports from two
// minutes before its first run, without pacing (the stand-in's limit is
// raised to match).
var fastReconcile = []string{"SUPPORTFLOW_RECONCILE_START=2m", "SUPPORTFLOW_EXPORT_REQUESTS_PER_MINUTE=600"}

// Zendesk's documented ticket event payloads, signed as Zendesk signs
// them, go through the webhook: each is mirrored and recorded once, the
// relay hands it to the ticket's enrichment, and a redelivery changes
// nothing.
func TestIngestion_EventWebhooksAsZendeskSendsThem(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.extraEnv = []string{"SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY=100ms", "SUPPORTFLOW_ENRICH_UPDATE_DELAY=100ms"}
	s.startWorker()
	c := s.api()

	deliver := func(name string) api.WebhookAccepted {
		body, err := os.ReadFile("../internal/ingest/testdata/" + name)
		require.NoError(t, err)
		code, resp := c.do("POST", "/webhooks/zendesk", "", body, signed(time.Now(), body))
		require.Equal(t, http.StatusOK, code, "%s: %s", name, resp)
		var acc api.WebhookAccepted
		require.NoError(t, json.Unmarshal(resp, &acc))
		return acc
	}
	created := deliver("ticket_created.json")
	assert.Equal(t, api.WebhookAccepted{EventID: "cbe4028c-7239-495d-b020-f22348516046", TicketID: 5158, Mirrored: true}, created)
	m, err := s.mirror.GetTicketMirror(ctxT(t), 5158)
	require.NoError(t, err)
	assert.Equal(t, "open", m.Status)
	assert.Equal(t, "ticketinfo_2294a6e9ece2", m.Subject)
	assert.Equal(t, int64(8447388090494), m.RequesterID)
	assert.Equal(t, time.Date(2025, 1, 8, 10, 12, 7, 0, time.UTC), m.UpdatedAt.UTC())
	assert.Equal(t, m.UpdatedAt, m.LastCustomerCommentAt, "the requester opened it: the customer spoke")

	changed := deliver("ticket_status_changed.json")
	assert.True(t, changed.Mirrored)
	m, err = s.mirror.GetTicketMirror(ctxT(t), 5158)
	require.NoError(t, err)
	assert.Equal(t, "solved", m.Status)

	comment := deliver("ticket_comment_added.json")
	assert.True(t, comment.Mirrored)
	assert.False(t, comment.CustomerActivity, "a private comment is not the customer speaking")
	m, err = s.mirror.GetTicketMirror(ctxT(t), 71447)
	require.NoError(t, err)
	assert.Equal(t, "open", m.Status)
	assert.True(t, m.LastCustomerCommentAt.IsZero() && m.LastAgentCommentAt.IsZero(), "private comments do not count: %+v", m)

	type row struct {
		EventID, Type, Kind, Source string
		Ticket                      int64
	}
	rows, err := s.pool.Query(ctxT(t), `SELECT event_id, event_type, kind, source, ticket_id FROM ticket_event ORDER BY received_at`)
	require.NoError(t, err)
	var got []row
	for rows.Next() {
		var r row
		require.NoError(t, rows.Scan(&r.EventID, &r.Type, &r.Kind, &r.Source, &r.Ticket))
		got = append(got, r)
	}
	assert.Equal(t, []row{
		{"cbe4028c-7239-495d-b020-f22348516046", ingest.TypeTicketCreated, "created", "webhook", 5158},
		{"5b7c9f2e-1d1a-4c55-9a43-2f0e7d6b8c11", ingest.TypeTicketStatusChanged, "updated", "webhook", 5158},
		{"d8551ba3-4243-433c-8629-aa79dc3e7182", ingest.TypeTicketCommentAdded, "updated", "webhook", 71447},
	}, got)

	// The relay hands every event to the ticket's enrichment, which looks
	// the requester up (unknown to BigQuery here: recorded as not found).
	for _, id := range []int64{5158, 71447} {
		require.Eventually(t, func() bool {
			st, err := s.starter.EnrichmentStatus(context.Background(), id)
			return err == nil && st.State == supportflow.EnrichEnriched && st.Lookups >= 1
		}, waitBudget, 50*time.Millisecond, "ticket %d was looked up", id)
	}
	assert.Zero(t, s.count(`SELECT count(*) FROM ticket_event WHERE dispatched_at IS NULL`), "every event was dispatched")

	// Redelivered (Zendesk retries, duplicates): 200, nothing changes.
	before := s.world(5158, 71447)
	again := deliver("ticket_created.json")
	assert.True(t, again.Duplicate)
	assert.Equal(t, before, s.world(5158, 71447))
}

// Deliveries duplicated, overtaken by later ones, and taken but answered
// too late for Zendesk (so it delivers again): each event is recorded and
// applied once, the mirror ends as Zendesk has the ticket, and each ticket
// gets one lookup.
func TestIngestion_DuplicatedReorderedAndLostAnswers(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	// Delays long enough that each ticket's events merge into one lookup,
	// so an extra lookup could only come from a repeated event.
	s.extraEnv = []string{"SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY=4s", "SUPPORTFLOW_ENRICH_UPDATE_DELAY=4s"}
	s.startWorker()
	c := s.api()
	c.subscribe(standin.WebhookConfig{RetryDelay: 100 * time.Millisecond})
	s.zd.InjectWebhookFault(standin.WebhookFault{Type: "ticket.created", Delay: 1500 * time.Millisecond, Times: 1})
	s.zd.InjectWebhookFault(standin.WebhookFault{Type: "comment_added", Duplicate: true, Times: 1})
	s.zd.InjectWebhookFault(standin.WebhookFault{Type: "comment_added", LoseAnswer: true, Times: 1})

	var ids []int64
	for i := range 2 {
		requester := 62000 + ticketIDs.Add(1)
		tk := standin.Ticket{ID: 62000 + ticketIDs.Add(1), Subject: "Parcel", Description: "Where is it?", RequesterID: requester, Status: "pending"}
		s.bq.AddCustomer(requester, standin.BQCustomer{CustomerID: fmt.Sprint("c-dup-", i)})
		s.zd.AddTicket(tk)
		ids = append(ids, tk.ID)
	}
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	for _, id := range ids {
		s.zd.AddComment(id, standin.SeedComment{Body: "Hello?"}) // reopens the ticket
	}
	waitCtx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()
	require.NoError(t, s.zd.WaitWebhooks(waitCtx))
	st := s.zd.WebhookStats()
	assert.Greater(t, st.Attempts, st.Events, "some events were delivered more than once: %+v", st)
	assert.Zero(t, st.Lost)

	for _, id := range ids {
		assert.Equal(t, 3, s.count(`SELECT count(*) FROM ticket_event WHERE ticket_id = $1`, id), "created, comment_added, status_changed: once each")
		m, err := s.mirror.GetTicketMirror(ctxT(t), id)
		require.NoError(t, err)
		zt, _ := s.zd.Ticket(id)
		assert.Equal(t, "open", m.Status, "the late created event did not roll the ticket back")
		assert.Equal(t, zt.RequesterID, m.RequesterID)
		assert.False(t, m.LastCustomerCommentAt.IsZero())
		require.Eventually(t, func() bool {
			e, err := s.starter.EnrichmentStatus(context.Background(), id)
			return err == nil && e.State == supportflow.EnrichEnriched && e.Found
		}, waitBudget, 50*time.Millisecond)
	}
	time.Sleep(time.Second)
	for _, id := range ids {
		assert.Equal(t, 1, s.count(`SELECT count(*) FROM enrichment_run WHERE ticket_id = $1`, id), "one lookup for ticket %d", id)
	}
}

// PostgreSQL out of reach while Zendesk delivers: the webhook answers 503
// with a Retry-After under 60 s, Zendesk's retry lands once the database
// is back, and the event has exactly one effect.
func TestIngestion_TransientFailureAsksZendeskToRetry(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.extraEnv = []string{"SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY=100ms", "SUPPORTFLOW_ENRICH_UPDATE_DELAY=100ms"}
	s.startWorker()

	// The API reaches PostgreSQL through a proxy the test can cut: a real
	// outage from the API's side, nothing mocked.
	u, err := url.Parse(s.dbURL)
	require.NoError(t, err)
	proxy := newTCPProxy(t, u.Host)
	u.Host = proxy.addr
	pool, err := pgxpool.New(ctxT(t), u.String())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	srv, err := api.New(api.Config{Tokens: apiTokens, WebhookSecret: webhookSecret, ZendeskUserID: standin.ZendeskAgentID,
		WebhookRetryAfter: 2 * time.Second, RelayInterval: 200 * time.Millisecond},
		s.starter, ledger.New(pool, s.ledger.Account()), pool, s.temporal, nil)
	require.NoError(t, err)
	c := serveAPI(t, srv)
	c.s = s
	c.subscribe(standin.WebhookConfig{RetryDelay: 200 * time.Millisecond})

	requester := 60000 + ticketIDs.Add(1)
	tk := standin.Ticket{ID: 60000 + ticketIDs.Add(1), Subject: "Refund", Description: "Please refund me.", RequesterID: requester}
	s.bq.AddCustomer(requester, standin.BQCustomer{CustomerID: "c-retry"})
	proxy.stop()
	s.zd.AddTicket(tk)
	require.Eventually(t, func() bool { return s.zd.WebhookStats().ByStatus[http.StatusServiceUnavailable] >= 1 },
		waitBudget, 20*time.Millisecond, "the webhook answered 503 while PostgreSQL was out of reach")
	proxy.start()

	waitCtx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()
	require.NoError(t, s.zd.WaitWebhooks(waitCtx))
	stats := s.zd.WebhookStats()
	assert.Equal(t, 1, stats.Delivered, "Zendesk's retry landed: %+v", stats)
	assert.Zero(t, stats.Lost, "%+v", stats)
	assert.Equal(t, 1, s.count(`SELECT count(*) FROM ticket_event WHERE ticket_id = $1`, tk.ID), "one event recorded")
	s.waitMirrored(tk.ID)
	s.waitEnriched(tk.ID)
	time.Sleep(500 * time.Millisecond) // a second lookup, if any, would follow within the delay
	assert.Equal(t, 1, s.count(`SELECT count(*) FROM enrichment_run WHERE ticket_id = $1`, tk.ID), "exactly one lookup")
}

// Live mode with Zendesk echoing supportflow's own writes as events: the
// enrichment's private note and the approved public reply come back as
// ticket.comment_added by the API user. Over 40 update delays (80 minutes
// at the product's 2-minute delay) the ticket gets one note and one lookup,
// and the reply supersedes nothing.
func TestIngestion_OwnWritesDoNotLoop(t *testing.T) {
	t.Parallel()
	s := newStack(t)
	s.extraEnv = append([]string{"SUPPORTFLOW_ENRICHMENT_MODE=live", "SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY=200ms",
		"SUPPORTFLOW_ENRICH_UPDATE_DELAY=200ms"}, fastReconcile...)
	s.zd.SetExports(standin.ExportConfig{Lag: time.Second, Limit: 1000})
	s.startWorker()
	c := s.api()
	c.subscribe(standin.WebhookConfig{})

	requester := 61000 + ticketIDs.Add(1)
	tk := standin.Ticket{ID: 61000 + ticketIDs.Add(1), Subject: "Cancel", Description: "Cancel my plan, please.", RequesterID: requester}
	s.bq.AddCustomer(requester, standin.BQCustomer{CustomerID: "c-loop", Orders: 2, ActiveSubscriptions: []string{"sub-loop"}})
	s.subs.AddSubscription("sub-loop", "c-loop")
	s.zd.AddTicket(tk)

	require.Eventually(t, func() bool { return s.zd.CommentCount(tk.ID) == 1 }, waitBudget, 50*time.Millisecond, "the live note was posted")
	time.Sleep(40 * 200 * time.Millisecond)
	assert.Equal(t, 1, s.zd.CommentCount(tk.ID), "one note: its echo scheduled nothing")
	assert.Equal(t, 1, s.count(`SELECT count(*) FROM enrichment_run WHERE ticket_id = $1`, tk.ID), "one lookup")
	assert.Equal(t, 1, s.count(`SELECT count(*) FROM ticket_event WHERE ticket_id = $1 AND own_write`, tk.ID), "the note's echo was recorded as our own")

	// Draft, approve: the public reply's echo supersedes nothing and
	// schedules no lookup.
	code, resp := c.do("POST", fmt.Sprintf("/tickets/%d/drafts", tk.ID), apiToken, nil, nil)
	require.Equal(t, http.StatusAccepted, code, "%s", resp)
	st := s.waitState(tk.ID, supportflow.DraftAwaitingApproval)
	code, resp = c.do("POST", "/proposals/"+st.Proposal.ID+"/approve", apiToken, nil, nil)
	require.Equal(t, http.StatusOK, code, "%s", resp)
	s.waitState(tk.ID, supportflow.DraftDone)
	waitCtx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()
	require.NoError(t, s.zd.WaitWebhooks(waitCtx))
	time.Sleep(40 * 200 * time.Millisecond)
	assert.Equal(t, 2, s.zd.CommentCount(tk.ID), "the note and the reply, nothing more")
	assert.Equal(t, 1, s.count(`SELECT count(*) FROM enrichment_run WHERE ticket_id = $1`, tk.ID), "still one lookup")
	assert.Equal(t, 1, s.proposals(tk.ID), "the reply's echo superseded nothing")
	assert.Zero(t, s.count(`SELECT count(*) FROM ticket_event WHERE ticket_id = $1 AND customer_activity`, tk.ID))

	// The reconciler, reading the same changes from the exports, repairs
	// nothing: the webhooks delivered them all.
	res, err := s.reconcilePass("own-writes")
	require.NoError(t, err)
	assert.NotContains(t, res.RepairedTickets, tk.ID)
	assert.Equal(t, 1, s.count(`SELECT count(*) FROM enrichment_run WHERE ticket_id = $1`, tk.ID), "still one lookup")
}

// 200 tickets, each opened and then written to again by its customer,
// while Zendesk drops 20% of deliveries and the API process is SIGKILLed
// mid-delivery six times (three in each burst). The reconciler repairs
// what was lost, although the worker is SIGKILLed during its pass (it
// goes on from the pages it saved): every ticket ends mirrored with its
// customer's last comment, enriched, and drafted exactly once.
func TestIngestion_LostDeliveriesAreRepaired(t *testing.T) {
	t.Parallel()
	const tickets = 200
	s := newStack(t)
	s.extraEnv = append([]string{"SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY=300ms", "SUPPORTFLOW_ENRICH_UPDATE_DELAY=300ms"}, fastReconcile...)
	// Pages of 100 events: the pass reads several, and the worker dies
	// in the middle of them.
	s.zd.SetExports(standin.ExportConfig{Lag: time.Second, Limit: 1000, EventsPageLimit: 100})
	s.startWorker()
	a := s.startAPIProcess()
	s.zd.SetWebhook(standin.WebhookConfig{URL: a.url + "/webhooks/zendesk", Secret: webhookSecret, DropRate: 0.2, Seed: 11,
		RetryDelay: 200 * time.Millisecond, Timeout: 3 * time.Second})

	base := 70000 + ticketIDs.Add(tickets*2)
	ids := make([]int64, tickets)
	for i := range ids {
		requester := base*10 + int64(i)
		ids[i] = base + int64(i)
		s.bq.AddCustomer(requester, standin.BQCustomer{CustomerID: fmt.Sprintf("c-%d", i)})
		s.zd.AddTicket(standin.Ticket{ID: ids[i], Subject: "Where is my order?", Description: "It has not arrived.", RequesterID: requester})
		if i%60 < 25 || i%60 > 30 {
			time.Sleep(15 * time.Millisecond)
		}
		if i%60 == 30 { // right after a burst of six: deliveries in flight
			a.kill() // mid-delivery: the deliveries in flight are cut off
			time.Sleep(100 * time.Millisecond)
			a.restart()
		}
	}
	// Zendesk's times are whole seconds: the customers write again a
	// second later.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	for i, id := range ids {
		s.zd.AddComment(id, standin.SeedComment{Body: "Any news?"})
		if i%60 < 40 || i%60 > 45 {
			time.Sleep(15 * time.Millisecond)
		}
		if i%60 == 45 {
			a.kill()
			time.Sleep(100 * time.Millisecond)
			a.restart()
		}
	}
	waitCtx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()
	require.NoError(t, s.zd.WaitWebhooks(waitCtx))
	stats := s.zd.WebhookStats()
	t.Logf("webhooks: %d events, %d delivered, %d lost (%v)", stats.Events, stats.Delivered, stats.Lost, stats.ByStatus)
	require.Greater(t, stats.Lost, tickets/10, "deliveries were lost")
	require.Positive(t, stats.ByStatus[-1], "the kills cut deliveries off mid-flight")

	// Past the exports' lag, the reconciler repairs what the webhooks lost.
	// Its third event page is held up and the worker SIGKILLed meanwhile:
	// the activity's next attempt goes on from the pages saved.
	time.Sleep(1500 * time.Millisecond)
	var eventPages atomic.Int32
	held := make(chan struct{}, 1)
	hold := func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path != "/api/v2/incremental/ticket_events.json" || eventPages.Add(1) != 3 {
			return false
		}
		held <- struct{}{}
		time.Sleep(3 * time.Second)
		w.WriteHeader(http.StatusServiceUnavailable)
		return true
	}
	s.zdGate.intercept.Store(&hold)
	t.Cleanup(func() { s.zdGate.intercept.Store(nil) })
	killed := make(chan struct{})
	go func() {
		defer close(killed)
		select {
		case <-held:
			s.killWorker()
			s.startWorker()
		case <-time.After(3 * waitBudget):
		}
	}()
	repaired := 0
	for pass := range 3 {
		// A workflow ID of this test's own (the on-demand ID is shared by
		// every stack on the server).
		res, err := s.reconcilePass(fmt.Sprintf("lost-%d", pass))
		require.NoError(t, err)
		repaired += res.Repaired
		t.Logf("reconcile: %+v", struct{ Read, Events, Requests, Repaired int }{res.TicketsRead, res.EventsRead, res.Requests, res.Repaired})
		if pass == 0 {
			<-killed
			require.GreaterOrEqual(t, eventPages.Load(), int32(3), "the worker was killed during the pass")
		}
		if res.CaughtUp {
			break
		}
	}
	s.zdGate.intercept.Store(nil)
	assert.Greater(t, repaired, 0, "the reconciler repaired lost deliveries")

	for i, id := range ids {
		m, err := s.mirror.GetTicketMirror(ctxT(t), id)
		require.NoError(t, err, "ticket %d is mirrored", id)
		zt, _ := s.zd.Ticket(id)
		assert.Equal(t, zt.RequesterID, m.RequesterID)
		assert.False(t, m.LastCustomerCommentAt.IsZero(), "ticket %d (%d): the customer's comment is known: %+v", id, i, m)
		assert.True(t, m.LastCustomerCommentAt.After(m.LastAgentCommentAt))
	}
	// Every ticket is enriched, then one scan drafts each once.
	require.Eventually(t, func() bool {
		return s.count(`SELECT count(*) FROM ticket_enrichment WHERE ticket_id = ANY($1)`, ids) == tickets
	}, 3*waitBudget, 200*time.Millisecond, "every ticket was enriched")
	for _, round := range []string{"1", "2"} {
		run, err := s.temporal.ExecuteWorkflow(ctxT(t), clientStart("scan-"+round+"-"+t.Name()+"-"+runNonce, s.taskQueue),
			supportflow.ScanTicketsWorkflow, supportflow.ScanRequest{Limit: tickets})
		require.NoError(t, err)
		var res supportflow.ScanResult
		// Starting 200 drafts takes a while on a busy server.
		scanCtx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		require.NoError(t, run.Get(scanCtx, &res))
		cancel()
	}
	require.Eventually(t, func() bool {
		return s.count(`SELECT count(*) FROM proposal WHERE ticket_id = ANY($1)`, ids) == tickets
	}, 3*waitBudget, 200*time.Millisecond, "every ticket was drafted")
	time.Sleep(time.Second)
	assert.Equal(t, tickets, s.count(`SELECT count(DISTINCT ticket_id) FROM proposal WHERE ticket_id = ANY($1)`, ids), "drafted once each")
	assert.Equal(t, tickets, s.count(`SELECT count(*) FROM proposal WHERE ticket_id = ANY($1)`, ids), "drafted once each")
	// Events a killed API process had claimed are dispatched by another
	// relay once their claim's lease lapses.
	require.Eventually(t, func() bool {
		return s.count(`SELECT count(*) FROM ticket_event WHERE dispatched_at IS NULL AND NOT own_write`) == 0
	}, waitBudget, 200*time.Millisecond, "every recorded event was dispatched")
}

// apiProcess is `supportflow-api` as its own OS process on a fixed port, so a
// test can SIGKILL it and start it again at the same address.
type apiProcess struct {
	s    *stack
	addr string
	url  string
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{}
}

func (s *stack) startAPIProcess() *apiProcess {
	s.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(s.t, err)
	addr := ln.Addr().String()
	require.NoError(s.t, ln.Close())
	a := &apiProcess{s: s, addr: addr, url: "http://" + addr}
	a.restart()
	s.t.Cleanup(func() {
		a.mu.Lock()
		defer a.mu.Unlock()
		if a.cmd != nil {
			_ = a.cmd.Process.Signal(syscall.SIGTERM)
			<-a.done
		}
	})
	return a
}

func (a *apiProcess) restart() {
	a.s.t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	cmd := exec.Command(apiBin)
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+a.s.dbURL,
		"TEMPORAL_ADDRESS="+a.s.temporalAddress(),
		"SUPPORTFLOW_TASK_QUEUE="+a.s.taskQueue,
		"SUPPORTFLOW_ACCOUNT="+a.s.ledger.Account(),
		"SUPPORTFLOW_API_ADDR="+a.addr,
		"SUPPORTFLOW_API_TOKENS="+apiTokensEnv(),
		"ZENDESK_WEBHOOK_SECRET="+webhookSecret,
		fmt.Sprintf("ZENDESK_API_USER_ID=%d", standin.ZendeskAgentID),
		"SUPPORTFLOW_WEBHOOK_RETRY_AFTER=1s",
		"SUPPORTFLOW_RELAY_INTERVAL=200ms",
		"SUPPORTFLOW_METRICS_ADDR=",
		"SUPPORTFLOW_LOG_LEVEL=warn",
		"SUPPORTFLOW_PAYLOAD_KEYS="+a.s.payloadKeys,
	)
	w := &prefixWriter{mu: &a.s.mu, buf: a.s.logs, prefix: "[api] "}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(a.s.t, cmd.Start())
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	a.cmd, a.done = cmd, done
	require.Eventually(a.s.t, func() bool {
		resp, err := http.Get(a.url + "/healthz")
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}, 30*time.Second, 20*time.Millisecond, "the API process listens")
}

// kill SIGKILLs the API: requests in flight are cut off unanswered.
func (a *apiProcess) kill() {
	a.s.t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	require.NoError(a.s.t, a.cmd.Process.Signal(syscall.SIGKILL))
	<-a.done
	a.cmd = nil
}

// serveAPI serves srv on a loopback listener with its relay running.
func serveAPI(t *testing.T, srv *api.Server) *apiClient {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	hs := &http.Server{Handler: srv}
	go func() { _ = hs.Serve(ln) }()
	relayDone := make(chan struct{})
	go func() { srv.RunRelay(context.Background()); close(relayDone) }()
	t.Cleanup(func() { _ = hs.Close(); srv.Close(); <-relayDone })
	return &apiClient{t: t, url: "http://" + ln.Addr().String()}
}

// tcpProxy forwards connections to a target until stopped; stop closes
// its listener and every open connection, start listens again on the same
// address.
type tcpProxy struct {
	t      *testing.T
	addr   string
	target string
	mu     sync.Mutex
	ln     net.Listener
	conns  map[net.Conn]bool
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	p := &tcpProxy{t: t, target: target, conns: map[net.Conn]bool{}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p.addr = ln.Addr().String()
	p.serve(ln)
	t.Cleanup(p.stop)
	return p
}

func (p *tcpProxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				in.Close()
				continue
			}
			p.mu.Lock()
			p.conns[in], p.conns[out] = true, true
			p.mu.Unlock()
			go func() { _, _ = io.Copy(out, in); out.Close() }()
			go func() { _, _ = io.Copy(in, out); in.Close() }()
		}
	}()
}

func (p *tcpProxy) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
	p.conns = map[net.Conn]bool{}
}

func (p *tcpProxy) start() {
	ln, err := net.Listen("tcp", p.addr)
	require.NoError(p.t, err)
	p.serve(ln)
}

func (s *stack) temporalAddress() string { return testenv.TemporalAddress(s.t) }

func clientStart(id, taskQueue string) client.StartWorkflowOptions {
	return client.StartWorkflowOptions{ID: id, TaskQueue: taskQueue}
}
