// Command codec-gateway forwards a Temporal Web UI's codec requests to
// supportflow-api's codec server with a codec token, for a Web UI without
// sign-in, until SIGINT/SIGTERM.
//
//	codec-gateway          serve
//	codec-gateway --help   list every environment variable it reads
package main

import (
	"context"
	"io"
	"os"

	"github.com/supportflow/supportflow/internal/config"
	"github.com/supportflow/supportflow/internal/workerapp"
)

func main() {
	workerapp.Program("codec-gateway", "usage: codec-gateway\n\nForwards the Web UI's codec requests to supportflow-api with a codec token.",
		func(w io.Writer) { config.PrintVars(w, config.GatewayVars) }, func(ctx context.Context) error {
			cfg, err := config.LoadGateway()
			if err != nil {
				return err
			}
			return workerapp.RunGateway(ctx, cfg, config.NewLogger(os.Stderr, cfg.LogLevel), nil)
		})
}
