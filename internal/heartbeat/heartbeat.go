// Package heartbeat runs an activity's work while a ticker separate from
// the work heartbeats to Temporal, so an attempt beats while its work is
// blocked (a model that has gone silent, a BigQuery job still running) and
// stops beating only when its process stops. Every supportflow activity
// that can take longer than a moment runs under it.
package heartbeat

import (
	"context"
	"errors"
	"time"

	"go.temporal.io/sdk/activity"
)

// ErrAttemptOver is the cause given to the work's context when Temporal no
// longer considers the attempt live (heartbeat timeout, cancellation).
var ErrAttemptOver = errors.New("the attempt is no longer live in Temporal")

// Run runs work while a ticker heartbeats details() to Temporal every
// interval. After each heartbeat, onTick (if any) runs; an error from it
// cancels the work, waits for it, and is returned, unless the work had
// already succeeded (then nil). When Temporal has given
// the attempt up (a timed-out or cancelled attempt's context ends after its
// next heartbeat), the work is cancelled and waited for, so a stale attempt
// stops rather than running on unseen; the error then wraps ErrAttemptOver.
//
// The work ends a little before the attempt's deadline (WorkDeadline), so
// an attempt that runs out of time fails with its own error, which the one
// retry policy delays with jitter, rather than with the server's timeout,
// which Temporal retries in lockstep.
func Run(ctx context.Context, interval time.Duration, details func() any, onTick func(context.Context) error, work func(context.Context) error) error {
	workCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if deadline, ok := ctx.Deadline(); ok {
		var stop context.CancelFunc
		workCtx, stop = context.WithDeadline(workCtx, WorkDeadline(time.Now(), deadline))
		defer stop()
	}
	done := make(chan error, 1)
	go func() { done <- work(workCtx) }()

	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			activity.RecordHeartbeat(ctx, details())
			if ctx.Err() != nil {
				cancel(ErrAttemptOver)
				return errors.Join(ErrAttemptOver, <-done)
			}
			if onTick == nil {
				continue
			}
			if err := onTick(ctx); err != nil {
				cancel(err)
				if werr := <-done; werr == nil {
					// The work had finished, and succeeded, while the tick
					// ran: its result stands (a lease extension that lost
					// because the work had just recorded the action done
					// is not a failure of the work).
					return nil
				}
				return err
			}
		}
	}
}

// WorkDeadline is when an attempt's work should stop, given now and the
// attempt's deadline: a tenth of the time left before it (at most 5 s),
// so the attempt can still report its own failure.
func WorkDeadline(now, deadline time.Time) time.Time {
	return deadline.Add(-max(0, min(deadline.Sub(now)/10, 5*time.Second)))
}
