package tests

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The README's bench command at its tiny size, so it cannot rot: it brings
// up its own stack, measures every figure, prints the table and writes the
// JSON. Its figures are reported, not asserted, except what is exact: the
// burst merges into one lookup per ticket, and the lifecycle posts.
func TestBench_TinyRunPrintsEveryFigure(t *testing.T) {
	startsItsOwnServers(t)
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	out := filepath.Join(t.TempDir(), "bench.json")
	cmd := exec.CommandContext(ctx, "go", "run", "-C", "../bench", ".", "-size", "tiny", "-json", out)
	cmd.Env = localEnv()
	table, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", table)
	for _, want := range []string{"1. approve -> reply posted", "2. enrichment", "3. ledger per action", "4. worker RSS",
		"5. one ticket's lifecycle", "6. floor: no-op Temporal workflow", "floor: River no-op job", "GOAL",
		"FIGURE (dev server)", "FIGURE (Temporal server on PostgreSQL)"} {
		assert.Contains(t, string(table), want)
	}
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	var r struct {
		Approve struct {
			N int `json:"n"`
		} `json:"approve_to_posted_sequential"`
		Enrichment struct {
			PerSecond float64 `json:"lookups_per_second"`
			Lookups   int     `json:"burst_lookups"`
			Tickets   int     `json:"tickets"`
		} `json:"enrichment"`
		Ledger struct {
			Commits float64 `json:"commits_per_action"`
		} `json:"ledger"`
		Memory struct {
			RSSMB float64 `json:"rss_mb"`
		} `json:"worker_memory"`
		Lifecycle struct {
			Events  int `json:"total_history_events"`
			Actions int `json:"actions"`
		} `json:"ticket_lifecycle"`
		River struct {
			JobsPerSec float64 `json:"jobs_per_second"`
		} `json:"river_floor"`
		Topology string `json:"topology"`
		Columns  []struct {
			Topology string `json:"topology"`
			Approve  struct {
				N int `json:"n"`
			} `json:"approve_to_posted_sequential"`
			Floor struct {
				PerSecond float64 `json:"per_second"`
			} `json:"temporal_noop_floor_concurrent"`
		} `json:"columns"`
	}
	require.NoError(t, json.Unmarshal(b, &r))
	assert.Positive(t, r.Approve.N)
	assert.Positive(t, r.Enrichment.Tickets)
	assert.Equal(t, r.Enrichment.Tickets, r.Enrichment.Lookups, "the burst merged into one lookup per ticket")
	assert.Positive(t, r.Enrichment.PerSecond)
	assert.Positive(t, r.Ledger.Commits)
	assert.Positive(t, r.Memory.RSSMB)
	assert.Positive(t, r.Lifecycle.Events)
	assert.Positive(t, r.Lifecycle.Actions)
	assert.Positive(t, r.River.JobsPerSec)
	assert.Equal(t, "dev", r.Topology)
	require.Len(t, r.Columns, 1, "the real server's column")
	assert.Equal(t, "server", r.Columns[0].Topology)
	assert.Positive(t, r.Columns[0].Approve.N)
	assert.Positive(t, r.Columns[0].Floor.PerSecond)
}
