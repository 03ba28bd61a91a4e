package supportflow_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	commonpb "go.temporal.io/api/common/v1"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/codec"
)

// TestContract_GoldenPayloads holds the contract's payload types to the
// committed histories (workflows/testdata, which stand for every run open
// at a deploy): every payload in them (workflow inputs and results,
// activity arguments and results, signals, updates, children, continues
// as new) decodes into its contract type with unknown fields refused, and
// encodes back to the same JSON, byte for byte. A renamed JSON field, a
// client struct slipped into a payload, or a field dropped fails here;
// replay alone would not notice, since it does not compare payloads.
// (TestReplay_CommittedHistories replays the same files.)
func TestContract_GoldenPayloads(t *testing.T) {
	t.Parallel()
	files, err := filepath.Glob("workflows/testdata/*.json")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	keyText, err := os.ReadFile("workflows/testdata/payload-keys")
	require.NoError(t, err)
	keys, err := codec.ParseKeyring(string(keyText), "payload-keys")
	require.NoError(t, err)
	opener := &codec.Codec{Keys: keys, AdmitUnsealed: true}

	workflows := map[string]supportflow.WorkflowPayloads{}
	for _, w := range supportflow.AllWorkflows {
		workflows[w.Name] = w
	}
	activities := map[string]supportflow.ActivityType{}
	for _, a := range supportflow.AllActivities {
		activities[a.ActivityName()] = a
	}

	total := 0
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			r, err := os.Open(f)
			require.NoError(t, err)
			defer r.Close()
			h, err := client.HistoryFromJSON(r, client.HistoryJSONOptions{})
			require.NoError(t, err)
			g := golden{t: t, opener: opener}
			wfType := ""
			scheduled := map[int64]string{} // activity scheduled event ID -> type
			children := map[int64]string{}  // child initiated event ID -> type
			for _, e := range h.GetEvents() {
				where := fmt.Sprintf("event %d %s", e.GetEventId(), e.GetEventType())
				switch e.GetEventType() {
				case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
					a := e.GetWorkflowExecutionStartedEventAttributes()
					wfType = a.GetWorkflowType().GetName()
					w, ok := workflows[wfType]
					require.True(t, ok, "%s: workflow type %q is not in the contract", where, wfType)
					g.check(where, a.GetInput(), w.NewInput)
				case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
					g.check(where, e.GetWorkflowExecutionCompletedEventAttributes().GetResult(), workflows[wfType].NewResult)
				case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
					a := e.GetWorkflowExecutionContinuedAsNewEventAttributes()
					w, ok := workflows[a.GetWorkflowType().GetName()]
					require.True(t, ok, "%s: workflow type %q is not in the contract", where, a.GetWorkflowType().GetName())
					g.check(where, a.GetInput(), w.NewInput)
				case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
					a := e.GetActivityTaskScheduledEventAttributes()
					name := a.GetActivityType().GetName()
					act, ok := activities[name]
					require.True(t, ok, "%s: activity %q is not in the contract", where, name)
					scheduled[e.GetEventId()] = name
					g.check(where+" "+name, a.GetInput(), act.NewInput)
				case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
					a := e.GetActivityTaskCompletedEventAttributes()
					name := scheduled[a.GetScheduledEventId()]
					g.check(where+" "+name, a.GetResult(), activities[name].NewResult)
				case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED:
					a := e.GetWorkflowExecutionSignaledEventAttributes()
					newPayload, ok := supportflow.SignalPayloads[a.GetSignalName()]
					require.True(t, ok, "%s: signal %q is not in the contract", where, a.GetSignalName())
					g.check(where, a.GetInput(), newPayload)
				case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_ACCEPTED:
					req := e.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest()
					u, ok := supportflow.UpdatePayloads[req.GetInput().GetName()]
					require.True(t, ok, "%s: update %q is not in the contract", where, req.GetInput().GetName())
					g.check(where, req.GetInput().GetArgs(), u.NewRequest)
				case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_UPDATE_COMPLETED:
					a := e.GetWorkflowExecutionUpdateCompletedEventAttributes()
					name := g.updateName(h, a.GetAcceptedEventId())
					if ok := a.GetOutcome().GetSuccess(); ok != nil {
						g.check(where, ok, supportflow.UpdatePayloads[name].NewResult)
					}
				case enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
					a := e.GetStartChildWorkflowExecutionInitiatedEventAttributes()
					w, ok := workflows[a.GetWorkflowType().GetName()]
					require.True(t, ok, "%s: child workflow type %q is not in the contract", where, a.GetWorkflowType().GetName())
					children[e.GetEventId()] = w.Name
					g.check(where, a.GetInput(), w.NewInput)
				case enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED:
					a := e.GetChildWorkflowExecutionCompletedEventAttributes()
					g.check(where, a.GetResult(), workflows[a.GetWorkflowType().GetName()].NewResult)
				}
			}
			require.NotEmpty(t, wfType, "no start event")
			total += g.checked
		})
	}
	t.Logf("%d payloads in %d committed histories decode strictly into the contract and re-encode unchanged", total, len(files))
	assert.Greater(t, total, 100, "the histories hold far more payloads than that: the walk missed events")
}

type golden struct {
	t       *testing.T
	opener  *codec.Codec
	checked int
}

// check decodes each payload of p into a fresh contract value (newValue;
// nil says the contract has no payload here, and then there must be none
// but nil) with unknown fields refused, and re-encodes it.
func (g *golden) check(where string, p *commonpb.Payloads, newValue func() any) {
	t := g.t
	t.Helper()
	if len(p.GetPayloads()) == 0 {
		return
	}
	plain, err := g.opener.Decode(p.GetPayloads())
	require.NoError(t, err, where)
	for _, pl := range plain {
		enc := string(pl.GetMetadata()["encoding"])
		if enc == "binary/null" {
			continue
		}
		require.Equal(t, "json/plain", enc, "%s: payload encoding", where)
		require.NotNil(t, newValue, "%s: a payload where the contract has none: %s", where, pl.GetData())
		v := newValue()
		dec := json.NewDecoder(bytes.NewReader(pl.GetData()))
		dec.DisallowUnknownFields()
		require.NoError(t, dec.Decode(v), "%s: %s does not decode into %T", where, pl.GetData(), v)
		out, err := json.Marshal(v)
		require.NoError(t, err, where)
		require.Equal(t, string(pl.GetData()), string(out), "%s: %T re-encodes differently", where, v)
		g.checked++
	}
}

// updateName is the name of the update accepted at event id.
func (g *golden) updateName(h *historypb.History, id int64) string {
	for _, e := range h.GetEvents() {
		if e.GetEventId() == id {
			return e.GetWorkflowExecutionUpdateAcceptedEventAttributes().GetAcceptedRequest().GetInput().GetName()
		}
	}
	g.t.Fatalf("no update accepted at event %d", id)
	return ""
}
