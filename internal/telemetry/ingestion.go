package telemetry

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.opentelemetry.io/otel/metric"
)

// IngestionHealth is what the ingestion gauges show, read from PostgreSQL
// at each scrape, so every process that registers them shows the same
// values (take the max across replicas).
type IngestionHealth struct {
	// RelayBacklog counts ticket events recorded but not yet handed to
	// Temporal; RelayOldest is the age of the oldest of them (0 when none).
	RelayBacklog int64
	RelayOldest  time.Duration
	// ReconcileLag is how long ago a reconciliation pass last read the
	// ticket event export to its end (idle time on a quiet account is not
	// lag); before the first such read, how far behind now its cursor is.
	ReconcileLag time.Duration
	// ReconcileHeld counts tickets the reconciler could not place and
	// holds for a later pass.
	ReconcileHeld int64
}

// ingestionReadTimeout bounds one scrape's read of IngestionHealth: a slow
// database must not stall the metrics endpoint.
const ingestionReadTimeout = 3 * time.Second

// ObserveIngestion registers the ingestion gauges, each read through read
// at scrape time:
//
//	supportflow_relay_backlog              events waiting for the relay
//	supportflow_relay_oldest_seconds       age of the oldest of them
//	supportflow_reconcile_lag_seconds      since a pass last read the event export to its end
//	supportflow_reconcile_held_tickets     tickets the reconciler holds
//
// A failed read reports nothing for that scrape (the series go stale, which
// an absent-series alert catches). Safe on a nil *Telemetry (no-op).
func (t *Telemetry) ObserveIngestion(read func(context.Context) (IngestionHealth, error)) error {
	if t == nil {
		return nil
	}
	meter := t.meterProvider.Meter(projectScope)
	var errs []error
	gauge := func(name, unit, desc string) metric.Float64ObservableGauge {
		g, err := meter.Float64ObservableGauge(name, metric.WithUnit(unit), metric.WithDescription(desc))
		errs = append(errs, err)
		return g
	}
	backlog := gauge("supportflow_relay_backlog", "{event}", "Ticket events recorded but not yet handed to Temporal by the relay.")
	oldest := gauge("supportflow_relay_oldest_seconds", "s", "Age of the oldest ticket event the relay has not handed to Temporal (0 when none).")
	lag := gauge("supportflow_reconcile_lag_seconds", "s", "How long ago a reconciliation pass last read the ticket event export to its end (before the first such read: how far behind now its cursor is; 0 before any pass).")
	held := gauge("supportflow_reconcile_held_tickets", "{ticket}", "Tickets the reconciler could not place and holds for a later pass.")
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("telemetry: ingestion gauges: %w", err)
	}
	_, err := meter.RegisterCallback(func(ctx context.Context, o metric.Observer) error {
		ctx, cancel := context.WithTimeout(ctx, ingestionReadTimeout)
		defer cancel()
		h, err := read(ctx)
		if err != nil {
			return fmt.Errorf("telemetry: read ingestion health: %w", err)
		}
		o.ObserveFloat64(backlog, float64(h.RelayBacklog))
		o.ObserveFloat64(oldest, h.RelayOldest.Seconds())
		o.ObserveFloat64(lag, h.ReconcileLag.Seconds())
		o.ObserveFloat64(held, float64(h.ReconcileHeld))
		return nil
	}, backlog, oldest, lag, held)
	if err != nil {
		return fmt.Errorf("telemetry: ingestion gauges: %w", err)
	}
	return nil
}
