package main

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/codec"
	"github.com/supportflow/supportflow/internal/devenv"
	"github.com/supportflow/supportflow/internal/policy"
	"github.com/supportflow/supportflow/internal/proposals"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/internal/temporalconn"
	"github.com/supportflow/supportflow/migrations"
	"github.com/supportflow/supportflow/starter"
)

// stack is the local stack the bench runs on: PostgreSQL, the Temporal dev
// server (in memory, one task-queue partition), the stand-ins answering
// with no added latency, and the worker binary as its own process.
type stack struct {
	log      io.Writer
	dbURL    string
	pool     *pgxpool.Pool
	temporal client.Client
	address  string
	// namespace is the Temporal namespace the client uses.
	namespace string
	starter   *starter.Starter
	zd        *standin.Zendesk
	subs      *standin.Subscriptions
	bq        *standin.BigQuery
	model     *standin.Model
	env       []string
	bin       string
	worker    *exec.Cmd
	exited    chan struct{}
	stops     []func()
}

// dynamicConfig is the dev server's tuning for the run. Eager activity
// dispatch hands a workflow's first activity to the worker in the answer
// to the workflow task that schedules it, skipping a trip through
// matching: it took the no-op floor's p50 from 150 ms to 100 ms and
// approve -> posted from 93 ms to 51 ms here. -dynamic-config KEY=VALUE
// adds or overrides values.
var dynamicConfig = map[string]string{"system.enableActivityEagerExecution": "true"}

// externalTemporal is -temporal: the real-server column runs against it
// instead of a server the bench starts.
var externalTemporal string

const (
	benchQueue = "bench"
	zdEmail    = "bench@example.test"
	zdToken    = "bench-zendesk-token"
	subsToken  = "bench-subscriptions-token"
)

