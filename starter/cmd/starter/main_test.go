package main

import (
	"bytes"
	"context"
	"os"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow/internal/testenv"
	"github.com/supportflow/supportflow/migrations"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

func runCmd(args ...string) (code int, out, errOut string) {
	var o, e bytes.Buffer
	code = run(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

func TestHelp_ListsEveryCommandAndEachHasItsOwn(t *testing.T) {
	code, out, _ := runCmd("--help")
	assert.Equal(t, 0, code)
	for _, c := range commands {
		assert.Contains(t, out, c.name)
		code, help, _ := runCmd(c.name, "--help")
		assert.Equal(t, 0, code, c.name)
		assert.Contains(t, help, "usage: starter "+c.name, c.name)
		assert.Contains(t, help, c.help, c.name)
	}
	code, _, _ = runCmd()
	assert.Equal(t, 2, code, "no command is a usage error")
}

// Bad input gets a usage error (exit 2) and does nothing.
func TestBadInput_IsAUsageError(t *testing.T) {
	for _, args := range [][]string{
		{"nope"},
		{"redrive-enrichment"},
		{"redrive-enrichment", "-4"},
		{"redrive-enrichment", "12; rm -rf"},
		{"enrichment-status", "1", "2"},
		{"parity"},
		{"parity", "--legacy-table", "x; DROP TABLE action"},
	} {
		code, _, errOut := runCmd(args...)
		assert.Equal(t, 2, code, "%v: %s", args, errOut)
		assert.NotEmpty(t, errOut)
	}
}

func TestParity_PrintsTheReport(t *testing.T) {
	url := testenv.DatabaseURL(t)
	_, err := migrations.MigrateURL(context.Background(), url)
	require.NoError(t, err)
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(context.Background(), `
CREATE TABLE legacy (ticket_id bigint, order_count bigint);
INSERT INTO legacy VALUES (1, 2), (2, 3);
INSERT INTO ticket_enrichment (account, ticket_id, customer_id, lifetime_orders) VALUES ('acme', 1, 'c', 2);`)
	require.NoError(t, err)
	t.Setenv("DATABASE_URL", url)
	t.Setenv("SUPPORTFLOW_ACCOUNT", "acme")
	code, out, errOut := runCmd("parity", "--legacy-table", "legacy")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "coverage: legacy legacy 2 (100.0%), supportflow 1 (50.0%)")
	assert.Contains(t, out, "missing in supportflow: 1 [2]")
}
