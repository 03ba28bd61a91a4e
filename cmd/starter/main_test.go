package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow/internal/testdb"
	"github.com/supportflow/supportflow/internal/testenv"
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

// `starter --help` lists every command, each on its own line with its
// one-line help, in the table's order; the package doc names each too.
func TestHelp_ListsEachCommandWithItsOneLineHelp(t *testing.T) {
	want := []string{
		"draft-start", "draft-status", "approve", "reject", "retry",
		"ticket-event", "redrive-enrichment", "enrichment-status", "parity", "reconcile",
		"evaluate", "evaluation-status", "ensure-schedules",
	}
	var names []string
	for _, c := range commands {
		names = append(names, c.name)
	}
	require.Equal(t, want, names, "the command table changed: update this list, the package doc and the README")

	code, out, errOut := runCmd("--help")
	require.Equal(t, 0, code, errOut)
	_, section, ok := strings.Cut(out, "\ncommands:\n")
	require.True(t, ok, out)
	section, _, _ = strings.Cut(section, "\n\n")
	lines := strings.Split(section, "\n")
	require.Len(t, lines, len(commands), section)
	for i, c := range commands {
		assert.NotEmpty(t, c.help, c.name)
		assert.NotContains(t, c.help, "\n", "%s: the help is one line", c.name)
		assert.Regexp(t, "^  "+regexp.QuoteMeta(c.name)+" +"+regexp.QuoteMeta(c.help)+"$", lines[i])
	}
	for _, h := range []string{"-h", "help"} {
		code, o, _ := runCmd(h)
		assert.Equal(t, 0, code, h)
		assert.Equal(t, out, o, h)
	}

	src, err := os.ReadFile("main.go")
	require.NoError(t, err)
	doc, _, _ := strings.Cut(string(src), "\npackage main")
	for _, c := range commands {
		assert.Contains(t, doc, "starter "+c.name+" ", "the package doc lists %s", c.name)
	}
}

// noTemporal points the commands at a port nobody listens on: a command
// that dialed fails with a connection error instead of a usage error.
func noTemporal(t *testing.T) {
	t.Setenv("TEMPORAL_ADDRESS", "127.0.0.1:1")
	t.Setenv("TEMPORAL_NAMESPACE", "default")
	t.Setenv("SUPPORTFLOW_PAYLOAD_KEYS", "k1:3q2+7w0yZ0Vc9xL4kQ1rD8uP5sT6vW2aB3cE4fG5hI8=")
	t.Setenv("SUPPORTFLOW_PAYLOAD_KEYS_FILE", "")
}

// Without its payload keys the starter sends nothing: it says which
// variable is missing and exits 1 before dialing.
func TestMissingPayloadKeys_SendsNothing(t *testing.T) {
	noTemporal(t)
	t.Setenv("SUPPORTFLOW_PAYLOAD_KEYS", "")
	code, out, errOut := runCmd("draft-start", "12")
	assert.Equal(t, 1, code)
	assert.Contains(t, errOut, "SUPPORTFLOW_PAYLOAD_KEYS")
	assert.NotContains(t, errOut, "temporal:", "it never dialed")
	assert.Empty(t, out)
}

