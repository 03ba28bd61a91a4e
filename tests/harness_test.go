// Package tests runs supportflow end to end: a real Temporal dev server, a
// real PostgreSQL, the stand-ins for Zendesk and the subscription service
// reached through the real clients, and the worker binary as a separate OS
// process that a test can SIGKILL and restart. Durations are shrunk through
// the worker's own configuration so that heartbeat timeouts and lease
// expiries take a second or two.
package tests

import (
	"bytes"
	"cmp"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/codec"
	"github.com/supportflow/supportflow/internal/enrichment"
	"github.com/supportflow/supportflow/internal/eval"
	"github.com/supportflow/supportflow/internal/ingest"
	"github.com/supportflow/supportflow/internal/proposals"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/internal/temporalconn"
	"github.com/supportflow/supportflow/internal/testenv"
	"github.com/supportflow/supportflow/ledger"
	"github.com/supportflow/supportflow/migrations"
	"github.com/supportflow/supportflow/starter"
)

// The programs under test, built once for the package: the worker, the
// API and the codec gateway.
var workerBin, apiBin, gatewayBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "supportflow-tests-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	workerBin, apiBin, gatewayBin = filepath.Join(dir, "worker"), filepath.Join(dir, "supportflow-api"), filepath.Join(dir, "codec-gateway")
	build := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "github.com/supportflow/supportflow/worker",
		"github.com/supportflow/supportflow/cmd/supportflow-api", "github.com/supportflow/supportflow/cmd/codec-gateway")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "building the programs:", err)
		os.Exit(1)
	}
	for name, typ := range supportflow.SearchAttributes {
		testenv.SearchAttributes[name] = typ
	}
	if err := loadTestKeys(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// IDs this run owns: a long-lived Temporal server (TEMPORAL_ADDRESS)
	// keeps every earlier run's workflows, so ticket IDs (draft and
	// enrichment workflow IDs) and task queues differ per run.
	var b [8]byte
	_, _ = rand.Read(b[:])
	runNonce = hex.EncodeToString(b[:3])
	ticketIDs.Store(int64(1+binary.BigEndian.Uint64(b[:])%900_000) * 1_000_000)
	code := testenv.Main(m)
	os.RemoveAll(dir)
	os.Exit(code)
}

// runNonce names this run of the test binary (in task queues).
var runNonce string

// The payload keys the tests seal with: the published test keys the
// committed histories are replayed with (workflows/testdata/payload-keys),
// so a history recorded here replays there. keysA is key test-a alone;
// keysBA has test-b active and test-a kept for reading (a rotation).
var keysA, keysBA string

func loadTestKeys() error {
	b, err := os.ReadFile("../workflows/testdata/payload-keys")
	if err != nil {
		return err
	}
	entries := map[string]string{}
	for _, line := range strings.Split(string(b), "\n") {
		if id, _, ok := strings.Cut(line, ":"); ok && !strings.HasPrefix(line, "#") {
			entries[id] = strings.TrimSpace(line)
		}
	}
	keysA, keysBA = entries["test-a"], entries["test-b"]+","+entries["test-a"]
	_, err = codec.ParseKeyring(keysBA, "the test keys")
	return err
}

// dialTemporal dials the test server with payloads sealed by keys (an
// ID:BASE64KEY list such as keysA).
func dialTemporal(t *testing.T, keys string) (client.Client, converter.DataConverter, converter.FailureConverter) {
	t.Helper()
	return dialTemporalWith(t, temporalconn.Plain(testenv.TemporalAddress(t), ""), keys)
}

// dialTemporalWith dials the frontend conn names, as a supportflow process
// would (TLS, mTLS, API key).
func dialTemporalWith(t *testing.T, conn temporalconn.Settings, keys string) (client.Client, converter.DataConverter, converter.FailureConverter) {
	t.Helper()
	ring, err := codec.ParseKeyring(keys, "test keys")
	require.NoError(t, err)
	o := client.Options{Logger: quietLogger{}}
	require.NoError(t, conn.Apply(&o))
	codec.Apply(&o, ring)
	c, err := client.Dial(o)
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c, o.DataConverter, o.FailureConverter
}

