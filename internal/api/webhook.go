package api

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/text"
	"github.com/supportflow/supportflow/ledger"
)

// Zendesk's webhook signature headers.
const (
	SignatureHeader          = "X-Zendesk-Webhook-Signature"
	SignatureTimestampHeader = "X-Zendesk-Webhook-Signature-Timestamp"
)

// Sign computes Zendesk's webhook signature: base64(HMAC-SHA256(secret,
// timestamp + body)).
func Sign(secret, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(timestamp))
	m.Write(body)
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// WebhookEvent is the body the Zendesk trigger sends (its JSON template is
// in the README): the ticket as it now is and, when the update added one,
// the newest comment.
type WebhookEvent struct {
	// Event is "ticket.created" or "ticket.updated".
	Event   string          `json:"event"`
	Ticket  WebhookTicket   `json:"ticket"`
	Comment *WebhookComment `json:"comment,omitempty"`
}

// WebhookTicket is the ticket part of a webhook.
type WebhookTicket struct {
	ID          int64     `json:"id"`
	Subject     string    `json:"subject"`
	Status      string    `json:"status"`
	RequesterID int64     `json:"requester_id"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// WebhookComment is the newest comment of an update.
type WebhookComment struct {
	AuthorID  int64     `json:"author_id"`
	Public    bool      `json:"public"`
	CreatedAt time.Time `json:"created_at"`
}

// validate checks a webhook body before anything is written.
func (e WebhookEvent) validate() error {
	switch e.Event {
	case "ticket.created", "ticket.updated":
	default:
		return fmt.Errorf("event %q must be ticket.created or ticket.updated", text.Clip(e.Event, 40))
	}
	if e.Ticket.ID <= 0 || e.Ticket.RequesterID < 0 {
		return fmt.Errorf("ticket id %d must be positive and requester id %d not negative", e.Ticket.ID, e.Ticket.RequesterID)
	}
	if e.Ticket.UpdatedAt.IsZero() {
		return errors.New("ticket.updated_at is required")
	}
	if len(e.Ticket.Subject) > 1024 || len(e.Ticket.Status) > 32 {
		return errors.New("ticket subject or status is too long")
	}
	if e.Comment != nil && e.Comment.CreatedAt.IsZero() {
		return errors.New("comment.created_at is required with a comment")
	}
	return nil
}

// WebhookAccepted answers a webhook.
type WebhookAccepted struct {
	TicketID         int64 `json:"ticket_id"`
	Mirrored         bool  `json:"mirrored"`
	CustomerActivity bool  `json:"customer_activity"`
}

// webhook verifies Zendesk's signature (HMAC-SHA256 over timestamp and
// body, compared in constant time), refuses a timestamp outside MaxSkew
// and a signature already accepted (a replay), then mirrors the ticket
// under its advisory lock and records the ticket event: enrichment, and
// the supersede of a running draft when the customer wrote.
func (s *Server) webhook(w http.ResponseWriter, r *http.Request) {
	body, err := s.readBody(w, r)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			problem(w, http.StatusRequestEntityTooLarge, "body-too-large", "Request body too large", fmt.Sprintf("the body must be at most %d bytes", s.cfg.MaxBody))
			return
		}
		problem(w, http.StatusBadRequest, "unreadable-body", "Unreadable request body", err.Error())
		return
	}
	sig, ts := r.Header.Get(SignatureHeader), r.Header.Get(SignatureTimestampHeader)
	if sig == "" || ts == "" {
		problem(w, http.StatusUnauthorized, "unsigned-webhook", "Unsigned webhook", "the Zendesk signature headers are missing")
		return
	}
	if !hmac.Equal([]byte(sig), []byte(Sign(s.cfg.WebhookSecret, ts, body))) {
		problem(w, http.StatusUnauthorized, "bad-signature", "Bad signature", "the webhook signature does not match")
		return
	}
	at, err := time.Parse(time.RFC3339, ts)
	if err != nil {
		problem(w, http.StatusUnauthorized, "bad-timestamp", "Bad timestamp", "the signature timestamp is not RFC 3339")
		return
	}
	if skew := s.now().Sub(at); skew > s.cfg.MaxSkew || skew < -s.cfg.MaxSkew {
		problem(w, http.StatusUnauthorized, "stale-timestamp", "Stale timestamp", fmt.Sprintf("the signature timestamp is more than %s from now", s.cfg.MaxSkew))
		return
	}
	var ev WebhookEvent
	if !s.decodeBytes(w, body, &ev, false) {
		return
	}
	if err := ev.validate(); err != nil {
		problem(w, http.StatusUnprocessableEntity, "invalid-webhook", "Invalid webhook", err.Error())
		return
	}
	fresh, err := s.claimDelivery(r.Context(), sig)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	if !fresh {
		problem(w, http.StatusConflict, "replayed-webhook", "Replayed webhook", "this signed delivery was already accepted")
		return
	}
	res, err := s.applyWebhook(r.Context(), ev)
	if err != nil {
		// Let Zendesk's retry of this delivery through.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
		defer cancel()
		if _, derr := s.pool.Exec(rctx, `DELETE FROM webhook_delivery WHERE signature = $1`, sig); derr != nil {
			s.log.Warn("releasing a failed webhook delivery", "error", derr)
		}
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusAccepted, res)
}

// claimDelivery records a signature; false when it was already there.
// Deliveries older than three times the skew bound are pruned on the way:
// a delivery is refused after MaxSkew by its timestamp, and the extra
// MaxSkew covers replicas whose clocks differ from the database's.
func (s *Server) claimDelivery(ctx context.Context, sig string) (bool, error) {
	tag, err := s.pool.Exec(ctx, `INSERT INTO webhook_delivery (signature) VALUES ($1) ON CONFLICT DO NOTHING`, sig)
	if err != nil {
		return false, err
	}
	if _, err := s.pool.Exec(ctx, `DELETE FROM webhook_delivery WHERE received_at < now() - $1::interval`,
		(3 * s.cfg.MaxSkew).String()); err != nil {
		s.log.Warn("pruning webhook deliveries", "error", err)
	}
	return tag.RowsAffected() == 1, nil
}

func (s *Server) applyWebhook(ctx context.Context, ev WebhookEvent) (WebhookAccepted, error) {
	m := ledger.TicketMirror{TicketID: ev.Ticket.ID, Subject: ev.Ticket.Subject, Status: ev.Ticket.Status,
		RequesterID: ev.Ticket.RequesterID, UpdatedAt: ev.Ticket.UpdatedAt}
	customer := false
	if c := ev.Comment; c != nil && c.Public {
		if c.AuthorID == ev.Ticket.RequesterID {
			m.LastCustomerCommentAt, customer = c.CreatedAt, true
		} else {
			m.LastAgentCommentAt = c.CreatedAt
		}
	}
	mirrored, err := s.ledger.UpsertTicketMirror(ctx, m)
	if err != nil {
		return WebhookAccepted{}, err
	}
	kind := supportflow.TicketUpdated
	if ev.Event == "ticket.created" {
		kind = supportflow.TicketCreated
	}
	// Only news supersedes a draft: an older copy of the ticket (out of
	// order) or a retried delivery leaves the mirror unchanged and must not
	// throw away a proposal that already covered the comment.
	te := supportflow.TicketEvent{TicketID: ev.Ticket.ID, Kind: kind, At: ev.Ticket.UpdatedAt,
		RequesterID: ev.Ticket.RequesterID, CustomerActivity: customer && mirrored && kind == supportflow.TicketUpdated}
	if _, err := s.starter.RecordTicketEvent(ctx, te); err != nil {
		return WebhookAccepted{}, err
	}
	return WebhookAccepted{TicketID: ev.Ticket.ID, Mirrored: mirrored, CustomerActivity: te.CustomerActivity}, nil
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
