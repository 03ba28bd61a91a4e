package supportflow_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
)

// Without a prefix the IDs are exactly those of deployments before
// prefixes, so running drafts and schedules keep their IDs.
func TestIDs_NoPrefixKeepsTodaysIDs(t *testing.T) {
	var ids supportflow.IDs
	assert.Equal(t, "draft/42", ids.Draft(42))
	assert.Equal(t, supportflow.DraftWorkflowID(42), ids.Draft(42))
	assert.Equal(t, "enrich/42", ids.Enrich(42))
	assert.Equal(t, "execute/42-run-1", ids.Execute("42-run-1"))
	assert.Equal(t, "eval/r1", ids.Evaluation("r1"))
	assert.Equal(t, "supportflow-scan-tickets", ids.ScanSchedule())
	assert.Equal(t, "supportflow-prune-retention", ids.PruneSchedule())
	assert.Equal(t, "supportflow-reconcile-tickets", ids.ReconcileSchedule())
	assert.Equal(t, "scan-tickets", ids.ScanAction())
	assert.Equal(t, "prune-retention", ids.PruneAction())
	assert.Equal(t, "reconcile-tickets", ids.ReconcileAction())
	assert.Equal(t, "reconcile-tickets-now", ids.ReconcileNow())
}

// Two accounts with different prefixes share no ID, and neither shares one
// with an account without a prefix.
func TestIDs_TwoAccountsNeverCollide(t *testing.T) {
	accounts := []supportflow.IDs{{}, {Prefix: "acme"}, {Prefix: "globex"}, {Prefix: "acme-eu"}}
	seen := map[string]string{}
	for _, ids := range accounts {
		for _, id := range []string{
			ids.Draft(42), ids.Enrich(42), ids.Execute("42-run-1"), ids.Evaluation("r1"),
			ids.ScanSchedule(), ids.PruneSchedule(), ids.ReconcileSchedule(),
			ids.ScanAction(), ids.PruneAction(), ids.ReconcileAction(), ids.ReconcileNow(),
		} {
			other, dup := seen[id]
			require.False(t, dup, "%q is both %q's and %q's", id, other, ids.Prefix)
			seen[id] = ids.Prefix
		}
	}
	assert.Equal(t, "acme/draft/42", supportflow.IDs{Prefix: "acme"}.Draft(42))
	assert.Equal(t, "acme/supportflow-scan-tickets", supportflow.IDs{Prefix: "acme"}.ScanSchedule())
}

// A workflow finds its account's IDs from its own workflow ID, so the
// children it starts are its account's; an ID of any other shape has no
// prefix.
func TestIDs_DerivedFromTheWorkflowsOwnID(t *testing.T) {
	for id, want := range map[string]string{
		"draft/42":                 "",
		"acme/draft/42":            "acme",
		"acme-eu/draft/42":         "acme-eu",
		"draft/draft/42":           "draft",
		"acme/draft/43":            "", // another ticket's
		"Acme/draft/42":            "", // not a valid prefix
		"a/b/draft/42":             "",
		"default-test-workflow-id": "",
	} {
		assert.Equal(t, supportflow.IDs{Prefix: want}, supportflow.IDsOf(id, supportflow.DraftWorkflowID(42)), id)
	}
	for id, want := range map[string]string{
		"scan-tickets-2026-12-04T21:55:00Z":      "",
		"acme/scan-tickets-2026-12-04T21:55:00Z": "acme",
		"scan-1-TestScan/sub-abc123":             "",
		"acme/other-2026-12-04T21:55:00Z":        "",
	} {
		assert.Equal(t, supportflow.IDs{Prefix: want}, supportflow.ScanIDsOf(id), id)
	}
	acme := supportflow.IDs{Prefix: "acme"}
	assert.Equal(t, acme, supportflow.IDsOf(acme.Draft(42), supportflow.DraftWorkflowID(42)))
	assert.Equal(t, acme, supportflow.ScanIDsOf(acme.ScanAction()+"-2026-12-04T21:55:00Z"))
}

// Only safe tokens are prefixes: nothing that could hold the separator,
// spaces, upper case or an empty segment.
func TestIDs_ValidatePrefix(t *testing.T) {
	for _, ok := range []string{"", "a", "acme", "acme-eu", "acme_2", "0", "a1234567890123456789012345678901234567z"} {
		assert.NoError(t, supportflow.ValidateIDPrefix(ok), ok)
	}
	for _, bad := range []string{"acme/eu", "Acme", "acme ", " acme", "-acme", "acme-", "_a", "a.b", "ac:me", "é",
		"a12345678901234567890123456789012345678901"} {
		err := supportflow.ValidateIDPrefix(bad)
		assert.ErrorIs(t, err, supportflow.ErrInvalidInput, bad)
	}
}
