// Package telemetry gives supportflow's processes their metrics and traces:
// one OpenTelemetry MeterProvider whose only reader is a Prometheus
// exporter on a private registry (so the Temporal SDK's metrics, the
// project's own and the Go runtime's all come out of one /metrics page),
// and, when an OTLP endpoint is configured, a TracerProvider that exports
// spans over OTLP/gRPC and the Temporal tracing interceptor that feeds it.
// Exported spans carry IDs and error classes, never an error's message
// (scrub.go).
//
// Nothing here touches the OpenTelemetry or Prometheus globals: every
// process (and test) gets its own providers and registry, so two of them in
// one binary never see each other's series. Exporter errors (a collector
// that is down, a conflicting instrument) go to otel.Handle, the
// OpenTelemetry global error handler, which a process may replace with
// otel.SetErrorHandler.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/otlptranslator"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracegrpc"
	otelprom "go.opentelemetry.io/otel/exporters/prometheus"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.temporal.io/sdk/client"
	temporalotel "go.temporal.io/sdk/contrib/opentelemetry"
	"go.temporal.io/sdk/interceptor"
)

// DefaultServiceName is the service.name used when Config.ServiceName is
// empty, so a forgotten name still yields labelled, usable telemetry.
const DefaultServiceName = "supportflow"

// temporalScope is the instrumentation scope (meter and tracer name) the
// Temporal SDK's metrics and spans are recorded under; it is the name the
// SDK's contrib package would pick for itself from the global providers.
const temporalScope = "temporal-sdk-go"

// projectScope is the instrumentation scope of supportflow's own metrics.
const projectScope = "github.com/supportflow/supportflow"

// secondsBuckets are the histogram bounds, in seconds, for every histogram
// recorded in seconds (the Temporal SDK's timers). OpenTelemetry's default
// bounds (0, 5, 10, 25 … 10000) are meant for milliseconds and would put
// every RPC and activity latency in the first bucket; these span a fast
// RPC (1ms) to a long poll or a slow model call (10min).
var secondsBuckets = []float64{
	0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5,
	1, 2.5, 5, 10, 30, 60, 120, 300, 600,
}

// Config configures a process's telemetry.
type Config struct {
	// ServiceName is the OpenTelemetry service.name of the process, e.g.
	// "supportflow-worker" or "supportflow-api". It labels spans and the
	// target_info metric. Empty means DefaultServiceName. OTEL_SERVICE_NAME
	// and OTEL_RESOURCE_ATTRIBUTES, when set, take precedence, as
	// OpenTelemetry specifies.
	ServiceName string

	// OTLPEndpoint, when not empty, turns tracing on: spans are exported
	// over OTLP/gRPC to it. It is either host:port, secured with TLS unless
	// OTEL_EXPORTER_OTLP_INSECURE (or OTEL_EXPORTER_OTLP_TRACES_INSECURE)
	// is true, or a URL whose scheme says which: http:// for plaintext,
	// https:// for TLS. Every other OTEL_EXPORTER_OTLP_* variable (headers,
	// certificates, timeout, compression) and OTEL_TRACES_SAMPLER / OTEL_BSP_*
	// keep their standard meaning. Export is asynchronous: an unreachable
	// collector never fails New, it only loses spans.
	OTLPEndpoint string

	// SpanExporter, when not nil, turns tracing on with spans handed to it
	// as each ends (an in-memory exporter in tests), instead of over OTLP.
	// Like OTLP's, it receives spans scrubbed of error text (scrub.go).
	SpanExporter sdktrace.SpanExporter
}

// Telemetry holds a process's meter and tracer providers and the
// Prometheus registry they are exposed on. Build it once with New, hand its
// parts to the Temporal client and the process's own code, serve Handler,
// and call Shutdown on the way out.
type Telemetry struct {
	registry      *prometheus.Registry
	handler       http.Handler
	meterProvider *sdkmetric.MeterProvider
	// tracerProvider is nil when tracing is off.
	tracerProvider *sdktrace.TracerProvider
	temporal       client.MetricsHandler
	interceptors   []interceptor.Interceptor
	metrics        *Metrics

	shutdownOnce sync.Once
	shutdownErr  error
}

