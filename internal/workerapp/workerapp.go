// Package workerapp wires supportflow's worker: it migrates the database,
// builds every client from the configuration, registers the workflows and
// activities with the retry interceptor, and runs until its context ends,
// letting running activities drain.
package workerapp

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"

	"github.com/jackc/pgx/v5/pgxpool"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/worker"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/activities"
	"github.com/supportflow/supportflow/codec"
	"github.com/supportflow/supportflow/internal/bqlookup"
	"github.com/supportflow/supportflow/internal/config"
	"github.com/supportflow/supportflow/internal/enrichment"
	"github.com/supportflow/supportflow/internal/eval"
	"github.com/supportflow/supportflow/internal/ingest"
	"github.com/supportflow/supportflow/internal/model"
	"github.com/supportflow/supportflow/internal/policy"
	"github.com/supportflow/supportflow/internal/proposals"
	"github.com/supportflow/supportflow/internal/subscriptions"
	"github.com/supportflow/supportflow/internal/telemetry"
	"github.com/supportflow/supportflow/internal/temporalconn"
	"github.com/supportflow/supportflow/internal/zendeskclient"
	"github.com/supportflow/supportflow/ledger"
	"github.com/supportflow/supportflow/migrations"
	"github.com/supportflow/supportflow/starter"
	"github.com/supportflow/supportflow/workflows"
)

