package workflows_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/activities/activitiestest"
)

// The daily prune deletes terminal rows older than 30 days and nothing
// else: not a recent terminal row, and never one still pending, applying,
// running or awaiting approval, however old.
func TestPruneRetention_DeletesOnlyOldTerminalRows(t *testing.T) {
	w := newDraftWorld(t)
	ctx := context.Background()
	db := w.h.Pool
	old := time.Now().Add(-31 * 24 * time.Hour)
	exec := func(sql string, args ...any) {
		t.Helper()
		_, err := db.Exec(ctx, sql, args...)
		require.NoError(t, err)
	}
	acct := activitiestest.Account
	for _, a := range []struct {
		key, state string
		at         time.Time
	}{
		{"old-applied:0", "applied", old}, {"old-failed:0", "failed", old}, {"old-partial:0", "partial_failure", old},
		{"old-pending:0", "pending", old}, {"old-applying:0", "applying", old},
		{"new-applied:0", "applied", time.Now()},
	} {
		pid := a.key[:len(a.key)-2]
		exec(`WITH a AS (INSERT INTO action (account, key, proposal_id, action_index, ticket_id, state, updated_at)
VALUES ($1, $2, $3, 0, 7, $4, $5) RETURNING id)
INSERT INTO action_leg (action_id, position, kind, target) SELECT id, 0, 'reply', '7' FROM a`, acct, a.key, pid, a.state, a.at)
	}
	for i, p := range []struct {
		id, state string
		ticket    int64
		at        time.Time
	}{
		{"p-done", "done", 7, old}, {"p-expired", "expired", 7, old}, {"p-awaiting", "awaiting_approval", 7, old},
		{"p-executing", "executing", 7, old}, {"p-new-done", "done", 7, time.Now()},
		// Ticket 8's only proposal is old and rejected: kept, or the scan
		// would draft the ticket's month-old comment again.
		{"p-only-of-8", "rejected", 8, old},
	} {
		exec(`INSERT INTO proposal (account, proposal_id, ticket_id, state, reply, conversation_through, updated_at)
VALUES ($1, $2, $3, $4, 'r', now() + make_interval(secs => $5), $6)`, acct, p.id, p.ticket, p.state, i, p.at)
	}
	// Another account's old terminal rows are not this worker's to prune.
	exec(`INSERT INTO action (account, key, proposal_id, action_index, ticket_id, state, updated_at)
VALUES ('other', 'old-applied:0', 'old-applied', 0, 7, 'applied', $1)`, old)
	exec(`INSERT INTO lookup_log (account, ticket_id, workflow_id, run_id, activity_id, attempt, outcome, started_at, finished_at)
VALUES ('other', 7, 'w', 'r', '1', 1, 'found', $1, $1)`, old)
	for _, l := range []struct {
		outcome string
		at      time.Time
	}{{"found", old}, {"error", old}, {"running", old}, {"found", time.Now()}} {
		exec(`INSERT INTO lookup_log (account, ticket_id, workflow_id, run_id, activity_id, attempt, outcome, started_at, finished_at)
VALUES ($1, 7, 'w', gen_random_uuid()::text, '1', 1, $2, $3, CASE WHEN $2 = 'running' THEN NULL ELSE $3::timestamptz END)`, acct, l.outcome, l.at)
	}

	// Ticket events: an old dispatched one and an old own write go; an old
	// undispatched one waits for its relay; a new one stays.
	for _, e := range []struct {
		id         string
		dispatched bool
		own        bool
		at         time.Time
	}{{"old-dispatched", true, false, old}, {"old-own", false, true, old}, {"old-undispatched", false, false, old}, {"new", true, false, time.Now()}} {
		exec(`INSERT INTO ticket_event (account, event_id, ticket_id, event_type, source, occurred_at, kind, own_write, mirrored, received_at, dispatched_at)
VALUES ($1, $2, 7, 'zen:event-type:ticket.created', 'webhook', $4::timestamptz, 'created', $3, true, $4::timestamptz, CASE WHEN $5 THEN $4::timestamptz END)`, acct, e.id, e.own, e.at, e.dispatched)
	}
	exec(`INSERT INTO reconcile_run (account, workflow_id, tickets_read, events_read, repaired, finished_at) VALUES ($1, 'r', 1, 1, 0, $2), ($1, 'r2', 1, 1, 0, now())`, acct, old)

	w.env.ExecuteWorkflow(supportflow.PruneRetentionWorkflow)
	require.NoError(t, w.env.GetWorkflowError())
	var pruned map[string]int64
	require.NoError(t, w.env.GetWorkflowResult(&pruned))
	assert.Equal(t, int64(2), pruned["ticket_event"])
	assert.Equal(t, int64(1), pruned["reconcile_run"])
	assert.Equal(t, int64(3), pruned["action"])
	assert.Equal(t, int64(2), pruned["proposal"])
	assert.Equal(t, int64(2), pruned["lookup_log"])

	left := func(sql string) []string {
		rows, err := db.Query(ctx, sql)
		require.NoError(t, err)
		var out []string
		for rows.Next() {
			var s string
			require.NoError(t, rows.Scan(&s))
			out = append(out, s)
		}
		return out
	}
	assert.ElementsMatch(t, []string{"old-pending:0", "old-applying:0", "new-applied:0"}, left(`SELECT key FROM action WHERE account = 'acme'`))
	assert.ElementsMatch(t, []string{"old-pending:0", "old-applying:0", "new-applied:0"},
		left(`SELECT a.key FROM action_leg l JOIN action a ON a.id = l.action_id`), "a pruned action's legs go with it")
	assert.ElementsMatch(t, []string{"p-awaiting", "p-executing", "p-new-done", "p-only-of-8"}, left(`SELECT proposal_id FROM proposal`))
	assert.ElementsMatch(t, []string{"running", "found"}, left(`SELECT outcome FROM lookup_log WHERE account = 'acme'`))
	assert.ElementsMatch(t, []string{"old-undispatched", "new"}, left(`SELECT event_id FROM ticket_event`))
	assert.Equal(t, []string{"old-applied:0"}, left(`SELECT key FROM action WHERE account = 'other'`), "another account's rows are untouched")
	assert.Equal(t, []string{"found"}, left(`SELECT outcome FROM lookup_log WHERE account = 'other'`))
}