// New builds the telemetry described by cfg. It fails only on a malformed
// configuration (endpoint, OTEL_* variables); it does not connect anywhere.
func New(ctx context.Context, cfg Config) (*Telemetry, error) {
	name := strings.TrimSpace(cfg.ServiceName)
	if name == "" {
		name = DefaultServiceName
	}
	// Later options override earlier ones, so the standard environment
	// variables win over the name in the code.
	res, err := resource.New(ctx,
		resource.WithTelemetrySDK(),
		resource.WithAttributes(attribute.String("service.name", name)),
		resource.WithFromEnv(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: resource: %w", err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	exporter, err := otelprom.New(
		otelprom.WithRegisterer(reg),
		// Spelled out so a change of the exporter's default cannot rename
		// series that dashboards and alerts query: names are escaped to
		// underscores, counters get _total and histograms their unit
		// (temporal_request_latency_seconds_bucket, as Temporal's own Go
		// SDK dashboards expect).
		otelprom.WithTranslationStrategy(otlptranslator.UnderscoreEscapingWithSuffixes),
		// No otel_scope_* label on every series: the metric prefixes
		// (temporal_, supportflow_) already say where a series comes from.
		otelprom.WithoutScopeInfo(),
	)
	if err != nil {
		return nil, fmt.Errorf("telemetry: prometheus exporter: %w", err)
	}
	mp := sdkmetric.NewMeterProvider(
		sdkmetric.WithResource(res),
		sdkmetric.WithReader(exporter),
		sdkmetric.WithView(sdkmetric.NewView(
			sdkmetric.Instrument{Kind: sdkmetric.InstrumentKindHistogram, Unit: "s"},
			sdkmetric.Stream{Aggregation: sdkmetric.AggregationExplicitBucketHistogram{Boundaries: secondsBuckets}},
		)),
	)

	t := &Telemetry{
		registry:      reg,
		meterProvider: mp,
		handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{
			// A failing collector should cost its own series, not the
			// whole scrape.
			ErrorHandling: promhttp.ContinueOnError,
		}),
		// Counters stay OpenTelemetry up-down counters (the contrib
		// default), which Prometheus sees as gauges without _total:
		// temporal_request, temporal_request_failure … are the names
		// Temporal's published Go SDK dashboards query with rate().
		temporal: temporalotel.NewMetricsHandler(temporalotel.MetricsHandlerOptions{
			Meter: mp.Meter(temporalScope),
			// The contrib default panics; a metric the SDK cannot record
			// must not take a worker down.
			OnError: otel.Handle,
		}),
	}
	t.metrics, err = newMetrics(mp.Meter(projectScope))
	if err != nil {
		_ = mp.Shutdown(context.Background())
		return nil, fmt.Errorf("telemetry: metrics: %w", err)
	}

	var processor sdktrace.SpanProcessor
	if cfg.SpanExporter != nil {
		processor = sdktrace.NewSimpleSpanProcessor(scrubExporter{cfg.SpanExporter})
	} else if endpoint := strings.TrimSpace(cfg.OTLPEndpoint); endpoint != "" {
		opt, err := endpointOption(endpoint)
		if err != nil {
			_ = mp.Shutdown(context.Background())
			return nil, err
		}
		spanExporter, err := otlptracegrpc.New(ctx, opt)
		if err != nil {
			_ = mp.Shutdown(context.Background())
			return nil, fmt.Errorf("telemetry: otlp exporter: %w", err)
		}
		processor = sdktrace.NewBatchSpanProcessor(scrubExporter{spanExporter})
	}
	if processor != nil {
		tp := sdktrace.NewTracerProvider(
			sdktrace.WithResource(res),
			sdktrace.WithSpanProcessor(processor),
		)
		// Spans record an error's class, never its message (scrub.go).
		tracing, err := temporalotel.NewTracingInterceptor(temporalotel.TracerOptions{
			Tracer:      tp.Tracer(temporalScope),
			SpanStarter: startClassifyingSpan,
		})
		if err != nil {
			_ = tp.Shutdown(context.Background())
			_ = mp.Shutdown(context.Background())
			return nil, fmt.Errorf("telemetry: tracing interceptor: %w", err)
		}
		t.tracerProvider = tp
		t.interceptors = []interceptor.Interceptor{tracing}
	}
	return t, nil
}

