package standin

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// This file makes the Zendesk stand-in deliver ticket event webhooks and
// serve the incremental exports, as Zendesk documents them:
//
//   - Every ticket change (a seeded ticket or comment, and every update
//     through the API, supportflow's own included) becomes one event per
//     change (ticket.created, ticket.comment_added, ticket.status_changed,
//     ticket.tags_changed) in the documented envelope, detail IDs as
//     strings and statuses upper case, signed base64(HMAC-SHA256(secret,
//     timestamp+body)) and POSTed to the configured URL.
//     https://developer.zendesk.com/api-reference/webhooks/event-types/ticket-events
//     https://developer.zendesk.com/documentation/webhooks/verifying/
//   - Deliveries are concurrent and unordered. An answer that does not
//     come within 12 s is a timeout, retried up to 5 times; a 409 is
//     retried up to 3 times; a 429 or 503 is retried (up to 3 times) only
//     with a Retry-After under 60 s, after it; anything else, or a refused
//     connection, is not retried and the event is lost.
//     https://developer.zendesk.com/documentation/webhooks/creating-and-monitoring-webhooks
//   - GET /api/v2/incremental/tickets/cursor.json (start_time, then cursor),
//     GET /api/v2/incremental/ticket_events.json (start_time, end_time,
//     include=comment_events) and GET /api/v2/users/me.json. The exports
//     leave out the most recent minute, refuse a start_time inside it
//     (422), and share a limit of 10 requests a minute (429 with
//     Retry-After).
//     https://developer.zendesk.com/api-reference/ticketing/ticket-management/incremental_exports/

// WebhookConfig points the stand-in's event webhooks at a receiver.
type WebhookConfig struct {
	// URL receives every event; empty stops deliveries.
	URL string
	// Secret signs each delivery.
	Secret string
	// Timeout is how long a delivery waits for its answer; 0 means
	// Zendesk's 12 s.
	Timeout time.Duration
	// RetryDelay is the wait before retrying a 409 or a timeout (Zendesk
	// does not document it); 0 means 1 s. A Retry-After is always honoured
	// as given.
	RetryDelay time.Duration
	// DropRate is the share of events (0-1) never delivered, drawn from a
	// generator seeded with Seed, so a test's losses repeat.
	DropRate float64
	Seed     uint64
	// AccountID is the envelope's account_id; 0 means 1.
	AccountID int64
}

// WebhookFault misdelivers matching events. A fault applies to Times
// events (0 means 1, negative forever) whose type ends with Type ("" any).
type WebhookFault struct {
	Type  string
	Times int
	// Drop never delivers the event.
	Drop bool
	// Duplicate delivers the event twice (two deliveries, the same id).
	Duplicate bool
	// Delay holds the delivery back, so later events overtake it.
	Delay time.Duration
	// LoseAnswer delivers the event and then treats the answer as lost (a
	// timeout), so Zendesk retries a delivery the receiver already took.
	LoseAnswer bool
}

// WebhookStats counts deliveries.
type WebhookStats struct {
	// Events is how many events were generated.
	Events int
	// Attempts counts POSTs (first deliveries and retries).
	Attempts int
	// Delivered counts events answered 2xx at least once.
	Delivered int
	// Lost counts events that were dropped or whose retries ran out.
	Lost int
	// ByStatus counts answers by HTTP status (0: no answer).
	ByStatus map[int]int
}

type webhooks struct {
	mu       sync.Mutex
	cfg      WebhookConfig
	rng      *mrand.Rand
	faults   faultQueue[WebhookFault]
	stats    WebhookStats
	inflight sync.WaitGroup
}

// SetWebhook starts (or, with an empty URL, stops) event deliveries for
// every later ticket change.
func (z *Zendesk) SetWebhook(cfg WebhookConfig) {
	z.hooks.mu.Lock()
	defer z.hooks.mu.Unlock()
	if cfg.Timeout == 0 {
		cfg.Timeout = 12 * time.Second
	}
	if cfg.RetryDelay == 0 {
		cfg.RetryDelay = time.Second
	}
	if cfg.AccountID == 0 {
		cfg.AccountID = 1
	}
	z.hooks.cfg = cfg
	z.hooks.rng = mrand.New(mrand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15))
}

// webhookClient is the HTTP client of every delivery (never replaced, so
// a delivery in flight is safe from SetWebhook).
var webhookClient = &http.Client{}

// InjectWebhookFault adds a delivery fault.
func (z *Zendesk) InjectWebhookFault(f WebhookFault) { z.hooks.faults.inject(f, f.Times) }

