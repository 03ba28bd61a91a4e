package telemetry

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
)

func newTelemetry(t *testing.T, cfg Config) *Telemetry {
	t.Helper()
	tel, err := New(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = tel.Shutdown(ctx)
	})
	return tel
}

// scrape returns the body h serves for GET /metrics and its parsed families.
func scrape(t *testing.T, h http.Handler) (string, map[string]*dto.MetricFamily) {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.Equal(t, http.StatusOK, rec.Code, rec.Body.String())
	body := rec.Body.String()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	require.NoError(t, err, body)
	return body, families
}

// labels renders a metric's labels as k=v pairs, sorted, for comparison.
func labels(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// sample finds the metric of family name whose labels are exactly want.
func sample(t *testing.T, families map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	f, ok := families[name]
	require.True(t, ok, "no family %q in %v", name, familyNames(families))
	for _, m := range f.GetMetric() {
		if assert.ObjectsAreEqual(want, labels(m)) {
			return m
		}
	}
	var got []map[string]string
	for _, m := range f.GetMetric() {
		got = append(got, labels(m))
	}
	t.Fatalf("%s has no series with labels %v; has %v", name, want, got)
	return nil
}

func familyNames(families map[string]*dto.MetricFamily) []string {
	var names []string
	for n := range families {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func TestProjectMetricsExposed(t *testing.T) {
	tel := newTelemetry(t, Config{ServiceName: "supportflow-test"})
	m := tel.Metrics()
	require.NotNil(t, m)

	m.ActionLeg("zendesk", "posted")
	m.ActionLeg("zendesk", "posted")
	m.ActionLeg("cancellations", "lost_claim")
	m.DeadLetter("retries_exhausted")
	m.DeadLetter("not_retryable")
	m.DeadLetter("not_retryable")
	m.Retry("PostReply")
	m.Lookup("found")
	m.Lookup("error")
	m.Lookup("error")
	m.Lookup("error")
	m.Draft("generated")
	m.Draft("invalid_output")

	body, families := scrape(t, tel.Handler())
	cases := []struct {
		name   string
		labels map[string]string
		value  float64
	}{
		{"supportflow_action_legs_total", map[string]string{"leg": "zendesk", "outcome": "posted"}, 2},
		{"supportflow_action_legs_total", map[string]string{"leg": "cancellations", "outcome": "lost_claim"}, 1},
		{"supportflow_enrichment_dead_letters_total", map[string]string{"reason": "retries_exhausted"}, 1},
		{"supportflow_enrichment_dead_letters_total", map[string]string{"reason": "not_retryable"}, 2},
		{"supportflow_activity_retries_total", map[string]string{"activity_type": "PostReply"}, 1},
		{"supportflow_enrichment_lookups_total", map[string]string{"outcome": "found"}, 1},
		{"supportflow_enrichment_lookups_total", map[string]string{"outcome": "error"}, 3},
		{"supportflow_drafts_total", map[string]string{"outcome": "generated"}, 1},
		{"supportflow_drafts_total", map[string]string{"outcome": "invalid_output"}, 1},
	}
	for _, c := range cases {
		assert.Equal(t, dto.MetricType_COUNTER, families[c.name].GetType(), c.name)
		got := sample(t, families, c.name, c.labels)
		assert.Equal(t, c.value, got.GetCounter().GetValue(), "%s%v", c.name, c.labels)
	}
	// Exact exposition lines, so a renamed series or an extra label (an
	// otel_scope_* one, say) fails here rather than on a dashboard.
	for _, line := range []string{
		`supportflow_action_legs_total{leg="zendesk",outcome="posted"} 2`,
		`supportflow_enrichment_dead_letters_total{reason="not_retryable"} 2`,
		`supportflow_activity_retries_total{activity_type="PostReply"} 1`,
		`supportflow_enrichment_lookups_total{outcome="error"} 3`,
		`supportflow_drafts_total{outcome="generated"} 1`,
		`# TYPE supportflow_drafts_total counter`,
	} {
		assert.Contains(t, body, line+"\n")
	}
	assert.NotContains(t, body, "otel_scope_")

	// The runtime collectors and the resource are on the same page.
	assert.Contains(t, families, "go_goroutines")
	assert.Contains(t, families, "process_cpu_seconds_total")
	assert.Contains(t, families, "target_info")
}

func sampleWith(families map[string]*dto.MetricFamily, name, label, value string) bool {
	for _, m := range families[name].GetMetric() {
		if labels(m)[label] == value {
			return true
		}
	}
	return false
}

func TestTargetInfoNamesService(t *testing.T) {
	tel := newTelemetry(t, Config{ServiceName: "supportflow-test"})
	_, families := scrape(t, tel.Handler())
	assert.True(t, sampleWith(families, "target_info", "service_name", "supportflow-test"),
		"target_info: %v", families["target_info"])

	t.Setenv("OTEL_SERVICE_NAME", "from-env")
	tel = newTelemetry(t, Config{ServiceName: "supportflow-test"})
	_, families = scrape(t, tel.Handler())
	assert.True(t, sampleWith(families, "target_info", "service_name", "from-env"),
		"target_info: %v", families["target_info"])
}

func TestNilMetricsAreNoOps(t *testing.T) {
	var m *Metrics
	assert.NotPanics(t, func() {
		m.ActionLeg("zendesk", "posted")
		m.DeadLetter("not_retryable")
		m.Retry("PostReply")
		m.Lookup("found")
		m.Draft("failed")
	})
}

func TestTemporalMetricsExposed(t *testing.T) {
	tel := newTelemetry(t, Config{ServiceName: "supportflow-test"})
	h := tel.TemporalMetrics().WithTags(map[string]string{"namespace": "default"})
	h.Counter("temporal_request").Inc(1)
	h.Counter("temporal_request").Inc(2)
	h.Timer("temporal_request_latency").Record(time.Millisecond)
	h.Timer("temporal_request_latency").Record(3 * time.Second)
	h.Gauge("temporal_num_pollers").Update(2)

	body, families := scrape(t, tel.Handler())
	ns := map[string]string{"namespace": "default"}

	// Counters keep the names Temporal's Go SDK dashboards query.
	req := sample(t, families, "temporal_request", ns)
	assert.Equal(t, 3.0, req.GetGauge().GetValue())

	pollers := sample(t, families, "temporal_num_pollers", ns)
	assert.Equal(t, 2.0, pollers.GetGauge().GetValue())

	assert.Equal(t, dto.MetricType_HISTOGRAM, families["temporal_request_latency_seconds"].GetType())
	lat := sample(t, families, "temporal_request_latency_seconds", ns).GetHistogram()
	assert.Equal(t, uint64(2), lat.GetSampleCount())
	assert.InDelta(t, 3.001, lat.GetSampleSum(), 1e-9)
	// Buckets are in seconds, not OpenTelemetry's millisecond-sized default.
	buckets := map[float64]uint64{}
	for _, b := range lat.GetBucket() {
		buckets[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	assert.Equal(t, uint64(1), buckets[0.001], "buckets %v", buckets)
	assert.Equal(t, uint64(1), buckets[2.5], "buckets %v", buckets)
	assert.Equal(t, uint64(2), buckets[5], "buckets %v", buckets)
	assert.Contains(t, body, `temporal_request_latency_seconds_bucket{namespace="default",le="0.001"} 1`+"\n")
}

func TestTemporalMetricsErrorsDoNotPanic(t *testing.T) {
	tel := newTelemetry(t, Config{})
	var handled []error
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { handled = append(handled, err) }))
	t.Cleanup(func() { otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {})) })
	// An invalid instrument name is an error from the meter, which the
	// contrib handler would turn into a panic by default.
	assert.NotPanics(t, func() {
		tel.TemporalMetrics().Counter("not a valid name!").Inc(1)
	})
	assert.NotEmpty(t, handled)
}

func TestPrivateRegistries(t *testing.T) {
	a := newTelemetry(t, Config{ServiceName: "a"})
	b := newTelemetry(t, Config{ServiceName: "b"})
	a.Metrics().Draft("generated")
	_, families := scrape(t, b.Handler())
	assert.NotContains(t, families, "supportflow_drafts_total")
	_, families = scrape(t, a.Handler())
	assert.Contains(t, families, "supportflow_drafts_total")
}

func TestTracingOffWithoutEndpoint(t *testing.T) {
	tel := newTelemetry(t, Config{ServiceName: "supportflow-test"})
	assert.False(t, tel.Tracing())
	assert.Empty(t, tel.Interceptors())
	assert.Nil(t, tel.ClientInterceptors())

	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	require.NoError(t, tel.Shutdown(ctx))
	require.NoError(t, tel.Shutdown(ctx), "a second Shutdown repeats the first's result")
}

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

func TestTracingToUnreachableCollector(t *testing.T) {
	// The exporter reports its failures to the global handler; keep the
	// test output quiet.
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(error) {}))
	for _, endpoint := range []string{closedAddr(t), "http://" + closedAddr(t)} {
		t.Run(endpoint, func(t *testing.T) {
			tel, err := New(context.Background(), Config{ServiceName: "supportflow-test", OTLPEndpoint: endpoint})
			require.NoError(t, err, "export is asynchronous; New must not need the collector")
			assert.True(t, tel.Tracing())
			require.Len(t, tel.Interceptors(), 1)
			require.Len(t, tel.ClientInterceptors(), 1)

			// A span waiting in the batcher makes Shutdown try to send it.
			_, span := tel.tracerProvider.Tracer("test").Start(context.Background(), "work")
			span.End()

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			start := time.Now()
			_ = tel.Shutdown(ctx) // the flush fails; that is not the point
			assert.Less(t, time.Since(start), 5*time.Second)
		})
	}
}

