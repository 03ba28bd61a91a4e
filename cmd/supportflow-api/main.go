// Command supportflow-api serves supportflow's HTTP API, the Zendesk
// webhook and the codec server until SIGINT/SIGTERM.
//
//	supportflow-api          migrate the database, then serve
//	supportflow-api --help   list every environment variable it reads
package main

import (
	"context"
	"os"

	"github.com/supportflow/supportflow/internal/config"
	"github.com/supportflow/supportflow/internal/telemetry"
	"github.com/supportflow/supportflow/internal/workerapp"
)

func main() {
	workerapp.Program("supportflow-api", "usage: supportflow-api\n\nServes the HTTP API, the Zendesk webhook and the codec server.",
		config.PrintAPIHelp, func(ctx context.Context) error {
			cfg, err := config.LoadAPI()
			if err != nil {
				return err
			}
			logger := config.NewLogger(os.Stderr, cfg.LogLevel)
			return workerapp.WithTelemetry(ctx, "supportflow-api", cfg.MetricsAddr, cfg.HTTP, cfg.OTLPEndpoint, logger, func(tel *telemetry.Telemetry) error {
				return workerapp.RunAPI(ctx, cfg, logger, tel, nil)
			})
		})
}
