package telemetry

import (
	"context"
	"errors"

	"github.com/supportflow/supportflow/internal/policy"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	sdklog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
)

// Spans and logs carry IDs and error types, never an error's message: the
// message of an activity's or a workflow's error can quote the model's
// answer or the customer's words (an answer that does not parse, a reply
// Zendesk refused), and a trace backend or a log store is not where that
// text may go (Temporal's own copy is sealed by the failure converter).
//
// Two layers keep it out of exported spans:
//   - the Temporal tracing interceptor's spans are started through
//     classifyingSpan (its SpanStarter hook), whose RecordError records the
//     error's class (policy.ErrorClass) as exception.type and error.type, without
//     exception.message, and whose SetStatus puts the class, not the
//     message, in the status description. The interceptor records every
//     failed span with RecordError and SetStatus(codes.Error, err.Error())
//     (go.temporal.io/sdk/contrib/opentelemetry, tracerSpan.Finish);
//   - every exporter is wrapped in scrubExporter, which drops message and
//     stack trace attributes from whatever span reaches it (one started
//     anywhere else: a library's, a future otelhttp) and replaces an error
//     status's description with the recorded exception type, or "error".
//
// The attribute names are OpenTelemetry's semantic conventions:
// https://opentelemetry.io/docs/specs/semconv/exceptions/exceptions-spans/
// (exception.type, exception.message, exception.stacktrace) and
// https://opentelemetry.io/docs/specs/semconv/attributes-registry/error/
// (error.type).

// The semantic-convention keys the scrubbing reads and writes.
const (
	keyExceptionType       = attribute.Key("exception.type")
	keyExceptionMessage    = attribute.Key("exception.message")
	keyExceptionStacktrace = attribute.Key("exception.stacktrace")
	keyErrorType           = attribute.Key("error.type")
	// exceptionEvent is the name of the event RecordError adds.
	exceptionEvent = "exception"
)

// classifyingSpan records errors by class only (see the package's note
// above): RecordError adds an exception event with exception.type and
// sets error.type; SetStatus(codes.Error, …) describes the status with
// the last class recorded (or "error"), never with the text it is given.
type classifyingSpan struct {
	trace.Span
	class string
}

// startClassifyingSpan is the Temporal tracing interceptor's SpanStarter.
func startClassifyingSpan(ctx context.Context, t trace.Tracer, name string, opts ...trace.SpanStartOption) trace.Span {
	_, span := t.Start(ctx, name, opts...)
	return &classifyingSpan{Span: span}
}

// RecordError records err's class; the options (a stack trace, extra
// attributes) are dropped, as they could carry what the error says.
func (s *classifyingSpan) RecordError(err error, _ ...trace.EventOption) {
	if err == nil || !s.IsRecording() {
		return
	}
	s.class = policy.ErrorClass(err)
	s.Span.AddEvent(exceptionEvent, trace.WithAttributes(keyExceptionType.String(s.class)))
	s.Span.SetAttributes(keyErrorType.String(s.class))
}

// SetStatus sets the status with the recorded class as its description.
func (s *classifyingSpan) SetStatus(code codes.Code, _ string) {
	desc := ""
	if code == codes.Error {
		desc = s.class
		if desc == "" {
			desc = "error"
		}
	}
	s.Span.SetStatus(code, desc)
}

// scrubExporter hands its exporter spans with no error text: message and
// stack trace attributes dropped from the span, its events and links, and
// an error status described by the last exception type recorded.
type scrubExporter struct {
	next sdktrace.SpanExporter
}

func (e scrubExporter) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	out := make([]sdktrace.ReadOnlySpan, len(spans))
	for i, s := range spans {
		out[i] = scrubbedSpan{s}
	}
	return e.next.ExportSpans(ctx, out)
}

func (e scrubExporter) Shutdown(ctx context.Context) error { return e.next.Shutdown(ctx) }

// scrubbedSpan is a ReadOnlySpan as scrubExporter exports it.
type scrubbedSpan struct{ sdktrace.ReadOnlySpan }

// textKey reports whether an attribute carries an error's text.
func textKey(k attribute.Key) bool { return k == keyExceptionMessage || k == keyExceptionStacktrace }

