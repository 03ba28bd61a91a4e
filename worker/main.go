// Command worker runs supportflow's Temporal worker: drafting, execution
// and enrichment workflows and their activities. The HTTP API is
// cmd/supportflow-api, the codec gateway cmd/codec-gateway.
//
//	worker           run until SIGINT/SIGTERM (migrates the database first)
//	worker migrate   apply database migrations and exit
//	worker probe URL exit 0 if URL answers 2xx (the container health check of every image's program)
//	worker --help    list every environment variable
package main

import (
	"context"
	"fmt"
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
	fmt.Fprintf(os.Stderr, "usage: worker [migrate|probe URL]\n\nRuns the supportflow worker; `worker migrate` applies database migrations and exits;\n`worker probe URL` exits 0 when URL answers 2xx. The HTTP API is supportflow-api, the codec gateway codec-gateway.\n\nEnvironment:\n")
	config.PrintHelp(os.Stderr)
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
	if len(args) > 0 {
		usage()
		return fmt.Errorf("unknown command %q", args[0])
	}
	cfg, err := config.LoadWorker()
	if err != nil {
		return err
	}
	logger := config.NewLogger(os.Stderr, cfg.LogLevel)
	return workerapp.WithTelemetry(ctx, "supportflow-worker", cfg.MetricsAddr, cfg.HTTP, cfg.OTLPEndpoint, logger, func(tel *telemetry.Telemetry) error {
		return workerapp.Run(ctx, cfg, logger, tel)
	})
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