// endpointOption turns Config.OTLPEndpoint into the exporter option that
// names it. A URL is checked here because the exporter silently falls back
// to localhost:4317 on one it cannot parse.
func endpointOption(endpoint string) (otlptracegrpc.Option, error) {
	if !strings.Contains(endpoint, "://") {
		return otlptracegrpc.WithEndpoint(endpoint), nil
	}
	u, err := url.Parse(endpoint)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		// The value is not echoed: an endpoint URL may carry credentials.
		return nil, errors.New("telemetry: OTLP endpoint must be host:port or an http(s):// URL")
	}
	return otlptracegrpc.WithEndpointURL(endpoint), nil
}

// Handler serves the Prometheus exposition of every metric the process
// has: the Temporal SDK's, supportflow's own, and the Go runtime and
// process collectors, all from this Telemetry's private registry.
func (t *Telemetry) Handler() http.Handler { return t.handler }

// Registry is the private Prometheus registry Handler exposes, for a
// process that has its own prometheus collectors to add.
func (t *Telemetry) Registry() *prometheus.Registry { return t.registry }

// TemporalMetrics is the handler to set as client.Options.MetricsHandler so
// the Temporal SDK's client and worker metrics land on Handler's page.
func (t *Telemetry) TemporalMetrics() client.MetricsHandler { return t.temporal }

// Interceptors returns the Temporal OpenTelemetry tracing interceptor when
// tracing is on, else nil. Each one is both a client and a worker
// interceptor; ClientInterceptors gives the same list typed for
// client.Options.Interceptors, through which workers built on that client
// inherit it.
func (t *Telemetry) Interceptors() []interceptor.Interceptor { return t.interceptors }

// ClientInterceptors is Interceptors typed for client.Options.Interceptors,
// which is a []interceptor.ClientInterceptor and so cannot take
// Interceptors' slice as is. It is nil when tracing is off.
func (t *Telemetry) ClientInterceptors() []interceptor.ClientInterceptor {
	if len(t.interceptors) == 0 {
		return nil
	}
	out := make([]interceptor.ClientInterceptor, len(t.interceptors))
	for i, in := range t.interceptors {
		out[i] = in
	}
	return out
}

// Tracing reports whether spans are exported (Config.OTLPEndpoint was set).
func (t *Telemetry) Tracing() bool { return t.tracerProvider != nil }

// Metrics returns supportflow's own instruments.
// On a nil *Telemetry it is nil, which counts nothing.
func (t *Telemetry) Metrics() *Metrics {
	if t == nil {
		return nil
	}
	return t.metrics
}

// Shutdown flushes pending spans to the collector and stops both
// providers, waiting no longer than ctx allows; spans still unsent then
// are dropped and ctx's error is returned. Call it after the Temporal
// client is closed and the metrics server has stopped. Later calls return
// the first call's result.
func (t *Telemetry) Shutdown(ctx context.Context) error {
	t.shutdownOnce.Do(func() {
		var errs []error
		if t.tracerProvider != nil {
			if err := t.tracerProvider.Shutdown(ctx); err != nil {
				errs = append(errs, fmt.Errorf("telemetry: tracer provider: %w", err))
			}
		}
		if err := t.meterProvider.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("telemetry: meter provider: %w", err))
		}
		t.shutdownErr = errors.Join(errs...)
	})
	return t.shutdownErr
}
