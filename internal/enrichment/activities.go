package enrichment

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/bqlookup"
	"github.com/supportflow/supportflow/internal/heartbeat"
	"github.com/supportflow/supportflow/internal/policy"
	"github.com/supportflow/supportflow/internal/telemetry"
	"github.com/supportflow/supportflow/internal/text"
)

// Lookuper is what the lookup needs from BigQuery. Its context carries the
// attempt's deadline, which the BigQuery client's internal retries need.
type Lookuper interface {
	LookupCustomer(ctx context.Context, requesterID int64) (bqlookup.Result, error)
}

// Activities are the enrichment activities. Register a filled-in value
// with the worker; workflows name them through a nil *Activities.
type Activities struct {
	Store    *Store
	BigQuery Lookuper
	// HeartbeatInterval is how often a running lookup heartbeats.
	HeartbeatInterval time.Duration
	// CallTimeout bounds the BigQuery call inside an attempt (the client
	// retries 5xx until its context ends); it is shorter than the attempt's
	// deadline, so the attempt still records its outcome. 0 means the
	// attempt's deadline alone.
	CallTimeout time.Duration
	// Retention is how long PruneEnrichment keeps finished rows; 0 means
	// 30 days.
	Retention time.Duration
	// Logger receives operational logs; nil means slog.Default().
	Logger *slog.Logger
	// Metrics counts lookups and dead letters; nil counts nothing.
	Metrics *telemetry.Metrics
}

// LookupProgress is a running lookup's heartbeat details.
type LookupProgress struct {
	Step    string        `json:"step"`
	Elapsed time.Duration `json:"elapsed"`
}

// LookupCustomer looks the ticket's requester up in BigQuery and records
// the result (see Store.Record). Every attempt writes exactly one
// lookup-log row: when it starts, completed with its outcome when it ends.
// The BigQuery call runs under the attempt's deadline (the client retries
// 5xx internally until its context ends) while a separate ticker
// heartbeats, so a worker that dies is noticed by the heartbeat timeout.
//
// Errors: a bad ticket id, a ticket with no known requester, and
// BigQuery's permanent refusals (invalid query, unknown dataset, access
// denied) are final; everything else is retried under the one policy, and
// the workflow dead-letters the ticket after the last attempt.
func (a *Activities) LookupCustomer(ctx context.Context, in supportflow.LookupInput) (supportflow.LookupOutput, error) {
	if in.TicketID <= 0 || in.RequesterID < 0 {
		err := fmt.Errorf("%w: ticket %d, requester %d", supportflow.ErrInvalidInput, in.TicketID, in.RequesterID)
		return supportflow.LookupOutput{}, policy.AppError(err.Error(), supportflow.ErrTypeInvalidInput, err)
	}
	info := activity.GetInfo(ctx)
	att := Attempt{TicketID: in.TicketID, WorkflowID: info.WorkflowExecution.ID, RunID: info.WorkflowExecution.RunID,
		ActivityID: info.ActivityID, Attempt: info.Attempt}
	if err := a.Store.BeginAttempt(ctx, att); err != nil {
		return supportflow.LookupOutput{}, err
	}
	out, err := a.lookup(ctx, in)
	outcome, msg := OutcomeFound, ""
	switch {
	case err != nil:
		outcome, msg = OutcomeError, text.Clip(err.Error(), 2000)
	case !out.Found:
		outcome = OutcomeNotFound
	}
	a.Metrics.Lookup(outcome)
	// Even when the attempt is being torn down, its row gets its outcome.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if ferr := a.Store.FinishAttempt(fctx, att, outcome, msg, out.JobID); ferr != nil {
		a.log().Warn("finishing the lookup log failed", "ticket_id", in.TicketID, "error", ferr)
	}
	if err != nil {
		return supportflow.LookupOutput{}, classify(err)
	}
	return out, nil
}

func (a *Activities) lookup(ctx context.Context, in supportflow.LookupInput) (supportflow.LookupOutput, error) {
	out := supportflow.LookupOutput{RequesterID: in.RequesterID}
	if in.Redrive {
		if _, err := a.Store.MarkRedriven(ctx, in.TicketID); err != nil {
			return out, err
		}
	}
	if out.RequesterID == 0 {
		id, found, err := a.Store.RequesterOf(ctx, in.TicketID)
		if err != nil {
			return out, err
		}
		if !found {
			return out, errUnknownRequester{ticket: in.TicketID}
		}
		out.RequesterID = id
	}
	start := time.Now()
	details := func() any {
		return LookupProgress{Step: "querying BigQuery", Elapsed: time.Since(start).Round(time.Millisecond)}
	}
	var res bqlookup.Result
	err := heartbeat.Run(ctx, a.HeartbeatInterval, details, nil, func(ctx context.Context) error {
		if a.CallTimeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, a.CallTimeout)
			defer cancel()
		}
		var err error
		res, err = a.BigQuery.LookupCustomer(ctx, out.RequesterID)
		return err
	})
	out.JobID = res.JobID
	if err != nil {
		return out, err
	}
	runID, err := a.Store.Record(ctx, in.TicketID, out.RequesterID, res)
	if err != nil {
		return out, err
	}
	out.RunID, out.Found, out.Customer = runID, res.Found, res.Customer
	out.BytesBilled, out.BytesProcessed = res.BytesBilled, res.BytesProcessed
	return out, nil
}

type errUnknownRequester struct{ ticket int64 }

func (e errUnknownRequester) Error() string {
	return fmt.Sprintf("ticket %d has no known requester: it is not mirrored yet and the event did not name one", e.ticket)
}

// classify makes permanent failures non-retryable.
func classify(err error) error {
	var unknown errUnknownRequester
	var bq *bqlookup.Error
	switch {
	case errors.As(err, &unknown):
		return policy.AppError(err.Error(), supportflow.ErrTypeInvalidInput, err)
	case errors.As(err, &bq) && bq.Permanent():
		return policy.AppError(err.Error(), supportflow.ErrTypeRejected, err)
	}
	return err
}

// DeadLetterTicket writes (or replaces) the ticket's dead-letter row.
func (a *Activities) DeadLetterTicket(ctx context.Context, in supportflow.DeadLetterInput) error {
	reason := "retries_exhausted"
	if in.Attempts <= 1 {
		reason = "not_retryable"
	}
	a.Metrics.DeadLetter(reason)
	return a.Store.PutDeadLetter(ctx, in.TicketID, in.RequesterID, in.Attempts, text.Clip(in.LastError, 4000), text.Clip(in.Reason, 1000))
}

func (a *Activities) log() *slog.Logger {
	if a.Logger == nil {
		return slog.Default()
	}
	return a.Logger
}

// PruneEnrichment deletes finished enrichment rows older than Retention
// (see Store.Prune) and returns how many, by table.
func (a *Activities) PruneEnrichment(ctx context.Context) (map[string]int64, error) {
	keep := a.Retention
	if keep <= 0 {
		keep = 30 * 24 * time.Hour
	}
	return a.Store.Prune(ctx, time.Now().Add(-keep))
}
