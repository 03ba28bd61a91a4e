package activities

// An internal test: subscriptionOwner is unexported, and activitiestest
// imports this package, so this file wires its own small fixture on the
// same parts (a real migrated PostgreSQL, the subscription stand-in behind
// the real client). TestMain (testenv.Main) is in execute_test.go.

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/enrichment"
	"github.com/supportflow/supportflow/internal/policy"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/internal/subscriptions"
	"github.com/supportflow/supportflow/internal/testdb"
	"github.com/supportflow/supportflow/internal/zendeskclient"
	"github.com/supportflow/supportflow/ledger"
)

type ownerFixture struct {
	a    *Activities
	subs *standin.Subscriptions
	zd   *standin.Zendesk
}

const ownerTicket, ownerRequester = int64(31), int64(7001)

func newOwnerFixture(t *testing.T) *ownerFixture {
	t.Helper()
	pool := testdb.MigratedPool(t)
	const token = "subs-token"
	subs := standin.NewSubscriptions(token)
	srv := httptest.NewServer(subs)
	t.Cleanup(srv.Close)
	client, err := subscriptions.New(srv.URL, token, nil)
	require.NoError(t, err)
	const email, zdToken = "agent@acme.test", "zd-token"
	zd := standin.NewZendesk(email, zdToken)
	zsrv := httptest.NewServer(zd)
	t.Cleanup(zsrv.Close)
	zc, err := zendeskclient.New(zendeskclient.Config{URL: zsrv.URL, Email: email, APIToken: zdToken})
	require.NoError(t, err)
	return &ownerFixture{
		a: &Activities{Subscriptions: client, Zendesk: zc, Ledger: ledger.New(pool, "acme"), Enrichment: enrichment.NewStore(pool, "acme"),
			Durations: policy.Durations{SubscriptionCallTimeout: 300 * time.Millisecond}.Fill()},
		subs: subs, zd: zd,
	}
}

// requester makes requester (0: none) the ticket's requester at Zendesk,
// creating the ticket the first time.
func (f *ownerFixture) requester(t *testing.T, requester int64) {
	t.Helper()
	if _, ok := f.zd.Ticket(ownerTicket); !ok {
		f.zd.AddTicket(standin.Ticket{ID: ownerTicket, Subject: "Plan", Description: "hi"})
	}
	require.True(t, f.zd.SetRequester(ownerTicket, requester))
}

func (f *ownerFixture) enrich(t *testing.T, requester int64, customerID string, subs ...string) {
	t.Helper()
	require.NoError(t, f.a.Enrichment.PutEnrichment(context.Background(), ownerTicket, requester,
		supportflow.Enrichment{CustomerID: customerID, ActiveSubscriptions: subs}))
}

func (f *ownerFixture) owner(t *testing.T, sub string) (bool, string) {
	t.Helper()
	owned, reason, err := f.a.subscriptionOwner(context.Background(), ownerTicket, sub)
	require.NoError(t, err)
	if owned {
		assert.Empty(t, reason, "an owned subscription needs no reason")
	} else {
		assert.NotEmpty(t, reason, "a refusal says why")
	}
	return owned, reason
}

// The service's customer is the requester's: owned, whether or not the
// enrichment lists it (a subscription started after the lookup). When the
// service names no customer, or refuses to read it for good, the current
// enrichment's list decides.
func TestSubscriptionOwner_OwnedByTheRequestersCustomer(t *testing.T) {
	f := newOwnerFixture(t)
	f.requester(t, ownerRequester)
	f.enrich(t, ownerRequester, "cus-ada", "sub-listed", "sub-anon", "sub-gone")
	f.subs.AddSubscriptionWithPlan("sub-listed", "cus-ada", "monthly")
	f.subs.AddSubscription("sub-new", "cus-ada")
	f.subs.AddSubscription("sub-anon", "")
	f.subs.AddSubscription("sub-anon-unlisted", "")

	for _, sub := range []string{"sub-listed", "sub-new", "sub-anon", "sub-gone"} {
		owned, reason := f.owner(t, sub)
		assert.True(t, owned, "%s: %s", sub, reason)
	}
	owned, reason := f.owner(t, "sub-anon-unlisted")
	assert.False(t, owned, "the service does not say whose it is and the enrichment does not list it")
	assert.Contains(t, reason, "sub-anon-unlisted")

	owned, reason = f.owner(t, "sub-unknown")
	assert.False(t, owned)
	assert.Contains(t, reason, "HTTP 404 not_found", "the refusal, classified")
	assert.NotContains(t, reason, `"sub-unknown" not found`, "never the service's message")
	assert.Equal(t, 6, f.subs.Requests(http.MethodGet, "/v1/subscriptions/"), "one read of the service each")
}

