package migrations

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// Migration 7 turns the comment columns and the cancellation table into
// leg rows: an action in flight when the release changes keeps what it
// recorded (a landed comment is not posted again, a cancelled
// subscription is not cancelled again), and going down restores them.
func TestLegsMigration_MovesExistingRows(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.DatabaseURL(t))
	require.NoError(t, err)
	defer conn.Close(context.Background())

	require.NoError(t, migrateTo(ctx, conn, 6))
	var partial, replyOnly int64
	require.NoError(t, conn.QueryRow(ctx, `
INSERT INTO action (account, key, proposal_id, action_index, ticket_id, has_comment, state, zendesk_audit_id, zendesk_comment_id, comment_landed_at)
VALUES ('acme', 'p1:0', 'p1', 0, 42, true, 'partial_failure', 900, 901, now()) RETURNING id`).Scan(&partial))
	_, err = conn.Exec(ctx, `
INSERT INTO action_cancellation (action_id, subscription_id, position, state, already_cancelled, calls, last_error)
VALUES ($1, 'sub-a', 0, 'cancelled', true, 2, NULL), ($1, 'sub-b', 1, 'failed', false, 1, 'HTTP 422'),
       ($1, 'sub-c', 2, 'unknown', false, 1, 'connection reset')`, partial)
	require.NoError(t, err)
	require.NoError(t, conn.QueryRow(ctx, `
INSERT INTO action (account, key, proposal_id, action_index, ticket_id, has_comment, state)
VALUES ('acme', 'p2:0', 'p2', 0, 43, true, 'applying') RETURNING id`).Scan(&replyOnly))
	_, err = conn.Exec(ctx, `UPDATE action SET attempts = 1 WHERE id = $1`, replyOnly)
	require.NoError(t, err)

	// Settled without ever being claimed: no cancellation rows were made.
	var unclaimed int64
	require.NoError(t, conn.QueryRow(ctx, `
INSERT INTO action (account, key, proposal_id, action_index, ticket_id, has_comment, state)
VALUES ('acme', 'p3:0', 'p3', 0, 44, true, 'failed') RETURNING id`).Scan(&unclaimed))

	require.NoError(t, migrateTo(ctx, conn, 7))
	type leg struct {
		Position              int
		Kind, Target, State   string
		ExternalID, RequestID *string
		AlreadyDone           bool
		Calls                 int
	}
	legs := func(id int64) []leg {
		rows, err := conn.Query(ctx, `SELECT position, kind, target, state, external_id, request_id, already_done, calls
FROM action_leg WHERE action_id = $1 ORDER BY position`, id)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowToStructByPos[leg])
		require.NoError(t, err)
		return out
	}
	str := func(s string) *string { return &s }
	assert.Equal(t, []leg{
		{0, "cancel_subscription", "sub-a", "done", nil, nil, true, 2},
		{1, "cancel_subscription", "sub-b", "failed", nil, nil, false, 1},
		{2, "cancel_subscription", "sub-c", "unknown", nil, nil, false, 1},
		{3, "reply", "42", "done", str("901"), str("900"), false, 0},
	}, legs(partial), "cancellations first, the landed comment last, with its IDs")
	assert.Equal(t, []leg{{0, "reply", "43", "pending", nil, nil, false, 0}}, legs(replyOnly))
	assert.Empty(t, legs(unclaimed), "a row never claimed gets its whole list from its next reserve")

	require.NoError(t, migrateTo(ctx, conn, 6))
	var comment *int64
	var hasComment bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT has_comment, zendesk_comment_id FROM action WHERE id = $1`, partial).Scan(&hasComment, &comment))
	assert.True(t, hasComment)
	require.NotNil(t, comment)
	assert.Equal(t, int64(901), *comment)
	var states []string
	rows, err := conn.Query(ctx, `SELECT state FROM action_cancellation WHERE action_id = $1 ORDER BY position`, partial)
	require.NoError(t, err)
	states, err = pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	assert.Equal(t, []string{"cancelled", "failed", "unknown"}, states)
}

// Migration 8 carries over the approvals of executions under way at the
// upgrade, so they finish under the new check: a drafted proposal that
// was approved (executing, done or failed) keeps its approver, and an
// action reserved by the old release (an app's proposal, which has no
// proposal row) is approved as 'before-approvals'. Proposals nobody
// approved and supportflow's own notes are not; nothing carried over has
// digests. Going down drops the table and the settled run.
func TestApprovalMigration_CarriesOverExecutionsUnderWay(t *testing.T) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, testenv.DatabaseURL(t))
	require.NoError(t, err)
	defer conn.Close(context.Background())

	require.NoError(t, migrateTo(ctx, conn, 7))
	_, err = conn.Exec(ctx, `
