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
//     ticket.tags_changed, ticket.email_ccs_changed) in the documented
//     envelope, detail IDs as strings and statuses upper case, the
//     envelope's time with nanoseconds (detail times whole seconds),
//     signed base64(HMAC-SHA256(secret, timestamp+body)) and POSTed to
//     the configured URL. Comment authors carry is_staff (false for every
//     end user: the requester, a CC'd colleague); a change no user made
//     (ChangeStatus by SystemActorID) carries actor_id "-1".
//     https://developer.zendesk.com/api-reference/webhooks/event-types/ticket-events
//     https://developer.zendesk.com/documentation/webhooks/verifying/
//   - A message on a messaging ticket (AddMessage) is delivered only as
//     zen:event-type:messaging_ticket.message_added (detail: the ticket's
//     id; event: actor with its type, message), and kept as the ticket's
//     comment, as the ticket's conversation shows it.
//     https://developer.zendesk.com/api-reference/webhooks/event-types/messaging-events
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
	// ccs are the end users copied on each ticket (AddCCs).
	ccs map[int64][]int64
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
	// typ is the ticket event's name after "zen:event-type:ticket.", or a
	// whole type ("zen:event-type:messaging_ticket.message_added").
	typ   string
	event map[string]any
	// detail replaces the ticket's detail (a messaging event's holds only
	// the ticket's id).
	detail map[string]any
}

// emit queues the events of one update for delivery, stamped now. z.mu
// must be held; the deliveries run on their own goroutines.
func (z *Zendesk) emit(zt *zTicket, actor int64, sequence int64, changes []change) {
	z.emitAt(zt, actor, sequence, changes, time.Now())
}

// emitAt is emit with the envelope's time at (nanoseconds, as Zendesk
// sends it).
func (z *Zendesk) emitAt(zt *zTicket, actor int64, sequence int64, changes []change, at time.Time) {
	z.hooks.mu.Lock()
	cfg := z.hooks.cfg
	z.hooks.mu.Unlock()
	if cfg.URL == "" || len(changes) == 0 {
		return
	}
	detail := ticketDetail(zt, actor)
	for i, c := range changes {
		ev := map[string]any{}
		for k, v := range c.event {
			ev[k] = v
		}
		typ, d := c.typ, detail
		if !strings.HasPrefix(typ, "zen:") {
			typ = "zen:event-type:ticket." + typ
			ev["meta"] = map[string]any{"sequence": map[string]any{"id": strconv.FormatInt(sequence, 10), "position": i + 1}}
		}
		if c.detail != nil {
			d = c.detail
		}
		body, err := json.Marshal(webhookEvent{
			AccountID: cfg.AccountID, Detail: d, Event: ev, ID: newUUID(),
			Subject: "zen:ticket:" + strconv.FormatInt(zt.ID, 10), Time: at.UTC().Format(time.RFC3339Nano),
			Type: typ, Version: "2022-11-06",
		})
		if err != nil {
			panic(err) // only maps of JSON values: a bug
		}
		z.deliver(cfg, typ, body)
	}
}

// SystemActorID is the actor of a change no user made (a trigger, an
// automation): ticket events carry it as actor_id "-1".
const SystemActorID int64 = -1

// StatusChange is a status change made in Zendesk, not through the API:
// by a human agent in Zendesk's UI, or by a trigger or automation.
type StatusChange struct {
	Status string
	// ActorID made the change: a user seeded with AddUser, or
	// SystemActorID (0 means SystemActorID).
	ActorID int64
	// At defaults to now. Tests pin two changes to one second with it
	// (Zendesk's updated_at is whole seconds; the envelope's time is not).
	At time.Time
}

// ChangeStatus changes a ticket's status as c says: an audit with the
// change, and a ticket.status_changed event whose envelope time is c.At.
// It panics on an unknown ticket or status, since that is a bug in the
// test.
func (z *Zendesk) ChangeStatus(ticketID int64, c StatusChange) {
	z.mu.Lock()
	defer z.mu.Unlock()
	zt, ok := z.tickets[ticketID]
	if !ok {
		panic(fmt.Sprintf("standin: Zendesk ticket %d does not exist", ticketID))
	}
	if !slices.Contains(zendeskStatuses, c.Status) {
		panic(fmt.Sprintf("standin: %q is not a ticket status", c.Status))
	}
	at, actor := c.At, c.ActorID
	if at.IsZero() {
		at = time.Now()
	}
	if actor == 0 {
		actor = SystemActorID
	}
	via := "web"
	if actor == SystemActorID {
		via = "rule"
	}
	previous := zt.Status
	zt.Status = c.Status
	if at.After(zt.updatedAt) {
		zt.updatedAt = at
	}
	auditID := z.newID()
	zt.audits = append(zt.audits, auditJSON{
		ID: auditID, TicketID: ticketID, CreatedAt: zendeskTime(at), AuthorID: actor,
		Metadata: newAuditMetadata(nil), Via: newVia(via),
		Events: []any{changeEvent(z.newID(), "status", c.Status, previous)}, at: at,
	})
	z.emitAt(zt, actor, auditID, []change{{typ: "status_changed",
		event: map[string]any{"previous": strings.ToUpper(previous), "current": strings.ToUpper(c.Status)}}}, at)
}