const (
	account    = "127.0.0.1"
	zdEmail    = "agent@acme.test"
	zdToken    = "zd-secret-token"
	subsToken  = "subs-secret-token"
	modelKey   = "model-secret-key"
	bqProject  = "acme-analytics"
	lease      = 2 * time.Second
	hbTimeout  = 2 * time.Second
	waitBudget = 90 * time.Second
	// legBound is the workers' SUPPORTFLOW_UNRESOLVED_LEG_BOUND: how long
	// a settle keeps asking a receiver that cannot answer before the
	// action ends needs_attention (a day in production). Generous against
	// a loaded machine, well inside waitBudget.
	legBound = 20 * time.Second
)

// stack is one test's world: its own database, stand-ins, task queue and
// worker process, on the shared dev server.
type stack struct {
	t         *testing.T
	dbURL     string
	pool      *pgxpool.Pool
	ledger    *ledger.Ledger
	zd        *standin.Zendesk
	subs      *standin.Subscriptions
	model     *standin.Model
	bq        *standin.BigQuery
	bqSrv     *standin.Server
	zdSrv     *standin.Server
	subsSrv   *standin.Server
	modelSrv  *standin.Server
	temporal  client.Client
	starter   *starter.Starter
	taskQueue string
	// The other stores on the ledger's database and account: the
	// proposals and approvals, the ticket mirror, the enrichment
	// projection and the evaluation results.
	proposalStore *proposals.Store
	mirror        *ingest.Store
	enrichment    *enrichment.Store
	evals         *eval.Store
	// failures reads failures in histories (their messages are sealed).
	failures converter.FailureConverter
	// payloadKeys is the workers' SUPPORTFLOW_PAYLOAD_KEYS (keysA unless a
	// test rotates).
	payloadKeys string
	// zdGate and subsGate stand in front of the Zendesk and subscription
	// stand-ins: a test may answer some requests itself
	// (unavailableWhileAttempting).
	zdGate, subsGate *gate

	// extraEnv is added to the worker's environment (later entries win).
	extraEnv []string
	// bin is the worker binary the next worker runs (empty: this
	// module's, workerBin).
	bin string
	// temporalEnv is how the worker reaches Temporal (TEMPORAL_ADDRESS and,
	// on a secured server, TEMPORAL_TLS_* and TEMPORAL_API_KEY).
	temporalEnv []string

	mu      sync.Mutex
	worker  *exec.Cmd
	exited  chan struct{}
	logs    *bytes.Buffer
	workers int
}

func newStack(t *testing.T) *stack {
	t.Helper()
	return newStackOn(t, nil, nil)
}

