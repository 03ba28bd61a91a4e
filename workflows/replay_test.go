package workflows_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/supportflow/supportflow/internal/codec"
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
//
// The replayer reads payloads as the workers do, through the payload
// codec: the histories written before it (plain JSON payloads) pass
// through it unchanged, and the ones written since are sealed with the
// published test keys in testdata/payload-keys (some under a key that was
// rotated out mid-run).
func TestReplay_CommittedHistories(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	keyFile, err := os.ReadFile("testdata/payload-keys")
	require.NoError(t, err)
	keys, err := codec.ParseKeyring(string(keyFile), "testdata/payload-keys")
	require.NoError(t, err)
	dc := codec.DataConverter(keys)
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{
				DataConverter: dc, FailureConverter: codec.FailureConverter(dc),
			})
			require.NoError(t, err)
			(&workflows.Workflows{}).Register(r)
			require.NoError(t, r.ReplayWorkflowHistoryFromJSONFile(nil, f))
		})
	}
}