// Bad input gets a usage error (exit 2) and sends nothing: it is refused
// before the command dials Temporal.
func TestBadInput_IsAUsageError(t *testing.T) {
	noTemporal(t)
	for _, args := range [][]string{
		{"nope"},
		{"redrive-enrichment"},
		{"redrive-enrichment", "-4"},
		{"redrive-enrichment", "12; rm -rf"},
		{"enrichment-status", "1", "2"},
		{"parity"},
		{"parity", "--legacy-table", "x; DROP TABLE action"},
		{"retry"},
		{"retry", "p1", "p2"},
		{"retry", "../etc"},
		{"reconcile", "now"},

		{"draft-start"},
		{"draft-start", "abc"},
		{"draft-start", "-4"},
		{"draft-start", "0"},
		{"draft-start", "1.5"},
		{"draft-start", "99999999999999999999"},
		{"draft-start", "12", "13"},
		{"draft-start", "12", "--reason", ""},
		{"draft-start", "12", "--reason", "a\x00b"},
		{"draft-start", "12", "--reason", strings.Repeat("r", 101)},
		{"draft-start", "12", "--reason"},
		{"draft-start", "12", "--bogus"},

		{"draft-status"},
		{"draft-status", "x"},
		{"draft-status", "-1"},
		{"draft-status", "1", "2"},

		{"approve"},
		{"approve", "12"},
		{"approve", "12", "x y"},
		{"approve", "12", ""},
		{"approve", "12", "p/1"},
		{"approve", "12", strings.Repeat("p", 129)},
		{"approve", "-12", "p-1"},
		{"approve", "twelve", "p-1"},
		{"approve", "12", "p-1", "extra"},
		{"approve", "12", "p-1", "--by", "  "},
		{"approve", "12", "p-1", "--by", "ada\nbo"},
		{"approve", "12", "p-1", "--by", strings.Repeat("a", 201)},
		{"approve", "12", "p-1", "--reason", "no such flag"},

		{"reject"},
		{"reject", "12"},
		{"reject", "12", "x y"},
		{"reject", "0", "p-1"},
		{"reject", "12", "p-1", "--reason", ""},
		{"reject", "12", "p-1", "--reason", strings.Repeat("r", 1001)},
		{"reject", "12", "p-1", "--reason", "bell\a"},
		{"reject", "12", "p-1", "--by", ""},

		{"ticket-event"},
		{"ticket-event", "12"},
		{"ticket-event", "--kind", "created"},
		{"ticket-event", "x", "--kind", "created"},
		{"ticket-event", "-3", "--kind", "created"},
		{"ticket-event", "12", "--kind", "deleted"},
		{"ticket-event", "12", "--kind", "Created"},
		{"ticket-event", "12", "--kind", "redrive"},
		{"ticket-event", "12", "--kind", ""},
		{"ticket-event", "12", "--kind", "updated", "--requester", "0"},
		{"ticket-event", "12", "--kind", "updated", "--requester", "-5"},
		{"ticket-event", "12", "--kind", "updated", "--requester", "bob"},
		{"ticket-event", "12", "--kind", "created", "--customer-activity"},
		{"ticket-event", "12", "--kind", "updated", "--customer-activity=maybe"},
		{"ticket-event", "12", "13", "--kind", "updated"},

		{"evaluate"},
		{"evaluate", "--set", "golden", "--tickets", "1,2"},
		{"evaluate", "--run-id", "r1", "--tickets", "1,2"},
		{"evaluate", "--run-id", "r1", "--set", "golden"},
		{"evaluate", "--run-id", "r 1", "--set", "golden", "--tickets", "1"},
		{"evaluate", "--run-id", "r1", "--set", "gold/en", "--tickets", "1"},
		{"evaluate", "--run-id", "r1", "--set", "golden", "--tickets", "1,x,3"},
		{"evaluate", "--run-id", "r1", "--set", "golden", "--tickets", "1,,3"},
		{"evaluate", "--run-id", "r1", "--set", "golden", "--tickets", "1,2,"},
		{"evaluate", "--run-id", "r1", "--set", "golden", "--tickets", "1,-2"},
		{"evaluate", "--run-id", "r1", "--set", "golden", "--tickets", "0"},
		{"evaluate", "--run-id", "r1", "--set", "golden", "--tickets", "1,2,1"},
		{"evaluate", "--run-id", "r1", "--set", "golden", "--tickets", "1 2"},
		{"evaluate", "--run-id", "r1", "--set", "golden", "--tickets", manyTickets(1001)},
		{"evaluate", "--run-id", "r1", "--set", "golden", "--tickets", "1", "--concurrency", "-1"},
		{"evaluate", "--run-id", "r1", "--set", "golden", "--tickets", "1", "--concurrency", "33"},
		{"evaluate", "--run-id", "r1", "--set", "golden", "--tickets", "1", "--concurrency", "two"},
		{"evaluate", "r1", "--set", "golden", "--tickets", "1"},

		{"evaluation-status"},
		{"evaluation-status", "r 1"},
		{"evaluation-status", "r1", "r2"},

		{"ensure-schedules", "--scan-interval", "0"},
		{"ensure-schedules", "--scan-interval", "0s"},
		{"ensure-schedules", "--scan-interval", "-5m"},
		{"ensure-schedules", "--scan-interval", "garbage"},
		{"ensure-schedules", "--scan-interval", "5"},
		{"ensure-schedules", "--scan-interval", "30s"},
		{"ensure-schedules", "--scan-interval", "25h"},
		{"ensure-schedules", "extra"},
	} {
		code, out, errOut := runCmd(args...)
		assert.Equal(t, 2, code, "%q: %s", args, errOut)
		assert.NotEmpty(t, errOut, "%q", args)
		assert.Empty(t, out, "%q", args)
		for _, dialed := range []string{"temporal:", "dial", "connection", "127.0.0.1:1"} {
			assert.NotContains(t, errOut, dialed, "%q was refused only after dialing", args)
		}
	}
}

func manyTickets(n int) string {
	ids := make([]string, n)
	for i := range ids {
		ids[i] = strconv.Itoa(i + 1)
	}
	return strings.Join(ids, ",")
}

// noDatabase gives approve and retry the PostgreSQL settings they require
// before they dial (an approval is recorded where the execution's legs
// check it; a retry reads the proposal), on a port nobody listens on: the
// pool connects only when used, so a command gets as far as dialing
// Temporal.
func noDatabase(t *testing.T) {
	t.Setenv("DATABASE_URL", "postgres://supportflow@127.0.0.1:1/supportflow")
	t.Setenv("SUPPORTFLOW_ACCOUNT", "acme")
}