// newStackOn is newStack on the Temporal frontend conn (nil: the shared
// test server), its workers given env to reach it.
func newStackOn(t *testing.T, conn *temporalconn.Settings, env []string) *stack {
	t.Helper()
	ctx := context.Background()
	s := &stack{t: t, dbURL: testenv.DatabaseURL(t), logs: &bytes.Buffer{}, payloadKeys: keysA}
	_, err := migrations.MigrateURL(ctx, s.dbURL)
	require.NoError(t, err)
	s.pool, err = pgxpool.New(ctx, s.dbURL)
	require.NoError(t, err)
	t.Cleanup(s.pool.Close)

	s.zd = standin.NewZendesk(zdEmail, zdToken)
	s.subs = standin.NewSubscriptions(subsToken)
	s.model = standin.NewModel(modelKey)
	s.bq = standin.NewBigQuery(bqProject)
	s.bqSrv, err = standin.Listen(s.bq, "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { s.bqSrv.Close() })
	s.modelSrv, err = standin.Listen(s.model, "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { s.modelSrv.Close() })
	s.zdGate, s.subsGate = &gate{next: s.zd}, &gate{next: s.subs}
	s.zdSrv, err = standin.Listen(s.zdGate, "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { s.zdSrv.Close() })
	s.subsSrv, err = standin.Listen(s.subsGate, "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { s.subsSrv.Close() })
	// The worker keys its ledger by the Zendesk URL's host.
	s.ledger = ledger.New(s.pool, zdHost(s.zdSrv.URL()))
	s.proposalStore = proposals.New(s.pool, s.ledger.Account())
	s.mirror = ingest.NewStore(s.pool, s.ledger.Account())
	s.enrichment = enrichment.NewStore(s.pool, s.ledger.Account())
	s.evals = eval.NewStore(s.pool, s.ledger.Account())

	var dc converter.DataConverter
	if conn == nil {
		s.temporal, dc, s.failures = dialTemporal(t, keysA)
		s.temporalEnv = []string{"TEMPORAL_ADDRESS=" + testenv.TemporalAddress(t)}
	} else {
		s.temporal, dc, s.failures = dialTemporalWith(t, *conn, keysA)
		s.temporalEnv = env
	}
	s.taskQueue = "tq-" + strings.ReplaceAll(t.Name(), "/", "-") + "-" + runNonce
	// Registered after the client's Close, so it runs before it: what the
	// test started and left running (a draft awaiting approval on a 72 h
	// timer) is terminated, so a long-lived server carries nothing of this
	// run into the next.
	t.Cleanup(func() { s.terminateLeftovers() })
	s.starter = &starter.Starter{Client: s.temporal, TaskQueue: s.taskQueue, Proposals: s.proposalStore, Approvals: s.proposalStore, Converter: dc}
	t.Cleanup(func() {
		s.stopWorker()
		if t.Failed() {
			s.mu.Lock()
			t.Logf("worker logs:\n%s", s.logs.String())
			s.mu.Unlock()
		}
	})
	return s
}

// waitClosed waits until the workflow's latest run is closed.
func (s *stack) waitClosed(workflowID string) {
	s.t.Helper()
	require.Eventually(s.t, func() bool {
		d, err := s.temporal.DescribeWorkflowExecution(context.Background(), workflowID, "")
		return err == nil && d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING
	}, waitBudget, 50*time.Millisecond, "%s closes", workflowID)
}

// terminateLeftovers terminates this test's running workflows (those on
// its task queue), as visibility lists them.
func (s *stack) terminateLeftovers() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	query := fmt.Sprintf("TaskQueue = '%s' AND ExecutionStatus = 'Running'", s.taskQueue)
	var token []byte
	for {
		resp, err := s.temporal.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{Query: query, NextPageToken: token})
		if err != nil {
			s.t.Logf("listing leftover workflows: %v", err)
			return
		}
		for _, e := range resp.GetExecutions() {
			id, run := e.GetExecution().GetWorkflowId(), e.GetExecution().GetRunId()
			if err := s.temporal.TerminateWorkflow(ctx, id, run, "test over"); err != nil {
				s.t.Logf("terminating leftover %s: %v", id, err)
			}
		}
		if token = resp.GetNextPageToken(); len(token) == 0 {
			return
		}
	}
}

func zdHost(u string) string { return strings.TrimPrefix(u, "http://") }

// startWorker starts the worker binary as its own process.
func (s *stack) startWorker() {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	require.Nil(s.t, s.worker, "a worker is already running")
	cmd, exited := s.spawnWorker()
	s.worker = cmd
	s.exited = exited
}

// startExtraWorker starts another worker process beside the stack's own
// (not stopped by killWorker); it is killed at cleanup.
func (s *stack) startExtraWorker() *exec.Cmd {
	s.t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	cmd, exited := s.spawnWorker()
	s.t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		<-exited
	})
	return cmd
}

