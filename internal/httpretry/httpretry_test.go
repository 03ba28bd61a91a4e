package httpretry

import (
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

func TestRetryAfter(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i < len(kv); i += 2 {
			h.Set(kv[i], kv[i+1])
		}
		return h
	}
	for name, tc := range map[string]struct {
		h    http.Header
		want time.Duration
	}{
		"none":           {hdr(), 0},
		"nil":            {nil, 0},
		"seconds":        {hdr("Retry-After", "3"), 3 * time.Second},
		"fractional":     {hdr("Retry-After", "0.5"), 500 * time.Millisecond},
		"zero":           {hdr("Retry-After", "0"), 0},
		"negative":       {hdr("Retry-After", "-4"), 0},
		"garbage":        {hdr("Retry-After", "soon"), 0},
		"http date":      {hdr("Retry-After", now.Add(90*time.Second).Format(http.TimeFormat)), 90 * time.Second},
		"past date":      {hdr("Retry-After", now.Add(-time.Minute).Format(http.TimeFormat)), 0},
		"ms":             {hdr("retry-after-ms", "250"), 250 * time.Millisecond},
		"ms beats secs":  {hdr("retry-after-ms", "250", "Retry-After", "7"), 250 * time.Millisecond},
		"bad ms":         {hdr("retry-after-ms", "x", "Retry-After", "7"), 7 * time.Second},
		"huge":           {hdr("Retry-After", "99999999999999"), MaxRetryAfter},
		"huge ms":        {hdr("retry-after-ms", "1e300"), MaxRetryAfter},
		"whitespace":     {hdr("Retry-After", " 2 "), 2 * time.Second},
		"date, far away": {hdr("Retry-After", now.Add(1000*time.Hour).Format(http.TimeFormat)), MaxRetryAfter},
	} {
		assert.Equal(t, tc.want, RetryAfter(tc.h, now), name)
	}
}

func TestPermanentStatus(t *testing.T) {
	for _, s := range []int{400, 401, 403, 404, 413, 422} {
		assert.True(t, PermanentStatus(s), "%d", s)
	}
	for _, s := range []int{0, 200, 408, 409, 429, 500, 502, 503, 504} {
		assert.False(t, PermanentStatus(s), "%d", s)
	}
}
