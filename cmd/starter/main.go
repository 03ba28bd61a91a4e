// Command starter is the operators' command line for supportflow's
// workflows. Every subcommand takes --help; flags may come before or after
// the positional arguments. Arguments are checked before anything is
// sent: bad input exits 2 without dialing Temporal.
//
// Drafts (workflow draft/{TICKET}):
//
//	starter draft-start TICKET [--reason R]            start a ticket's draft, or join the running one
//	starter draft-status TICKET                        a ticket's draft as JSON
//	starter approve TICKET PROPOSAL_ID [--by NAME]     approve the draft's current proposal
//	starter reject TICKET PROPOSAL_ID [--by NAME] [--reason TEXT]
//	                                                   reject the draft's current proposal
//	starter retry PROPOSAL_ID                          run a failed approved proposal again (same keys)
//
// Enrichment (workflow enrich/{TICKET}):
//
//	starter ticket-event TICKET --kind created|updated [--requester ID] [--customer-activity]
//	                                                   record a ticket event
//	starter redrive-enrichment TICKET                  look a (dead-lettered) ticket up again now
//	starter enrichment-status TICKET                   a ticket's enrichment state as JSON
//	starter parity --legacy-table NAME                 compare a legacy enrichment table with supportflow's
//	starter reconcile                                  repair what the ticket event webhooks missed, now; print the result
//
// Evaluation and schedules:
//
//	starter evaluate --run-id ID --set NAME --tickets 1,2,3 [--concurrency N]
//	                                                   start an evaluation run (workflow eval/{ID})
//	starter evaluation-status RUN_ID                   an evaluation run's progress as JSON
//	starter ensure-schedules [--scan-interval 5m]      create or update the scan, reconcile and retention-prune schedules
//
// Exit status: 0 done, 1 failed (including a stale proposal or a ticket
// without a draft), 2 bad usage.
//
// Settings come from the environment: TEMPORAL_ADDRESS, TEMPORAL_NAMESPACE
// and the connection's TLS and API key (TEMPORAL_TLS_*, TEMPORAL_API_KEY or
// TEMPORAL_API_KEY_FILE, as Temporal's own tools name them; see
// internal/temporalconn), SUPPORTFLOW_TASK_QUEUE, the payload keys (SUPPORTFLOW_PAYLOAD_KEYS or
// SUPPORTFLOW_PAYLOAD_KEYS_FILE, as the worker's),
// SUPPORTFLOW_ADMIT_UNSEALED_PAYLOADS (as the worker's), and for approve,
// retry and parity DATABASE_URL and SUPPORTFLOW_ACCOUNT.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/codec"
	"github.com/supportflow/supportflow/internal/config"
	"github.com/supportflow/supportflow/starter"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// command is one subcommand. help is its one line in `starter --help`;
