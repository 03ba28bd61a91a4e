package enrichment_test

import (
	"context"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/testsuite"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/bqlookup"
	"github.com/supportflow/supportflow/internal/enrichment"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/internal/testdb"
	"github.com/supportflow/supportflow/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

const requester = int64(4242)

type fixture struct {
	pool  *pgxpool.Pool
	store *enrichment.Store
	bq    *standin.BigQuery
	acts  *enrichment.Activities
	env   *testsuite.TestActivityEnvironment
}

// newFixture runs the real lookup activity against the BigQuery stand-in
// (project "proj", location US) and a fresh database.
func newFixture(t *testing.T) *fixture {
	t.Helper()
	pool := testdb.MigratedPool(t)
	f := &fixture{pool: pool, store: enrichment.NewStore(pool, "acme"), bq: standin.NewBigQuery("proj")}
	srv := httptest.NewServer(f.bq)
	t.Cleanup(srv.Close)
	client, err := bqlookup.New(context.Background(), bqlookup.Config{Endpoint: srv.URL + "/bigquery/v2/", ProjectID: "proj", Dataset: "commerce", Location: "US"})
	require.NoError(t, err)
	t.Cleanup(func() { client.Close() })
	f.acts = &enrichment.Activities{Store: f.store, BigQuery: client, HeartbeatInterval: 50 * time.Millisecond, CallTimeout: 5 * time.Second}
	var s testsuite.WorkflowTestSuite
	f.env = s.NewTestActivityEnvironment()
	f.env.RegisterActivity(f.acts)
	return f
}

func (f *fixture) lookup(t *testing.T, in supportflow.LookupInput) (supportflow.LookupOutput, error) {
	t.Helper()
	v, err := f.env.ExecuteActivity("LookupCustomer", in)
	if err != nil {
		return supportflow.LookupOutput{}, err
	}
	var out supportflow.LookupOutput
	require.NoError(t, v.Get(&out))
	return out, nil
}

// A run that bills 2.5 GB (more than an int4 holds) round-trips exactly,
// and a BigQuery job ID is stored as BigQuery prints it, not as a UUID.
func TestLookup_BytesBilledAndJobIDRoundTripExactly(t *testing.T) {
	f := newFixture(t)
	f.bq.AddCustomer(requester, standin.BQCustomer{CustomerID: "c-1", Email: "ada@example.test", Orders: 3, ActiveSubscriptions: []string{"s-2", "s-1"}})
	f.bq.SetBytesBilled(2_500_000_000)
	f.bq.SetNextJobID("job_0Ab")

	out, err := f.lookup(t, supportflow.LookupInput{TicketID: 7, RequesterID: requester})
	require.NoError(t, err)
	assert.True(t, out.Found)
	assert.Equal(t, "proj:US.job_0Ab", out.JobID)

	runs, err := f.store.Runs(context.Background(), 7)
	require.NoError(t, err)
	require.Len(t, runs, 1)
	assert.Equal(t, int64(2_500_000_000), runs[0].BytesBilled)
	assert.Equal(t, "proj:US.job_0Ab", runs[0].JobID)
	var orders, storedRequester int64
	var subs []string
	require.NoError(t, f.pool.QueryRow(context.Background(),
		`SELECT lifetime_orders, active_subscriptions, requester_id FROM ticket_enrichment WHERE ticket_id = 7`).Scan(&orders, &subs, &storedRequester))
	assert.Equal(t, int64(3), orders)
	assert.Equal(t, []string{"s-1", "s-2"}, subs)
	assert.Equal(t, requester, storedRequester, "the projection belongs to the requester looked up")

	sql, params := f.bq.LastQuery()
	assert.Contains(t, sql, "@requester_id", "the query is parameterized")
	assert.NotContains(t, sql, "4242", "the value never reaches the SQL text")
	assert.Equal(t, "4242", params["requester_id"])
}

// The requester comes from the ticket mirror when the event did not say;
// a ticket nobody mirrored is refused (final) and its attempt is logged.
func TestLookup_RequesterFromTheMirrorOrRefused(t *testing.T) {
	f := newFixture(t)
	f.bq.AddCustomer(requester, standin.BQCustomer{CustomerID: "c-1", Orders: 1})
	_, err := f.pool.Exec(context.Background(), `INSERT INTO ticket_mirror (account, ticket_id, requester_id, zendesk_updated_at) VALUES ('acme', 7, $1, now())`, requester)
	require.NoError(t, err)
	out, err := f.lookup(t, supportflow.LookupInput{TicketID: 7})
	require.NoError(t, err)
	assert.Equal(t, requester, out.RequesterID)

	_, err = f.lookup(t, supportflow.LookupInput{TicketID: 8})
	require.ErrorContains(t, err, "no known requester")
	log, err := f.store.LookupLog(context.Background(), 8)
	require.NoError(t, err)
	require.Len(t, log, 1)
	assert.Equal(t, enrichment.OutcomeError, log[0].Outcome)
	assert.Zero(t, f.bq.Queries()-1, "only ticket 7 reached BigQuery")
}

// A dead letter is one row per ticket: re-dead-lettering replaces it, a
// re-drive is recorded, a successful lookup resolves it.
func TestDeadLetter_Lifecycle(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	f.bq.AddCustomer(requester, standin.BQCustomer{CustomerID: "c-1"})
	require.NoError(t, f.store.PutDeadLetter(ctx, 7, requester, 5, "backendError", "the lookup failed 5 attempts"))
	require.NoError(t, f.store.PutDeadLetter(ctx, 7, 0, 5, "timeout", "the lookup failed 5 attempts"), "a second dead letter for the ticket replaces the first; no unique-index failure")
	dl, err := f.store.GetDeadLetter(ctx, 7)
	require.NoError(t, err)
	assert.Equal(t, "timeout", dl.LastError)

	// The re-drive names no requester: the dead letter remembers it.
	out, err := f.lookup(t, supportflow.LookupInput{TicketID: 7, Redrive: true})
	require.NoError(t, err)
	assert.Equal(t, requester, out.RequesterID)
	dl, err = f.store.GetDeadLetter(ctx, 7)
	require.NoError(t, err)
	assert.NotNil(t, dl.RedrivenAt)
	assert.NotNil(t, dl.ResolvedAt, "the successful lookup resolved it")
	ok, err := f.store.MarkRedriven(ctx, 7)
	require.NoError(t, err)
	assert.False(t, ok, "a resolved dead letter is not re-driven again")
}

// Parity on seeded legacy and new data with known differences.
func TestParity_ReportsCoverageGapsAndMismatches(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	_, err := f.pool.Exec(ctx, `
CREATE TABLE legacy_enrichment (ticket_id bigint PRIMARY KEY, order_count bigint);
INSERT INTO legacy_enrichment VALUES (1, 5), (2, 7), (3, 1), (4, 9);
INSERT INTO ticket_enrichment (account, ticket_id, customer_id, lifetime_orders) VALUES
  ('acme', 1, 'c1', 5), ('acme', 2, 'c2', 8), ('acme', 5, 'c5', 2),
  ('other-account', 3, 'c3', 1);`)
	require.NoError(t, err)

	r, err := f.store.Parity(ctx, "legacy_enrichment")
	require.NoError(t, err)
	assert.Equal(t, 5, r.Tickets)
	assert.Equal(t, 4, r.LegacyCovered)
	assert.Equal(t, 3, r.NewCovered)
	assert.Equal(t, []int64{3, 4}, r.MissingNew, "ticket 3 is another account's")
	assert.Equal(t, []int64{5}, r.MissingLegacy)
	assert.Equal(t, []enrichment.Mismatch{{TicketID: 2, LegacyOrders: 7, NewOrders: 8}}, r.Mismatched)
	lc, nc := r.Coverage()
	assert.InDelta(t, 0.8, lc, 1e-9)
	assert.InDelta(t, 0.6, nc, 1e-9)
	assert.Contains(t, r.String(), "mismatched order counts: 1")

	for _, bad := range []string{"legacy; DROP TABLE action", `legacy"x`, "a.b.c", ""} {
		_, err := f.store.Parity(ctx, bad)
		assert.ErrorContains(t, err, "legacy table", bad)
	}
	_, err = f.store.Parity(ctx, "public.legacy_enrichment")
	assert.NoError(t, err, "schema-qualified names work")
}

// The shadow-mode code path must not be able to write to Zendesk or to
// tables that are not its own. This fails the build if the package ever
// imports a Zendesk client, the action ledger or the activities that post,
// or if its SQL writes to another table.
func TestShadowPathImportsAndWritesOnlyItsOwn(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	require.NoError(t, err)
	deps := strings.Fields(string(out))
	for _, forbidden := range []string{
		"github.com/nukosuke/go-zendesk/zendesk",
		"github.com/supportflow/supportflow/internal/zendeskclient",
		"github.com/supportflow/supportflow/internal/subscriptions",
		"github.com/supportflow/supportflow/ledger",
		"github.com/supportflow/supportflow/activities",
		"github.com/supportflow/supportflow/workflows",
	} {
		assert.NotContains(t, deps, forbidden, "internal/enrichment must not import %s", forbidden)
	}

	own := map[string]bool{"ticket_enrichment": true, "enrichment_run": true, "lookup_log": true, "enrichment_dead_letter": true}
	write := regexp.MustCompile(`(?i)\b(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+([A-Za-z_][A-Za-z0-9_.]*)`)
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	checked := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range write.FindAllStringSubmatch(string(src), -1) {
			table := strings.ToLower(m[1])
			if table == "set" { // ON CONFLICT ... DO UPDATE SET
				continue
			}
			checked++
			assert.True(t, own[table], "%s writes to %s, which is not an enrichment table", f, table)
		}
	}
	assert.Greater(t, checked, 4, "the guard found the package's writes")
}
