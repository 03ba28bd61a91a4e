package standin

import (
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Load is what a stand-in saw of its callers' pace: the most requests in
// flight at once, the most in any rate-limit window, and how many it
// answered 429 because they were over the limit.
type Load struct {
	Requests     int
	PeakInFlight int
	MaxInWindow  int
	Throttled    int
}

// meter counts a stand-in's load and, with a limit, refuses requests over
// it in a sliding window, as the real services do (Zendesk: 429 with
// Retry-After, https://developer.zendesk.com/api-reference/introduction/rate-limits/;
// OpenAI: 429 rate_limit_exceeded).
type meter struct {
	mu       sync.Mutex
	limit    int
	window   time.Duration
	stamps   []time.Time
	inflight int
	load     Load
}

// setLimit sets the limit per window; limit 0 only measures (over window,
// one minute when 0).
func (m *meter) setLimit(limit int, window time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if window <= 0 {
		window = time.Minute
	}
	m.limit, m.window, m.stamps, m.load = limit, window, nil, Load{}
}

// admit counts a request; false (and how long to wait) when it is over the
// limit, and then it is not in flight.
func (m *meter) admit(now time.Time) (bool, time.Duration) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.window <= 0 {
		m.window = time.Minute
	}
	m.load.Requests++
	cut := 0
	for cut < len(m.stamps) && !m.stamps[cut].After(now.Add(-m.window)) {
		cut++
	}
	m.stamps = m.stamps[cut:]
	if m.limit > 0 && len(m.stamps) >= m.limit {
		m.load.Throttled++
		return false, m.stamps[0].Add(m.window).Sub(now)
	}
	m.stamps = append(m.stamps, now)
	m.load.MaxInWindow = max(m.load.MaxInWindow, len(m.stamps))
	m.inflight++
	m.load.PeakInFlight = max(m.load.PeakInFlight, m.inflight)
	return true, 0
}

func (m *meter) done() {
	m.mu.Lock()
	m.inflight--
	m.mu.Unlock()
}

func (m *meter) get() Load {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.load
}

// serve runs next under the meter; over the limit it answers 429 with
// Retry-After (whole seconds, rounded up) through refuse.
func (m *meter) serve(w http.ResponseWriter, r *http.Request, refuse func(http.ResponseWriter), next func()) {
	ok, wait := m.admit(time.Now())
	if !ok {
		w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(wait), 10))
		refuse(w)
		return
	}
	defer m.done()
	next()
}