// spawnWorker starts a worker process; s.mu must be held.
func (s *stack) spawnWorker() (*exec.Cmd, chan struct{}) {
	s.workers++
	cmd := exec.Command(cmp.Or(s.bin, workerBin))
	cmd.Env = append(os.Environ(),
		"DATABASE_URL="+s.dbURL,
		"SUPPORTFLOW_TASK_QUEUE="+s.taskQueue,
		"ZENDESK_URL="+s.zdSrv.URL(),
		"ZENDESK_EMAIL="+zdEmail,
		"ZENDESK_API_TOKEN="+zdToken,
		"SUBSCRIPTIONS_URL="+s.subsSrv.URL(),
		"SUBSCRIPTIONS_TOKEN="+subsToken,
		"MODEL_BASE_URL="+s.modelSrv.URL()+"/v1",
		"MODEL_API_KEY="+modelKey,
		"MODEL_NAME=standin-model",
		"SUPPORTFLOW_MODEL_ATTEMPT_TIMEOUT=20s",
		"BIGQUERY_ENDPOINT="+s.bqSrv.URL()+"/bigquery/v2/",
		"BIGQUERY_PROJECT="+bqProject,
		"BIGQUERY_DATASET=commerce",
		"SUPPORTFLOW_LOOKUP_ATTEMPT_TIMEOUT=10s",
		"SUPPORTFLOW_HEARTBEAT_INTERVAL=200ms",
		"SUPPORTFLOW_HEARTBEAT_TIMEOUT="+hbTimeout.String(),
		"SUPPORTFLOW_LEASE="+lease.String(),
		"SUPPORTFLOW_ZENDESK_CALL_TIMEOUT=1s",
		"SUPPORTFLOW_SUBSCRIPTION_CALL_TIMEOUT=1s",
		"SUPPORTFLOW_DEADLINE_MARGIN=3s",
		"SUPPORTFLOW_RETRY_BASE=200ms",
		"SUPPORTFLOW_RETRY_CAP=2s",
		"SUPPORTFLOW_DRAIN_TIMEOUT=1s",
		"SUPPORTFLOW_UNRESOLVED_LEG_BOUND="+legBound.String(),
		"SUPPORTFLOW_LOG_LEVEL=info",
		"SUPPORTFLOW_PAYLOAD_KEYS="+s.payloadKeys,
		// The stand-ins have no rate limits (TestLoad sets its own).
		"SUPPORTFLOW_ZENDESK_REQUESTS_PER_MINUTE=1000000", "SUPPORTFLOW_ZENDESK_CONCURRENCY=200",
		"SUPPORTFLOW_MODEL_REQUESTS_PER_MINUTE=1000000", "SUPPORTFLOW_MODEL_CONCURRENCY=200",
		"SUPPORTFLOW_BIGQUERY_REQUESTS_PER_MINUTE=1000000", "SUPPORTFLOW_BIGQUERY_CONCURRENCY=200",
		"SUPPORTFLOW_SUBSCRIPTIONS_REQUESTS_PER_MINUTE=1000000", "SUPPORTFLOW_SUBSCRIPTIONS_CONCURRENCY=200",
	)
	cmd.Env = append(cmd.Env, s.temporalEnv...)
	cmd.Env = append(cmd.Env, s.extraEnv...)
	w := &prefixWriter{mu: &s.mu, buf: s.logs, prefix: fmt.Sprintf("[worker %d] ", s.workers)}
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(s.t, cmd.Start())
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	return cmd, exited
}

// killWorker SIGKILLs the worker: no drain, no cleanup, like a crashed or
// force-redeployed machine.
func (s *stack) killWorker() {
	s.t.Helper()
	s.mu.Lock()
	cmd, exited := s.worker, s.exited
	s.worker = nil
	s.mu.Unlock()
	require.NotNil(s.t, cmd)
	require.NoError(s.t, cmd.Process.Signal(syscall.SIGKILL))
	<-exited
}

func (s *stack) stopWorker() {
	s.mu.Lock()
	cmd, exited := s.worker, s.exited
	s.worker = nil
	s.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
	}
}

// approve starts (or joins) the proposal's execution.
func (s *stack) approve(p supportflow.Proposal) starter.Execution {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e, err := s.starter.ExecuteProposal(ctx, p, "tests")
	require.NoError(s.t, err)
	return e
}

// wait blocks until the proposal's execution closes.
func (s *stack) wait(proposalID string) ([]supportflow.ActionStatus, error) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitBudget)
	defer cancel()
	return s.starter.WaitExecution(ctx, proposalID)
}

func (s *stack) action(key string) ledger.Action {
	s.t.Helper()
	a, err := s.ledger.Get(context.Background(), key)
	require.NoError(s.t, err)
	return a
}

