// Command local runs supportflow on one machine: a throwaway PostgreSQL
// (or DATABASE_URL), the Temporal dev server with its Web UI (or
// TEMPORAL_ADDRESS), stand-ins for Zendesk and the subscription service
// (or the real ones, as soon as ZENDESK_URL/ZENDESK_SUBDOMAIN and
// SUBSCRIPTIONS_URL are set), the worker, and one demo proposal executed
// end to end. It then prints what to open and waits for Ctrl-C, which
// stops everything, letting the worker drain.
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

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/config"
	"github.com/supportflow/supportflow/internal/devenv"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/internal/workerapp"
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
		tmp, err := devenv.StartTemporal(ctx, devenv.TemporalOptions{UI: true, DBFile: dbFile, Log: logFile, Progress: os.Stdout})
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

	cfg, err := config.LoadWorker()
	if err != nil {
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

	if usingStandins {
		if err := demo(ctx, st, zd, subs); err != nil {
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

// demo seeds a ticket and two subscriptions on the stand-ins and executes
// one approved proposal: a public reply, then both cancellations.
func demo(ctx context.Context, st *starter.Starter, zd *standin.Zendesk, subs *standin.Subscriptions) error {
	ticket := zd.AddTicket(standin.Ticket{Subject: "Please cancel my subscriptions", Description: "I'd like to cancel both of my plans."})
	subs.AddSubscription("demo-sub-1", "demo-customer")
	subs.AddSubscription("demo-sub-2", "demo-customer")
	proposalID := fmt.Sprintf("demo-%d", time.Now().Unix())
	p := supportflow.Proposal{ID: proposalID, Actions: []supportflow.Action{{
		TicketID:            ticket,
		Comment:             &supportflow.Comment{Body: "Both of your subscriptions are cancelled. Sorry to see you go!", Public: true},
		CancelSubscriptions: []string{"demo-sub-1", "demo-sub-2"},
	}}}
	say("executing demo proposal %s on ticket %d", proposalID, ticket)
	e, err := st.ExecuteProposal(ctx, p)
	if err != nil {
		return err
	}
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	statuses, err := st.WaitExecution(waitCtx, proposalID)
	if err != nil {
		return fmt.Errorf("demo proposal: %w", err)
	}
	for _, s := range statuses {
		say("action %s: %s (comment %d, cancelled %v)", s.Key, s.State, s.CommentID, s.Cancelled)
	}
	if n := zd.CommentCount(ticket); n != 1 {
		return fmt.Errorf("demo proposal: %d comments on ticket %d, want exactly 1", n, ticket)
	}
	for _, id := range []string{"demo-sub-1", "demo-sub-2"} {
		if n := subs.Cancellations(id); n != 1 {
			return fmt.Errorf("demo proposal: %s cancelled %d times, want exactly 1", id, n)
		}
	}
	say("demo proposal applied: 1 comment, 2 cancellations (workflow %s)", e.WorkflowID)
	return nil
}
