// Command codec-gateway forwards a Temporal Web UI's codec requests to
// supportflow-api's codec server with a codec token, for a Web UI without
// sign-in, until SIGINT/SIGTERM.
//
//	codec-gateway          serve
//	codec-gateway --help   list every environment variable it reads
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/supportflow/supportflow/internal/config"
	"github.com/supportflow/supportflow/internal/workerapp"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "codec-gateway:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) > 0 {
		fmt.Fprintf(os.Stderr, "usage: codec-gateway\n\nForwards the Web UI's codec requests to supportflow-api with a codec token.\n\nEnvironment:\n")
		config.PrintVars(os.Stderr, config.GatewayVars)
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			return nil
		}
		return fmt.Errorf("unknown argument %q", args[0])
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cfg, err := config.LoadGateway()
	if err != nil {
		return err
	}
	return workerapp.RunGateway(ctx, cfg, config.NewLogger(os.Stderr, cfg.LogLevel), nil)
}
