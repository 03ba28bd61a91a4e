package subscriptions_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/internal/subscriptions"
)

const token = "tok_live_very_secret_123"

// newEnv starts a subscription stand-in with one active subscription and a
// client for it with its own transport, so connection reuse is per test.
func newEnv(t *testing.T) (*standin.Subscriptions, *subscriptions.Client, *httptest.Server) {
	t.Helper()
	s := standin.NewSubscriptions(token)
	s.AddSubscription("sub_1", "cus_1")
	s.AddSubscription("sub_2", "cus_2")
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	c, err := subscriptions.New(srv.URL, token, &http.Client{Transport: &http.Transport{}})
	require.NoError(t, err)
	return s, c, srv
}

// asError requires err to be a *subscriptions.Error.
func asError(t *testing.T, err error) *subscriptions.Error {
	t.Helper()
	var e *subscriptions.Error
	require.ErrorAs(t, err, &e)
	return e
}

func TestCancel(t *testing.T) {
	s, c, _ := newEnv(t)

	got, err := c.Cancel(t.Context(), "sub_1", "key-1")
	require.NoError(t, err)
	assert.False(t, got.AlreadyCancelled)
	assert.WithinDuration(t, time.Now(), got.CancelledAt, time.Minute)
	assert.Equal(t, standin.SubscriptionCancelled, s.Status("sub_1"))
	assert.Equal(t, 1, s.Cancellations("sub_1"))
	assert.Equal(t, []string{"key-1"}, s.IdempotencyKeys("sub_1"))

	// The same key again is the first call's answer: this key cancelled it.
	same, err := c.Cancel(t.Context(), "sub_1", "key-1")
	require.NoError(t, err)
	assert.False(t, same.AlreadyCancelled)
	assert.Equal(t, got.CancelledAt, same.CancelledAt)
	assert.Equal(t, 1, s.IdempotentReplays("sub_1"))

	// Another cancel conflicts, which the client reports as success.
	again, err := c.Cancel(t.Context(), "sub_1", "key-2")
	require.NoError(t, err)
	assert.True(t, again.AlreadyCancelled)
	assert.Equal(t, got.CancelledAt, again.CancelledAt)
	assert.Equal(t, 1, s.Cancellations("sub_1"))
	assert.Equal(t, 3, s.CancelCalls("sub_1"))
	assert.Equal(t, 0, s.CancelCalls("sub_2"))
}

// Lookup reads whose a subscription is, its status and plan; an unknown
// one is a permanent 404, and a failure to answer may be retried.
func TestLookup(t *testing.T) {
	s, c, _ := newEnv(t)
	s.AddSubscriptionWithPlan("sub_3", "cus_3", "annual")

	got, err := c.Lookup(t.Context(), "sub_3")
	require.NoError(t, err)
	assert.Equal(t, subscriptions.Subscription{ID: "sub_3", CustomerID: "cus_3", Status: subscriptions.StatusActive, Plan: "annual"}, got)
	got, err = c.Lookup(t.Context(), "sub_1")
	require.NoError(t, err)
	assert.Equal(t, "cus_1", got.CustomerID)
	assert.Empty(t, got.Plan, "no plan, none reported")

	status, err := c.Status(t.Context(), "sub_3")
	require.NoError(t, err)
	assert.Equal(t, subscriptions.StatusActive, status)

	_, err = c.Lookup(t.Context(), "sub_404")
	e := asError(t, err)
	assert.Equal(t, http.StatusNotFound, e.Status)
	assert.True(t, e.Permanent())

	s.Inject(standin.Fault{Method: http.MethodGet, Status: http.StatusServiceUnavailable, RetryAfter: 2 * time.Second})
	_, err = c.Lookup(t.Context(), "sub_3")
	e = asError(t, err)
	assert.False(t, e.Permanent())
	assert.Equal(t, 2*time.Second, e.RetryAfterDelay())

	_, err = c.Lookup(t.Context(), "..")
	assert.True(t, asError(t, err).Permanent(), "a dot segment is refused before sending")
	assert.Equal(t, 0, s.CancelCalls("sub_3"), "a read cancels nothing")
}

func TestCancelWithoutIdempotencyKey(t *testing.T) {
	s, c, _ := newEnv(t)
	_, err := c.Cancel(t.Context(), "sub_1", "")
	require.NoError(t, err)
	assert.Empty(t, s.IdempotencyKeys("sub_1"))
	assert.Equal(t, 1, s.Cancellations("sub_1"))
}

func TestCancelUnknownIsPermanent(t *testing.T) {
	s, c, _ := newEnv(t)

	_, err := c.Cancel(t.Context(), "sub_404", "k")
	e := asError(t, err)
	assert.Equal(t, http.StatusNotFound, e.Status)
	assert.Equal(t, "not_found", e.Code)
	assert.NotEmpty(t, e.Message)
	assert.True(t, e.Permanent())
	assert.False(t, e.MayHaveLanded())
	assert.Zero(t, e.RetryAfterDelay())
	assert.Contains(t, e.Error(), "404")
	assert.Equal(t, 1, s.CancelCalls("sub_404"))
}

