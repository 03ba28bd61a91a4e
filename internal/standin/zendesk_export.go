package standin

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// This file serves the incremental exports (see zendesk_events.go for the
// documentation links).

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
	// EventsPageLimit caps a ticket event export page below the
	// requested per_page (Zendesk's cap is 1,000); 0 means no cap. With
	// more events in one second than a page holds, a page of that second
	// answers end_time == start_time and end_of_stream false, as Zendesk's
	// time-based exports do.
	EventsPageLimit int
	// TicketsPageLimit caps a ticket export page below the requested
	// per_page; 0 means no cap.
	TicketsPageLimit int
}

type exports struct {
	mu          sync.Mutex
	cfg         ExportConfig
	windowStart time.Time
	used        int
	throttled   int
	requests    int
	// eventsHandled counts the ticket event export requests the handler
	// saw (a Fault that answers instead keeps one from it); holds are
	// the holds armed for some of them, by that count.
	eventsHandled int
	holds         map[int]*ExportHold
}

// ExportHold is a ticket event export request held before it is admitted
// (HoldEventRequest): Arrived is closed when it arrives; it waits until
// Release is called or its client goes away, then is served as usual (so
// a rate limit spent meanwhile answers it 429).
type ExportHold struct {
	arrived, release chan struct{}
	once             sync.Once
}

// Arrived is closed when the held request has arrived.
func (h *ExportHold) Arrived() <-chan struct{} { return h.arrived }

// Release lets the held request go on; calling it again does nothing.
func (h *ExportHold) Release() { h.once.Do(func() { close(h.release) }) }

// HoldEventRequest holds the n-th ticket event export request the handler
// sees from now on (1-based; a request a Fault answers instead does not
// reach the handler and is not counted), so a test acts while it is held
// rather than within a delay.
func (z *Zendesk) HoldEventRequest(n int) *ExportHold {
	z.exp.mu.Lock()
	defer z.exp.mu.Unlock()
	h := &ExportHold{arrived: make(chan struct{}), release: make(chan struct{})}
	if z.exp.holds == nil {
		z.exp.holds = map[int]*ExportHold{}
	}
	z.exp.holds[z.exp.eventsHandled+max(n, 1)] = h
	return h
}

// holdEvent waits on the hold armed for this event export request, if any.
func (e *exports) holdEvent(r *http.Request) {
	e.mu.Lock()
	e.eventsHandled++
	h := e.holds[e.eventsHandled]
	delete(e.holds, e.eventsHandled)
	e.mu.Unlock()
	if h == nil {
		return
	}
	close(h.arrived)
	select {
	case <-h.release:
	case <-r.Context().Done():
	}
}

// SetExports changes the exports' lag and rate limit.
func (z *Zendesk) SetExports(cfg ExportConfig) {
	z.exp.mu.Lock()
	defer z.exp.mu.Unlock()
	z.exp.cfg = cfg
}

// ConsumeExportBudget spends n requests of the account's export rate
// limit now, as another integration of the account would (Zendesk counts
// the 10 a minute per account, whoever asks): a window starts now with n
// requests used, so the next requests in it may be answered 429 with
// Retry-After.
func (z *Zendesk) ConsumeExportBudget(n int) {
	z.exp.mu.Lock()
	defer z.exp.mu.Unlock()
	z.exp.windowStart, z.exp.used = time.Now(), n
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

func (e *exports) window() time.Duration {
	if e.cfg.Window <= 0 {
		return time.Minute
	}
	return e.cfg.Window
}

// admit applies the export rate limit; false means 429 was answered.
func (e *exports) admit(w http.ResponseWriter) (lag time.Duration, ok bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	limit, window := e.cfg.Limit, e.window()
	if limit <= 0 {
		limit = 10
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
	z.exp.mu.Lock()
	if c := z.exp.cfg.TicketsPageLimit; c > 0 && c < limit {
		limit = c
	}
	z.exp.mu.Unlock()
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
// out the lag. end_time, the next start_time, is the most recent time on
// the page; the next page repeats that second's rows (as Zendesk's may).
func (z *Zendesk) incrementalTicketEvents(w http.ResponseWriter, r *http.Request) {
	z.exp.holdEvent(r)
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
	z.exp.mu.Lock()
	if c := z.exp.cfg.EventsPageLimit; c > 0 && c < limit {
		limit = c
	}
	z.exp.mu.Unlock()
	horizon := time.Now().Add(-lag)

	type item struct {
		at  time.Time
		id  int64
		row map[string]any
	}
	var items []item
	z.mu.Lock()
	for _, zt := range z.tickets {
		for _, a := range zt.audits {
			if a.at.Unix() < start.Unix() || !a.at.Before(horizon) {
				continue
			}
			items = append(items, item{at: a.at, id: a.ID, row: exportedAudit(a, comments)})
		}
	}
	z.mu.Unlock()
	// Zendesk orders by the events' seconds; within one, by ID here.
	slices.SortFunc(items, func(a, b item) int {
		if c := a.at.Unix() - b.at.Unix(); c != 0 {
			return int(c)
		}
		return int(a.id - b.id)
	})
	end := len(items) <= limit
	if !end {
		items = items[:limit]
	}
	// end_time is the most recent time present in the result set, as
	// Zendesk documents it (the start_time when the set is empty), not the
	// export's horizon: on a quiet account it stays at the last event's
	// second. A full page ends at its last event's second, which the next
	// page (start_time = end_time) reads again: rows may repeat. When every
	// event of the page is in its start second, end_time is the start_time:
	// the second holds more events than a page.
	// https://developer.zendesk.com/api-reference/ticketing/ticket-management/incremental_exports/#incremental-ticket-event-export
	endTime := start.Unix()
	if len(items) > 0 {
		endTime = items[len(items)-1].at.Unix()
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