// Valid input gets past validation, flags before or after the positional
// arguments, and only then dials: with no server there, the command fails
// (exit 1) on the connection. This is what TestBadInput_IsAUsageError's
// "nothing was sent" check relies on.
func TestValidInput_DialsOnlyAfterValidation(t *testing.T) {
	noTemporal(t)
	noDatabase(t)
	for _, args := range [][]string{
		{"draft-start", "12"},
		{"draft-start", "12", "--reason", "click"},
		{"draft-start", "--reason=click", "12"},
		{"draft-status", "12"},
		{"approve", "12", "p-1"},
		{"approve", "12", "p-1", "--by", "ada@acme.test"},
		{"approve", "--by", "ada", "12", "p-1"},
		{"reject", "12", "p-1", "--by", "bo", "--reason", "wrong tone\nand too long"},
		{"retry", "p-1"},
		{"ticket-event", "12", "--kind", "created"},
		{"ticket-event", "12", "--kind", "updated", "--requester", "7", "--customer-activity"},
		{"ticket-event", "--customer-activity", "--kind=updated", "12"},
		{"redrive-enrichment", "12"},
		{"enrichment-status", "12"},
		{"evaluate", "--run-id", "run-1", "--set", "golden", "--tickets", "1, 2,3"},
		{"evaluate", "--run-id", "run-1", "--set", "golden", "--tickets", "1", "--concurrency", "32"},
		{"evaluate", "--run-id", "run-1", "--set", "golden", "--tickets", manyTickets(1000)},
		{"evaluation-status", "run-1"},
		{"ensure-schedules"},
		{"ensure-schedules", "--scan-interval", "1m"},
		{"ensure-schedules", "--scan-interval=24h"},
		{"redrive-enrichment", "--", "12"},
	} {
		code, out, errOut := runCmd(args...)
		assert.Equal(t, 1, code, "%q: %s", args, errOut)
		assert.Contains(t, errOut, "temporal:", "%q", args)
		assert.Empty(t, out, "%q", args)
	}
}

// approve records the approval in PostgreSQL before it tells the draft,
// and retry reads the proposal there: without DATABASE_URL and
// SUPPORTFLOW_ACCOUNT each is a usage error (exit 2) that names them, and
// nothing is sent.
func TestApproveAndRetry_NeedTheDatabaseBeforeDialing(t *testing.T) {
	noTemporal(t)
	for _, env := range []struct{ url, account string }{
		{"", ""},
		{"postgres://supportflow@127.0.0.1:1/supportflow", ""},
		{"", "acme"},
	} {
		t.Setenv("DATABASE_URL", env.url)
		t.Setenv("SUPPORTFLOW_ACCOUNT", env.account)
		for _, args := range [][]string{
			{"approve", "12", "p-1"},
			{"approve", "12", "p-1", "--by", "ada@acme.test"},
			{"retry", "p-1"},
		} {
			code, out, errOut := runCmd(args...)
			assert.Equal(t, 2, code, "%q %+v: %s", args, env, errOut)
			assert.Contains(t, errOut, "DATABASE_URL and SUPPORTFLOW_ACCOUNT must be set", "%q %+v", args, env)
			assert.NotContains(t, errOut, "temporal:", "%q %+v: it never dialed", args, env)
			assert.Empty(t, out, "%q %+v", args, env)
		}
	}
}

func TestSplitArgs(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	fs.String("by", "", "")
	fs.Bool("yes", false, "")
	for _, tc := range []struct {
		in, flags, pos []string
	}{
		{in: []string{"12", "p", "--by", "ada"}, flags: []string{"--by", "ada"}, pos: []string{"12", "p"}},
		{in: []string{"--by", "-4", "12"}, flags: []string{"--by", "-4"}, pos: []string{"12"}},
		{in: []string{"-4", "--yes", "p"}, flags: []string{"--yes"}, pos: []string{"-4", "p"}},
		{in: []string{"--by=a", "x", "--", "--yes", "-"}, flags: []string{"--by=a"}, pos: []string{"x", "--yes", "-"}},
		{in: []string{"--nope", "x"}, flags: []string{"--nope"}, pos: []string{"x"}},
		{in: []string{"x", "--by"}, flags: []string{"--by"}, pos: []string{"x"}},
	} {
		flags, pos := splitArgs(fs, tc.in)
		assert.Equal(t, tc.flags, flags, "%q", tc.in)
		assert.Equal(t, tc.pos, pos, "%q", tc.in)
	}
}

func TestParity_PrintsTheReport(t *testing.T) {
	pool := testdb.MigratedPool(t)
	_, err := pool.Exec(context.Background(), `
CREATE TABLE legacy (ticket_id bigint, order_count bigint);
INSERT INTO legacy VALUES (1, 2), (2, 3);
INSERT INTO ticket_enrichment (account, ticket_id, customer_id, lifetime_orders) VALUES ('acme', 1, 'c', 2);`)
	require.NoError(t, err)
	t.Setenv("DATABASE_URL", pool.Config().ConnString())
	t.Setenv("SUPPORTFLOW_ACCOUNT", "acme")
	code, out, errOut := runCmd("parity", "--legacy-table", "legacy")
	require.Equal(t, 0, code, errOut)
	assert.Contains(t, out, "coverage: legacy legacy 2 (100.0%), supportflow 1 (50.0%)")
	assert.Contains(t, out, "missing in supportflow: 1 [2]")
}