func startStack(ctx context.Context, log io.Writer, topology string) (_ *stack, err error) {
	s := &stack{log: log}
	defer func() {
		if err != nil {
			s.stop()
		}
	}()
	fmt.Fprintln(log, "bench: starting PostgreSQL and the Temporal dev server")
	pg, err := devenv.StartPostgres(ctx, devenv.PostgresOptions{Log: io.Discard})
	if err != nil {
		return nil, err
	}
	s.stops = append(s.stops, func() { _ = pg.Stop() })
	dbURL, _, err := devenv.CreateDatabase(ctx, pg.URL)
	if err != nil {
		return nil, err
	}
	s.dbURL = dbURL
	if _, err := migrations.MigrateURL(ctx, dbURL); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dbURL)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 80
	if s.pool, err = pgxpool.NewWithConfig(ctx, cfg); err != nil {
		return nil, err
	}
	s.stops = append(s.stops, s.pool.Close)
	switch {
	case topology == "dev":
		tmp, err := devenv.StartTemporal(ctx, devenv.TemporalOptions{SearchAttributes: supportflow.SearchAttributes, Log: io.Discard, Progress: log,
			DynamicConfig: dynamicConfig})
		if err != nil {
			return nil, err
		}
		s.stops = append(s.stops, func() { _ = tmp.Stop() })
		s.address = tmp.Address
	case externalTemporal != "":
		fmt.Fprintf(log, "bench: using the Temporal server at %s\n", externalTemporal)
		s.address = externalTemporal
	default:
		fmt.Fprintln(log, "bench: starting the Temporal server on PostgreSQL (what compose deploys)")
		tmp, err := devenv.StartTemporalServer(ctx, devenv.TemporalServerOptions{PostgresURL: pg.URL,
			SearchAttributes: supportflow.SearchAttributes, Log: io.Discard, Progress: log})
		if err != nil {
			return nil, err
		}
		s.stops = append(s.stops, func() { _ = tmp.Stop() })
		s.address = tmp.Address
	}
	// Payloads are sealed as in production: the figures include the codec.
	key := make([]byte, codec.KeySize)
	_, _ = rand.Read(key)
	keysEnv := "bench:" + base64.StdEncoding.EncodeToString(key)
	keys, err := codec.ParseKeyring(keysEnv, "bench")
	if err != nil {
		return nil, err
	}
	// A Temporal of the caller's (TEMPORAL_ADDRESS) is reached as every
	// supportflow process reaches it: TLS, mTLS and API key from the
	// environment (temporalconn), passed on to the workers too.
	conn := temporalconn.Plain(s.address, "")
	if externalTemporal != "" {
		if conn, err = temporalconn.FromEnv(os.Getenv); err != nil {
			return nil, err
		}
		conn.Address = s.address
	}
	s.namespace = conn.Namespace
	o, err := conn.ClientOptions(sdklog.NewStructuredLogger(quietLogger()), keys)
	if err != nil {
		return nil, err
	}
	if s.temporal, err = client.DialContext(ctx, o); err != nil {
		return nil, err
	}
	s.stops = append(s.stops, s.temporal.Close)
	s.starter = &starter.Starter{Client: s.temporal, TaskQueue: benchQueue, Converter: o.DataConverter}

	s.zd, s.subs, s.bq, s.model = standin.NewZendesk(zdEmail, zdToken), standin.NewSubscriptions(subsToken), standin.NewBigQuery("bench"), standin.NewModel("")
	urls := map[string]string{}
	for _, sv := range []struct {
		name string
		h    http.Handler
	}{{"zd", s.zd}, {"subs", s.subs}, {"bq", s.bq}, {"model", s.model}} {
		srv, err := standin.Listen(sv.h, "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		s.stops = append(s.stops, func() { srv.Close() })
		urls[sv.name] = srv.URL()
	}
	dir, err := os.MkdirTemp("", "supportflow-bench-")
	if err != nil {
		return nil, err
	}
	s.stops = append(s.stops, func() { os.RemoveAll(dir) })
	s.bin = filepath.Join(dir, "worker")
	fmt.Fprintln(log, "bench: building the worker")
	// The worker is built in the product's own module, with its go.sum.
	root, err := exec.CommandContext(ctx, "go", "list", "-m", "-f", "{{.Dir}}", "github.com/supportflow/supportflow").Output()
	if err != nil {
		return nil, fmt.Errorf("finding the supportflow module: %w", err)
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", s.bin, "./worker")
	build.Dir = strings.TrimSpace(string(root))
	build.Stdout, build.Stderr = log, log
	if err := build.Run(); err != nil {
		return nil, fmt.Errorf("building the worker: %w", err)
	}
	s.env = []string{
		"DATABASE_URL=" + dbURL, "TEMPORAL_ADDRESS=" + s.address, "SUPPORTFLOW_TASK_QUEUE=" + benchQueue,
		"ZENDESK_URL=" + urls["zd"], "ZENDESK_EMAIL=" + zdEmail, "ZENDESK_API_TOKEN=" + zdToken,
		"SUBSCRIPTIONS_URL=" + urls["subs"], "SUBSCRIPTIONS_TOKEN=" + subsToken,
		"MODEL_BASE_URL=" + urls["model"] + "/v1", "MODEL_NAME=standin",
		"BIGQUERY_ENDPOINT=" + urls["bq"] + "/bigquery/v2/", "BIGQUERY_PROJECT=bench", "BIGQUERY_DATASET=commerce",
		"SUPPORTFLOW_METRICS_ADDR=", "SUPPORTFLOW_LOG_LEVEL=warn", "SUPPORTFLOW_DRAIN_TIMEOUT=2s",
		codec.EnvKeys + "=" + keysEnv,
	}
	if externalTemporal != "" {
		for _, v := range temporalconn.Vars {
			if val, ok := os.LookupEnv(v.Name); ok && v.Name != temporalconn.EnvAddress {
				s.env = append(s.env, v.Name+"="+val)
			}
		}
	}
	// The stand-ins have no rate limits: measure the engine, not a plan.
	for _, r := range policy.Resources {
		up := strings.ToUpper(r)
		s.env = append(s.env, "SUPPORTFLOW_"+up+"_REQUESTS_PER_MINUTE=1000000", "SUPPORTFLOW_"+up+"_CONCURRENCY=500")
	}
	// Approvals go where the worker's legs check them: its account.
	s.starter.Approvals = proposals.New(s.pool, s.account())
	return s, nil
}

// account is the ledger account the worker derives from ZENDESK_URL.
func (s *stack) account() string {
	for _, kv := range s.env {
		if u, ok := strings.CutPrefix(kv, "ZENDESK_URL=http://"); ok {
			return u
		}
	}
	return ""
}

// startWorker starts the worker binary with the bench's environment plus
// extra settings.
func (s *stack) startWorker(extra ...string) error {
	cmd := exec.Command(s.bin)
	cmd.Env = append(append(os.Environ(), s.env...), extra...)
	cmd.Stdout, cmd.Stderr = s.log, s.log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return err
	}
	s.worker, s.exited = cmd, make(chan struct{})
	go func(exited chan struct{}) { _ = cmd.Wait(); close(exited) }(s.exited)
	return nil
}

func (s *stack) stopWorker() {
	if s.worker == nil {
		return
	}
	_ = s.worker.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		_ = s.worker.Process.Kill()
		<-s.exited
	}
	s.worker = nil
}

func (s *stack) stop() {
	s.stopWorker()
	for i := len(s.stops) - 1; i >= 0; i-- {
		s.stops[i]()
	}
}
