package standin

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// receiver answers deliveries with a scripted list of statuses (the last
// one repeats) and keeps what arrived.
type receiver struct {
	mu       sync.Mutex
	answers  []func(w http.ResponseWriter)
	bodies   [][]byte
	arrivals []time.Time
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	rc.mu.Lock()
	rc.bodies = append(rc.bodies, body)
	rc.arrivals = append(rc.arrivals, time.Now())
	answer := rc.answers[min(len(rc.bodies), len(rc.answers))-1]
	rc.mu.Unlock()
	// The signature is Zendesk's: base64 HMAC-SHA256 of timestamp+body.
	m := hmac.New(sha256.New, []byte("secret"))
	m.Write([]byte(r.Header.Get("X-Zendesk-Webhook-Signature-Timestamp")))
	m.Write(body)
	if r.Header.Get("X-Zendesk-Webhook-Signature") != base64.StdEncoding.EncodeToString(m.Sum(nil)) ||
		r.Header.Get("Content-Type") != "application/json" {
		w.WriteHeader(http.StatusUnauthorized)
		return
	}
	answer(w)
}

func status(code int, retryAfter string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		if retryAfter != "" {
			w.Header().Set("Retry-After", retryAfter)
		}
		w.WriteHeader(code)
	}
}

func (rc *receiver) count() int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return len(rc.bodies)
}

func deliverOne(t *testing.T, answers ...func(http.ResponseWriter)) (*receiver, WebhookStats) {
	t.Helper()
	rc := &receiver{answers: answers}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	z := NewZendesk("a@b.test", "tok")
	z.SetWebhook(WebhookConfig{URL: srv.URL, Secret: "secret", RetryDelay: 10 * time.Millisecond, Timeout: 200 * time.Millisecond})
	z.AddTicket(Ticket{ID: 7, Subject: "Hi", Description: "Help", RequesterID: 42})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, z.WaitWebhooks(ctx))
	return rc, z.WebhookStats()
}

// Zendesk's retry rules: 409 up to 3 retries, 429/503 only with a
// Retry-After under 60 s, a timeout up to 5 retries, anything else never.
func TestWebhooks_RetryAsZendeskDocuments(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		answers         []func(http.ResponseWriter)
		deliveries      int
		delivered, lost int
	}{
		"200 at once":                      {[]func(http.ResponseWriter){status(200, "")}, 1, 1, 0},
		"409 then 200":                     {[]func(http.ResponseWriter){status(409, ""), status(200, "")}, 2, 1, 0},
		"409 forever: 3 retries":           {[]func(http.ResponseWriter){status(409, "")}, 4, 0, 1},
		"503 with Retry-After 1 then 200":  {[]func(http.ResponseWriter){status(503, "1"), status(200, "")}, 2, 1, 0},
		"429 with Retry-After 1 then 200":  {[]func(http.ResponseWriter){status(429, "1"), status(200, "")}, 2, 1, 0},
		"503 without Retry-After: dropped": {[]func(http.ResponseWriter){status(503, ""), status(200, "")}, 1, 0, 1},
		"503 with Retry-After 60: dropped": {[]func(http.ResponseWriter){status(503, "60"), status(200, "")}, 1, 0, 1},
		"500: dropped":                     {[]func(http.ResponseWriter){status(500, ""), status(200, "")}, 1, 0, 1},
		"timeout then 200": {[]func(http.ResponseWriter){func(w http.ResponseWriter) { time.Sleep(400 * time.Millisecond) },
			status(200, "")}, 2, 1, 0},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rc, st := deliverOne(t, tc.answers...)
			assert.Equal(t, tc.deliveries, rc.count())
			assert.Equal(t, tc.delivered, st.Delivered)
			assert.Equal(t, tc.lost, st.Lost)
		})
	}
	// A Retry-After is waited out before the retry.
	rc, _ := deliverOne(t, status(503, "1"), status(200, ""))
	require.Len(t, rc.arrivals, 2)
	assert.GreaterOrEqual(t, rc.arrivals[1].Sub(rc.arrivals[0]), 900*time.Millisecond)
}

