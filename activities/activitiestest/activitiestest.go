// Package activitiestest wires the real activities to a real, migrated
// PostgreSQL database and to the Zendesk, subscription-service and model
// stand-ins through the real clients, for tests of activities and of the
// workflows that run them.
package activitiestest

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/activities"
	"github.com/supportflow/supportflow/internal/bqlookup"
	"github.com/supportflow/supportflow/internal/config"
	"github.com/supportflow/supportflow/internal/enrichment"
	"github.com/supportflow/supportflow/internal/eval"
	"github.com/supportflow/supportflow/internal/ingest"
	"github.com/supportflow/supportflow/internal/model"
	"github.com/supportflow/supportflow/internal/policy"
	"github.com/supportflow/supportflow/internal/proposals"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/internal/subscriptions"
	"github.com/supportflow/supportflow/internal/testenv"
	"github.com/supportflow/supportflow/internal/workerapp"
	"github.com/supportflow/supportflow/internal/zendeskclient"
	"github.com/supportflow/supportflow/ledger"
	"github.com/supportflow/supportflow/migrations"
)

// Account is the ledger account the harness writes under.
const Account = "acme"

// The BigQuery project and dataset the enrichment activities query.
const (
	BigQueryProject = "acme-analytics"
	BigQueryDataset = "commerce"
)

// Harness is a test's activities and the parts behind them.
type Harness struct {
	Activities    *activities.Activities
	Zendesk       *standin.Zendesk
	Subscriptions *standin.Subscriptions
	Model         *standin.Model
	BigQuery      *standin.BigQuery
	// Enrichment are the enrichment activities on the same database and
	// the BigQuery stand-in (project BigQueryProject, dataset
	// BigQueryDataset).
	Enrichment *enrichment.Activities
	// Reconciler is the reconciliation (and ticket-event prune) activity
	// on the same database and the Zendesk stand-in.
	Reconciler *ingest.Reconciler
	Pool       *pgxpool.Pool
	// The stores on the same database, for Account: the action ledger,
	// the proposals and approvals, the ticket mirror (and events) and the
	// evaluation results; the enrichment projection's is Enrichment.Store.
	// Each is the one writer of its tables.
	Ledger    *ledger.Ledger
	Proposals *proposals.Store
	Ingest    *ingest.Store
	Evals     *eval.Store
}

// New returns activities with durations d (zero fields: the product's
// defaults) on a fresh database of the test's own; everything is torn down
// at t.Cleanup. The package's TestMain must use testenv.Main.
func New(t testing.TB, d policy.Durations) *Harness {
	t.Helper()
	url := testenv.DatabaseURL(t)
	_, err := migrations.MigrateURL(context.Background(), url)
	require.NoError(t, err)
	pool, err := pgxpool.New(context.Background(), url)
	require.NoError(t, err)
	t.Cleanup(pool.Close)

	const email, zdToken, subsToken, modelKey = "agent@acme.test", "zd-token", "subs-token", "model-key"
	h := &Harness{
		Zendesk: standin.NewZendesk(email, zdToken), Subscriptions: standin.NewSubscriptions(subsToken),
		Model: standin.NewModel(modelKey), BigQuery: standin.NewBigQuery(BigQueryProject), Pool: pool,
	}
	zsrv, ssrv, msrv := httptest.NewServer(h.Zendesk), httptest.NewServer(h.Subscriptions), httptest.NewServer(h.Model)
	bsrv := httptest.NewServer(h.BigQuery)
	t.Cleanup(zsrv.Close)
	t.Cleanup(ssrv.Close)
	t.Cleanup(msrv.Close)
	t.Cleanup(bsrv.Close)
	zc, err := zendeskclient.New(zendeskclient.Config{URL: zsrv.URL, Email: email, APIToken: zdToken})
	require.NoError(t, err)
	sc, err := subscriptions.New(ssrv.URL, subsToken, nil)
	require.NoError(t, err)
	mc, err := model.New(model.Config{BaseURL: msrv.URL + "/v1", APIKey: modelKey, Model: "standin-model"})
	require.NoError(t, err)
	h.Ledger = ledger.New(pool, Account)
	h.Proposals = proposals.New(pool, Account)
	h.Ingest = ingest.NewStore(pool, Account)
	h.Evals = eval.NewStore(pool, Account)
	bq, err := bqlookup.New(context.Background(), bqlookup.Config{Endpoint: bsrv.URL + "/bigquery/v2/", ProjectID: BigQueryProject, Dataset: BigQueryDataset})
	require.NoError(t, err)
	t.Cleanup(func() { bq.Close() })
	h.Enrichment = workerapp.EnrichmentActivities(config.Worker{Account: Account, Durations: d}, pool, bq, nil)
	h.Activities = &activities.Activities{Zendesk: zc, Subscriptions: sc, Model: mc, Ledger: h.Ledger, Proposals: h.Proposals,
		Enrichment: h.Enrichment.Store, Evals: h.Evals, Durations: d.Fill()}
	h.Reconciler = &ingest.Reconciler{Store: h.Ingest, Export: zc,
		Retention: d.Fill().Retention, RequestsPerMinute: 600}
	return h
}

