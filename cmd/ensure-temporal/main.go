// Command ensure-temporal builds the pinned Temporal CLI if it is missing and
// prints its path on stdout; progress goes to stderr. With -server it also
// builds the pinned Temporal server (the production topology, which the
// secured-Temporal tests start themselves). CI runs it before the tests so
// that no test has to wait for a build.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"

	"github.com/supportflow/supportflow/internal/devenv"
)

func main() {
	server := flag.Bool("server", false, "also build the pinned Temporal server and its SQL tool")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	path, err := devenv.EnsureTemporalCLI(ctx, os.Stderr)
	if err == nil && *server {
		_, err = devenv.EnsureTemporalServer(ctx, os.Stderr)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(path)
}
