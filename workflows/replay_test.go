package workflows_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/supportflow/supportflow/workflows"
)

// TestReplay_CommittedHistories replays histories recorded from real runs
// (testdata/*.json, exported with `temporal workflow show -o json`) against
// today's workflow code. A change that would break open executions on
// deploy (non-determinism) fails here. When a change is intended to alter
// the command sequence, version it with workflow.GetVersion and record a
// new history beside the old ones.
func TestReplay_CommittedHistories(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			(&workflows.Workflows{}).Register(r)
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, f))
		})
	}
}
