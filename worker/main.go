// Command worker runs supportflow's Temporal worker: drafting, execution
// and enrichment workflows and their activities.
//
//	worker           run until SIGINT/SIGTERM (migrates the database first)
//	worker api       serve the HTTP API and the Zendesk webhook until SIGINT/SIGTERM
//	worker codec-gateway  forward the Web UI's codec requests to worker api with a codec token
//	worker migrate   apply database migrations and exit
//	worker probe URL exit 0 if URL answers 2xx (the container health check)
//	worker --help    list every environment variable
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/supportflow/supportflow/internal/config"
	"github.com/supportflow/supportflow/internal/telemetry"
	"github.com/supportflow/supportflow/internal/workerapp"
	"github.com/supportflow/supportflow/migrations"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintf(os.Stderr, "usage: worker [api|codec-gateway|migrate|probe URL]\n\nRuns the supportflow worker; `worker api` serves the HTTP API, the Zendesk webhook and the codec server;\n`worker codec-gateway` lets a Web UI without sign-in decode through it; `worker migrate` applies database migrations and exits.\n\nEnvironment:\n")
	config.PrintHelp(os.Stderr)
	fmt.Fprintf(os.Stderr, "\nworker api also reads:\n")
	config.PrintAPIHelp(os.Stderr)
	fmt.Fprintf(os.Stderr, "\nworker codec-gateway reads:\n")
	config.PrintVars(os.Stderr, config.GatewayVars)
}

func run(args []string) error {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
		usage()
		return nil
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(args) > 0 && args[0] == "migrate" {
		url := os.Getenv("DATABASE_URL")
		if url == "" {
			return fmt.Errorf("%w: DATABASE_URL is required", config.ErrConfig)
		}
		v, err := migrations.MigrateURL(ctx, url)
		if err != nil {
			return err
		}
		fmt.Printf("database at schema version %d\n", v)
		return nil
	}
	if len(args) > 0 && args[0] == "probe" {
		if len(args) != 2 {
			return fmt.Errorf("usage: worker probe URL")
		}
		return probe(ctx, args[1])
	}
	if len(args) > 0 && args[0] == "api" {
		cfg, err := config.LoadAPI()
		if err != nil {
			return err
		}
		logger := config.NewLogger(os.Stderr, cfg.LogLevel)
		return withTelemetry(ctx, "supportflow-api", cfg.MetricsAddr, cfg.HTTP, cfg.OTLPEndpoint, logger, func(tel *telemetry.Telemetry) error {
			return workerapp.RunAPI(ctx, cfg, logger, tel, nil)
		})
	}
	if len(args) > 0 && args[0] == "codec-gateway" {
		cfg, err := config.LoadGateway()
		if err != nil {
			return err
		}
		return workerapp.RunGateway(ctx, cfg, config.NewLogger(os.Stderr, cfg.LogLevel), nil)
	}
	if len(args) > 0 {
		usage()
		return fmt.Errorf("unknown command %q", args[0])
	}
	cfg, err := config.LoadWorker()
	if err != nil {
		return err
	}
	logger := config.NewLogger(os.Stderr, cfg.LogLevel)
	return withTelemetry(ctx, "supportflow-worker", cfg.MetricsAddr, cfg.HTTP, cfg.OTLPEndpoint, logger, func(tel *telemetry.Telemetry) error {
		return workerapp.Run(ctx, cfg, logger, tel)
	})
}

// withTelemetry runs fn with the process's telemetry, serving /metrics on
// metricsAddr (when set, with the HTTP servers' timeouts) and flushing
// traces on the way out.
func withTelemetry(ctx context.Context, service, metricsAddr string, timeouts telemetry.HTTPTimeouts, otlp string, logger *slog.Logger, fn func(*telemetry.Telemetry) error) error {
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

// probe GETs url and succeeds on a 2xx answer: the image has no shell or
// curl, so its health checks run the worker binary itself.
func probe(ctx context.Context, url string) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("%s answered %s", url, resp.Status)
	}
	return nil
}
