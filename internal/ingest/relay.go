package ingest

import (
	"context"
	"log/slog"
	"time"

	"github.com/supportflow/supportflow"
)

// Dispatcher hands a ticket event to Temporal: the starter's
// RecordTicketEvent (signal-with-start of the ticket's enrichment, and a
// supersede of its running draft for customer activity).
type Dispatcher interface {
	RecordTicketEvent(ctx context.Context, ev supportflow.TicketEvent) (string, error)
}

// Relay hands recorded ticket events to Temporal and marks them
// dispatched: the outbox half of at-least-once intake. Any number of
// relays (each API and worker process runs one) share the work through
// SKIP LOCKED claims. A dispatch that fails is retried with backoff; one
// that lands but whose mark is lost is dispatched again, which the
// enrichment merges.
type Relay struct {
	Store    *Store
	Dispatch Dispatcher
	Logger   *slog.Logger
	// Interval is how often the relay looks for due events when nothing
	// wakes it; 0 means 2 s.
	Interval time.Duration
	// Lease is how long a claimed event is left to its claimant; 0 means
	// CallTimeout plus 10 s, so no other relay takes an event this one is
	// still dispatching, and one that died is replaced soon.
	Lease time.Duration
	// CallTimeout bounds one dispatch; 0 means 10 s.
	CallTimeout time.Duration

	wake chan struct{}
}

// batch is how many events one claim takes: one, so the claim's lease
// covers a single dispatch and an event claimed by a relay that dies is
// taken up by another within that lease.
const batch = 1

// Wake makes a running relay look for due events now.
func (r *Relay) Wake() {
	if r == nil {
		return
	}
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// NewRelay returns a relay ready for Run and Wake.
func NewRelay(store *Store, d Dispatcher, logger *slog.Logger) *Relay {
	return &Relay{Store: store, Dispatch: d, Logger: logger, wake: make(chan struct{}, 1)}
}

// Run dispatches due events until ctx ends.
func (r *Relay) Run(ctx context.Context) {
	interval := r.Interval
	if interval <= 0 {
		interval = 2 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		for {
			n, err := r.DispatchDue(ctx)
			if err != nil && ctx.Err() == nil {
				r.logger().Warn("dispatching ticket events", "error", err)
			}
			if err != nil || n < batch {
				break
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-r.wake:
		}
	}
}

// DispatchDue claims and dispatches one batch of due events; it returns
// how many it claimed.
func (r *Relay) DispatchDue(ctx context.Context) (int, error) {
	timeout := r.CallTimeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	lease := r.Lease
	if lease <= 0 {
		lease = batch * (timeout + 10*time.Second)
	}
	due, err := r.Store.ClaimDue(ctx, batch, lease)
	if err != nil {
		return 0, err
	}
	for _, d := range due {
		cctx, cancel := context.WithTimeout(ctx, timeout)
		_, derr := r.Dispatch.RecordTicketEvent(cctx, d.Event)
		cancel()
		// The marks outlive a stopping relay's context, so a dispatch that
		// landed is not dispatched twice for want of a write.
		mctx, mcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		if derr != nil {
			wait := min(time.Duration(1<<min(d.Attempts, 8))*time.Second, 5*time.Minute)
			r.logger().Warn("ticket event not dispatched; will retry", "event_id", d.EventID, "ticket_id", d.Event.TicketID,
				"attempts", d.Attempts, "retry_in", wait, "error", derr)
			err = r.Store.Postpone(mctx, d.EventID, wait, derr)
		} else {
			err = r.Store.MarkDispatched(mctx, d.EventID)
		}
		mcancel()
		if err != nil {
			return len(due), err
		}
	}
	return len(due), nil
}

func (r *Relay) logger() *slog.Logger {
	if r.Logger == nil {
		return slog.Default()
	}
	return r.Logger
}
