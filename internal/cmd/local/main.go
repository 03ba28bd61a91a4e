// Command local runs supportflow on one machine: a throwaway PostgreSQL
// (or DATABASE_URL), the Temporal dev server with its Web UI and
// supportflow's search attributes (or TEMPORAL_ADDRESS), stand-ins for
// Zendesk, the subscription service and the model (or the real ones, as
// soon as ZENDESK_URL/ZENDESK_SUBDOMAIN, SUBSCRIPTIONS_URL and
// MODEL_BASE_URL are set), the worker and the scan schedule. With the
// stand-ins it seeds demo tickets: one is drafted, approved and executed
// end to end, one is left awaiting approval. It then prints what to open
// and waits for Ctrl-C, which stops everything, letting the worker drain.
//
//	go run ./internal/cmd/local          run until Ctrl-C
//	go run ./internal/cmd/local -once    run the demo, check it, exit
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/config"
	"github.com/supportflow/supportflow/internal/devenv"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/internal/workerapp"
	"github.com/supportflow/supportflow/ledger"
	"github.com/supportflow/supportflow/migrations"
	"github.com/supportflow/supportflow/starter"
)

func main() {
	once := flag.Bool("once", false, "run the demo proposal, verify it, and exit")
	stateDir := flag.String("state", ".local", "directory for the dev server's history and logs (kept across runs)")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: go run ./internal/cmd/local [-once] [-state DIR]\n\n")
		flag.PrintDefaults()
		fmt.Fprintf(os.Stderr, "\nEnvironment (unset services are started locally or replaced by stand-ins):\n")
		config.PrintHelp(os.Stderr)
	}
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *once, *stateDir); err != nil {
		fmt.Fprintln(os.Stderr, "local:", err)
		os.Exit(1)
	}
}

func say(format string, args ...any) { fmt.Printf("==> "+format+"\n", args...) }

func run(ctx context.Context, once bool, stateDir string) error {
	if err := os.MkdirAll(stateDir, 0o755); err != nil {
		return err
	}
	logFile, err := os.OpenFile(filepath.Join(stateDir, "local.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logFile.Close()
	logger := config.NewLogger(logFile, "info")

	var cleanups []func()
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			cleanups[i]()
		}
	}()

	if os.Getenv("DATABASE_URL") == "" {
		say("starting a throwaway PostgreSQL")
		pg, err := devenv.StartPostgres(ctx, devenv.PostgresOptions{Durable: true, Log: logFile})
		if err != nil {
			return err
		}
		cleanups = append(cleanups, func() { say("stopping PostgreSQL"); _ = pg.Stop() })
		os.Setenv("DATABASE_URL", pg.URL)
	}
	uiURL := ""
	if os.Getenv("TEMPORAL_ADDRESS") == "" {
		say("starting the Temporal dev server with its Web UI (the CLI is built on first use: a few minutes)")
		dbFile, _ := filepath.Abs(filepath.Join(stateDir, "temporal.db"))
		tmp, err := devenv.StartTemporal(ctx, devenv.TemporalOptions{
			UI: true, DBFile: dbFile, Log: logFile, Progress: os.Stdout, SearchAttributes: supportflow.SearchAttributes,
		})
		if err != nil {
			return err
		}
		cleanups = append(cleanups, func() { say("stopping the Temporal dev server"); _ = tmp.Stop() })
		os.Setenv("TEMPORAL_ADDRESS", tmp.Address)
		uiURL = tmp.UIURL
	}

	zd := standin.NewZendesk("agent@example.test", "local-zendesk-token")
	subs := standin.NewSubscriptions("local-subscriptions-token")
	usingStandins := false
	if os.Getenv("ZENDESK_URL") == "" && os.Getenv("ZENDESK_SUBDOMAIN") == "" {
		srv, err := standin.Listen(zd, "127.0.0.1:0")
		if err != nil {
			return err
		}
		cleanups = append(cleanups, func() { srv.Close() })
		os.Setenv("ZENDESK_URL", srv.URL())
		os.Setenv("ZENDESK_EMAIL", "agent@example.test")
		os.Setenv("ZENDESK_API_TOKEN", "local-zendesk-token")
		say("Zendesk stand-in at %s", srv.URL())
		usingStandins = true
	}
	if os.Getenv("SUBSCRIPTIONS_URL") == "" {
		srv, err := standin.Listen(subs, "127.0.0.1:0")
		if err != nil {
			return err
		}
		cleanups = append(cleanups, func() { srv.Close() })
		os.Setenv("SUBSCRIPTIONS_URL", srv.URL())
		os.Setenv("SUBSCRIPTIONS_TOKEN", "local-subscriptions-token")
		say("subscription-service stand-in at %s", srv.URL())
	}

	if os.Getenv("MODEL_BASE_URL") == "" {
		srv, err := standin.Listen(standin.NewModel("local-model-key"), "127.0.0.1:0")
		if err != nil {
			return err
		}
		cleanups = append(cleanups, func() { srv.Close() })
		os.Setenv("MODEL_BASE_URL", srv.URL()+"/v1")
		os.Setenv("MODEL_API_KEY", "local-model-key")
		os.Setenv("MODEL_NAME", "standin")
		say("model stand-in at %s", srv.URL())
	}

	bq := standin.NewBigQuery("local-analytics")
	if os.Getenv("BIGQUERY_PROJECT") == "" {
		srv, err := standin.Listen(bq, "127.0.0.1:0")
		if err != nil {
			return err
		}
		cleanups = append(cleanups, func() { srv.Close() })
		os.Setenv("BIGQUERY_ENDPOINT", srv.URL()+"/bigquery/v2/")
		os.Setenv("BIGQUERY_PROJECT", "local-analytics")
		os.Setenv("BIGQUERY_DATASET", "commerce")
		say("BigQuery stand-in at %s", srv.URL())
	}

	cfg, err := config.LoadWorker()
	if err != nil {
		return err
	}
	// Migrate before anything reads the schema; the worker's own migration
	// then finds nothing to do.
	if _, err := migrations.MigrateURL(ctx, cfg.DatabaseURL); err != nil {
		return err
	}
	workerCtx, stopWorker := context.WithCancel(context.Background())
	workerDone := make(chan error, 1)
	go func() { workerDone <- workerapp.Run(workerCtx, cfg, logger) }()
	cleanups = append(cleanups, func() {
		say("stopping the worker (draining up to %s)", cfg.DrainTimeout)
		stopWorker()
		<-workerDone
	})

	c, err := client.DialContext(ctx, client.Options{HostPort: cfg.TemporalAddress, Namespace: cfg.TemporalNamespace, Logger: sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil)))})
	if err != nil {
		return err
	}
	defer c.Close()
	st := &starter.Starter{Client: c, TaskQueue: cfg.TaskQueue}
	if err := st.EnsureSchedules(ctx, cfg.Durations.ScanInterval); err != nil {
		return err
	}
	say("scan schedule %s runs every %s", supportflow.ScanScheduleID, cfg.Durations.ScanInterval)

	if usingStandins {
		pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
		if err != nil {
			return err
		}
		defer pool.Close()
		if err := demo(ctx, st, ledger.New(pool, cfg.Account), zd, subs); err != nil {
			return err
		}
	}
	say("ready")
	if uiURL != "" {
		say("Temporal Web UI: %s/namespaces/%s/workflows", uiURL, cfg.TemporalNamespace)
	}
	say("logs: %s", logFile.Name())
	if once {
		return nil
	}
	say("press Ctrl-C to stop")
	select {
	case <-ctx.Done():
		return nil
	case err := <-workerDone:
		workerDone <- err
		return fmt.Errorf("worker stopped: %w", err)
	}
}

