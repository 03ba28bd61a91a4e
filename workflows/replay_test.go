package workflows_test

import (
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/supportflow/supportflow/workflows"
)

// TestReplay_CommittedHistories replays histories recorded from real runs
// on the dev server (testdata/*.json: ExecuteProposal exported with
// `temporal workflow show -o json`; DraftReply's approved, failed and
// continued-as-new runs written by the tests/ suite with
// SUPPORTFLOW_RECORD_HISTORIES=1 go test ./tests -run TestDraft_) against
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
