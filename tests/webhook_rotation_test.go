package tests

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow/internal/api"
	"github.com/supportflow/supportflow/internal/standin"
	"github.com/supportflow/supportflow/internal/telemetry"
)

// A signing-secret rotation is not an outage: while the API holds the new
// secret and the previous one, deliveries signed with either are taken
// (the old webhook and the new one deliver the same events under the same
// IDs, so the second is a duplicate), a third secret is still refused, and
// once the previous secret is dropped its deliveries are refused again.
// The deliveries metric says which secret verified each delivery, so an
// operator sees when nothing signs with the old one any more.
func TestWebhook_SecretRotation(t *testing.T) {
	t.Parallel()
	const oldSecret, newSecret = "old-webhook-signing-secret", "new-webhook-signing-secret"
	s := newStack(t)
	tel, err := telemetry.New(ctxT(t), telemetry.Config{ServiceName: "supportflow-api-test"})
	require.NoError(t, err)
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	rotating := s.apiWith(func(c *api.Config) {
		c.WebhookSecret, c.PreviousWebhookSecret, c.Metrics = newSecret, oldSecret, tel.Metrics()
	})
	require.NoError(t, tel.ObserveIngestion(s.mirror.Health))

	signedWith := func(secret string, body []byte) http.Header {
		stamp := time.Now().UTC().Format(time.RFC3339)
		return http.Header{api.SignatureHeader: {api.Sign(secret, stamp, body)}, api.SignatureTimestampHeader: {stamp},
			"Content-Type": {"application/json"}}
	}

	// The old webhook, still signing with the old secret, delivers a real
	// ticket change: it is taken and mirrored.
	s.zd.SetWebhook(standin.WebhookConfig{URL: rotating.url + "/webhooks/zendesk", Secret: oldSecret})
	first := s.zd.AddTicket(standin.Ticket{Subject: "rotation", Status: "open", RequesterID: 7001})
	require.NoError(t, s.zd.WaitWebhooks(ctxT(t)))
	st := s.zd.WebhookStats()
	require.Equal(t, 0, st.Lost, "no delivery of the old webhook was lost: %+v", st)
	require.Equal(t, st.Events, st.Delivered)
	m, err := s.mirror.GetTicketMirror(ctxT(t), first)
	require.NoError(t, err, "the old webhook's delivery was mirrored")
	assert.Equal(t, "open", m.Status)

	// The same event from both webhooks: the first taken, the second a
	// duplicate; a third secret is refused.
	body := ticketEvent(t, "status_changed", standin.Ticket{ID: first, RequesterID: 7001, Status: "pending", Subject: "rotation"}, nil)
	code, resp := rotating.do("POST", "/webhooks/zendesk", "", body, signedWith(newSecret, body))
	require.Equal(t, http.StatusOK, code, "%s", resp)
	assert.NotContains(t, string(resp), `"duplicate":true`)
	code, resp = rotating.do("POST", "/webhooks/zendesk", "", body, signedWith(oldSecret, body))
	require.Equal(t, http.StatusOK, code, "%s", resp)
	assert.Contains(t, string(resp), `"duplicate":true`, "the old webhook's copy of the same event changes nothing")
	code, _ = rotating.do("POST", "/webhooks/zendesk", "", body, signedWith("some-other-secret", body))
	assert.Equal(t, http.StatusUnauthorized, code, "a secret that is neither is refused")
	m, err = s.mirror.GetTicketMirror(ctxT(t), first)
	require.NoError(t, err)
	assert.Equal(t, "pending", m.Status)

	// The metrics tell the secrets apart.
	scrape := scrapeMetrics(t, tel)
	for _, want := range []string{
		`supportflow_webhook_deliveries_total{answer="accepted",secret="current"} 1`,
		`supportflow_webhook_deliveries_total{answer="duplicate",secret="previous"} 1`,
		`supportflow_webhook_deliveries_total{answer="accepted",secret="previous"}`, // the old webhook's deliveries
		`supportflow_webhook_deliveries_total{answer="unauthorized",secret="none"} 1`,
		"supportflow_relay_backlog ", "supportflow_relay_oldest_seconds ", "supportflow_reconcile_lag_seconds ",
	} {
		assert.True(t, strings.Contains(scrape, want), "the metrics hold %s", want)
	}

	// The rotation ends: the API holds only the new secret, and the old
	// secret is refused.
	rotated := s.apiWith(func(c *api.Config) { c.WebhookSecret = newSecret })
	again := ticketEvent(t, "status_changed", standin.Ticket{ID: first, RequesterID: 7001, Status: "open", Subject: "rotation"}, nil)
	code, _ = rotated.do("POST", "/webhooks/zendesk", "", again, signedWith(oldSecret, again))
	assert.Equal(t, http.StatusUnauthorized, code, "after the rotation the old secret is refused")
	code, resp = rotated.do("POST", "/webhooks/zendesk", "", again, signedWith(newSecret, again))
	assert.Equal(t, http.StatusOK, code, "%s", resp)
}

// scrapeMetrics reads the Prometheus exposition tel serves.
func scrapeMetrics(t *testing.T, tel *telemetry.Telemetry) string {
	t.Helper()
	srv := httptest.NewServer(tel.Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return strings.TrimSpace(string(b))
}
