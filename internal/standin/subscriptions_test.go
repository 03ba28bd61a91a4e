package standin

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const testSubsToken = "subs-secret-token"

// subsCall sends one raw request to the subscription stand-in and decodes
// the JSON answer.
func subsCall(t *testing.T, srv *httptest.Server, method, path, token, idemKey string) (int, map[string]any, http.Header) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, nil)
	require.NoError(t, err)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if idemKey != "" {
		req.Header.Set("Idempotency-Key", idemKey)
	}
	resp, err := srv.Client().Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	return resp.StatusCode, body, resp.Header
}

func newSubsEnv(t *testing.T) (*Subscriptions, *httptest.Server) {
	t.Helper()
	s := NewSubscriptions(testSubsToken)
	s.AddSubscription("sub_1", "cus_1")
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return s, srv
}

func TestSubscriptionsCancelAndShow(t *testing.T) {
	s, srv := newSubsEnv(t)

	status, body, _ := subsCall(t, srv, http.MethodGet, "/v1/subscriptions/sub_1", testSubsToken, "")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, map[string]any{"id": "sub_1", "customer_id": "cus_1", "status": "active"}, body)

	status, body, _ = subsCall(t, srv, http.MethodPost, "/v1/subscriptions/sub_1/cancel", testSubsToken, "key-1")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "sub_1", body["id"])
	assert.Equal(t, "cancelled", body["status"])
	cancelledAt, err := time.Parse(time.RFC3339, body["cancelled_at"].(string))
	require.NoError(t, err)
	assert.WithinDuration(t, time.Now(), cancelledAt, time.Minute)

	// Another key conflicts.
	status, body, _ = subsCall(t, srv, http.MethodPost, "/v1/subscriptions/sub_1/cancel", testSubsToken, "key-2")
	assert.Equal(t, http.StatusConflict, status)
	assert.Equal(t, "already_cancelled", body["error"])
	assert.NotEmpty(t, body["message"])
	assert.NotEmpty(t, body["cancelled_at"])

	status, body, _ = subsCall(t, srv, http.MethodGet, "/v1/subscriptions/sub_1", testSubsToken, "")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "cancelled", body["status"])
	assert.NotEmpty(t, body["cancelled_at"])

	assert.Equal(t, SubscriptionCancelled, s.Status("sub_1"))
	assert.Equal(t, 1, s.Cancellations("sub_1"))
	assert.Equal(t, 2, s.CancelCalls("sub_1"))
	assert.Equal(t, []string{"key-1", "key-2"}, s.IdempotencyKeys("sub_1"))
	assert.Equal(t, 2, s.Requests(http.MethodGet, "/v1/subscriptions/"))
	assert.Equal(t, 4, s.Requests("", "/v1/"))
}

func TestSubscriptionsErrors(t *testing.T) {
	s, srv := newSubsEnv(t)

	status, body, _ := subsCall(t, srv, http.MethodPost, "/v1/subscriptions/nope/cancel", testSubsToken, "")
	assert.Equal(t, http.StatusNotFound, status)
	assert.Equal(t, "not_found", body["error"])
	assert.Equal(t, 1, s.CancelCalls("nope"))

	status, _, _ = subsCall(t, srv, http.MethodGet, "/v1/subscriptions/nope", testSubsToken, "")
	assert.Equal(t, http.StatusNotFound, status)

	for _, token := range []string{"", "wrong"} {
		status, body, _ = subsCall(t, srv, http.MethodPost, "/v1/subscriptions/sub_1/cancel", token, "")
		assert.Equal(t, http.StatusUnauthorized, status)
		assert.Equal(t, "unauthorized", body["error"])
		assert.NotEmpty(t, body["message"])
	}

	status, body, _ = subsCall(t, srv, http.MethodDelete, "/v1/subscriptions/sub_1", testSubsToken, "")
	assert.Equal(t, http.StatusNotFound, status)
	assert.Equal(t, "not_found", body["error"])

	assert.Equal(t, SubscriptionActive, s.Status("sub_1"))
	assert.Equal(t, 0, s.Cancellations("sub_1"))
	assert.Equal(t, 2, s.CancelCalls("sub_1"), "unauthorized calls count too")
	assert.Empty(t, s.Status("nope"))
}

func TestSubscriptionsFaults(t *testing.T) {
	s, srv := newSubsEnv(t)
	s.Inject(Fault{Method: http.MethodPost, Path: "/v1/subscriptions/*", Status: http.StatusTooManyRequests, RetryAfter: 2 * time.Second})
	s.Inject(Fault{Method: http.MethodPost, Status: http.StatusInternalServerError})

	status, body, hdr := subsCall(t, srv, http.MethodPost, "/v1/subscriptions/sub_1/cancel", testSubsToken, "")
	assert.Equal(t, http.StatusTooManyRequests, status)
	assert.Equal(t, "rate_limited", body["error"])
	assert.Equal(t, "2", hdr.Get("Retry-After"))

	status, body, _ = subsCall(t, srv, http.MethodPost, "/v1/subscriptions/sub_1/cancel", testSubsToken, "")
	assert.Equal(t, http.StatusInternalServerError, status)
	assert.Equal(t, "internal_error", body["error"])

	assert.Equal(t, 0, s.Cancellations("sub_1"), "faulted statuses apply nothing")
	assert.Equal(t, 2, s.CancelCalls("sub_1"))

	status, _, _ = subsCall(t, srv, http.MethodPost, "/v1/subscriptions/sub_1/cancel", testSubsToken, "")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, 1, s.Cancellations("sub_1"))
}

