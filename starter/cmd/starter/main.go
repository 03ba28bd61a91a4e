// Command starter is the operators' command line for supportflow's
// workflows. Every subcommand takes --help.
//
//	starter redrive-enrichment TICKET   look a (dead-lettered) ticket up again now
//	starter enrichment-status TICKET    a ticket's enrichment state
//	starter parity --legacy-table NAME  compare a legacy enrichment table with supportflow's
//
// Settings come from the environment: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE,
// SUPPORTFLOW_TASK_QUEUE, and for parity DATABASE_URL and
// SUPPORTFLOW_ACCOUNT.
package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/enrichment"
	"github.com/supportflow/supportflow/starter"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

type command struct {
	name, args, help string
	run              func(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error
	flags            func(fs *flag.FlagSet)
}

var commands = []command{
	{name: "redrive-enrichment", args: "TICKET", help: "look a ticket's customer up in BigQuery again, at once (a dead-lettered ticket's re-drive)", run: redrive},
	{name: "enrichment-status", args: "TICKET", help: "print a ticket's enrichment state as JSON", run: enrichmentStatus},
	{name: "parity", args: "--legacy-table NAME", help: "compare order coverage of a legacy enrichment table (ticket_id, order_count) with supportflow's",
		run: parity, flags: func(fs *flag.FlagSet) {
			fs.String("legacy-table", "", "legacy table, table or schema.table (required)")
		}},
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: starter COMMAND [ARGS]   (starter COMMAND --help for more)")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-20s %s\n", c.name, c.help)
	}
	fmt.Fprintln(w, "\nenvironment: TEMPORAL_ADDRESS (localhost:7233), TEMPORAL_NAMESPACE (default), SUPPORTFLOW_TASK_QUEUE (supportflow);")
	fmt.Fprintln(w, "parity also DATABASE_URL and SUPPORTFLOW_ACCOUNT (both required)")
}

// run executes one command and returns the exit code: 0 done, 1 failed,
// 2 bad usage.
func run(ctx context.Context, args []string, out, errOut io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(out)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	for _, c := range commands {
		if c.name != args[0] {
			continue
		}
		fs := flag.NewFlagSet(c.name, flag.ContinueOnError)
		fs.SetOutput(errOut)
		fs.Usage = func() {
			fmt.Fprintf(fs.Output(), "usage: starter %s %s\n\n%s\n", c.name, c.args, c.help)
			fs.PrintDefaults()
		}
		if c.flags != nil {
			c.flags(fs)
		}
		if err := fs.Parse(args[1:]); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(out)
				fs.Usage()
				return 0
			}
			return 2
		}
		if err := c.run(ctx, fs, fs.Args(), out); err != nil {
			fmt.Fprintf(errOut, "starter %s: %v\n", c.name, err)
			if errors.Is(err, errUsage) || errors.Is(err, supportflow.ErrInvalidInput) {
				return 2
			}
			return 1
		}
		return 0
	}
	fmt.Fprintf(errOut, "starter: unknown command %q\n", args[0])
	usage(errOut)
	return 2
}

var errUsage = errors.New("usage")

func ticketArg(args []string) (int64, error) {
	if len(args) != 1 {
		return 0, fmt.Errorf("%w: one TICKET id expected", errUsage)
	}
	id, err := strconv.ParseInt(args[0], 10, 64)
	if err != nil || id <= 0 {
		return 0, fmt.Errorf("%w: ticket id %q must be a positive integer", errUsage, args[0])
	}
	return id, nil
}

func dial(ctx context.Context) (*starter.Starter, func(), error) {
	c, err := client.DialContext(ctx, client.Options{
		HostPort:  cmp.Or(os.Getenv("TEMPORAL_ADDRESS"), "localhost:7233"),
		Namespace: cmp.Or(os.Getenv("TEMPORAL_NAMESPACE"), "default"),
		Logger:    sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	})
	if err != nil {
		return nil, nil, fmt.Errorf("temporal: %w", err)
	}
	return &starter.Starter{Client: c, TaskQueue: os.Getenv("SUPPORTFLOW_TASK_QUEUE")}, c.Close, nil
}

func redrive(ctx context.Context, _ *flag.FlagSet, args []string, out io.Writer) error {
	ticket, err := ticketArg(args)
	if err != nil {
		return err
	}
	s, closeFn, err := dial(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	if err := s.RedriveEnrichment(ctx, ticket); err != nil {
		return err
	}
	fmt.Fprintf(out, "re-drive of ticket %d requested: workflow %s looks it up now\n", ticket, supportflow.EnrichWorkflowID(ticket))
	return nil
}

func enrichmentStatus(ctx context.Context, _ *flag.FlagSet, args []string, out io.Writer) error {
	ticket, err := ticketArg(args)
	if err != nil {
		return err
	}
	s, closeFn, err := dial(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	st, err := s.EnrichmentStatus(ctx, ticket)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(st)
}

func parity(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	table := fs.Lookup("legacy-table").Value.String()
	if table == "" || len(args) != 0 {
		return fmt.Errorf("%w: --legacy-table NAME is required, and nothing else", errUsage)
	}
	if _, err := enrichment.LegacyIdentifier(table); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	dbURL, account := os.Getenv("DATABASE_URL"), os.Getenv("SUPPORTFLOW_ACCOUNT")
	if dbURL == "" || account == "" {
		return fmt.Errorf("%w: DATABASE_URL and SUPPORTFLOW_ACCOUNT must be set", errUsage)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	r, err := enrichment.NewStore(pool, account).Parity(ctx, table)
	if err != nil {
		return err
	}
	fmt.Fprint(out, r.String())
	return nil
}
