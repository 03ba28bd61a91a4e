package policy

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"go.temporal.io/sdk/temporal"
)

// ErrorClass names err's kind without its text, for span attributes and
// log fields: a Temporal ApplicationError's Type ("application:" + e.g.
// ModelTruncated, InvalidModelOutput, or the Go type of a plain error an
// activity returned), a timeout's type ("timeout:" + e.g.
// TIMEOUT_TYPE_START_TO_CLOSE), "canceled", "terminated", "panic",
// "server", a context's end, or else err's Go type. "" for nil.
func ErrorClass(err error) string {
	if err == nil {
		return ""
	}
	var (
		panicked   *temporal.PanicError
		timeout    *temporal.TimeoutError
		canceled   *temporal.CanceledError
		terminated *temporal.TerminatedError
		app        *temporal.ApplicationError
		server     *temporal.ServerError
	)
	switch {
	case errors.As(err, &panicked):
		return "panic"
	case errors.As(err, &timeout):
		return "timeout:" + timeout.TimeoutType().String()
	case errors.As(err, &canceled):
		return "canceled"
	case errors.As(err, &terminated):
		return "terminated"
	case errors.As(err, &app):
		return "application:" + TypeName(app.Type())
	case errors.As(err, &server):
		return "server"
	case errors.Is(err, context.DeadlineExceeded):
		return "context_deadline_exceeded"
	case errors.Is(err, context.Canceled):
		return "context_canceled"
	}
	return TypeName(fmt.Sprintf("%T", err))
}

// TypeName keeps a type name to what a type name is made of, at most 80
// characters: an ApplicationError's Type is a string its maker chose, and
// must not become a way for text to reach a span.
func TypeName(s string) string {
	s = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune("._*:/-[]", r):
			return r
		}
		return '_'
	}, s)
	if len(s) > 80 {
		s = s[:80]
	}
	if s == "" {
		return "unknown"
	}
	return s
}