// detail, when set, is printed after it by `starter NAME --help`. run
// must validate every argument before it dials.
type command struct {
	name, args, help, detail string
	run                      func(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error
	flags                    func(fs *flag.FlagSet)
}

var commands = []command{
	{name: "draft-start", args: "TICKET [--reason R]", help: "start drafting a reply to a ticket, or join its running draft",
		detail: "Prints whether the draft was started or joined, its workflow ID and run ID.",
		run:    draftStart, flags: func(fs *flag.FlagSet) {
			fs.String("reason", "operator", "who asked for the draft, recorded on it (1-100 characters)")
		}},
	{name: "draft-status", args: "TICKET", help: "print a ticket's draft (state, proposal, progress) as JSON",
		detail: "A ticket that was never drafted exits 1.",
		run:    draftStatus},
	{name: "approve", args: "TICKET PROPOSAL_ID [--by NAME]", help: "approve a draft's current proposal and print the result as JSON",
		detail: "PROPOSAL_ID must be the draft's current proposal awaiting approval (see draft-status);\n" +
			"any other (stale, expired, superseded, rejected) exits 1, as does a ticket without a draft.\n" +
			"Approving the same proposal again, while it runs or after it finished, answers its execution (already_approved: true).\n" +
			"The approval is recorded in PostgreSQL, where every leg checks it: DATABASE_URL and SUPPORTFLOW_ACCOUNT must be set.",
		run: approve, flags: func(fs *flag.FlagSet) {
			fs.String("by", "", "who approves, recorded on the proposal and the approval (1-200 characters; default operator:$SUPPORTFLOW_OPERATOR or $USER)")
		}},
	{name: "reject", args: "TICKET PROPOSAL_ID [--by NAME] [--reason TEXT]", help: "reject a draft's current proposal",
		detail: "PROPOSAL_ID must be the draft's current proposal awaiting approval (see draft-status);\n" +
			"any other exits 1, as does a ticket without a draft.",
		run: reject, flags: func(fs *flag.FlagSet) {
			fs.String("by", "", "who rejects, recorded on the proposal (1-200 characters)")
			fs.String("reason", "", "why, recorded as the draft's error (1-1000 characters)")
		}},
	{name: "retry", args: "PROPOSAL_ID", help: "run an approved proposal whose execution failed again, with the same action keys, and wait for it",
		detail: "What landed (a cancellation, the agents' note) is skipped; the rest runs, the reply last.\n" +
			"Reads the proposal from PostgreSQL: DATABASE_URL and SUPPORTFLOW_ACCOUNT must be set.", run: retry},
	{name: "ticket-event", args: "TICKET --kind created|updated [--requester ID] [--customer-activity]", help: "record a ticket event for the ticket's enrichment (signal-with-start)",
		detail: "The event is dated now. With --customer-activity the ticket's running draft, if any, is also told\n" +
			"and supersedes its proposal. A re-drive of a dead-lettered ticket is redrive-enrichment.",
		run: ticketEvent, flags: func(fs *flag.FlagSet) {
			fs.String("kind", "", "event kind: created or updated (required)")
			fs.Int64("requester", 0, "the ticket's requester id, when known (positive)")
			fs.Bool("customer-activity", false, "the customer wrote (with --kind updated): a running draft of the ticket is superseded")
		}},
	{name: "redrive-enrichment", args: "TICKET", help: "look a ticket's customer up in BigQuery again, at once (a dead-lettered ticket's re-drive)", run: redrive},
	{name: "enrichment-status", args: "TICKET", help: "print a ticket's enrichment state as JSON", run: enrichmentStatus},
	{name: "parity", args: "--legacy-table NAME", help: "compare order coverage of a legacy enrichment table (ticket_id, order_count) with supportflow's",
		run: parity, flags: func(fs *flag.FlagSet) {
			fs.String("legacy-table", "", "legacy table, table or schema.table (required)")
		}},
	{name: "reconcile", args: "", help: "read Zendesk's incremental exports now and repair what the ticket event webhooks missed; print the result as JSON",
		detail: "The same pass the reconcile schedule runs; a second request while one runs joins it.", run: reconcile},
	{name: "evaluate", args: "--run-id ID --set NAME --tickets 1,2,3 [--concurrency N]", help: "start an evaluation run over past tickets and print its workflow ID",
		detail: "A run with the same ID that is still going is joined, not restarted.",
		run:    evaluate, flags: func(fs *flag.FlagSet) {
			fs.String("run-id", "", "the run's id, 1-128 characters of [A-Za-z0-9._-] (required)")
			fs.String("set", "", "the ticket set's name, for reports, 1-128 characters of [A-Za-z0-9._-] (required)")
			fs.String("tickets", "", fmt.Sprintf("comma-separated ticket ids, 1-%d distinct positive integers (required)", supportflow.MaxEvaluationTickets))
			fs.Int("concurrency", 0, fmt.Sprintf("drafts in flight, 1-%d; 0 means the workflow's default", supportflow.MaxEvaluationConcurrency))
		}},
	{name: "evaluation-status", args: "RUN_ID", help: "print an evaluation run's progress (or summary) as JSON", run: evaluationStatus},
	{name: "ensure-schedules", args: "[--scan-interval 5m]", help: "create or update the schedules: the ticket scan (at the interval), the reconciliation (5 min) and the daily retention prune",
		detail: "Safe to repeat. The scan skips a run while the previous one still runs.",
		run:    ensureSchedules, flags: func(fs *flag.FlagSet) {
			fs.Duration("scan-interval", defaultScanInterval(), fmt.Sprintf("how often the scan runs, %s to %s", minScanInterval, maxScanInterval))
		}},
}

// usage writes the commands and, with env, the variables the starter
// reads (config's spec).
func usage(w io.Writer, env bool) {
	fmt.Fprintln(w, "usage: starter COMMAND [ARGS]   (starter COMMAND --help for more)")
	fmt.Fprintln(w, "\ncommands:")
	for _, c := range commands {
		fmt.Fprintf(w, "  %-20s %s\n", c.name, c.help)
	}
	fmt.Fprintln(w, "\nexit status: 0 done, 1 failed, 2 bad usage (nothing was sent)")
	if !env {
		fmt.Fprintln(w, "\nenvironment: starter --help lists it")
		return
	}
	fmt.Fprintln(w, "\nenvironment (approve, retry and parity also need DATABASE_URL and SUPPORTFLOW_ACCOUNT):")
	config.PrintVars(w, config.VarsFor(config.ProgramStarter))
}

// run executes one command and returns the exit code: 0 done, 1 failed,
// 2 bad usage.
func run(ctx context.Context, args []string, out, errOut io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(out, true)
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
		fs.Usage = func() {
			fmt.Fprintf(fs.Output(), "usage: starter %s %s\n\n%s\n", c.name, c.args, c.help)
			if c.detail != "" {
				fmt.Fprintf(fs.Output(), "%s\n", c.detail)
			}
			if hasFlags(fs) {
				fmt.Fprintln(fs.Output(), "\nflags:")
				fs.PrintDefaults()
			}
		}
		if c.flags != nil {
			c.flags(fs)
		}
		shortUsage := func() {
			fmt.Fprintf(errOut, "usage: starter %s %s   (starter %s --help for more)\n", c.name, c.args, c.name)
		}
		flagArgs, positional := splitArgs(fs, args[1:])
		fs.SetOutput(io.Discard) // a parse error is reported below, in one line
		if err := fs.Parse(flagArgs); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				fs.SetOutput(out)
				fs.Usage()
				return 0
			}
			fmt.Fprintf(errOut, "starter %s: %v\n", c.name, err)
			shortUsage()
			return 2
		}
		positional = append(positional, fs.Args()...)
		if err := c.run(ctx, fs, positional, out); err != nil {
			fmt.Fprintf(errOut, "starter %s: %v\n", c.name, err)
			if errors.Is(err, errUsage) || errors.Is(err, supportflow.ErrInvalidInput) {
				shortUsage()
				return 2
			}
			return 1
		}
		return 0
	}
	fmt.Fprintf(errOut, "starter: unknown command %q\n", args[0])
	usage(errOut, false)
	return 2
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// dial connects to Temporal. Commands call it only after their arguments
// have been validated, so that bad input sends nothing.
// Payloads are sealed with the same keys as the workers' (a missing or
// malformed key is an error before anything is sent), and payloads read
// back that are not sealed are refused unless
// SUPPORTFLOW_ADMIT_UNSEALED_PAYLOADS admits them, as in the workers.
func dial(ctx context.Context) (*starter.Starter, func(), error) {
	keys, err := config.PayloadKeys()
	if err != nil {
		return nil, nil, err
	}
	admit, err := config.AdmitUnsealedPayloads()
	if err != nil {
		return nil, nil, err
	}
	conn, err := config.TemporalSettings()
	if err != nil {
		return nil, nil, err
	}
	prefix, err := config.IDPrefixFrom(config.OSEnv)
	if err != nil {
		return nil, nil, err
	}
	o, err := conn.ClientOptions(sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)), keys, codec.WithAdmitUnsealed(admit))
	if err != nil {
		return nil, nil, err
	}
	c, err := client.DialContext(ctx, o)
	if err != nil {
		return nil, nil, fmt.Errorf("temporal: %w", err)
	}
	return &starter.Starter{Client: c, TaskQueue: os.Getenv("SUPPORTFLOW_TASK_QUEUE"), IDs: supportflow.IDs{Prefix: prefix}, Converter: o.DataConverter}, c.Close, nil
}

// withStarter dials, runs f and closes the connection.
func withStarter(ctx context.Context, f func(s *starter.Starter) error) error {
	s, closeFn, err := dial(ctx)
	if err != nil {
		return err
	}
	defer closeFn()
	return f(s)
}

func printJSON(out io.Writer, v any) error {
	enc := json.NewEncoder(out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