func TestSubscriptionsEscapedID(t *testing.T) {
	s, srv := newSubsEnv(t)
	s.AddSubscription("team/42 a", "cus_2")

	status, body, _ := subsCall(t, srv, http.MethodPost, "/v1/subscriptions/team%2F42%20a/cancel", testSubsToken, "")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, "team/42 a", body["id"])
	assert.Equal(t, 1, s.Cancellations("team/42 a"))
	assert.Equal(t, 1, s.CancelCalls("team/42 a"))
}

func TestSubscriptionsAddResets(t *testing.T) {
	s, srv := newSubsEnv(t)
	status, _, _ := subsCall(t, srv, http.MethodPost, "/v1/subscriptions/sub_1/cancel", testSubsToken, "")
	require.Equal(t, http.StatusOK, status)

	s.AddSubscription("sub_1", "cus_1")
	assert.Equal(t, SubscriptionActive, s.Status("sub_1"))
	assert.Equal(t, 0, s.Cancellations("sub_1"))
	assert.Equal(t, 0, s.CancelCalls("sub_1"))
}

func TestCeilSeconds(t *testing.T) {
	for d, want := range map[time.Duration]int64{
		time.Nanosecond:         1,
		time.Second:             1,
		1500 * time.Millisecond: 2,
		30 * time.Second:        30,
	} {
		assert.Equal(t, want, ceilSeconds(d), d.String())
	}
}

func TestFaultMatchesPath(t *testing.T) {
	req := httptest.NewRequest(http.MethodPut, "/api/v2/tickets/12.json", strings.NewReader(""))
	for _, tc := range []struct {
		fault Fault
		want  bool
	}{
		{Fault{}, true},
		{Fault{Method: "put"}, true},
		{Fault{Method: http.MethodGet}, false},
		{Fault{Path: "/api/v2/tickets/12.json"}, true},
		{Fault{Path: "/api/v2/tickets/1"}, false},
		{Fault{Path: "/api/v2/tickets/1*"}, true},
		{Fault{Path: "/api/v2/users/*"}, false},
		{Fault{Path: "*"}, true},
	} {
		assert.Equal(t, tc.want, tc.fault.matches(req), "%+v", tc.fault)
	}
}

// A cancel whose Idempotency-Key the subscription's cancel already
// answered gets that answer again, status and body, with no second effect;
// another key, or none, is handled afresh; a key is the subscription's own;
// a request refused before the service handled it (an injected 503) leaves
// its key unused. The counters stay truthful: every call and key counted,
// one cancellation, the repeats counted as replays.
func TestSubscriptionsCancelDeduplicatesOnIdempotencyKey(t *testing.T) {
	s, srv := newSubsEnv(t)
	s.AddSubscription("sub_2", "cus_1")
	raw := func(path, key string) (int, string) {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, srv.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+testSubsToken)
		if key != "" {
			req.Header.Set("Idempotency-Key", key)
		}
		resp, err := srv.Client().Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var b strings.Builder
		_, err = io.Copy(&b, resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, b.String()
	}

	s.Inject(Fault{Method: http.MethodPost, Path: "/v1/subscriptions/sub_1/cancel", Status: http.StatusServiceUnavailable})
	status, _ := raw("/v1/subscriptions/sub_1/cancel", "k-1")
	require.Equal(t, http.StatusServiceUnavailable, status)

	status, first := raw("/v1/subscriptions/sub_1/cancel", "k-1")
	require.Equal(t, http.StatusOK, status, "the faulted request changed nothing, so its key was unused")
	status, again := raw("/v1/subscriptions/sub_1/cancel", "k-1")
	assert.Equal(t, http.StatusOK, status, "the first answer's status, not a conflict")
	assert.Equal(t, first, again, "and its body, byte for byte")

	status, other := raw("/v1/subscriptions/sub_1/cancel", "k-2")
	assert.Equal(t, http.StatusConflict, status, "another key is a new request")
	assert.Contains(t, other, "already_cancelled")
	status, _ = raw("/v1/subscriptions/sub_1/cancel", "")
	assert.Equal(t, http.StatusConflict, status, "no key: as before")
	status, conflictAgain := raw("/v1/subscriptions/sub_1/cancel", "k-2")
	assert.Equal(t, http.StatusConflict, status, "a stored conflict is answered again too")
	assert.Equal(t, other, conflictAgain)

	status, _ = raw("/v1/subscriptions/sub_2/cancel", "k-1")
	assert.Equal(t, http.StatusOK, status, "a key belongs to its subscription")

	assert.Equal(t, 1, s.Cancellations("sub_1"))
	assert.Equal(t, 6, s.CancelCalls("sub_1"), "every request counted, the faulted one too")
	assert.Equal(t, []string{"k-1", "k-1", "k-1", "k-2", "k-2"}, s.IdempotencyKeys("sub_1"))
	assert.Equal(t, 2, s.IdempotentReplays("sub_1"))
	assert.Equal(t, 1, s.Cancellations("sub_2"))
	assert.Equal(t, 0, s.IdempotentReplays("sub_2"))

	s.AddSubscription("sub_1", "cus_1")
	status, _ = raw("/v1/subscriptions/sub_1/cancel", "k-1")
	assert.Equal(t, http.StatusOK, status, "re-seeding forgets the keys")
	assert.Equal(t, 1, s.Cancellations("sub_1"))
}

// A subscription seeded with a plan reports it; AddSubscription's has none.
func TestSubscriptionsPlan(t *testing.T) {
	s, srv := newSubsEnv(t)
	s.AddSubscriptionWithPlan("sub_p", "cus_9", "annual")
	status, body, _ := subsCall(t, srv, http.MethodGet, "/v1/subscriptions/sub_p", testSubsToken, "")
	assert.Equal(t, http.StatusOK, status)
	assert.Equal(t, map[string]any{"id": "sub_p", "customer_id": "cus_9", "plan": "annual", "status": "active"}, body)
}