// Run runs a worker until ctx ends. Configuration errors are returned
// before anything connects. tel (may be nil) receives the SDK's metrics,
// traces workflows and activities when tracing is on, and counts the
// project's own outcomes.
func Run(ctx context.Context, cfg config.Worker, logger *slog.Logger, tel *telemetry.Telemetry) error {
	version, err := migrations.MigrateURL(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	logger.Info("database migrated", "schema_version", version)

	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("database: %w", err)
	}
	defer pool.Close()

	httpClient := &http.Client{} // per-call deadlines come from contexts
	zd, err := zendeskclient.New(zendeskclient.Config{
		URL: cfg.ZendeskURL, Subdomain: cfg.ZendeskSubdomain,
		Email: cfg.ZendeskEmail, APIToken: cfg.ZendeskAPIToken, HTTPClient: httpClient,
	})
	if err != nil {
		return err
	}
	subs, err := subscriptions.New(cfg.SubscriptionsURL, cfg.SubscriptionsToken, httpClient)
	if err != nil {
		return err
	}

	mdl, err := model.New(model.Config{BaseURL: cfg.ModelBaseURL, APIKey: cfg.ModelAPIKey, Model: cfg.ModelName, HTTPClient: httpClient,
		MaxCompletionTokens: int64(cfg.MaxCompletionTokens)})
	if err != nil {
		return err
	}

	bq, err := bqlookup.New(ctx, bqlookup.Config{
		Endpoint: cfg.BigQueryEndpoint, ProjectID: cfg.BigQueryProject, Dataset: cfg.BigQueryDataset,
		Location: cfg.BigQueryLocation,
	})
	if err != nil {
		return err
	}
	defer bq.Close()

	o, err := ClientOptions(cfg.Temporal, cfg.PayloadKeys, cfg.AdmitUnsealedPayloads, logger, tel)
	if err != nil {
		return err
	}
	c, err := client.DialContext(ctx, o)
	if err != nil {
		return fmt.Errorf("temporal: %w", err)
	}
	defer c.Close()

	m := metricsOf(tel)
	w := worker.New(c, cfg.TaskQueue, Options(cfg, m))
	(&workflows.Workflows{Durations: cfg.Durations, EnrichmentMode: cfg.EnrichmentMode}).Register(w)
	// One worker per rate-limited service, on its own task queue: the
	// server hands out its activities no faster than the fleet-wide rate,
	// and this worker runs no more than its concurrency at once. Every
	// worker registers every activity; the workflows choose the queue.
	workers := []worker.Worker{w}
	fatalErrs := make(chan error, len(policy.Resources))
	for _, r := range policy.Resources {
		opts := Options(cfg, m)
		lim := cfg.Limits[r]
		opts.TaskQueueActivitiesPerSecond = lim.ActivitiesPerSecond()
		opts.MaxConcurrentActivityExecutionSize = lim.Concurrency
		opts.DisableWorkflowWorker = true
		queue := policy.ResourceQueue(cfg.TaskQueue, r)
		opts.OnFatalError = func(err error) {
			logger.Error("resource worker failed; stopping", "task_queue", queue, "error", err)
			fatalErrs <- err
		}
		workers = append(workers, worker.New(c, queue, opts))
		logger.Info("resource queue", "task_queue", queue,
			"fleet_requests_per_minute", lim.PerMinute, "activities_per_second", lim.ActivitiesPerSecond(), "worker_concurrency", lim.Concurrency)
	}
	ea := EnrichmentActivities(cfg, pool, bq, logger)
	ea.Metrics = m
	l := ledger.New(pool, cfg.Account)
	acts := &activities.Activities{
		Zendesk:       zd,
		Subscriptions: subs,
		Model:         mdl,
		Metrics:       m,
		Ledger:        l,
		Proposals:     proposals.New(pool, cfg.Account),
		Enrichment:    ea.Store,
		Evals:         eval.NewStore(pool, cfg.Account),
		Durations:     cfg.Durations,
		Logger:        logger,
		ReplyUpdate:   cfg.ReplyUpdate,
		// The prompt budget leaves the answer its room in the window.
		PromptTokenBudget: cfg.PromptTokens,
	}
	store := ingest.NewStore(pool, cfg.Account)
	reconciler := &ingest.Reconciler{
		Store: store, Export: zd,
		RequestsPerMinute: cfg.ExportRequestsPerM, BackfillFrom: cfg.ReconcileFrom, Backfill: cfg.ReconcileBackfill,
		HeartbeatInterval: cfg.Durations.Fill().HeartbeatInterval, Retention: cfg.Durations.Fill().Retention,
		Logger: logger, Metrics: m,
	}
	for _, w := range workers {
		RegisterActivities(w, acts, ea, reconciler)
	}
	// Every worker also relays recorded ticket events to Temporal, so an
	// event the API recorded is handed on even when no API process runs.
	relay := ingest.NewRelay(store, &starter.Starter{Client: c, TaskQueue: cfg.TaskQueue, IDs: supportflow.IDs{Prefix: cfg.IDPrefix}, Converter: o.DataConverter}, logger)
	relayCtx, stopRelay := context.WithCancel(ctx)
	defer stopRelay()
	go relay.Run(relayCtx)
	logger.Info("worker starting", append(cfg.Temporal.Describe(), "task_queue", cfg.TaskQueue, "payload_key", cfg.PayloadKeys.ActiveID(), "payload_keys", cfg.PayloadKeys.IDs(),
		"account", cfg.Account, "model", cfg.ModelName,
		"enrichment_mode", cfg.EnrichmentMode, "bigquery_project", cfg.BigQueryProject, "admit_unsealed_payloads", cfg.AdmitUnsealedPayloads)...)
	if cfg.AdmitUnsealedPayloads {
		logger.Warn("payloads that are not sealed are admitted: anyone who can reach Temporal can start a workflow this worker runs; unset " +
			codec.EnvAdmitUnsealed + " once the histories from before payload encryption have drained")
	}
	// Run returns on ctx's end (after draining) or on a fatal error (the
	// namespace is gone, credentials were revoked), which then ends the
	// process rather than leaving a worker that polls nothing.
	// A resource worker's fatal error ends the process too, through the
	// same drain.
	interrupt := make(chan any)
	var fatal error
	var once sync.Once
	stopAll := func(why error) {
		once.Do(func() {
			fatal = why
			logger.Info("worker draining", "drain_timeout", cfg.DrainTimeout)
			close(interrupt)
		})
	}
	go func() {
		select {
		case <-ctx.Done():
			stopAll(nil)
		case err := <-fatalErrs:
			stopAll(err)
		}
	}()
	resourceWorkers := workers[1:]
	for i, rw := range resourceWorkers {
		if err := rw.Start(); err != nil {
			for _, started := range resourceWorkers[:i] {
				started.Stop()
			}
			return fmt.Errorf("worker: %w", err)
		}
	}
	// The resource workers drain alongside the main one, all at once, so
	// the whole stop stays within one drain timeout.
	var drained sync.WaitGroup
	drained.Add(1)
	go func() {
		defer drained.Done()
		<-interrupt
		var wg sync.WaitGroup
		for _, rw := range resourceWorkers {
			wg.Go(rw.Stop)
		}
		wg.Wait()
	}()
	if cfg.Deployment.Versioned() {
		promoteCtx, stopPromote := context.WithCancel(ctx)
		defer stopPromote()
		go promote(promoteCtx, c, cfg.Deployment, logger)
	}
	err = w.Run(interrupt)
	stopAll(nil)
	drained.Wait()
	if err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	if fatal != nil {
		return fmt.Errorf("worker: %w", fatal)
	}
	logger.Info("worker stopped")
	return nil
}

