package workerapp

import (
	"context"
	"log/slog"
	"time"

	"github.com/supportflow/supportflow/internal/telemetry"
)

// WithTelemetry runs fn with the process's telemetry, serving /metrics on
// metricsAddr (when set, with the HTTP servers' timeouts) and flushing
// traces on the way out.
func WithTelemetry(ctx context.Context, service, metricsAddr string, timeouts telemetry.HTTPTimeouts, otlp string, logger *slog.Logger, fn func(*telemetry.Telemetry) error) error {
	tel, err := telemetry.New(ctx, telemetry.Config{ServiceName: service, OTLPEndpoint: otlp})
	if err != nil {
		return err
	}
	defer func() {
		shutdownCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := tel.Shutdown(shutdownCtx); err != nil {
			logger.Warn("telemetry shutdown", "error", err)
		}
	}()
	if metricsAddr != "" {
		ready := make(chan string, 1)
		go func() {
			if err := telemetry.ServeWith(ctx, metricsAddr, tel.Handler(), ready, timeouts); err != nil {
				logger.Error("metrics endpoint failed", "addr", metricsAddr, "error", err)
			}
		}()
		select {
		case addr := <-ready:
			logger.Info("metrics at /metrics", "addr", addr, "tracing", tel.Tracing())
		case <-time.After(5 * time.Second):
		}
	}
	return fn(tel)
}