// AddCCs copies end users on a ticket (an agent adding them, or the
// customer's email copying them): a ticket.email_ccs_changed event with
// users_added. A CC'd user's later comments are end users' comments
// (SeedComment.AuthorID, after AddUser). It panics on an unknown ticket.
func (z *Zendesk) AddCCs(ticketID int64, userIDs ...int64) {
	z.mu.Lock()
	defer z.mu.Unlock()
	zt, ok := z.tickets[ticketID]
	if !ok {
		panic(fmt.Sprintf("standin: Zendesk ticket %d does not exist", ticketID))
	}
	added := make([]string, 0, len(userIDs))
	z.hooks.mu.Lock()
	if z.hooks.ccs == nil {
		z.hooks.ccs = map[int64][]int64{}
	}
	for _, id := range userIDs {
		if !slices.Contains(z.hooks.ccs[ticketID], id) {
			z.hooks.ccs[ticketID] = append(z.hooks.ccs[ticketID], id)
			added = append(added, strconv.FormatInt(id, 10))
		}
	}
	z.hooks.mu.Unlock()
	if len(added) == 0 {
		return
	}
	now := time.Now()
	if now.After(zt.updatedAt) {
		zt.updatedAt = now
	}
	z.emitAt(zt, zt.RequesterID, z.newID(), []change{{typ: "email_ccs_changed",
		event: map[string]any{"users_added": added, "users_removed": []string{}}}}, now)
}

// CCs returns the end users copied on a ticket.
func (z *Zendesk) CCs(ticketID int64) []int64 {
	z.hooks.mu.Lock()
	defer z.hooks.mu.Unlock()
	return slices.Clone(z.hooks.ccs[ticketID])
}

// Messaging actor types (event.actor.type of messaging_ticket.message_added).
const (
	MessagingEndUser = "end_user"
	MessagingAgent   = "agent"
	MessagingTrigger = "trigger"
	MessagingSystem  = "system"
)

// Message is a message on a messaging ticket's conversation.
type Message struct {
	Body string
	// ActorType is MessagingEndUser (the default), MessagingAgent,
	// MessagingTrigger or MessagingSystem.
	ActorType string
	// AuthorID is the user who wrote it; 0 means the requester for an end
	// user, ZendeskAgentID for an agent. A trigger's or the system's
	// message has a bot as its actor ("zd:answerBot").
	AuthorID int64
	// At defaults to now.
	At time.Time
}

// AddMessage adds a message to a messaging ticket: kept as the ticket's
// public comment (via native_messaging, the ticket's conversation) and
// delivered only as messaging_ticket.message_added, no ticket.* event, as
// a messaging follow-up reaches a webhook. Returns the comment's ID. It
// panics on an unknown ticket.
func (z *Zendesk) AddMessage(ticketID int64, m Message) int64 {
	z.mu.Lock()
	defer z.mu.Unlock()
	zt, ok := z.tickets[ticketID]
	if !ok {
		panic(fmt.Sprintf("standin: Zendesk ticket %d does not exist", ticketID))
	}
	at := m.At
	if at.IsZero() {
		at = time.Now()
	}
	typ := m.ActorType
	if typ == "" {
		typ = MessagingEndUser
	}
	author, actorID, name := m.AuthorID, "", ""
	switch typ {
	case MessagingEndUser:
		if author == 0 {
			author = zt.RequesterID
		}
		actorID, name = strconv.FormatInt(author, 10), z.userLocked(zt, author).Name
	case MessagingAgent:
		if author == 0 {
			author = ZendeskAgentID
		}
		actorID, name = strconv.FormatInt(author, 10), z.userLocked(zt, author).Name
	default:
		author, actorID, name = SystemActorID, "zd:answerBot", "Answer Bot"
	}
	auditID := z.newID()
	zc := zComment{
		Comment:  Comment{ID: z.newID(), AuditID: auditID, Body: m.Body, Public: true, At: at},
		authorID: author,
		htmlBody: textToHTML(m.Body),
	}
	zt.comments = append(zt.comments, zc)
	if at.After(zt.updatedAt) {
		zt.updatedAt = at
	}
	zt.audits = append(zt.audits, auditJSON{
		ID: auditID, TicketID: ticketID, CreatedAt: zendeskTime(at), AuthorID: author,
		Metadata: newAuditMetadata(nil), Via: newVia("native_messaging"), Events: []any{commentEvent(zc)}, at: at,
	})
	z.emitAt(zt, author, auditID, []change{{
		typ:    "zen:event-type:messaging_ticket.message_added",
		detail: map[string]any{"id": strconv.FormatInt(zt.ID, 10)},
		event: map[string]any{
			"actor":           map[string]any{"id": actorID, "name": name, "type": typ},
			"conversation_id": fmt.Sprintf("conv-%d", zt.ID),
			"message":         map[string]any{"id": fmt.Sprintf("msg-%d", zc.ID), "body": m.Body},
		},
	}}, at)
	return zc.ID
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