func TestCancelRateLimited(t *testing.T) {
	s, c, _ := newEnv(t)
	s.Inject(standin.Fault{Method: http.MethodPost, Status: http.StatusTooManyRequests, RetryAfter: 3 * time.Second})

	_, err := c.Cancel(t.Context(), "sub_1", "k")
	e := asError(t, err)
	assert.Equal(t, http.StatusTooManyRequests, e.Status)
	assert.Equal(t, "rate_limited", e.Code)
	assert.Equal(t, 3*time.Second, e.RetryAfterDelay())
	assert.False(t, e.Permanent())
	assert.False(t, e.MayHaveLanded(), "a rate-limited request was not applied")
	assert.Equal(t, 0, s.Cancellations("sub_1"))

	_, err = c.Cancel(t.Context(), "sub_1", "k")
	require.NoError(t, err)
	assert.Equal(t, 1, s.Cancellations("sub_1"))
}

func TestCancelServerErrors(t *testing.T) {
	s, c, _ := newEnv(t)
	for _, tc := range []struct {
		status     int
		mayHave    bool
		retryAfter time.Duration
	}{
		{http.StatusInternalServerError, true, 0},
		{http.StatusBadGateway, true, 0},
		{http.StatusGatewayTimeout, true, 0},
		{http.StatusServiceUnavailable, false, 5 * time.Second},
	} {
		s.Inject(standin.Fault{Status: tc.status, RetryAfter: tc.retryAfter})
		_, err := c.Cancel(t.Context(), "sub_1", "k")
		e := asError(t, err)
		assert.Equal(t, tc.status, e.Status)
		assert.Equal(t, tc.mayHave, e.MayHaveLanded(), "status %d", tc.status)
		assert.False(t, e.Permanent(), "status %d", tc.status)
		assert.Equal(t, tc.retryAfter, e.RetryAfterDelay(), "status %d", tc.status)
	}
	assert.Equal(t, 0, s.Cancellations("sub_1"))
}

func TestCancelLostResponse(t *testing.T) {
	s, c, _ := newEnv(t)
	// Warm the connection up: net/http silently resends a request that it
	// deems replayable (Idempotency-Key makes a POST so) when a reused
	// connection breaks. The client must prevent that.
	_, err := c.Cancel(t.Context(), "sub_2", "warm-up")
	require.NoError(t, err)
	s.Inject(standin.Fault{Method: http.MethodPost, Path: "/v1/subscriptions/sub_1/cancel", DropAfterApply: true})

	_, err = c.Cancel(t.Context(), "sub_1", "key-1")
	e := asError(t, err)
	assert.Equal(t, 0, e.Status)
	assert.NotNil(t, e.Err)
	assert.True(t, e.MayHaveLanded())
	assert.False(t, e.Permanent())
	assert.Equal(t, 1, s.Cancellations("sub_1"), "the cancel landed")
	assert.Equal(t, 1, s.CancelCalls("sub_1"), "one request per call, no hidden retry")

	// Retrying with the same key is safe: the service answers what the
	// lost call did.
	got, err := c.Cancel(t.Context(), "sub_1", "key-1")
	require.NoError(t, err)
	assert.False(t, got.AlreadyCancelled, "the first call with this key cancelled it")
	assert.False(t, got.CancelledAt.IsZero())
	assert.Equal(t, 1, s.Cancellations("sub_1"))
	assert.Equal(t, 2, s.CancelCalls("sub_1"))
	assert.Equal(t, 1, s.IdempotentReplays("sub_1"))

	// Without the key (or with another), the conflict still reports the
	// desired end state.
	got, err = c.Cancel(t.Context(), "sub_1", "")
	require.NoError(t, err)
	assert.True(t, got.AlreadyCancelled)
	assert.Equal(t, 1, s.Cancellations("sub_1"))
}

func TestCancelTimeoutMayHaveLanded(t *testing.T) {
	s, c, _ := newEnv(t)
	s.Inject(standin.Fault{Method: http.MethodPost, DelayAfterApply: 300 * time.Millisecond})

	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err := c.Cancel(ctx, "sub_1", "k")
	e := asError(t, err)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.True(t, e.MayHaveLanded())
	assert.Equal(t, 1, s.Cancellations("sub_1"))
}