// Every ticket change, our own API writes included, is delivered as the
// documented envelope: string IDs, upper-case status, the actor.
func TestWebhooks_EventsForEveryChange(t *testing.T) {
	t.Parallel()
	rc := &receiver{answers: []func(http.ResponseWriter){status(200, "")}}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	z := NewZendesk("a@b.test", "tok")
	z.SetWebhook(WebhookConfig{URL: srv.URL, Secret: "secret"})
	z.AddTicket(Ticket{ID: 7, Subject: "Hi", Description: "Help", RequesterID: 42, Status: "pending"})
	z.AddComment(7, SeedComment{Body: "again"})
	api := httptest.NewServer(z)
	t.Cleanup(api.Close)
	req, _ := http.NewRequest("PUT", api.URL+"/api/v2/tickets/7.json",
		stringsReader(`{"ticket":{"comment":{"body":"reply","public":true},"status":"pending"}}`))
	req.SetBasicAuth("a@b.test/token", "tok")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	require.NoError(t, z.WaitWebhooks(ctx))

	type env struct {
		Type    string         `json:"type"`
		ID      string         `json:"id"`
		Subject string         `json:"subject"`
		Detail  map[string]any `json:"detail"`
		Event   map[string]any `json:"event"`
	}
	byType := map[string][]env{}
	ids := map[string]bool{}
	rc.mu.Lock()
	for _, b := range rc.bodies {
		var e env
		require.NoError(t, json.Unmarshal(b, &e))
		byType[e.Type] = append(byType[e.Type], e)
		ids[e.ID] = true
	}
	n := len(rc.bodies)
	rc.mu.Unlock()
	assert.Len(t, ids, n, "every event has its own id")
	require.Len(t, byType["zen:event-type:ticket.created"], 1)
	created := byType["zen:event-type:ticket.created"][0]
	assert.Equal(t, "zen:ticket:7", created.Subject)
	assert.Equal(t, "7", created.Detail["id"])
	assert.Equal(t, "42", created.Detail["actor_id"])
	assert.Equal(t, "PENDING", created.Detail["status"])
	comments := byType["zen:event-type:ticket.comment_added"]
	require.Len(t, comments, 2, "the customer's comment and our reply")
	actors := map[any]bool{}
	for _, c := range comments {
		actors[c.Detail["actor_id"]] = true
	}
	assert.Equal(t, map[any]bool{"42": true, strconv.FormatInt(ZendeskAgentID, 10): true}, actors)
	// The customer's reply reopened the ticket; our update set it pending.
	require.Len(t, byType["zen:event-type:ticket.status_changed"], 2)
}

// The ticket export pages with cursors and resumes after its last row; the
// event export pages by end_time; both leave out the lag, refuse a
// start_time inside it, and share a rate limit answered 429 + Retry-After.
func TestExports_CursorsLagAndRateLimit(t *testing.T) {
	t.Parallel()
	z := NewZendesk("a@b.test", "tok")
	z.SetExports(ExportConfig{Lag: 300 * time.Millisecond, Limit: 5, Window: time.Minute})
	api := httptest.NewServer(z)
	t.Cleanup(api.Close)
	get := func(path string) (int, map[string]any, http.Header) {
		req, _ := http.NewRequest("GET", api.URL+path, nil)
		req.SetBasicAuth("a@b.test/token", "tok")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&m)
		return resp.StatusCode, m, resp.Header
	}
	start := time.Now().Add(-time.Minute).Unix()
	z.AddTicket(Ticket{ID: 1, RequesterID: 5})
	z.AddTicket(Ticket{ID: 2, RequesterID: 6})
	code, page, _ := get("/api/v2/incremental/tickets/cursor.json?start_time=" + strconv.FormatInt(start, 10))
	require.Equal(t, 200, code)
	assert.Empty(t, page["tickets"], "changes inside the lag are left out")
	assert.Equal(t, true, page["end_of_stream"])

	time.Sleep(400 * time.Millisecond)
	code, page, _ = get("/api/v2/incremental/tickets/cursor.json?start_time=" + strconv.FormatInt(start, 10) + "&per_page=1")
	require.Equal(t, 200, code)
	require.Len(t, page["tickets"], 1)
	assert.Equal(t, false, page["end_of_stream"])
	code, page2, _ := get("/api/v2/incremental/tickets/cursor.json?cursor=" + page["after_cursor"].(string))
	require.Equal(t, 200, code)
	require.Len(t, page2["tickets"], 1)
	assert.NotEqual(t, page["tickets"].([]any)[0].(map[string]any)["id"], page2["tickets"].([]any)[0].(map[string]any)["id"])
	assert.Equal(t, true, page2["end_of_stream"])

	code, events, _ := get("/api/v2/incremental/ticket_events.json?include=comment_events&start_time=" + strconv.FormatInt(start, 10))
	require.Equal(t, 200, code)
	rows := events["ticket_events"].([]any)
	require.Len(t, rows, 2)
	child := rows[0].(map[string]any)["child_events"].([]any)[0].(map[string]any)
	assert.Equal(t, "Comment", child["event_type"])
	assert.Equal(t, true, child["public"])
	assert.NotEmpty(t, child["created_at"])

	code, _, _ = get("/api/v2/incremental/ticket_events.json?start_time=" + strconv.FormatInt(time.Now().Unix()+1, 10))
	assert.Equal(t, http.StatusUnprocessableEntity, code, "a start_time inside the lag is refused")
	code, _, h := get("/api/v2/incremental/ticket_events.json?start_time=" + strconv.FormatInt(start, 10))
	assert.Equal(t, http.StatusTooManyRequests, code, "the sixth export request in a window of five")
	assert.NotEmpty(t, h.Get("Retry-After"))
	requests, throttled := z.ExportStats()
	assert.Equal(t, 6, requests)
	assert.Equal(t, 1, throttled)
}

