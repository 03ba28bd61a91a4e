package policy

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
)

func TestEnvDefaultsAreTheProductDefaults(t *testing.T) {
	def := Defaults()
	for _, e := range Env {
		assert.Equal(t, *e.field(&def), e.Default, e.Name)
	}
	require.NoError(t, def.Validate())
}

func TestFromEnv(t *testing.T) {
	t.Setenv("SUPPORTFLOW_HEARTBEAT_INTERVAL", "200ms")
	t.Setenv("SUPPORTFLOW_HEARTBEAT_TIMEOUT", "2s")
	t.Setenv("SUPPORTFLOW_LEASE", "2s")
	t.Setenv("SUPPORTFLOW_ZENDESK_CALL_TIMEOUT", "1s")
	t.Setenv("SUPPORTFLOW_SUBSCRIPTION_CALL_TIMEOUT", "1s")
	d, err := FromEnv()
	require.NoError(t, err)
	assert.Equal(t, 200*time.Millisecond, d.HeartbeatInterval)
	assert.Equal(t, 5*time.Second, d.RetryBase, "unset keeps its default")

	t.Setenv("SUPPORTFLOW_LEASE", "soon")
	_, err = FromEnv()
	assert.ErrorIs(t, err, ErrInvalidDurations)
	assert.ErrorContains(t, err, "SUPPORTFLOW_LEASE")

	// A lease shorter than a call would let a successor take over while the
	// call may still land: refused.
	t.Setenv("SUPPORTFLOW_LEASE", "500ms")
	_, err = FromEnv()
	assert.ErrorIs(t, err, ErrInvalidDurations)
	assert.ErrorContains(t, err, "must outlive one call")
}

func TestRetryDelay(t *testing.T) {
	d := Defaults()
	for attempt, want := range map[int32]time.Duration{1: 5 * time.Second, 2: 10 * time.Second, 3: 20 * time.Second, 7: 300 * time.Second, 60: 300 * time.Second} {
		assert.Equal(t, want, d.NominalDelay(attempt), "attempt %d", attempt)
		assert.Equal(t, want/2, d.RetryDelay(attempt, 0), "lowest jitter")
		assert.Less(t, d.RetryDelay(attempt, 0.999999), want+1, "highest jitter")
	}
}

type retryAfterErr struct{ d time.Duration }

func (e retryAfterErr) Error() string                  { return "429" }
func (e retryAfterErr) RetryAfterDelay() time.Duration { return e.d }

func TestAnnotate(t *testing.T) {
	r := &retryInterceptor{d: Defaults(), rand: func() float64 { return 0.5 }}

	var app *temporal.ApplicationError
	require.ErrorAs(t, r.annotate(errors.New("boom"), 3), &app)
	assert.Equal(t, 15*time.Second, app.NextRetryDelay(), "20 s nominal x 0.75")

	require.ErrorAs(t, r.annotate(retryAfterErr{2 * time.Minute}, 1), &app)
	assert.Equal(t, 2*time.Minute, app.NextRetryDelay(), "Retry-After wins when longer")

	require.ErrorAs(t, r.annotate(retryAfterErr{6 * time.Hour}, 1), &app)
	assert.Equal(t, 300*time.Second, app.NextRetryDelay(), "but never past the retry cap")

	typed := temporal.NewApplicationError("held", "LeaseHeld")
	require.ErrorAs(t, r.annotate(typed, 1), &app)
	assert.Equal(t, "LeaseHeld", app.Type(), "the activity's own type is kept")

	permanent := temporal.NewNonRetryableApplicationError("gone", "Rejected", nil)
	assert.Same(t, permanent, r.annotate(permanent, 1), "non-retryable errors pass through")
}
