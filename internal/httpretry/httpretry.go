// Package httpretry holds what every supportflow HTTP client decides the
// same way about a failed call: which statuses can never succeed on retry,
// and how long the server asked the caller to wait. The clients never
// retry themselves; they report these, and the one retry policy acts on
// them.
package httpretry

import (
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// PermanentStatus reports whether a request answered with status can
// never succeed as it stands: 400, 401, 403, 404, 413 and 422. Retrying it
// only repeats the failure.
func PermanentStatus(status int) bool {
	switch status {
	case http.StatusBadRequest, http.StatusUnauthorized, http.StatusForbidden,
		http.StatusNotFound, http.StatusRequestEntityTooLarge, http.StatusUnprocessableEntity:
		return true
	}
	return false
}

// MaxRetryAfter caps a server's requested wait, so that a bogus header
// cannot park work for years.
const MaxRetryAfter = 24 * time.Hour

// RetryAfter reads the wait a response asks for: retry-after-ms (OpenAI's,
// in milliseconds) when present and valid, else Retry-After as
// delay-seconds (fractions allowed) or an HTTP date. Absent, malformed,
// zero, negative or past values mean 0; values are capped at
// MaxRetryAfter.
func RetryAfter(h http.Header, now time.Time) time.Duration {
	if h == nil {
		return 0
	}
	if v := strings.TrimSpace(h.Get("Retry-After-Ms")); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil && ms > 0 && !math.IsInf(ms, 0) {
			return capped(ms * float64(time.Millisecond))
		}
	}
	v := strings.TrimSpace(h.Get("Retry-After"))
	if v == "" {
		return 0
	}
	if secs, err := strconv.ParseFloat(v, 64); err == nil {
		if secs <= 0 || math.IsNaN(secs) {
			return 0
		}
		return capped(secs * float64(time.Second))
	}
	if t, err := http.ParseTime(v); err == nil {
		if d := t.Sub(now); d > 0 {
			return min(d, MaxRetryAfter)
		}
	}
	return 0
}

func capped(ns float64) time.Duration {
	if ns >= float64(MaxRetryAfter) {
		return MaxRetryAfter
	}
	return time.Duration(ns)
}
