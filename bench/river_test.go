package main

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/supportflow/supportflow/internal/testenv"
)

// TestMain stops the servers testenv started. It is the package's only
// TestMain: tests in other files of this package share it.
func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

func TestMeasureRiver(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	const sequential, inserters, total = 20, 4, 100
	floor, err := measureRiver(ctx, testenv.DatabaseURL(t), sequential, inserters, total)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("River floor: p50 %v, p95 %v, p99 %v over %d sequential jobs; %.0f jobs/s over %d jobs from %d inserters",
		floor.P50, floor.P95, floor.P99, floor.Sequential, floor.JobsPerSec, floor.Total, floor.Inserters)

	if floor.Sequential != sequential || floor.Inserters != inserters || floor.Total != total {
		t.Errorf("counts = %d sequential, %d inserters, %d total; want %d, %d, %d",
			floor.Sequential, floor.Inserters, floor.Total, sequential, inserters, total)
	}
	if floor.P50 <= 0 {
		t.Errorf("P50 = %v, want > 0", floor.P50)
	}
	if floor.P50 > floor.P95 || floor.P95 > floor.P99 {
		t.Errorf("percentiles out of order: P50 %v, P95 %v, P99 %v", floor.P50, floor.P95, floor.P99)
	}
	if floor.P99 > 10*time.Second {
		t.Errorf("P99 = %v; a no-op job should be worked well within seconds", floor.P99)
	}
	if floor.JobsPerSec <= 0 {
		t.Errorf("JobsPerSec = %v, want > 0", floor.JobsPerSec)
	}
}

func TestRiverPercentile(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	var ds []time.Duration
	for i := 1; i <= 100; i++ {
		ds = append(ds, ms(i))
	}
	for _, tc := range []struct {
		ds   []time.Duration
		p    float64
		want time.Duration
	}{
		{nil, 50, 0},
		{[]time.Duration{ms(7)}, 99, ms(7)},
		{ds, 50, ms(50)},
		{ds, 95, ms(95)},
		{ds, 99, ms(99)},
		{ds, 100, ms(100)},
		{ds[:20], 95, ms(19)},
		{ds[:20], 99, ms(20)},
	} {
		if got := riverPercentile(tc.ds, tc.p); got != tc.want {
			t.Errorf("riverPercentile(%d durations, %v) = %v, want %v", len(tc.ds), tc.p, got, tc.want)
		}
	}
}