// WebhookStats returns the delivery counters.
func (z *Zendesk) WebhookStats() WebhookStats {
	z.hooks.mu.Lock()
	defer z.hooks.mu.Unlock()
	s := z.hooks.stats
	s.ByStatus = make(map[int]int, len(z.hooks.stats.ByStatus))
	for k, v := range z.hooks.stats.ByStatus {
		s.ByStatus[k] = v
	}
	return s
}

// WaitWebhooks blocks until no delivery is in flight or ctx ends.
func (z *Zendesk) WaitWebhooks(ctx context.Context) error {
	done := make(chan struct{})
	go func() { z.hooks.inflight.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// webhookEvent is one event's envelope.
type webhookEvent struct {
	AccountID int64          `json:"account_id"`
	Detail    map[string]any `json:"detail"`
	Event     map[string]any `json:"event"`
	ID        string         `json:"id"`
	Subject   string         `json:"subject"`
	Time      string         `json:"time"`
	Type      string         `json:"type"`
	Version   string         `json:"zendesk_event_version"`
}

// ticketDetail renders a ticket as ticket events do: IDs as strings,
// status upper case, whole-second times. z.mu must be held.
func ticketDetail(zt *zTicket, actor int64) map[string]any {
	id := func(v int64) any {
		if v == 0 {
			return nil
		}
		return strconv.FormatInt(v, 10)
	}
	return map[string]any{
		"actor_id": id(actor), "assignee_id": nil, "brand_id": "360000000001",
		"created_at": zendeskTime(zt.createdAt), "custom_status": nil, "description": zt.Description,
		"external_id": nil, "form_id": nil, "group_id": nil, "id": strconv.FormatInt(zt.ID, 10),
		"is_public": true, "organization_id": nil, "priority": nil, "requester_id": id(zt.RequesterID),
		"status": strings.ToUpper(zt.Status), "subject": zt.Subject, "submitter_id": id(zt.RequesterID),
		"tags": nonNil(slices.Clone(zt.Tags)), "type": nil, "updated_at": zendeskTime(zt.updatedAt),
		"via": map[string]any{"channel": "web_service"},
	}
}

// change is one event to emit for a ticket update.
type change struct {
	typ   string
	event map[string]any
}

// emit queues the events of one update for delivery. z.mu must be held;
// the deliveries run on their own goroutines.
func (z *Zendesk) emit(zt *zTicket, actor int64, sequence int64, changes []change) {
	z.hooks.mu.Lock()
	cfg := z.hooks.cfg
	z.hooks.mu.Unlock()
	if cfg.URL == "" || len(changes) == 0 {
		return
	}
	detail := ticketDetail(zt, actor)
	now := time.Now().UTC()
	for i, c := range changes {
		ev := map[string]any{}
		for k, v := range c.event {
			ev[k] = v
		}
		ev["meta"] = map[string]any{"sequence": map[string]any{"id": strconv.FormatInt(sequence, 10), "position": i + 1}}
		body, err := json.Marshal(webhookEvent{
			AccountID: cfg.AccountID, Detail: detail, Event: ev, ID: newUUID(),
			Subject: "zen:ticket:" + strconv.FormatInt(zt.ID, 10), Time: now.Format(time.RFC3339Nano),
			Type: "zen:event-type:ticket." + c.typ, Version: "2022-11-06",
		})
		if err != nil {
			panic(err) // only maps of JSON values: a bug
		}
		z.deliver(cfg, c.typ, body)
	}
}

// deliver sends one event under its fault, on its own goroutine.
func (z *Zendesk) deliver(cfg WebhookConfig, typ string, body []byte) {
	h := &z.hooks
	f := h.faults.take(func(f *WebhookFault) bool { return strings.HasSuffix(typ, f.Type) })
	h.mu.Lock()
	h.stats.Events++
	drop := h.rng.Float64() < cfg.DropRate
	h.mu.Unlock()
	if drop || (f != nil && f.Drop) {
		h.mu.Lock()
		h.stats.Lost++
		h.mu.Unlock()
		return
	}
	copies := 1
	if f != nil && f.Duplicate {
		copies = 2
	}
	for range copies {
		h.inflight.Add(1)
		go func() {
			defer h.inflight.Done()
			if f != nil && f.Delay > 0 {
				time.Sleep(f.Delay)
			}
			z.deliverWithRetries(cfg, body, f != nil && f.LoseAnswer)
		}()
	}
}

// deliverWithRetries applies Zendesk's documented retry rules.
func (z *Zendesk) deliverWithRetries(cfg WebhookConfig, body []byte, loseFirstAnswer bool) {
	h := &z.hooks
	timeouts, conflicts, throttles := 0, 0, 0
	for {
		status, retryAfter := z.post(cfg, body)
		if loseFirstAnswer && status != 0 {
			loseFirstAnswer = false
			status = 0 // the answer never reached Zendesk: a timeout
		}
		h.mu.Lock()
		h.stats.Attempts++
		if h.stats.ByStatus == nil {
			h.stats.ByStatus = map[int]int{}
		}
		h.stats.ByStatus[status]++
		h.mu.Unlock()
		var wait time.Duration
		switch {
		case status >= 200 && status < 300:
			h.mu.Lock()
			h.stats.Delivered++
			h.mu.Unlock()
			return
		case status == -1: // refused or reset: not retried
		case status == 0 && timeouts < 5:
			timeouts++
			wait = cfg.RetryDelay
		case status == http.StatusConflict && conflicts < 3:
			conflicts++
			wait = cfg.RetryDelay
		case (status == http.StatusTooManyRequests || status == http.StatusServiceUnavailable) &&
			retryAfter > 0 && retryAfter < time.Minute && throttles < 3:
			throttles++
			wait = retryAfter
		}
		if wait == 0 {
			h.mu.Lock()
			h.stats.Lost++
			h.mu.Unlock()
			return
		}
		time.Sleep(wait)
	}
}

// post sends one delivery: the status, or 0 for a timeout and -1 for a
// connection that failed otherwise, and the answer's Retry-After.
func (z *Zendesk) post(cfg WebhookConfig, body []byte) (int, time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, cfg.URL, bytes.NewReader(body))
	if err != nil {
		return -1, 0
	}
	ts := time.Now().UTC().Format(time.RFC3339)
	m := hmac.New(sha256.New, []byte(cfg.Secret))
	m.Write([]byte(ts))
	m.Write(body)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "Zendesk Webhook")
	req.Header.Set("X-Zendesk-Account-Id", strconv.FormatInt(cfg.AccountID, 10))
	req.Header.Set("X-Zendesk-Webhook-Id", "01STANDINWEBHOOK")
	req.Header.Set("X-Zendesk-Webhook-Invocation-Id", strconv.FormatInt(time.Now().UnixNano(), 10))
	req.Header.Set("X-Zendesk-Webhook-Signature", base64.StdEncoding.EncodeToString(m.Sum(nil)))
	req.Header.Set("X-Zendesk-Webhook-Signature-Timestamp", ts)
	resp, err := webhookClient.Do(req)
	if err != nil {
		if errors.Is(err, context.DeadlineExceeded) || ctx.Err() != nil {
			return 0, 0
		}
		return -1, 0
	}
	defer resp.Body.Close()
	var ra time.Duration
	if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
		ra = time.Duration(s) * time.Second
	}
	return resp.StatusCode, ra
}