func scrubAttrs(attrs []attribute.KeyValue) []attribute.KeyValue {
	out := make([]attribute.KeyValue, 0, len(attrs))
	for _, a := range attrs {
		if !textKey(a.Key) {
			out = append(out, a)
		}
	}
	return out
}

func (s scrubbedSpan) Attributes() []attribute.KeyValue {
	return scrubAttrs(s.ReadOnlySpan.Attributes())
}

func (s scrubbedSpan) Events() []sdktrace.Event {
	events := s.ReadOnlySpan.Events()
	out := make([]sdktrace.Event, len(events))
	for i, ev := range events {
		ev.Attributes = scrubAttrs(ev.Attributes)
		out[i] = ev
	}
	return out
}

func (s scrubbedSpan) Links() []sdktrace.Link {
	links := s.ReadOnlySpan.Links()
	out := make([]sdktrace.Link, len(links))
	for i, l := range links {
		l.Attributes = scrubAttrs(l.Attributes)
		out[i] = l
	}
	return out
}

func (s scrubbedSpan) Status() sdktrace.Status {
	st := s.ReadOnlySpan.Status()
	if st.Code != codes.Error {
		st.Description = ""
		return st
	}
	st.Description = "error"
	for _, ev := range s.ReadOnlySpan.Events() {
		if ev.Name != exceptionEvent {
			continue
		}
		for _, a := range ev.Attributes {
			if a.Key == keyExceptionType {
				st.Description = policy.TypeName(a.Value.Emit())
			}
		}
	}
	return st
}

// LogError is the log fields of err: its class (error_type, policy.ErrorClass)
// always, and its message (error) only when no Temporal failure is in its
// chain. A failure's message is what a workflow or activity said, which
// can quote the model's answer or the customer's words; an
// infrastructure error's (PostgreSQL, a gRPC status, a dial) is kept, as
// it is what an operator needs.
func LogError(err error) []any {
	if err == nil {
		return nil
	}
	fields := []any{"error_type", policy.ErrorClass(err)}
	if !carriesFailureText(err) {
		fields = append(fields, "error", err.Error())
	}
	return fields
}

// carriesFailureText reports whether err's chain holds a Temporal failure
// whose message came from workflow or activity code.
func carriesFailureText(err error) bool {
	var (
		app        *temporal.ApplicationError
		activity   *temporal.ActivityError
		workflow   *temporal.WorkflowExecutionError
		child      *temporal.ChildWorkflowExecutionError
		panicked   *temporal.PanicError
		canceled   *temporal.CanceledError
		timeout    *temporal.TimeoutError
		terminated *temporal.TerminatedError
	)
	return errors.As(err, &app) || errors.As(err, &activity) || errors.As(err, &workflow) || errors.As(err, &child) ||
		errors.As(err, &panicked) || errors.As(err, &canceled) || errors.As(err, &timeout) || errors.As(err, &terminated)
}

// SDKLogger wraps the Temporal SDK's logger so that the errors it logs (an
// activity's failure, a workflow task's panic) go out as their class
// (ErrorClass), never their text: an activity's error can quote what a
// model answered or a service echoed.
func SDKLogger(l sdklog.Logger) sdklog.Logger { return scrubbedSDKLogger{l} }

type scrubbedSDKLogger struct{ l sdklog.Logger }

func scrubKeyvals(keyvals []any) []any {
	out := make([]any, len(keyvals))
	copy(out, keyvals)
	for i := 0; i+1 < len(out); i += 2 {
		if err, ok := out[i+1].(error); ok {
			out[i+1] = policy.ErrorClass(err)
		}
	}
	return out
}

func (s scrubbedSDKLogger) Debug(msg string, kv ...any) { s.l.Debug(msg, scrubKeyvals(kv)...) }
func (s scrubbedSDKLogger) Info(msg string, kv ...any)  { s.l.Info(msg, scrubKeyvals(kv)...) }
func (s scrubbedSDKLogger) Warn(msg string, kv ...any)  { s.l.Warn(msg, scrubKeyvals(kv)...) }
func (s scrubbedSDKLogger) Error(msg string, kv ...any) { s.l.Error(msg, scrubKeyvals(kv)...) }

// With keeps the wrapping on loggers the SDK derives (per workflow, per
// activity).
func (s scrubbedSDKLogger) With(kv ...any) sdklog.Logger {
	return scrubbedSDKLogger{sdklog.With(s.l, scrubKeyvals(kv)...)}
}
