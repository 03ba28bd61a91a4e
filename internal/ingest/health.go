package ingest

import (
	"context"
	"fmt"
	"time"

	"github.com/supportflow/supportflow/internal/telemetry"
)

// Health reads what the ingestion gauges show for the account: the relay's
// backlog and the age of its oldest event, the reconciler's lag
// (ReconcileHealth) and how many tickets it holds
// (telemetry.ObserveIngestion).
func (s *Store) Health(ctx context.Context) (telemetry.IngestionHealth, error) {
	var h telemetry.IngestionHealth
	var oldest float64
	err := s.db.QueryRow(ctx, `
SELECT count(*), COALESCE(EXTRACT(EPOCH FROM now() - min(received_at)), 0)::float8
FROM ticket_event WHERE account = $1 AND dispatched_at IS NULL AND NOT own_write`, s.account).Scan(&h.RelayBacklog, &oldest)
	if err != nil {
		return h, fmt.Errorf("ingest: relay backlog: %w", err)
	}
	lag, held, err := s.ReconcileHealth(ctx)
	if err != nil {
		return h, err
	}
	h.RelayOldest = seconds(oldest)
	h.ReconcileLag, h.ReconcileHeld = seconds(lag), int64(held)
	return h, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
