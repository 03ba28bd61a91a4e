package standin

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A Zendesk stand-in restored from another's saved state answers every
// read as the first did: the ticket, its comments and its audits (with
// the metadata supportflow finds its own writes by), and counts the same
// posted comments; the next IDs continue past the restored ones.
func TestZendesk_RestoredStateAnswersAsBefore(t *testing.T) {
	z, c, srv := newZendeskEnv(t, nil)
	_, err := putComment(context.Background(), c, testTicketID, "Done: cancelled.", map[string]any{"supportflow_action": "p-1/0", "n": 3})
	require.NoError(t, err)
	saved, err := z.SaveState()
	require.NoError(t, err)

	restored := NewZendesk(testEmail, testZDToken)
	require.NoError(t, restored.RestoreState(saved))
	srv2 := httptest.NewServer(restored)
	t.Cleanup(srv2.Close)
	get := func(base, path string) string {
		req, err := http.NewRequest("GET", base+path, nil)
		require.NoError(t, err)
		req.SetBasicAuth(testEmail+"/token", testZDToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		require.Equal(t, http.StatusOK, resp.StatusCode, "%s", b)
		return string(b)
	}
	for _, path := range []string{
		fmt.Sprintf("/api/v2/tickets/%d.json", testTicketID),
		fmt.Sprintf("/api/v2/tickets/%d/comments.json", testTicketID),
		fmt.Sprintf("/api/v2/tickets/%d/audits.json", testTicketID),
	} {
		// URLs in the answers name the server they came from.
		assert.JSONEq(t, get(srv.URL, path), strings.ReplaceAll(get(srv2.URL, path), srv2.URL, srv.URL), path)
	}
	assert.Equal(t, z.CommentCount(testTicketID), restored.CommentCount(testTicketID))
	assert.Equal(t, []int64{testTicketID}, restored.TicketIDs())
	again, err := restored.SaveState()
	require.NoError(t, err)
	assert.JSONEq(t, string(saved), string(again), "saving the restored state gives the same state")
	assert.Positive(t, restored.AddTicket(Ticket{Subject: "next"}))
	assert.Error(t, restored.RestoreState([]byte(`{"version": 99}`)), "another version is refused")
}

// A restored subscription service remembers each cancellation's answer by
// its Idempotency-Key: a retry after the restart has no second effect.
func TestSubscriptions_RestoredStateKeepsIdempotency(t *testing.T) {
	s := NewSubscriptions("tok")
	s.AddSubscriptionWithPlan("sub-1", "cust-1", "monthly")
	cancel := func(h http.Handler) (int, string) {
		req := httptest.NewRequest("POST", "/v1/subscriptions/sub-1/cancel", nil)
		req.Header.Set("Authorization", "Bearer tok")
		req.Header.Set("Idempotency-Key", "p-1/1")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code, w.Body.String()
	}
	code, body := cancel(s)
	require.Equal(t, http.StatusOK, code, body)
	saved, err := s.SaveState()
	require.NoError(t, err)

	restored := NewSubscriptions("tok")
	require.NoError(t, restored.RestoreState(saved))
	code2, body2 := cancel(restored)
	assert.Equal(t, code, code2)
	assert.Equal(t, body, body2)
	assert.Equal(t, 1, restored.Cancellations("sub-1"))
	assert.Equal(t, 1, restored.IdempotentReplays("sub-1"))
	assert.Equal(t, SubscriptionCancelled, restored.Status("sub-1"))

	bq := NewBigQuery("p")
	bq.AddCustomer(42, BQCustomer{CustomerID: "cust-1", ActiveSubscriptions: []string{"sub-1"}})
	bqSaved, err := bq.SaveState()
	require.NoError(t, err)
	bq2 := NewBigQuery("p")
	require.NoError(t, bq2.RestoreState(bqSaved))
	again, err := bq2.SaveState()
	require.NoError(t, err)
	assert.JSONEq(t, string(bqSaved), string(again))
}
