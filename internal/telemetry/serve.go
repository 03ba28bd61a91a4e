package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"
)

// MetricsPath is where Serve exposes the metrics handler.
const MetricsPath = "/metrics"

// serveShutdownTimeout bounds how long Serve waits for in-flight scrapes
// once ctx ends; a scrape is quick, and a stuck one must not hold up exit.
const serveShutdownTimeout = 5 * time.Second

// Serve serves h at /metrics on addr until ctx ends, then stops the server
// and returns nil. It has its own listener and mux, so metrics stay off the
// API's port and its middleware. When ready is not nil it receives the
// bound address (useful with port 0) once the listener is open; Serve
// waits for it to be read or for ctx to end. An empty addr disables
// metrics: Serve returns nil at once and sends nothing on ready. An error
// means the address could not be bound or the server failed.
//
// The server has DefaultHTTPTimeouts; ServeWith takes configured ones.
func Serve(ctx context.Context, addr string, h http.Handler, ready chan<- string) error {
	return ServeWith(ctx, addr, h, ready, DefaultHTTPTimeouts)
}

// ServeWith is Serve with the server's timeouts (SUPPORTFLOW_HTTP_*; those
// left zero are DefaultHTTPTimeouts'): a scraper that stalls, or leaves a
// connection idle, is cut off like any other client.
func ServeWith(ctx context.Context, addr string, h http.Handler, ready chan<- string, timeouts HTTPTimeouts) error {
	if addr == "" {
		return nil
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("telemetry: metrics listener: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(MetricsPath, h)
	srv := timeouts.Server(mux)

	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()

	if ready != nil {
		select {
		case ready <- ln.Addr().String():
		case <-ctx.Done():
		}
	}

	select {
	case err := <-errc:
		return fmt.Errorf("telemetry: metrics server: %w", err)
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), serveShutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(shutdownCtx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("telemetry: metrics server: %w", err)
	}
	return nil
}
