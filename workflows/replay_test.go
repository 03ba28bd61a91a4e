package workflows_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/worker"

	"github.com/supportflow/supportflow/codec"
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
// The replayer reads payloads through the payload codec with the
// published test keys in testdata/payload-keys: the histories written
// since the codec are sealed with them (some under a key that was rotated
// out mid-run), and the ones written before it hold plain JSON payloads.
// Workers refuse unsealed payloads by default (codec.ErrUnsealed), so this
// replayer admits them explicitly (codec.WithAdmitUnsealed), as a worker
// does with SUPPORTFLOW_ADMIT_UNSEALED_PAYLOADS=true while such histories
// drain: these committed histories stand for every run open at a deploy,
// and they must keep replaying.
func TestReplay_CommittedHistories(t *testing.T) {
	files, err := filepath.Glob("testdata/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	keys := testKeys(t)
	dc := codec.DataConverter(keys, codec.WithAdmitUnsealed(true))
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

func testKeys(t *testing.T) *codec.Keyring {
	t.Helper()
	keyFile, err := os.ReadFile("testdata/payload-keys")
	require.NoError(t, err)
	keys, err := codec.ParseKeyring(string(keyFile), "testdata/payload-keys")
	require.NoError(t, err)
	return keys
}

// A history sealed throughout replays with the strict converter a worker
// has by default (nil values, failures and all), and one recorded before
// the codec does not, which is why TestReplay_CommittedHistories admits
// unsealed payloads: its plain input is refused with ErrUnsealed, naming
// the setting that admits it. (Only the first workflow task is replayed
// for the error: over a whole history the SDK goes on to match the later
// events against a workflow that never started and reports that mismatch
// instead; the task fails either way, and no workflow code runs.)
func TestReplay_StrictConverter(t *testing.T) {
	dc := codec.DataConverter(testKeys(t))
	replayer := func() worker.WorkflowReplayer {
		r, err := worker.NewWorkflowReplayerWithOptions(worker.WorkflowReplayerOptions{
			DataConverter: dc, FailureConverter: codec.FailureConverter(dc),
		})
		require.NoError(t, err)
		(&workflows.Workflows{}).Register(r)
		return r
	}
	require.NoError(t, replayer().ReplayWorkflowHistoryFromJSONFile(nil, "testdata/draft_reply_key_rotated.json"),
		"sealed under the codec: the strict converter reads it")
	err := replayer().ReplayPartialWorkflowHistoryFromJSONFile(nil, "testdata/draft_reply_approved_done.json", 4)
	require.ErrorIs(t, err, codec.ErrUnsealed, "recorded before the codec: its plain input is refused")
	assert.ErrorContains(t, err, codec.EnvAdmitUnsealed)
	require.Error(t, replayer().ReplayWorkflowHistoryFromJSONFile(nil, "testdata/draft_reply_approved_done.json"))
}