func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// --- incremental exports ---

// ExportConfig shapes the incremental exports.
type ExportConfig struct {
	// Lag is the most recent stretch the exports leave out (and inside
	// which a start_time is refused); 0 means Zendesk's one minute,
	// negative means none.
	Lag time.Duration
	// Limit is how many export requests Window allows; 0 means 10.
	Limit int
	// Window is the rate limit's window; 0 means one minute.
	Window time.Duration
}

type exports struct {
	mu          sync.Mutex
	cfg         ExportConfig
	windowStart time.Time
	used        int
	throttled   int
	requests    int
}

// SetExports changes the exports' lag and rate limit.
func (z *Zendesk) SetExports(cfg ExportConfig) {
	z.exp.mu.Lock()
	defer z.exp.mu.Unlock()
	z.exp.cfg = cfg
}

// ExportStats returns how many export requests were served and how many
// were answered 429.
func (z *Zendesk) ExportStats() (requests, throttled int) {
	z.exp.mu.Lock()
	defer z.exp.mu.Unlock()
	return z.exp.requests, z.exp.throttled
}

func (e *exports) lag() time.Duration {
	switch {
	case e.cfg.Lag < 0:
		return 0
	case e.cfg.Lag == 0:
		return time.Minute
	}
	return e.cfg.Lag
}

