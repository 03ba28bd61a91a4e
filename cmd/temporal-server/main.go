// Command temporal-server runs the production topology for tests that want
// a long-lived server: a throwaway PostgreSQL cluster and the pinned
// Temporal server persisting to it, with supportflow's search attributes on
// the "default" namespace. It prints TEMPORAL_ADDRESS=host:port on stdout
// once the server is ready (and writes the address to -addr-file, if
// given), then runs until SIGINT or SIGTERM. CI runs the end-to-end suite
// against it twice in a row.
//
//	go run ./cmd/temporal-server -addr-file /tmp/addr &
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/devenv"
)

func main() {
	addrFile := flag.String("addr-file", "", "write the frontend's host:port here once ready")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *addrFile); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(ctx context.Context, addrFile string) error {
	startCtx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	pg, err := devenv.StartPostgres(startCtx, devenv.PostgresOptions{Log: os.Stderr})
	if err != nil {
		return err
	}
	defer pg.Stop()
	srv, err := devenv.StartTemporalServer(startCtx, devenv.TemporalServerOptions{
		PostgresURL: pg.URL, SearchAttributes: supportflow.SearchAttributes, Log: os.Stderr, Progress: os.Stderr})
	if err != nil {
		return err
	}
	defer srv.Stop()
	if addrFile != "" {
		if err := os.WriteFile(addrFile, []byte(srv.Address), 0o644); err != nil {
			return err
		}
	}
	fmt.Printf("TEMPORAL_ADDRESS=%s\n", srv.Address)
	<-ctx.Done()
	return nil
}
