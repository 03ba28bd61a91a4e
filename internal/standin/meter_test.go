package standin

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Over its limit in a window a stand-in answers 429 with Retry-After, as
// the real services do; the window slides; Load counts what it saw.
func TestMeter_LimitsAWindowAndCountsTheLoad(t *testing.T) {
	var m meter
	m.setLimit(2, time.Second)
	t0 := time.Unix(1000, 0)
	ok, _ := m.admit(t0)
	require.True(t, ok)
	ok, _ = m.admit(t0.Add(100 * time.Millisecond))
	require.True(t, ok)
	assert.Equal(t, 2, m.get().PeakInFlight, "both still in flight")
	ok, wait := m.admit(t0.Add(200 * time.Millisecond))
	assert.False(t, ok, "a third in the same second is refused")
	assert.Equal(t, 800*time.Millisecond, wait, "until the first leaves the window")
	m.done()
	m.done()
	ok, _ = m.admit(t0.Add(1100 * time.Millisecond))
	assert.True(t, ok, "the window slid past the first")
	l := m.get()
	assert.Equal(t, Load{Requests: 4, PeakInFlight: 2, MaxInWindow: 2, Throttled: 1}, l)

	z := NewZendesk("a@b.test", "tok")
	z.SetRateLimit(1, time.Minute)
	srv := httptest.NewServer(z)
	defer srv.Close()
	for i, want := range []int{http.StatusUnauthorized, http.StatusTooManyRequests} {
		resp, err := http.Get(srv.URL + "/api/v2/tickets/1.json")
		require.NoError(t, err)
		resp.Body.Close()
		assert.Equal(t, want, resp.StatusCode, "request %d", i)
		if want == http.StatusTooManyRequests {
			assert.NotEmpty(t, resp.Header.Get("Retry-After"))
		}
	}
	assert.Equal(t, 1, z.Load().Throttled)
}
