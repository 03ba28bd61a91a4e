package activities

import (
	"context"

	"github.com/supportflow/supportflow/internal/heartbeat"
)

// Progress is what an activity's heartbeat details carry: which leg and
// how far it got, visible in the Web UI's pending-activity view.
type Progress struct {
	Leg   string `json:"leg"`
	Done  int    `json:"done"`
	Total int    `json:"total"`
	Step  string `json:"step,omitempty"`
}

// progress is a leg's Progress, updated by the work and read by the
// heartbeat.
type progress = progressOf[Progress]

// errAttemptOver is the cause given to the work's context when Temporal no
// longer considers the attempt live (heartbeat timeout, cancellation).
var errAttemptOver = heartbeat.ErrAttemptOver

// heartbeating runs work while a ticker of its own, separate from the work,
// heartbeats to Temporal and extends the claim's ledger lease, so a claim
// lapses only when its claimant stops. When Temporal has given the attempt
// up (its context ends after a failed heartbeat) or the ledger says the
// claim was taken over, it cancels the work and waits for it to stop: a
// stale attempt must not go on writing.
func (a *Activities) heartbeating(ctx context.Context, claimID int64, claimant string, p *progress, work func(context.Context) error) error {
	return a.beating(ctx, p.details, func(ctx context.Context) error {
		won, err := a.Ledger.ExtendLease(ctx, claimID, claimant, a.Durations.Lease)
		if err != nil {
			// The lease still has time; the work's own fenced writes
			// catch a loss, and a persistent outage ends the attempt
			// through its deadline.
			a.log(ctx).Warn("extending lease failed", "error", err)
			return nil
		}
		if !won {
			return errLostClaim
		}
		return nil
	}, work)
}

// beating runs work under heartbeat.Run at the configured interval.
func (a *Activities) beating(ctx context.Context, details func() any, onTick func(context.Context) error, work func(context.Context) error) error {
	return heartbeat.Run(ctx, a.Durations.HeartbeatInterval, details, onTick, work)
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
