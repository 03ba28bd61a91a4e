package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/policy"
	"github.com/supportflow/supportflow/starter"
)

func evaluate(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	if err := positionals(args); err != nil {
		return err
	}
	req := supportflow.EvaluationRequest{
		RunID:       fs.Lookup("run-id").Value.String(),
		Set:         fs.Lookup("set").Value.String(),
		Concurrency: flagValue[int](fs, "concurrency"),
	}
	if req.RunID == "" || req.Set == "" {
		return fmt.Errorf("%w: --run-id and --set are required", errUsage)
	}
	if supportflow.ValidateProposalID(req.RunID) != nil {
		return fmt.Errorf("%w: --run-id %q must be 1-128 characters of [A-Za-z0-9._-]", errUsage, req.RunID)
	}
	if supportflow.ValidateProposalID(req.Set) != nil {
		return fmt.Errorf("%w: --set %q must be 1-128 characters of [A-Za-z0-9._-]", errUsage, req.Set)
	}
	if req.Concurrency < 0 || req.Concurrency > supportflow.MaxEvaluationConcurrency {
		return fmt.Errorf("%w: --concurrency %d must be 1-%d (0: the workflow's default)", errUsage, req.Concurrency, supportflow.MaxEvaluationConcurrency)
	}
	var err error
	if req.TicketIDs, err = parseTicketList(fs.Lookup("tickets").Value.String()); err != nil {
		return err
	}
	if err := req.Validate(); err != nil {
		return fmt.Errorf("%w: %v", errUsage, err)
	}
	return withStarter(ctx, func(s *starter.Starter) error {
		id, err := s.StartEvaluation(ctx, req)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "evaluation %s of set %s over %d tickets: workflow %s (an evaluation already running under this id is joined)\n",
			req.RunID, req.Set, len(req.TicketIDs), id)
		return nil
	})
}

func evaluationStatus(ctx context.Context, _ *flag.FlagSet, args []string, out io.Writer) error {
	if err := positionals(args, "RUN_ID"); err != nil {
		return err
	}
	runID := args[0]
	if supportflow.ValidateProposalID(runID) != nil {
		return fmt.Errorf("%w: run id %q must be 1-128 characters of [A-Za-z0-9._-]", errUsage, runID)
	}
	return withStarter(ctx, func(s *starter.Starter) error {
		st, err := s.EvaluationStatus(ctx, runID)
		if err != nil {
			return err
		}
		return printJSON(out, st)
	})
}

// The scan schedule's interval bounds: more often than every minute
// would start scans faster than one finishes; less often than daily
// leaves tickets undrafted for too long.
const (
	minScanInterval = time.Minute
	maxScanInterval = 24 * time.Hour
)

func defaultScanInterval() time.Duration { return policy.Defaults().ScanInterval }

func ensureSchedules(ctx context.Context, fs *flag.FlagSet, args []string, out io.Writer) error {
	if err := positionals(args); err != nil {
		return err
	}
	interval := flagValue[time.Duration](fs, "scan-interval")
	if interval < minScanInterval || interval > maxScanInterval {
		return fmt.Errorf("%w: --scan-interval %s must be %s to %s", errUsage, interval, minScanInterval, maxScanInterval)
	}
	return withStarter(ctx, func(s *starter.Starter) error {
		reconcile := policy.Defaults().ReconcileInterval
		if err := s.EnsureSchedules(ctx, interval, reconcile); err != nil {
			return err
		}
		fmt.Fprintf(out, "schedule %s runs the ticket scan every %s\n", s.IDs.ScanSchedule(), interval)
		fmt.Fprintf(out, "schedule %s runs the webhook reconciliation every %s\n", s.IDs.ReconcileSchedule(), reconcile)
		fmt.Fprintf(out, "schedule %s runs the retention prune daily\n", s.IDs.PruneSchedule())
		return nil
	})
}
