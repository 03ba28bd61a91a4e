// Command ensure-temporal builds the pinned Temporal CLI if it is missing and
// prints its path on stdout; progress goes to stderr. CI runs it before the
// tests so that no test has to wait for a build.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"

	"github.com/supportflow/supportflow/internal/devenv"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	path, err := devenv.EnsureTemporalCLI(ctx, os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(path)
}
