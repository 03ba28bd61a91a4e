package activities

import (
	"context"
	"errors"
	"sync"
	"time"

	"go.temporal.io/sdk/activity"
)

// Progress is what an activity's heartbeat details carry: which leg and
// how far it got, visible in the Web UI's pending-activity view.
type Progress struct {
	Leg   string `json:"leg"`
	Done  int    `json:"done"`
	Total int    `json:"total"`
	Step  string `json:"step,omitempty"`
}

type progress struct {
	mu sync.Mutex
	p  Progress
}

func (p *progress) set(f func(*Progress)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f(&p.p)
}

func (p *progress) get() Progress {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.p
}

// errAttemptOver is the cause given to the work's context when Temporal no
// longer considers the attempt live (heartbeat timeout, cancellation).
var errAttemptOver = errors.New("the attempt is no longer live in Temporal")

// heartbeating runs work while a ticker of its own, separate from the work,
// heartbeats to Temporal and extends the claim's ledger lease, so a claim
// lapses only when its claimant stops. When Temporal has given the attempt
// up (its context ends after a failed heartbeat) or the ledger says the
// claim was taken over, it cancels the work and waits for it to stop: a
// stale attempt must not go on writing.
func (a *Activities) heartbeating(ctx context.Context, claimID int64, claimant string, p *progress, work func(context.Context) error) error {
	workCtx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	done := make(chan error, 1)
	go func() { done <- work(workCtx) }()

	tick := time.NewTicker(a.Durations.HeartbeatInterval)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return err
		case <-tick.C:
			activity.RecordHeartbeat(ctx, p.get())
			if ctx.Err() != nil {
				cancel(errAttemptOver)
				return errors.Join(errAttemptOver, <-done)
			}
			won, err := a.Ledger.ExtendLease(ctx, claimID, claimant, a.Durations.Lease)
			if err != nil {
				// The lease still has time; the work's own fenced writes
				// catch a loss, and a persistent outage ends the attempt
				// through its deadline.
				a.log(ctx).Warn("extending lease failed", "error", err)
				continue
			}
			if !won {
				cancel(errLostClaim)
				<-done
				return errLostClaim
			}
		}
	}
}

// extendBeforeCall re-checks the claim right before an external write and
// pushes its expiry a full lease ahead. The write is bounded by a call
// timeout shorter than the lease, so no successor can take the action over
// while this write may still land.
func (a *Activities) extendBeforeCall(ctx context.Context, claimID int64, claimant string) error {
	won, err := a.Ledger.ExtendLease(ctx, claimID, claimant, a.Durations.Lease)
	if err != nil {
		return err
	}
	if !won {
		return errLostClaim
	}
	return nil
}
