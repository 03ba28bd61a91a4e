package telemetry

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/supportflow/supportflow/internal/policy"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.temporal.io/sdk/interceptor"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// marker stands for what a failing activity's error can quote: the
// model's answer, the customer's words.
const marker = "MARKER-customer-said-cancel-my-plan-7f3a"

// spanText is every string an exported span carries: its name,
// attributes, status description, events (names and attributes) and
// links' attributes.
func spanText(s tracetest.SpanStub) string {
	var b strings.Builder
	attrs := func(kvs []attribute.KeyValue) {
		for _, kv := range kvs {
			fmt.Fprintf(&b, "%s=%s\n", kv.Key, kv.Value.Emit())
		}
	}
	b.WriteString(s.Name + "\n" + s.Status.Description + "\n")
	attrs(s.Attributes)
	for _, e := range s.Events {
		b.WriteString(e.Name + "\n")
		attrs(e.Attributes)
	}
	for _, l := range s.Links {
		attrs(l.Attributes)
	}
	return b.String()
}

func failingActivity(context.Context) error {
	return temporal.NewNonRetryableApplicationError("the model answered: "+marker, "InvalidModelOutput", errors.New(marker))
}

func plainFailingActivity(context.Context) error {
	return fmt.Errorf("zendesk refused the reply %q", marker)
}

func failingWorkflow(ctx workflow.Context, plain bool) error {
	ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: time.Minute,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 1}})
	if plain {
		return workflow.ExecuteActivity(ctx, plainFailingActivity).Get(ctx, nil)
	}
	return workflow.ExecuteActivity(ctx, failingActivity).Get(ctx, nil)
}

// A workflow whose activity fails with an error quoting customer text,
// run through the tracing interceptor supportflow's workers use: every
// exported span carries the error's class (the ApplicationError's Type,
// or the Go type of a plain error), and the text appears nowhere, not in
// an attribute, an event or a status.
func TestSpans_FailingActivityCarryNoErrorText(t *testing.T) {
	for _, tc := range []struct {
		name  string
		plain bool
		// classes are the classes a failed span may be described by: the
		// activity's own error, and the workflow's (its ActivityError).
		classes []string
	}{
		{"application error", false, []string{"application:InvalidModelOutput"}},
		{"plain error", true, []string{"*errors.errorString", "application:unknown", "application:*errors.errorString"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			exp := tracetest.NewInMemoryExporter()
			tel := newTelemetry(t, Config{ServiceName: "supportflow-test", SpanExporter: exp})
			require.True(t, tel.Tracing())
			var ws []interceptor.WorkerInterceptor
			for _, i := range tel.Interceptors() {
				ws = append(ws, i)
			}
			var suite testsuite.WorkflowTestSuite
			env := suite.NewTestWorkflowEnvironment()
			env.SetWorkerOptions(worker.Options{Interceptors: ws})
			env.RegisterWorkflow(failingWorkflow)
			env.RegisterActivity(failingActivity)
			env.RegisterActivity(plainFailingActivity)
			env.ExecuteWorkflow(failingWorkflow, tc.plain)
			require.True(t, env.IsWorkflowCompleted())
			err := env.GetWorkflowError()
			require.Error(t, err)
			require.Contains(t, err.Error(), marker, "the error itself does carry the text")

			spans := exp.GetSpans()
			require.NotEmpty(t, spans)
			var failed int
			for _, s := range spans {
				assert.NotContains(t, spanText(s), marker, "span %q", s.Name)
				if s.Status.Code == codes.Error {
					failed++
					assert.Contains(t, tc.classes, s.Status.Description, "span %q is described by the error's class", s.Name)
					assert.Contains(t, s.Attributes, attribute.String("error.type", s.Status.Description), "span %q", s.Name)
				}
			}
			assert.Positive(t, failed, "the failing activity's span is exported as failed: %v", spanNames(spans))
		})
	}
}

// A span recorded anywhere else (not through the Temporal interceptor),
// with the SDK's own RecordError and a status quoting the error, reaches
// the exporter without the text: the exporter is wrapped too.
func TestSpans_OtherSpansAreScrubbedAtExport(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tel := newTelemetry(t, Config{ServiceName: "supportflow-test", SpanExporter: exp})
	_, span := tel.tracerProvider.Tracer("elsewhere").Start(context.Background(), "request")
	err := fmt.Errorf("bad body %q", marker)
	span.RecordError(err, trace.WithStackTrace(true))
	span.SetStatus(codes.Error, err.Error())
	span.End()

	spans := exp.GetSpans()
	require.Len(t, spans, 1)
	assert.NotContains(t, spanText(spans[0]), marker)
	assert.Equal(t, codes.Error, spans[0].Status.Code)
	assert.Equal(t, "*errors.errorString", spans[0].Status.Description, "described by the recorded exception type")
	require.Len(t, spans[0].Events, 1)
	assert.Contains(t, spans[0].Events[0].Attributes, attribute.String("exception.type", "*errors.errorString"))
}

func TestErrorClass(t *testing.T) {
	assert.Equal(t, "", policy.ErrorClass(nil))
	assert.Equal(t, "application:ModelTruncated", policy.ErrorClass(fmt.Errorf("wrapped: %w",
		temporal.NewApplicationError(marker, "ModelTruncated"))))
	assert.Equal(t, "context_deadline_exceeded", policy.ErrorClass(fmt.Errorf("%s: %w", marker, context.DeadlineExceeded)))
	assert.Equal(t, "*errors.errorString", policy.ErrorClass(errors.New(marker)))
	// A Type is a name, never a way for text to reach a span.
	assert.Equal(t, "application:said_hello_there", policy.ErrorClass(temporal.NewApplicationError("x", "said hello there")))

	fields := LogError(temporal.NewApplicationError(marker, "InvalidModelOutput"))
	assert.Equal(t, []any{"error_type", "application:InvalidModelOutput"}, fields, "a failure's message is not logged")
	fields = LogError(errors.New("dial tcp: connection refused"))
	assert.Equal(t, []any{"error_type", "*errors.errorString", "error", "dial tcp: connection refused"}, fields)
}

func spanNames(spans tracetest.SpanStubs) []string {
	var names []string
	for _, s := range spans {
		names = append(names, s.Name)
	}
	return names
}

// The SDK's own log lines (an activity's failure) carry the error's class,
// not its text, in every logger the SDK derives.
func TestSDKLogger_ErrorsAsClass(t *testing.T) {
	var buf bytes.Buffer
	l := SDKLogger(sdklog.NewStructuredLogger(slog.New(slog.NewJSONHandler(&buf, nil))))
	secret := "the customer wrote: cancel-marker-4711"
	err := temporal.NewApplicationError(secret, "InvalidModelOutput")
	l.Error("Activity error.", "Error", err, "ActivityType", "GenerateDraft")
	sdklog.With(l, "WorkflowID", "draft/1").Warn("again", "Error", errors.New(secret))
	out := buf.String()
	assert.NotContains(t, out, "cancel-marker-4711")
	assert.Contains(t, out, "application:InvalidModelOutput")
	assert.Contains(t, out, "draft/1")
	assert.Contains(t, out, "GenerateDraft")
}