// The service names another customer: not owned, even when the
// enrichment (a lookup that may be stale) lists the subscription.
func TestSubscriptionOwner_AnotherCustomersSubscriptionIsNotOwned(t *testing.T) {
	f := newOwnerFixture(t)
	f.requester(t, ownerRequester)
	f.enrich(t, ownerRequester, "cus-ada", "sub-bo")
	f.subs.AddSubscription("sub-bo", "cus-bo")

	owned, reason := f.owner(t, "sub-bo")
	assert.False(t, owned)
	assert.Contains(t, reason, "belongs to customer cus-bo, not to customer cus-ada")
	assert.Equal(t, 0, f.subs.CancelCalls("sub-bo"), "deciding cancels nothing")
}

// Without a known current requester (Zendesk's, not the mirror's), or
// without customer data for that requester, nothing is owned, and the
// service is not asked.
func TestSubscriptionOwner_NoRequesterOrNoCurrentEnrichment(t *testing.T) {
	f := newOwnerFixture(t)
	f.subs.AddSubscription("sub-1", "cus-ada")

	owned, reason := f.owner(t, "sub-1")
	assert.False(t, owned)
	assert.Contains(t, reason, "Zendesk refused to read ticket 31", "a ticket Zendesk does not know (404)")

	f.requester(t, 0)
	owned, reason = f.owner(t, "sub-1")
	assert.False(t, owned)
	assert.Contains(t, reason, "no known requester")

	// The requester was enriched, then Zendesk moved the ticket to
	// another requester: what was known of the first no longer counts.
	f.requester(t, ownerRequester)
	f.enrich(t, ownerRequester, "cus-ada", "sub-1")
	owned, _ = f.owner(t, "sub-1")
	require.True(t, owned, "the requester's own subscription")
	f.requester(t, ownerRequester+1)
	owned, reason = f.owner(t, "sub-1")
	assert.False(t, owned, "a requester change drops what was known")
	assert.Contains(t, reason, "current requester 7002")
	assert.Equal(t, 1, f.subs.Requests(http.MethodGet, "/v1/subscriptions/"), "only the owned case read the service")
}

// A read that fails for now (5xx, a timeout under SubscriptionCallTimeout)
// is an error to retry, never a decision.
func TestSubscriptionOwner_AFailedReadIsAnError(t *testing.T) {
	f := newOwnerFixture(t)
	f.requester(t, ownerRequester)
	f.enrich(t, ownerRequester, "cus-ada", "sub-1")
	f.subs.AddSubscription("sub-1", "cus-ada")

	f.subs.Inject(standin.Fault{Method: http.MethodGet, Status: http.StatusServiceUnavailable})
	_, _, err := f.a.subscriptionOwner(context.Background(), ownerTicket, "sub-1")
	require.Error(t, err)
	assert.False(t, isPermanent(err), "retryable")

	f.subs.Inject(standin.Fault{Method: http.MethodGet, Delay: time.Second})
	start := time.Now()
	_, _, err = f.a.subscriptionOwner(context.Background(), ownerTicket, "sub-1")
	require.Error(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(start), 900*time.Millisecond, "bounded by the call timeout")

	owned, _ := f.owner(t, "sub-1")
	assert.True(t, owned, "the next read decides")
}