// EnrichmentActivities builds the enrichment activities: their own store
// on the account's tables, and BigQuery calls bounded a margin inside the
// attempt's deadline so the attempt can record its outcome before Temporal
// times it out.
func EnrichmentActivities(cfg config.Worker, db enrichment.DB, bq enrichment.Lookuper, logger *slog.Logger) *enrichment.Activities {
	d := cfg.Durations.Fill()
	return &enrichment.Activities{
		Store:             enrichment.NewStore(db, cfg.Account),
		BigQuery:          bq,
		HeartbeatInterval: d.HeartbeatInterval,
		CallTimeout:       d.LookupAttemptTimeout - d.DeadlineMargin,
		Retention:         d.Retention,
		Logger:            logger,
	}
}

// ClientOptions are the Temporal client options of every supportflow
// process: payloads and failure messages sealed with keys, payloads that
// are not sealed refused (codec.ErrUnsealed) unless admitUnsealed
// (SUPPORTFLOW_ADMIT_UNSEALED_PAYLOADS, while histories from before
// payload encryption drain), structured logs through slog, and (with
// telemetry) the SDK's metrics and the OpenTelemetry tracing interceptor.
// A worker built on the client decodes with the same converter. conn says
// where Temporal is and how to authenticate (TLS, mTLS, API key).
func ClientOptions(conn temporalconn.Settings, keys *codec.Keyring, admitUnsealed bool, logger *slog.Logger, tel *telemetry.Telemetry) (client.Options, error) {
	o, err := conn.ClientOptions(telemetry.SDKLogger(sdklog.NewStructuredLogger(logger)), keys, codec.WithAdmitUnsealed(admitUnsealed))
	if err != nil {
		return o, err
	}
	if tel != nil {
		o.MetricsHandler = tel.TemporalMetrics()
		o.Interceptors = tel.ClientInterceptors()
	}
	return o, nil
}

// Options are the worker options every supportflow worker (and test
// environment) uses: the retry interceptor, heartbeats sent at the
// configured interval rather than throttled to 80% of the timeout, and the
// drain timeout.
func Options(cfg config.Worker, m *telemetry.Metrics) worker.Options {
	d := cfg.Durations.Fill()
	o := worker.Options{
		Interceptors:                 []interceptor.WorkerInterceptor{policy.NewRetryInterceptor(d, m.Retry)},
		MaxHeartbeatThrottleInterval: d.HeartbeatInterval,
		WorkerStopTimeout:            cfg.DrainTimeout,
	}
	if cfg.Deployment.Versioned() {
		// Every worker of the process (the resource queues' too) is the
		// same version, so a pinned run's activities stay on its build.
		o.DeploymentOptions = worker.DeploymentOptions{
			UseVersioning: true,
			Version:       worker.WorkerDeploymentVersion{DeploymentName: cfg.Deployment.Name, BuildID: cfg.Deployment.BuildID},
		}
	}
	return o
}

// metricsOf is tel's project metrics, nil without telemetry.
func metricsOf(tel *telemetry.Telemetry) *telemetry.Metrics {
	if tel == nil {
		return nil
	}
	return tel.Metrics()
}