// Approver is the name the harness records its approvals under.
const Approver = "tests"

// Approve records an approval of p by Approver, as the starter does for a
// proposal an app composed (ExecuteProposal): every leg of an execution
// checks it (proposals.Store.CheckApproval) before its first write.
// Approving p again with the same content is a no-op.
func (h *Harness) Approve(t testing.TB, p supportflow.Proposal) {
	t.Helper()
	_, err := h.Proposals.RecordApproval(context.Background(), p, Approver, "", false)
	require.NoError(t, err)
}

// ApproveAction approves the proposal of one action that key (index 0)
// names, for tests that run a leg activity on its own.
func (h *Harness) ApproveAction(t testing.TB, key string, act supportflow.Action) {
	t.Helper()
	proposalID, index, err := supportflow.ParseActionKey(key)
	require.NoError(t, err)
	require.Zero(t, index, "ApproveAction approves a proposal of one action: key %s", key)
	h.Approve(t, supportflow.Proposal{ID: proposalID, Actions: []supportflow.Action{act}})
}

// ApproveDraft records by's approval (Approver when empty) of the drafted
// proposal proposalID as it is stored, the way Starter.Approve does before
// it sends the draft its approve update: the proposal must be awaiting
// approval, and no other proposal of its ticket may be answering it.
func (h *Harness) ApproveDraft(t testing.TB, proposalID, by string) {
	t.Helper()
	if by == "" {
		by = Approver
	}
	p, err := h.Proposals.GetProposal(context.Background(), proposalID)
	require.NoError(t, err)
	_, err = h.Proposals.RecordApproval(context.Background(), p.DraftProposal.Proposal(), by, "", true)
	require.NoError(t, err)
}

// Own makes subs customerID's subscriptions and requesterID (the customer)
// the current requester of ticketID, which is what a cancellation checks
// before it runs: the ticket's mirror names the requester, the requester's
// enrichment names the customer and lists subs, and the subscription
// stand-in has each of subs as the customer's.
func (h *Harness) Own(t testing.TB, ticketID, requesterID int64, customerID string, subs ...string) {
	t.Helper()
	ctx := context.Background()
	// Zendesk says whose the ticket is (the check reads it there); the
	// mirror follows, as the webhook would make it.
	if _, ok := h.Zendesk.Ticket(ticketID); !ok {
		h.Zendesk.AddTicket(standin.Ticket{ID: ticketID, Subject: "Plan", Description: "Please cancel", RequesterID: requesterID})
	}
	require.True(t, h.Zendesk.SetRequester(ticketID, requesterID))
	_, err := h.Ingest.UpsertTicketMirror(ctx, ingest.TicketMirror{TicketID: ticketID, Status: "open",
		RequesterID: requesterID, UpdatedAt: time.Now()})
	require.NoError(t, err)
	require.NoError(t, h.Enrichment.Store.PutEnrichment(ctx, ticketID, requesterID,
		supportflow.Enrichment{CustomerID: customerID, ActiveSubscriptions: subs, LookedUpAt: time.Now()}))
	for _, sub := range subs {
		h.Subscriptions.AddSubscription(sub, customerID)
	}
}