func TestCancelNotSent(t *testing.T) {
	_, c, _ := newEnv(t)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := c.Cancel(ctx, "sub_1", "k")
	e := asError(t, err)
	assert.ErrorIs(t, err, context.Canceled)
	assert.False(t, e.MayHaveLanded(), "a cancelled context sends nothing")

	// Connection refused: a port nobody listens on any more.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	refused, err := subscriptions.New("http://"+addr, token, nil)
	require.NoError(t, err)
	_, err = refused.Cancel(t.Context(), "sub_1", "k")
	e = asError(t, err)
	assert.Equal(t, 0, e.Status)
	assert.False(t, e.MayHaveLanded())
	assert.False(t, e.Permanent())
	assert.NotContains(t, e.Error(), token)
}

func TestCancelBadToken(t *testing.T) {
	s, _, srv := newEnv(t)
	const wrong = "tok_wrong_secret_456"
	c, err := subscriptions.New(srv.URL, wrong, nil)
	require.NoError(t, err)

	_, err = c.Cancel(t.Context(), "sub_1", "k")
	e := asError(t, err)
	assert.Equal(t, http.StatusUnauthorized, e.Status)
	assert.Equal(t, "unauthorized", e.Code)
	assert.True(t, e.Permanent())
	assert.False(t, e.MayHaveLanded())
	assert.NotContains(t, err.Error(), wrong)
	assert.NotContains(t, err.Error(), token)
	assert.Equal(t, 0, s.Cancellations("sub_1"))
}

func TestErrorNeverLeaksToken(t *testing.T) {
	// A misbehaving proxy that echoes the request headers in its body.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "bad gateway, you sent "+r.Header.Get("Authorization"), http.StatusBadGateway)
	}))
	t.Cleanup(srv.Close)
	c, err := subscriptions.New(srv.URL, token, nil)
	require.NoError(t, err)

	_, err = c.Cancel(t.Context(), "sub_1", "k")
	e := asError(t, err)
	assert.Equal(t, http.StatusBadGateway, e.Status)
	assert.Empty(t, e.Code, "not the service's error format")
	assert.Contains(t, e.Message, "bad gateway")
	assert.NotContains(t, e.Message, token)
	assert.NotContains(t, e.Error(), token)
	assert.True(t, e.MayHaveLanded())
}

func TestCancelEscapesID(t *testing.T) {
	s, c, _ := newEnv(t)
	s.AddSubscription("team/7?x#y", "cus_3")

	_, err := c.Cancel(t.Context(), "team/7?x#y", "k")
	require.NoError(t, err)
	assert.Equal(t, 1, s.Cancellations("team/7?x#y"))
	assert.Equal(t, 1, s.Requests(http.MethodPost, "/v1/subscriptions/team/7?x#y/cancel"))

	for _, id := range []string{"", ".", ".."} {
		_, err := c.Cancel(t.Context(), id, "k")
		e := asError(t, err)
		assert.True(t, e.Permanent(), "%q", id)
		assert.False(t, e.MayHaveLanded(), "%q", id)
	}
}

func TestNewWithPathPrefix(t *testing.T) {
	s := standin.NewSubscriptions(token)
	s.AddSubscription("sub_1", "cus_1")
	mux := http.NewServeMux()
	mux.Handle("/subs/", http.StripPrefix("/subs", s))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)

	for _, base := range []string{srv.URL + "/subs", srv.URL + "/subs/"} {
		c, err := subscriptions.New(base, token, nil)
		require.NoError(t, err)
		_, err = c.Cancel(t.Context(), "sub_1", "k")
		require.NoError(t, err, base)
	}
	assert.Equal(t, 1, s.Cancellations("sub_1"))
	assert.Equal(t, 2, s.CancelCalls("sub_1"))
}

func TestNewValidates(t *testing.T) {
	for _, tc := range []struct{ url, token string }{
		{"", token},
		{"subs.internal", token},
		{"ftp://subs.internal", token},
		{"http://", token},
		{"http://user:pw@subs.internal", token},
		{"http://subs.internal?x=1", token},
		{"http://subs.internal", ""},
		{"http://%zz", token},
	} {
		_, err := subscriptions.New(tc.url, tc.token, nil)
		assert.Error(t, err, "%q", tc.url)
		if err != nil {
			assert.False(t, strings.Contains(err.Error(), "pw"), "password in %v", err)
		}
	}
	_, err := subscriptions.New("https://subs.internal", token, nil)
	assert.NoError(t, err)
}

func TestErrorUnwrap(t *testing.T) {
	e := &subscriptions.Error{Err: context.DeadlineExceeded, Message: "no response"}
	assert.True(t, errors.Is(e, context.DeadlineExceeded))
	assert.Equal(t, "subscriptions: no response: context deadline exceeded", e.Error())

	e = &subscriptions.Error{Status: 429, Code: "rate_limited", Message: "slow down", RetryAfter: 2 * time.Second}
	assert.Equal(t, "subscriptions: HTTP 429 rate_limited: slow down (retry after 2s)", e.Error())
	assert.Equal(t, 2*time.Second, e.RetryAfterDelay())
}
