package heartbeat

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// The work stops a tenth of the remaining time (at most 5 s) before the
// attempt's deadline, so the attempt fails with its own (jittered) error.
func TestWorkDeadline(t *testing.T) {
	now := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	assert.Equal(t, now.Add(100*time.Second), WorkDeadline(now, now.Add(105*time.Second)), "5 s before a 105 s deadline")
	assert.Equal(t, now.Add(18*time.Second), WorkDeadline(now, now.Add(20*time.Second)), "2 s before a 20 s deadline")
	assert.Equal(t, now.Add(-time.Second), WorkDeadline(now, now.Add(-time.Second)), "a deadline already past stays past")
}
