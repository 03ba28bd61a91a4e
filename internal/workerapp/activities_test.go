package workerapp_test

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/activities"
	"github.com/supportflow/supportflow/internal/enrichment"
	"github.com/supportflow/supportflow/internal/ingest"
	"github.com/supportflow/supportflow/internal/workerapp"
)

type recordingRegistry struct{ names []string }

func (r *recordingRegistry) RegisterActivityWithOptions(fn any, o activity.RegisterOptions) {
	if reflect.TypeOf(fn).Kind() != reflect.Func {
		panic("registered a non-function: " + o.Name)
	}
	r.names = append(r.names, o.Name)
}

// Every activity of the contract is registered by its name, once, and
// nothing else is: the worker's table and supportflow.ActivityNames are
// the same list. (That each implementation's argument and result types are
// the contract's is held by the compiler: see RegisterActivities.)
func TestContract_EveryActivityRegisteredByName(t *testing.T) {
	var r recordingRegistry
	workerapp.RegisterActivities(&r, &activities.Activities{}, &enrichment.Activities{}, &ingest.Reconciler{})
	assert.ElementsMatch(t, supportflow.ActivityNames, r.names)
	seen := map[string]bool{}
	for _, n := range r.names {
		require.False(t, seen[n], "%s registered twice", n)
		seen[n] = true
	}
	// The names are the ones open histories schedule: frozen.
	assert.Equal(t, []string{
		"LoadTicket", "GenerateDraft", "SaveProposal", "SetProposalState", "FindDraftCandidates",
		"RecordEvalResult", "RecordEvalSummary", "PruneLedger", "PostReply", "CancelSubscriptions",
		"SettleAction", "SettleLegs", "LookupCustomer", "DeadLetterTicket", "PruneEnrichment",
		"ReconcileTickets", "PruneTicketEvents",
	}, supportflow.ActivityNames)
}
