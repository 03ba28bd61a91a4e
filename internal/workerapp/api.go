package workerapp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/codec"
	"github.com/supportflow/supportflow/internal/api"
	"github.com/supportflow/supportflow/internal/config"
	"github.com/supportflow/supportflow/internal/ingest"
	"github.com/supportflow/supportflow/internal/proposals"
	"github.com/supportflow/supportflow/internal/telemetry"
	"github.com/supportflow/supportflow/ledger"
	"github.com/supportflow/supportflow/migrations"
	"github.com/supportflow/supportflow/starter"
)

// RunAPI serves the HTTP API until ctx ends, then shuts down gracefully
// (in-flight requests get up to 10 s; SSE streams are cut). ready, if not
// nil, receives the listening address once it listens.
func RunAPI(ctx context.Context, cfg config.API, logger *slog.Logger, tel *telemetry.Telemetry, ready chan<- string) error {
	if _, err := migrations.MigrateURL(ctx, cfg.DatabaseURL); err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()
	o, err := ClientOptions(cfg.Temporal, cfg.PayloadKeys, cfg.AdmitUnsealedPayloads, logger, tel)
	if err != nil {
		return err
	}
	c, err := client.DialContext(ctx, o)
	if err != nil {
		return fmt.Errorf("temporal: %w", err)
	}
	defer c.Close()
	l := ledger.New(pool, cfg.Account)
	p := proposals.New(pool, cfg.Account)
	srv, err := api.New(api.Config{Tokens: cfg.Tokens, WebhookSecret: cfg.WebhookSecret, PreviousWebhookSecret: cfg.PreviousWebhookSecret,
		Metrics: tel.Metrics(), ZendeskUserID: cfg.ZendeskUserID,
		WebhookRetryAfter: cfg.WebhookRetryAfter, RelayInterval: cfg.RelayInterval,
		ReadTimeout: cfg.HTTP.Read, WriteTimeout: cfg.HTTP.Write, MaxStreamsPerToken: cfg.MaxStreamsPerToken, KeepAlive: cfg.SSEKeepAlive,
		Codec: &codec.Codec{Keys: cfg.PayloadKeys, AllowEncode: cfg.CodecAllowEncode}, CodecTokens: cfg.CodecTokens, CodecOrigins: cfg.CodecOrigins, Namespace: cfg.Temporal.Namespace},
		&starter.Starter{Client: c, TaskQueue: cfg.TaskQueue, IDs: supportflow.IDs{Prefix: cfg.IDPrefix}, Proposals: p, Approvals: p, Converter: o.DataConverter}, l, pool, c, logger)
	if err != nil {
		return err
	}
	// The ingestion gauges (relay backlog, reconciler lag) are read from
	// PostgreSQL at each scrape of this process's metrics.
	if err := tel.ObserveIngestion(ingest.NewStore(pool, cfg.Account).Health); err != nil {
		return err
	}
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	// Requests do not inherit ctx: Shutdown lets in-flight ones finish
	// (an approval half-way through its Update must not be cut off).
	// The server's timeouts are SUPPORTFLOW_HTTP_*'s; the event streams
	// extend their own write deadline per event (api.Config.WriteTimeout).
	hs := cfg.HTTP.Server(srv)
	hs.RegisterOnShutdown(srv.Close)
	logger.Info("api listening", "addr", ln.Addr().String(), "account", cfg.Account, "payload_key", cfg.PayloadKeys.ActiveID(),
		"api_tokens", tokenNames(cfg.Tokens), "codec_server", len(cfg.CodecTokens) > 0, "codec_origins", cfg.CodecOrigins,
		"codec_encode", cfg.CodecAllowEncode, "admit_unsealed_payloads", cfg.AdmitUnsealedPayloads)
	go srv.RunRelay(ctx)
	if err := serve(ctx, hs, ln, ready); err != nil {
		return err
	}
	logger.Info("api stopped")
	return nil
}

// tokenNames are the API tokens' names and roles, for the start-up log:
// who can do what, never a secret.
func tokenNames(tokens []api.Token) []string {
	var names []string
	for _, t := range tokens {
		names = append(names, t.String())
	}
	return names
}

// serve serves hs on ln until ctx ends, then shuts it down gracefully
// (in-flight requests get up to 10 s). ready, if not nil, receives the
// listening address first.
func serve(ctx context.Context, hs *http.Server, ln net.Listener, ready chan<- string) error {
	if ready != nil {
		ready <- ln.Addr().String()
	}
	done := make(chan error, 1)
	go func() { done <- hs.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	shutdownCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := hs.Shutdown(shutdownCtx)
	if errors.Is(<-done, http.ErrServerClosed) && err == nil {
		return nil
	}
	return err
}

// RunGateway serves the codec gateway (codec.Gateway) until ctx ends.
// ready, if not nil, receives the listening address once it listens.
func RunGateway(ctx context.Context, cfg config.Gateway, logger *slog.Logger, ready chan<- string) error {
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return err
	}
	hs := cfg.HTTP.Server(codec.Gateway(cfg.Upstream, cfg.Token))
	logger.Info("codec gateway listening", "addr", ln.Addr().String(), "upstream", cfg.Upstream.Redacted())
	return serve(ctx, hs, ln, ready)
}