// demo seeds two tickets on the stand-ins. The first customer asks to
// cancel both plans: its draft is approved and executed (one public reply,
// both cancellations), and checked. The second is drafted and left
// awaiting approval, for the Web UI. Ticket IDs come from the clock, so a
// restarted local run never meets an earlier run's drafts.
func demo(ctx context.Context, st *starter.Starter, l *ledger.Ledger, zd *standin.Zendesk, subs *standin.Subscriptions) error {
	base := time.Now().Unix() * 10
	ticket := zd.AddTicket(standin.Ticket{ID: base, Subject: "Please cancel my subscriptions",
		Description: "I'd like to cancel both of my plans.", RequesterName: "Dana"})
	subs.AddSubscription("demo-sub-1", "demo-customer")
	subs.AddSubscription("demo-sub-2", "demo-customer")
	if err := l.PutEnrichment(ctx, ticket, ledger.Enrichment{CustomerID: "demo-customer", LifetimeOrders: 12,
		ActiveSubscriptions: []string{"demo-sub-1", "demo-sub-2"}}); err != nil {
		return err
	}
	other := zd.AddTicket(standin.Ticket{ID: base + 1, Subject: "Late delivery",
		Description: "My box has not arrived yet.", RequesterName: "Lee"})

	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var awaiting supportflow.DraftStatus
	for _, id := range []int64{ticket, other} {
		if _, err := st.StartDraft(ctx, id, "demo"); err != nil {
			return err
		}
		s, err := waitDraft(waitCtx, st, id, supportflow.DraftAwaitingApproval)
		if err != nil {
			return err
		}
		say("ticket %d: draft %s awaits approval: %q (cancel %v)", id, s.Proposal.ID, s.Proposal.Reply, s.Proposal.CancelSubscriptions)
		if id == ticket {
			awaiting = s
		}
	}
	res, err := st.Approve(ctx, ticket, supportflow.ApproveRequest{ProposalID: awaiting.Proposal.ID, ApprovedBy: "local-demo"})
	if err != nil {
		return err
	}
	say("approved %s; executing as %s", awaiting.Proposal.ID, res.ExecutionWorkflowID)
	if _, err := waitDraft(waitCtx, st, ticket, supportflow.DraftDone); err != nil {
		return err
	}
	if n := zd.CommentCount(ticket); n != 1 {
		return fmt.Errorf("demo: %d comments on ticket %d, want exactly 1", n, ticket)
	}
	for _, id := range []string{"demo-sub-1", "demo-sub-2"} {
		if n := subs.Cancellations(id); n != 1 {
			return fmt.Errorf("demo: %s cancelled %d times, want exactly 1", id, n)
		}
	}
	say("demo draft approved and applied: 1 comment, 2 cancellations (ticket %d)", ticket)
	say("ticket %d is left awaiting approval: find it in the Web UI with %s = '%s'", other, supportflow.SearchAttrState, supportflow.DraftAwaitingApproval)
	return nil
}

// waitDraft polls a draft until it reaches state, or fails saying where it
// stopped.
func waitDraft(ctx context.Context, st *starter.Starter, ticket int64, state string) (supportflow.DraftStatus, error) {
	for {
		s, err := st.DraftStatus(ctx, ticket)
		if err == nil && s.State == state {
			return s, nil
		}
		if err == nil && supportflow.DraftTerminal(s.State) {
			return s, fmt.Errorf("demo: the draft of ticket %d ended %s: %s", ticket, s.State, s.Error)
		}
		select {
		case <-ctx.Done():
			return s, fmt.Errorf("demo: the draft of ticket %d is %q, not %s: %w", ticket, s.State, state, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}