// admit applies the export rate limit; false means 429 was answered.
func (e *exports) admit(w http.ResponseWriter) (lag time.Duration, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	limit, window := e.cfg.Limit, e.cfg.Window
	if limit <= 0 {
		limit = 10
	}
	if window <= 0 {
		window = time.Minute
	}
	now := time.Now()
	if now.Sub(e.windowStart) >= window {
		e.windowStart, e.used = now, 0
	}
	e.requests++
	if e.used >= limit {
		e.throttled++
		w.Header().Set("Retry-After", strconv.FormatInt(ceilSeconds(window-now.Sub(e.windowStart)), 10))
		writeJSON(w, http.StatusTooManyRequests, zendeskError{Error: "APIRateLimitExceeded",
			Description: "Number of allowed incremental export API requests per minute exceeded"})
		return 0, false
	}
	e.used++
	w.Header().Set("Zendesk-RateLimit-incremental-exports", fmt.Sprintf("total=%d; remaining=%d; resets=%d",
		limit, limit-e.used, ceilSeconds(window-now.Sub(e.windowStart))))
	return e.lag(), true
}

// exportStart reads start_time: Unix seconds, not inside the lag.
func exportStart(w http.ResponseWriter, r *http.Request, lag time.Duration) (time.Time, bool) {
	raw := r.URL.Query().Get("start_time")
	sec, err := strconv.ParseInt(raw, 10, 64)
	if err != nil || sec < 0 {
		writeJSON(w, http.StatusBadRequest, zendeskError{Error: "InvalidValue", Description: "start_time must be a Unix epoch time"})
		return time.Time{}, false
	}
	t := time.Unix(sec, 0)
	if t.After(time.Now().Add(-lag)) {
		writeJSON(w, http.StatusUnprocessableEntity, zendeskError{Error: "InvalidValue",
			Description: fmt.Sprintf("Too recent start_time. Use a start_time older than %s", lag)})
		return time.Time{}, false
	}
	return t, true
}

func perPage(r *http.Request) int {
	n, err := strconv.Atoi(r.URL.Query().Get("per_page"))
	if err != nil || n <= 0 || n > 1000 {
		return 1000
	}
	return n
}

// exportPos is a position in the ticket export's order: a ticket's
// generated time, then its ID.
type exportPos struct {
	at time.Time
	id int64
}

func (p exportPos) less(q exportPos) bool {
	return p.at.Before(q.at) || (p.at.Equal(q.at) && p.id < q.id)
}

func encodeCursor(p exportPos) string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(p.at.UnixNano(), 10) + "|" + strconv.FormatInt(p.id, 10)))
}

func decodeCursor(s string) (exportPos, bool) {
	b, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return exportPos{}, false
	}
	ns, id, ok := strings.Cut(string(b), "|")
	n, err1 := strconv.ParseInt(ns, 10, 64)
	i, err2 := strconv.ParseInt(id, 10, 64)
	if !ok || err1 != nil || err2 != nil {
		return exportPos{}, false
	}
	return exportPos{at: time.Unix(0, n), id: i}, true
}

// incrementalTickets serves the cursor-based ticket export: tickets in
// the order of their last change, after the cursor (or from start_time),
// leaving out the lag.
func (z *Zendesk) incrementalTickets(w http.ResponseWriter, r *http.Request) {
	lag, ok := z.exp.admit(w)
	if !ok {
		return
	}
	var from exportPos
	inclusive := false
	if c := r.URL.Query().Get("cursor"); c != "" {
		if from, ok = decodeCursor(c); !ok {
			writeJSON(w, http.StatusBadRequest, zendeskError{Error: "InvalidValue", Description: "Invalid cursor"})
			return
		}
	} else {
		start, ok := exportStart(w, r, lag)
		if !ok {
			return
		}
		from, inclusive = exportPos{at: start}, true
	}
	limit := perPage(r)
	horizon := time.Now().Add(-lag)

	z.mu.Lock()
	var rows []*zTicket
	for _, zt := range z.tickets {
		p := exportPos{at: zt.updatedAt, id: zt.ID}
		if (from.less(p) || (inclusive && !p.less(from))) && zt.updatedAt.Before(horizon) {
			rows = append(rows, zt)
		}
	}
	slices.SortFunc(rows, func(a, b *zTicket) int {
		pa, pb := exportPos{at: a.updatedAt, id: a.ID}, exportPos{at: b.updatedAt, id: b.ID}
		switch {
		case pa.less(pb):
			return -1
		case pb.less(pa):
			return 1
		}
		return 0
	})
	end := len(rows) <= limit
	if !end {
		rows = rows[:limit]
	}
	tickets := make([]ticketJSON, 0, len(rows))
	last := from
	for _, zt := range rows {
		t := newTicketJSON(r, zt)
		tickets = append(tickets, t)
		last = exportPos{at: zt.updatedAt, id: zt.ID}
	}
	z.mu.Unlock()
	if inclusive && len(rows) == 0 {
		// Nothing yet: resume from the start time, not from before it.
		last = exportPos{at: from.at.Add(-time.Nanosecond), id: 1<<63 - 1}
	}
	after := encodeCursor(last)
	writeJSON(w, http.StatusOK, map[string]any{
		"tickets":       withGenerated(tickets),
		"after_cursor":  after,
		"after_url":     fmt.Sprintf("%s://%s/api/v2/incremental/tickets/cursor.json?cursor=%s", requestScheme(r), r.Host, after),
		"before_cursor": nil,
		"before_url":    nil,
		"end_of_stream": end,
	})
}

