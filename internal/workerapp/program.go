package workerapp

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

// Program runs one of supportflow's single-purpose programs (the API, the
// codec gateway): --help prints usage and exits 0, any other argument is
// refused after the usage, and run gets a context that ends on SIGINT or
// SIGTERM. An error is printed after the program's name and exits 1.
func Program(name, usage string, printVars func(io.Writer), run func(ctx context.Context) error) {
	if err := program(os.Args[1:], usage, printVars, run); err != nil {
		fmt.Fprintln(os.Stderr, name+":", err)
		os.Exit(1)
	}
}

func program(args []string, usage string, printVars func(io.Writer), run func(ctx context.Context) error) error {
	if len(args) > 0 {
		fmt.Fprintf(os.Stderr, "%s\n\nEnvironment:\n", usage)
		printVars(os.Stderr)
		if args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
			return nil
		}
		return fmt.Errorf("unknown argument %q", args[0])
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	return run(ctx)
}
