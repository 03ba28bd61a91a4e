package devenv

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
)

// TemporalOptions configures StartTemporal. The zero value starts a headless,
// in-memory dev server on free ports with the "default" namespace, no custom
// search attributes and output discarded.
type TemporalOptions struct {
	// Namespace is created at start and checked for readiness. "" means
	// "default" (which the dev server always creates).
	Namespace string
	// SearchAttributes maps custom search attribute names to their type
	// (Keyword, Text, Int, Double, Bool, Datetime, KeywordList), registered
	// at start. nil means none.
	SearchAttributes map[string]string
	// DBFile is the SQLite file that keeps the server's state across runs.
	// "" means in memory: everything is lost at Stop.
	DBFile string
	// UI serves the web UI on another free port. False means headless.
	UI bool
	// UICodecEndpoint is the codec server the web UI decodes payloads
	// through (it POSTs to UICodecEndpoint+"/decode"). "" means none.
	UICodecEndpoint string
	// Port is the frontend gRPC port on 127.0.0.1. 0 means a free port.
	Port int
	// UIPort is the web UI's port on 127.0.0.1, with UI. 0 means a free
	// port.
	UIPort int
	// Log receives the server's output. nil discards it.
	Log io.Writer
	// Progress receives progress lines if the CLI has to be built first.
	// nil discards them.
	Progress io.Writer
	// DynamicConfig adds dynamic config values (key -> value as the CLI's
	// --dynamic-config-value takes them, e.g. "true").
	DynamicConfig map[string]string
}

// Temporal is a running Temporal dev server started by StartTemporal.
type Temporal struct {
	// Address is the frontend gRPC host:port, for client.Options.HostPort.
	Address string
	// Namespace is the namespace that was checked ready.
	Namespace string
	// UIURL is the web UI's address, or "" when headless.
	UIURL string

	proc *child
	// cleanup, when set, runs after the process stopped (the real server's
	// databases and directory).
	cleanup func()
}

// StartTemporal starts `temporal server start-dev` (building the pinned CLI
// first if needed) and waits until an SDK client can reach it and describe
// the namespace, or until ctx ends.
func StartTemporal(ctx context.Context, opts TemporalOptions) (*Temporal, error) {
	cli, err := EnsureTemporalCLI(ctx, opts.Progress)
	if err != nil {
		return nil, err
	}
	ns := opts.Namespace
	if ns == "" {
		ns = "default"
	}
	// Ports picked ahead can be taken before the server binds them, so a
	// bind failure is retried with new ones.
	const attempts = 3
	for attempt := 1; ; attempt++ {
		ports, err := freePorts(4)
		if err != nil {
			return nil, err
		}
		port, httpPort, metricsPort, uiPort := ports[0], ports[1], ports[2], ports[3]
		if opts.Port != 0 {
			port = opts.Port
		}
		if opts.UIPort != 0 {
			uiPort = opts.UIPort
		}
		args := []string{"server", "start-dev",
			"--ip", "127.0.0.1",
			"--port", strconv.Itoa(port),
			"--http-port", strconv.Itoa(httpPort),
			"--metrics-port", strconv.Itoa(metricsPort),
			"--log-level", "warn",
			// One partition per task queue: with the default four, a dev
			// server spreads a few tasks thin and dispatch gets slower.
			"--dynamic-config-value", "matching.numTaskqueueReadPartitions=1",
			"--dynamic-config-value", "matching.numTaskqueueWritePartitions=1",
			// Task-queue priority: the dev server's Temporal (1.29) has
			// the priority-enabled matcher off by default; 1.31 and later
			// turn it on.
			"--dynamic-config-value", "matching.useNewMatcher=true",
		}
		for _, k := range slices.Sorted(maps.Keys(opts.DynamicConfig)) {
			args = append(args, "--dynamic-config-value", k+"="+opts.DynamicConfig[k])
		}
		uiURL := ""
		if opts.UI {
			// --ui-port is ignored with --headless, so only one is passed.
			args = append(args, "--ui-port", strconv.Itoa(uiPort))
			uiURL = fmt.Sprintf("http://127.0.0.1:%d", uiPort)
			if opts.UICodecEndpoint != "" {
				args = append(args, "--ui-codec-endpoint", opts.UICodecEndpoint)
			}
		} else {
			args = append(args, "--headless")
		}
		if ns != "default" {
			args = append(args, "--namespace", ns)
		}
		if opts.DBFile != "" {
			args = append(args, "--db-filename", opts.DBFile)
		}
		names := make([]string, 0, len(opts.SearchAttributes))
		for name := range opts.SearchAttributes {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			args = append(args, "--search-attribute", name+"="+opts.SearchAttributes[name])
		}

		// SIGKILL on parent death: the state is in memory or in a crash-safe
		// SQLite file, and a graceful stop takes seconds nobody waits for.
		proc, err := startChild("temporal dev server", exec.Command(cli, args...), opts.Log, syscall.SIGKILL, nil)
		if err != nil {
			return nil, err
		}
		t := &Temporal{Address: fmt.Sprintf("127.0.0.1:%d", port), Namespace: ns, UIURL: uiURL, proc: proc}
		err = waitTemporal(ctx, t)
		if err == nil {
			return t, nil
		}
		_ = proc.stop(syscall.SIGINT, 10*time.Second)
		out := proc.tail.String()
		bindErr := strings.Contains(out, "already in use") || strings.Contains(out, "can't set")
		if opts.Port != 0 || opts.UIPort != 0 || attempt == attempts || !proc.exited() || !bindErr {
			return nil, err
		}
	}
}

// waitTemporal polls until a client can check the server's health and
// describe the namespace, the server exits, or ctx ends.
func waitTemporal(ctx context.Context, t *Temporal) error {
	var lastErr error
	for {
		if t.proc.exited() {
			return t.proc.exitError()
		}
		attemptCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
		lastErr = pingTemporal(attemptCtx, t.Address, t.Namespace)
		cancel()
		if lastErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("devenv: Temporal dev server not ready before %w (last error: %v); last output:\n%s",
				context.Cause(ctx), lastErr, t.proc.tail.String())
		case <-t.proc.done:
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func pingTemporal(ctx context.Context, address, namespace string) error {
	c, err := client.DialContext(ctx, client.Options{
		HostPort:  address,
		Namespace: namespace,
		// The SDK's default logger prints to stdout; readiness polling
		// should not.
		Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
	})
	if err != nil {
		return err
	}
	defer c.Close()
	return pingClient(ctx, c, namespace)
}

// pingClient checks the server's health through c and describes the
// namespace.
func pingClient(ctx context.Context, c client.Client, namespace string) error {
	if _, err := c.CheckHealth(ctx, &client.CheckHealthRequest{}); err != nil {
		return err
	}
	_, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	return err
}

// Stop shuts the server down (SIGINT, killed if it takes more than 20 s). It
// is safe to call more than once.
func (t *Temporal) Stop() error {
	err := t.proc.stop(syscall.SIGINT, 20*time.Second)
	if t.cleanup != nil {
		t.cleanup()
		t.cleanup = nil
	}
	return err
}