INSERT INTO proposal (account, proposal_id, ticket_id, state, reply, conversation_through, decided_by) VALUES
  ('acme', 'p-exec', 42, 'executing', 'r', now(), 'ada@acme.test'),
  ('acme', 'p-done', 43, 'done', 'r', now(), NULL),
  ('acme', 'p-failed', 44, 'failed', 'r', now(), ''),
  ('acme', 'p-await', 45, 'awaiting_approval', 'r', now(), NULL),
  ('acme', 'p-rejected', 46, 'rejected', 'r', now(), 'bo'),
  ('other', 'p-exec', 47, 'executing', 'r', now(), 'cy')`)
	require.NoError(t, err)
	_, err = conn.Exec(ctx, `
INSERT INTO action (account, key, proposal_id, action_index, ticket_id, state, created_at) VALUES
  ('acme', 'p-exec:0', 'p-exec', 0, 42, 'applying', now()),
  ('acme', 'p-app:0', 'p-app', 0, 51, 'applied', now() - interval '1 hour'),
  ('acme', 'p-app:1', 'p-app', 1, 50, 'applying', now()),
  ('acme', 'attention-0123abcd:0', 'attention-0123abcd', 0, 42, 'applied', now())`)
	require.NoError(t, err)

	require.NoError(t, migrateTo(ctx, conn, 8))
	type approval struct {
		Account, ProposalID string
		TicketID            int64
		Digests             []string
		ApprovedBy          string
		OnBehalfOf          *string
	}
	rows, err := conn.Query(ctx, `SELECT account, proposal_id, ticket_id, action_digests, approved_by, on_behalf_of
FROM approval ORDER BY account, proposal_id`)
	require.NoError(t, err)
	got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[approval])
	require.NoError(t, err)
	assert.Equal(t, []approval{
		{"acme", "p-app", 50, nil, "before-approvals", nil},
		{"acme", "p-done", 43, nil, "before-approvals", nil},
		{"acme", "p-exec", 42, nil, "ada@acme.test", nil},
		{"acme", "p-failed", 44, nil, "before-approvals", nil},
		{"other", "p-exec", 47, nil, "cy", nil},
	}, got, "approved proposals and reserved actions, per account; not p-await, p-rejected or the agents' note")

	var appApprovedAt, firstReserved time.Time
	require.NoError(t, conn.QueryRow(ctx, `SELECT approved_at FROM approval WHERE account = 'acme' AND proposal_id = 'p-app'`).Scan(&appApprovedAt))
	require.NoError(t, conn.QueryRow(ctx, `SELECT created_at FROM action WHERE key = 'p-app:0'`).Scan(&firstReserved))
	assert.True(t, appApprovedAt.Equal(firstReserved), "approved when its first action was reserved")

	var settledRun *string
	require.NoError(t, conn.QueryRow(ctx, `SELECT settled_run FROM action WHERE key = 'p-exec:0'`).Scan(&settledRun))
	assert.Nil(t, settledRun, "no action was settled by a known run")

	require.NoError(t, migrateTo(ctx, conn, 7))
	var tables, columns int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_name = 'approval'`).Scan(&tables))
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM information_schema.columns WHERE table_name = 'action' AND column_name = 'settled_run'`).Scan(&columns))
	assert.Zero(t, tables, "down drops the approvals")
	assert.Zero(t, columns, "and the settled run")
	var actions int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM action`).Scan(&actions))
	assert.Equal(t, 4, actions, "and keeps the actions")

	v, err := Migrate(ctx, conn)
	require.NoError(t, err, "up again")
	assert.GreaterOrEqual(t, v, int32(8))
}