func stringsReader(s string) io.Reader { return strings.NewReader(s) }

// The people and shapes the ingestion rules need, as documented: a CC'd
// end user's comment (is_staff false, not the requester), a human
// agent's (is_staff true), a change by no user (actor_id "-1") with the
// envelope's sub-second time, the CCs event, and a messaging follow-up
// delivered only as messaging_ticket.message_added. A held delivery is
// overtaken by a later one.
func TestWebhooks_PeopleMessagingAndOrder(t *testing.T) {
	t.Parallel()
	rc := &receiver{answers: []func(http.ResponseWriter){status(200, "")}}
	srv := httptest.NewServer(rc)
	t.Cleanup(srv.Close)
	z := NewZendesk("a@b.test", "tok")
	z.SetWebhook(WebhookConfig{URL: srv.URL, Secret: "secret"})
	z.AddUser(User{ID: 77, Name: "Colleague"})
	z.AddUser(User{ID: 88, Name: "Human Agent", Role: RoleAgent})
	z.AddTicket(Ticket{ID: 7, Subject: "Hi", Description: "Help", RequesterID: 42, Status: "open"})
	z.AddCCs(7, 77)
	z.AddComment(7, SeedComment{Body: "On it", AuthorID: 88})
	z.AddComment(7, SeedComment{Body: "Me too", AuthorID: 77})
	sec := time.Now().Truncate(time.Second)
	z.InjectWebhookFault(WebhookFault{Type: "status_changed", Delay: 500 * time.Millisecond})
	z.ChangeStatus(7, StatusChange{Status: "pending", ActorID: 88, At: sec.Add(100 * time.Millisecond)})
	z.ChangeStatus(7, StatusChange{Status: "open", At: sec.Add(600 * time.Millisecond)})
	z.AddMessage(7, Message{Body: "Any news?"})
	z.AddMessage(7, Message{Body: "An agent will answer", ActorType: MessagingSystem})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, z.WaitWebhooks(ctx))

	type env struct {
		Type   string         `json:"type"`
		Time   string         `json:"time"`
		Detail map[string]any `json:"detail"`
		Event  map[string]any `json:"event"`
	}
	var got []env
	rc.mu.Lock()
	for _, b := range rc.bodies {
		var e env
		require.NoError(t, json.Unmarshal(b, &e))
		got = append(got, e)
	}
	rc.mu.Unlock()
	byType := map[string][]env{}
	for _, e := range got {
		byType[e.Type] = append(byType[e.Type], e)
	}
	ccs := byType["zen:event-type:ticket.email_ccs_changed"]
	require.Len(t, ccs, 1)
	assert.Equal(t, []any{"77"}, ccs[0].Event["users_added"])
	assert.Equal(t, []int64{77}, z.CCs(7))

	staff := map[string]any{}
	for _, e := range byType["zen:event-type:ticket.comment_added"] {
		author := e.Event["comment"].(map[string]any)["author"].(map[string]any)
		staff[author["id"].(string)] = author["is_staff"]
	}
	assert.Equal(t, map[string]any{"88": true, "77": false}, staff, "is_staff: the agent yes, the CC'd end user no")

	statuses := byType["zen:event-type:ticket.status_changed"]
	require.Len(t, statuses, 2)
	assert.Equal(t, "OPEN", statuses[0].Detail["status"], "the held older delivery was overtaken by the newer")
	assert.Equal(t, "-1", statuses[0].Detail["actor_id"], "a trigger's change: actor -1")
	assert.Equal(t, "PENDING", statuses[1].Detail["status"])
	assert.Equal(t, "88", statuses[1].Detail["actor_id"])
	t0, err := time.Parse(time.RFC3339Nano, statuses[0].Time)
	require.NoError(t, err)
	t1, err := time.Parse(time.RFC3339Nano, statuses[1].Time)
	require.NoError(t, err)
	assert.True(t, t1.Before(t0), "the envelope times say which came first")
	assert.Equal(t, sec.Unix(), t0.Unix())
	assert.Equal(t, sec.Unix(), t1.Unix(), "one second")
	assert.NotZero(t, t0.Nanosecond(), "sub-second precision")

	msgs := byType["zen:event-type:messaging_ticket.message_added"]
	require.Len(t, msgs, 2)
	types := map[string]string{}
	for _, m := range msgs {
		assert.Equal(t, map[string]any{"id": "7"}, m.Detail, "a messaging event's detail is the ticket's id")
		a := m.Event["actor"].(map[string]any)
		types[a["type"].(string)] = a["id"].(string)
		assert.NotContains(t, m.Event, "meta")
	}
	assert.Equal(t, map[string]string{"end_user": "42", "system": "zd:answerBot"}, types)
	// The messages are the ticket's comments too; no ticket.* event came of them.
	assert.Len(t, byType["zen:event-type:ticket.comment_added"], 2)
	zt, ok := z.Ticket(7)
	require.True(t, ok)
	assert.Equal(t, "open", zt.Status)
}
