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
// cancels the work, waits for it, and is returned. When Temporal has given
// the attempt up (a timed-out or cancelled attempt's context ends after its
// next heartbeat), the work is cancelled and waited for, so a stale attempt
// stops rather than running on unseen; the error then wraps ErrAttemptOver.
func Run(ctx context.Context, interval time.Duration, details func() any, onTick func(context.Context) error, work func(context.Context) error) error {
	workCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
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
				<-done
				return err
			}
		}
	}
}