// withGenerated adds generated_timestamp (Unix seconds of the last change)
// to exported tickets.
func withGenerated(ts []ticketJSON) []map[string]any {
	out := make([]map[string]any, 0, len(ts))
	for _, t := range ts {
		b, _ := json.Marshal(t)
		var m map[string]any
		_ = json.Unmarshal(b, &m)
		if at, err := time.Parse(time.RFC3339, t.UpdatedAt); err == nil {
			m["generated_timestamp"] = at.Unix()
		}
		out = append(out, m)
	}
	return out
}

// incrementalTicketEvents serves the time-based ticket event export: each
// audit from start_time on as a ticket event with its child events
// (comments in full with include=comment_events), in time order, leaving
// out the lag. end_time is the next start_time; a full page ends at its
// last event's second, which the next page repeats (as Zendesk's may).
func (z *Zendesk) incrementalTicketEvents(w http.ResponseWriter, r *http.Request) {
	lag, ok := z.exp.admit(w)
	if !ok {
		return
	}
	start, ok := exportStart(w, r, lag)
	if !ok {
		return
	}
	comments := strings.Contains(r.URL.Query().Get("include"), "comment_events")
	limit := perPage(r)
	horizon := time.Now().Add(-lag)

	type item struct {
		at  time.Time
		row map[string]any
	}
	var items []item
	z.mu.Lock()
	for _, zt := range z.tickets {
		for _, a := range zt.audits {
			if a.at.Unix() < start.Unix() || !a.at.Before(horizon) {
				continue
			}
			items = append(items, item{at: a.at, row: exportedAudit(a, comments)})
		}
	}
	z.mu.Unlock()
	slices.SortFunc(items, func(a, b item) int { return a.at.Compare(b.at) })
	end := len(items) <= limit
	endTime := horizon.Unix()
	if !end {
		// A page may run past per_page: it takes every event of its last
		// second, so end_time always moves on.
		n := limit
		for n < len(items) && items[n].at.Unix() == items[limit-1].at.Unix() {
			n++
		}
		end = n == len(items)
		items = items[:n]
		endTime = items[len(items)-1].at.Unix()
		if end {
			endTime = horizon.Unix()
		}
	}
	rows := make([]map[string]any, 0, len(items))
	for _, it := range items {
		rows = append(rows, it.row)
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"ticket_events": rows,
		"count":         len(rows),
		"end_time":      endTime,
		"end_of_stream": end,
		"next_page":     fmt.Sprintf("%s://%s/api/v2/incremental/ticket_events.json?start_time=%d", requestScheme(r), r.Host, endTime),
	})
}

// exportedAudit renders an audit as a ticket event export row.
func exportedAudit(a auditJSON, fullComments bool) map[string]any {
	children := make([]map[string]any, 0, len(a.Events))
	for _, e := range a.Events {
		ev, _ := e.(map[string]any)
		child := map[string]any{"id": ev["id"], "via": a.Via, "via_reference_id": nil}
		switch ev["type"] {
		case "Comment":
			child["event_type"] = "Comment"
			if fullComments {
				for _, k := range []string{"type", "author_id", "body", "html_body", "public", "attachments", "audit_id"} {
					child[k] = ev[k]
				}
				child["created_at"] = a.CreatedAt
			} else {
				child["comment_present"] = true
				child["comment_public"] = ev["public"]
			}
		default:
			child["event_type"] = ev["type"]
			if f, ok := ev["field_name"].(string); ok {
				child[f] = ev["value"]
				if p, ok := ev["previous_value"]; ok {
					child["previous_value"] = p
				}
			}
		}
		children = append(children, child)
	}
	return map[string]any{
		"id": a.ID, "ticket_id": a.TicketID, "timestamp": a.at.Unix(), "created_at": a.CreatedAt,
		"updater_id": a.AuthorID, "via": a.Via.Channel, "event_type": "Audit", "child_events": children,
	}
}

// me serves GET /api/v2/users/me.json: the API user.
func (z *Zendesk) me(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{"user": map[string]any{
		"id": ZendeskAgentID, "name": "Support Agent", "email": z.email, "role": "admin", "active": true,
	}})
}