// arrived returns a channel told when a faulted request arrives.
func arrived() chan string { return make(chan string, 8) }

func waitArrived(t *testing.T, ch chan string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(waitBudget):
		t.Fatal("the faulted request never arrived")
	}
}

type prefixWriter struct {
	mu     *sync.Mutex
	buf    *bytes.Buffer
	prefix string
}

func (w *prefixWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, line := range strings.SplitAfter(string(p), "\n") {
		if line != "" {
			w.buf.WriteString(w.prefix + line)
		}
	}
	return len(p), nil
}

type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(string, ...any)  {}
func (quietLogger) Error(string, ...any) {}

// own makes subs customer's subscriptions at the subscription stand-in and
// makes customer the requester of ticket: its mirror names the requester
// the Zendesk stand-in seeded it with, and that requester's enrichment
// lists subs. A cancellation runs only for the requester's subscriptions.
func (s *stack) own(ticket int64, customer string, subs ...string) {
	s.t.Helper()
	ctx := context.Background()
	zt, ok := s.zd.Ticket(ticket)
	require.True(s.t, ok, "ticket %d is seeded", ticket)
	requester := zt.RequesterID
	if requester == 0 {
		requester = standin.DefaultRequesterID
	}
	_, err := s.mirror.UpsertTicketMirror(ctx, ingest.TicketMirror{TicketID: ticket, Subject: zt.Subject, Status: "open",
		RequesterID: requester, UpdatedAt: time.Now()})
	require.NoError(s.t, err)
	require.NoError(s.t, s.enrichment.PutEnrichment(ctx, ticket, requester, supportflow.Enrichment{CustomerID: customer, ActiveSubscriptions: subs, LookedUpAt: time.Now()}))
	for _, sub := range subs {
		s.subs.AddSubscription(sub, customer)
	}
}

// gate is an http.Handler in front of a stand-in: while a test has set an
// interception, a request it claims is answered by it and never reaches
// the stand-in (which then neither logs nor counts it).
type gate struct {
	next      http.Handler
	intercept atomic.Pointer[func(w http.ResponseWriter, r *http.Request) bool]
}

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if f := g.intercept.Load(); f != nil && (*f)(w, r) {
		return
	}
	g.next.ServeHTTP(w, r)
}

// unavailableWhileAttempting makes the service behind g answer 503 to the
// requests match selects while an attempt of the action keyed key is at
// work on leg (the action holds a live claim) and the leg's last answer
// was lost (it is recorded unknown): the reads by which an attempt would
// learn that outcome fail, for every attempt, so the activity gives up;
// the same reads made by the settle, which holds no claim, are answered.
// It returns how many requests it refused so far.
func (s *stack) unavailableWhileAttempting(g *gate, key string, leg supportflow.Leg, match func(*http.Request) bool) (refused func() int) {
	s.t.Helper()
	var n atomic.Int64
	f := func(w http.ResponseWriter, r *http.Request) bool {
		if !match(r) {
			return false
		}
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		var attempting bool
		err := s.pool.QueryRow(ctx, `
SELECT COALESCE(a.lease_expires_at > now(), false) AND l.state = 'unknown'
FROM action a JOIN action_leg l ON l.action_id = a.id
WHERE a.account = $1 AND a.key = $2 AND l.kind = $3 AND l.target = $4`,
			s.ledger.Account(), key, string(leg.Kind), leg.Target).Scan(&attempting)
		if err != nil || !attempting {
			return false // no such row yet, or no attempt at work: the stand-in answers
		}
		n.Add(1)
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":"unavailable","message":"held down by the test","description":"held down by the test"}`))
		return true
	}
	g.intercept.Store(&f)
	s.t.Cleanup(func() { g.intercept.Store(nil) })
	return func() int { return int(n.Load()) }
}

// splitComments returns the comments posted on a ticket through the API,
// public ones (what the customer sees) and private notes apart.
func (s *stack) splitComments(ticket int64) (public, private []standin.Comment) {
	for _, c := range s.zd.Comments(ticket) {
		if c.Public {
			public = append(public, c)
		} else {
			private = append(private, c)
		}
	}
	return public, private
}