func TestBadEndpointURL(t *testing.T) {
	for _, endpoint := range []string{"ftp://collector:4317", "http://", "http://user:secret@%zz"} {
		_, err := New(context.Background(), Config{OTLPEndpoint: endpoint})
		require.Error(t, err, endpoint)
		assert.NotContains(t, err.Error(), "secret")
	}
}

func TestServe(t *testing.T) {
	tel := newTelemetry(t, Config{ServiceName: "supportflow-test"})
	tel.Metrics().Lookup("found")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ready := make(chan string)
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, "127.0.0.1:0", tel.Handler(), ready) }()

	var addr string
	select {
	case addr = <-ready:
	case err := <-done:
		t.Fatalf("Serve returned early: %v", err)
	case <-time.After(5 * time.Second):
		t.Fatal("Serve never became ready")
	}

	resp, err := http.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Contains(t, string(body), `supportflow_enrichment_lookups_total{outcome="found"} 1`)

	resp, err = http.Get("http://" + addr + "/")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusNotFound, resp.StatusCode)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("Serve did not stop when its context ended")
	}
	_, err = net.DialTimeout("tcp", addr, time.Second)
	assert.Error(t, err, "the listener is closed")
}

func TestServeDisabledAndBadAddr(t *testing.T) {
	ready := make(chan string, 1)
	require.NoError(t, Serve(context.Background(), "", http.NotFoundHandler(), ready))
	assert.Empty(t, ready)

	// A busy port is an error, not a hang.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	assert.Error(t, Serve(context.Background(), ln.Addr().String(), http.NotFoundHandler(), nil))
}
