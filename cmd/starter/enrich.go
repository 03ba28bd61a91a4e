package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/enrichment"
	"github.com/supportflow/supportflow/internal/proposals"
	"github.com/supportflow/supportflow/internal/text"
	"github.com/supportflow/supportflow/starter"
)

func ticketEvent(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	ticket, err := ticketArg(args)
	if err != nil {
		return err
	}
	ev := supportflow.TicketEvent{TicketID: ticket, Kind: fs.Lookup("kind").Value.String(), At: time.Now()}
	switch ev.Kind {
	case supportflow.TicketCreated, supportflow.TicketUpdated:
	case "":
		return fmt.Errorf("%w: --kind is required: %s or %s", errUsage, supportflow.TicketCreated, supportflow.TicketUpdated)
	case supportflow.TicketRedrive:
		return fmt.Errorf("%w: --kind %s: use starter redrive-enrichment", errUsage, ev.Kind)
	default:
		return fmt.Errorf("%w: --kind %q must be %s or %s", errUsage, ev.Kind, supportflow.TicketCreated, supportflow.TicketUpdated)
	}
	if isSet(fs, "requester") {
		ev.RequesterID = flagValue[int64](fs, "requester")
		if ev.RequesterID <= 0 {
			return fmt.Errorf("%w: --requester %d must be a positive id", errUsage, ev.RequesterID)
		}
	}
	// As the webhook does: only activity on an existing ticket can
	// supersede a draft.
	ev.CustomerActivity = flagValue[bool](fs, "customer-activity")
	if ev.CustomerActivity && ev.Kind != supportflow.TicketUpdated {
		return fmt.Errorf("%w: --customer-activity goes with --kind %s", errUsage, supportflow.TicketUpdated)
	}
	if err := ev.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return withStarter(ctx, func(s *starter.Starter) error {
		runID, err := s.RecordTicketEvent(ctx, ev)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "recorded %s event of ticket %d: workflow %s run %s\n", ev.Kind, ticket, s.IDs.Enrich(ticket), runID)
		if ev.CustomerActivity {
			fmt.Fprintf(out, "customer activity: a running draft of the ticket (workflow %s), if any, is superseded\n", s.IDs.Draft(ticket))
		}
		return nil
	})
}

func redrive(ctx context.Context, _ *flag.FlagSet, args []string, out io.Writer) error {
	ticket, err := ticketArg(args)
	if err != nil {
		return err
	}
	return withStarter(ctx, func(s *starter.Starter) error {
		if err := s.RedriveEnrichment(ctx, ticket); err != nil {
			return err
		}
		fmt.Fprintf(out, "re-drive of ticket %d requested: workflow %s looks it up now\n", ticket, s.IDs.Enrich(ticket))
		return nil
	})
}

func retry(ctx context.Context, _ *flag.FlagSet, args []string, out io.Writer) error {
	if len(args) != 1 {
		return fmt.Errorf("%w: retry takes one PROPOSAL_ID", errUsage)
	}
	if err := supportflow.ValidateProposalID(args[0]); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	pool, account, err := accountDB(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	return withStarter(ctx, func(s *starter.Starter) error {
		e, err := s.Retry(ctx, proposals.New(pool, account), args[0], operatorName())
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "retrying proposal %s: workflow %s (run %s)\n", args[0], e.WorkflowID, e.RunID)
		statuses, err := s.WaitExecution(ctx, args[0])
		if perr := printJSON(out, statuses); perr != nil {
			return perr
		}
		return err
	})
}

func reconcile(ctx context.Context, _ *flag.FlagSet, args []string, out io.Writer) error {
	if err := positionals(args); err != nil {
		return err
	}
	return withStarter(ctx, func(s *starter.Starter) error {
		res, err := s.Reconcile(ctx)
		if err != nil {
			return err
		}
		return printJSON(out, res)
	})
}

func enrichmentStatus(ctx context.Context, _ *flag.FlagSet, args []string, out io.Writer) error {
	ticket, err := ticketArg(args)
	if err != nil {
		return err
	}
	return withStarter(ctx, func(s *starter.Starter) error {
		st, err := s.EnrichmentStatus(ctx, ticket)
		if err != nil {
			return err
		}
		return printJSON(out, st)
	})
}

func parity(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	table := fs.Lookup("legacy-table").Value.String()
	if table == "" || len(args) != 0 {
		return fmt.Errorf("%w: --legacy-table NAME is required, and nothing else", errUsage)
	}
	if _, err := enrichment.LegacyIdentifier(table); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	pool, account, err := accountDB(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	r, err := enrichment.NewStore(pool, account).Parity(ctx, table)
	if err != nil {
		return err
	}
	fmt.Fprint(out, r.String())
	return nil
}

// accountDB opens the account's database for the commands that read
// PostgreSQL (parity, retry): DATABASE_URL and SUPPORTFLOW_ACCOUNT must be
// set, or it is a usage error.
func accountDB(ctx context.Context) (*pgxpool.Pool, string, error) {
	dbURL, account := os.Getenv("DATABASE_URL"), os.Getenv("SUPPORTFLOW_ACCOUNT")
	if dbURL == "" || account == "" {
		return nil, "", fmt.Errorf("%w: DATABASE_URL and SUPPORTFLOW_ACCOUNT must be set", errUsage)
	}
	pool, err := pgxpool.New(ctx, dbURL)
	if err != nil {
		return nil, "", fmt.Errorf("database: %w", err)
	}
	return pool, account, nil
}

// operatorName names an operator's decision for the ledger and the logs:
// SUPPORTFLOW_OPERATOR, else the login name, prefixed so it is never
// mistaken for an API token's name.
func operatorName() string {
	name := cmp.Or(os.Getenv("SUPPORTFLOW_OPERATOR"), os.Getenv("USER"), "unknown")
	return "operator:" + text.Clip(name, 100)
}
