// Command supportflow-api serves supportflow's HTTP API, the Zendesk
// webhook and the codec server until SIGINT/SIGTERM.
//
//	supportflow-api          migrate the database, then serve
//	supportflow-api --help   list every environment variable it reads
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/supportflow/supportflow/internal/config"
	"github.com/supportflow/supportflow/internal/telemetry"
	"github.com/supportflow/supportflow/internal/workerapp"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "supportflow-api:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) > 0 {
		fmt.Fprintf(os.Stderr, "usage: supportflow-api\n\nServes the HTTP API, the Zendesk webhook and the codec server.\n\nEnvironment:\n")
		config.PrintAPIHelp(os.Stderr)
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			return nil
		}
		return fmt.Errorf("unknown argument %q", args[0])
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := config.LoadAPI()
	if err != nil {
		return err
	}
	logger := config.NewLogger(os.Stderr, cfg.LogLevel)
	return workerapp.WithTelemetry(ctx, "supportflow-api", cfg.MetricsAddr, cfg.HTTP, cfg.OTLPEndpoint, logger, func(tel *telemetry.Telemetry) error {
		return workerapp.RunAPI(ctx, cfg, logger, tel, nil)
	})
}
