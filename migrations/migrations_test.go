package migrations

import (
	"context"
	"os"
	"testing"

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
