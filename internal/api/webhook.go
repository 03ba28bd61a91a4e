package api

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/supportflow/supportflow/internal/ingest"
)

// Zendesk's webhook signature headers.
// https://developer.zendesk.com/documentation/webhooks/verifying/
const (
	SignatureHeader          = "X-Zendesk-Webhook-Signature"
	SignatureTimestampHeader = "X-Zendesk-Webhook-Signature-Timestamp"
)

// Sign computes Zendesk's webhook signature: base64(HMAC-SHA256(secret,
// timestamp + body)), the secret used as given.
// https://developer.zendesk.com/documentation/webhooks/verifying/
func Sign(secret, timestamp string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(timestamp))
	m.Write(body)
	return base64.StdEncoding.EncodeToString(m.Sum(nil))
}

// WebhookAccepted answers an accepted (or ignored, or repeated) event.
type WebhookAccepted struct {
	EventID  string `json:"event_id"`
	TicketID int64  `json:"ticket_id,omitempty"`
	// Ignored is true for an event type supportflow does not read.
	Ignored bool `json:"ignored,omitempty"`
	// Duplicate is true when the event was already recorded: nothing
	// changed.
	Duplicate bool `json:"duplicate,omitempty"`
	// Mirrored is true when the event changed the ticket's mirror.
	Mirrored bool `json:"mirrored"`
	// OwnWrite is true when supportflow's own API user caused the event:
	// recorded, but it starts no lookup and supersedes no draft.
	OwnWrite         bool `json:"own_write,omitempty"`
	CustomerActivity bool `json:"customer_activity"`
}

// webhook takes Zendesk's ticket event webhooks. The order of checks, and
// what each failure gets (no bad input is ever answered 5xx):
//
//   - a body over MaxWebhookBody: 413;
//   - missing signature headers, a signature that does not match the
//     body, a timestamp that is not RFC 3339 or is more than MaxSkew from
//     now: 401;
//   - a Content-Type other than application/json (UTF-8): 415;
//   - invalid UTF-8, a NUL character, a key repeated in an object, not
//     one JSON object: 400; not a Zendesk event envelope, or a ticket event
//     whose fields do not hold together: 422;
//   - an event type supportflow does not read: 200, ignored;
//   - an event already recorded (a retry or a duplicate delivery): 200,
//     nothing changes;
//   - otherwise the ticket's mirror and the event's row are written in one
//     transaction and the answer is 200; if PostgreSQL fails, 503 with a
//     Retry-After under 60 s, which Zendesk retries.
//
// Zendesk retries 409, and 429/503 only with a Retry-After under 60 s, so
// a transient failure must say 503 + Retry-After or the event is dropped.
// https://developer.zendesk.com/documentation/webhooks/creating-and-monitoring-webhooks
func (s *Server) webhook(w http.ResponseWriter, r *http.Request) {
	answer, secret := s.takeWebhook(w, r)
	s.cfg.Metrics.WebhookDelivery(answer, secret)
}

// takeWebhook answers one delivery and says how, for the deliveries
// metric: the answer's name and which secret verified the signature.
func (s *Server) takeWebhook(w http.ResponseWriter, r *http.Request) (answer, secret string) {
	const refused, unauthorized = "refused", "unauthorized"
	secret = "none"
	body, err := s.readCapped(w, r, s.cfg.MaxWebhookBody)
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			problem(w, http.StatusRequestEntityTooLarge, "body-too-large", "Request body too large", fmt.Sprintf("the body must be at most %d bytes", s.cfg.MaxWebhookBody))
			return refused, secret
		}
		problem(w, http.StatusBadRequest, "unreadable-body", "Unreadable request body", err.Error())
		return refused, secret
	}
	sig, ts := r.Header.Get(SignatureHeader), r.Header.Get(SignatureTimestampHeader)
	if sig == "" || ts == "" {
		problem(w, http.StatusUnauthorized, "unsigned-webhook", "Unsigned webhook", "the Zendesk signature headers are missing")
		return unauthorized, secret
	}
	if secret = s.verifiedBy(sig, ts, body); secret == "none" {
		problem(w, http.StatusUnauthorized, "bad-signature", "Bad signature", "the webhook signature does not match")
		return unauthorized, secret
	}
	at, err := time.Parse(time.RFC3339, ts)
	if err != nil {
		problem(w, http.StatusUnauthorized, "bad-timestamp", "Bad timestamp", "the signature timestamp is not RFC 3339")
		return unauthorized, secret
	}
	if skew := s.now().Sub(at); skew > s.cfg.MaxSkew || skew < -s.cfg.MaxSkew {
		problem(w, http.StatusUnauthorized, "stale-timestamp", "Stale timestamp", fmt.Sprintf("the signature timestamp is more than %s from now", s.cfg.MaxSkew))
		return unauthorized, secret
	}
	if mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" ||
		(params["charset"] != "" && !strings.EqualFold(params["charset"], "utf-8")) {
		problem(w, http.StatusUnsupportedMediaType, "unsupported-media-type", "Unsupported media type", "a Zendesk event webhook is application/json (UTF-8)")
		return refused, secret
	}
	ev, err := ingest.Parse(body)
	if err != nil {
		badEvent(w, err)
		return refused, secret
	}
	if !ingest.Consumed(ev.Type) {
		writeJSON(w, http.StatusOK, WebhookAccepted{EventID: ev.ID, Ignored: true})
		return "ignored", secret
	}
	change, err := ev.Ticket()
	if err != nil {
		badEvent(w, err)
		return refused, secret
	}
	rec, err := s.ingest.RecordWebhook(r.Context(), change, s.cfg.ZendeskUserID)
	if err != nil {
		s.log.Error("recording a ticket event failed; asking Zendesk to retry", "event_id", ev.ID, "ticket_id", change.TicketID, "error", err)
		w.Header().Set("Retry-After", strconv.Itoa(int(s.cfg.WebhookRetryAfter/time.Second)))
		problem(w, http.StatusServiceUnavailable, "unavailable", "Service unavailable", "the event could not be recorded; retry later")
		return "unavailable", secret
	}
	if rec.Dispatch {
		s.relay.Wake()
	}
	writeJSON(w, http.StatusOK, WebhookAccepted{EventID: ev.ID, TicketID: change.TicketID, Duplicate: rec.Duplicate,
		Mirrored: rec.Mirror.Wrote, OwnWrite: rec.Own, CustomerActivity: rec.Event.CustomerActivity})
	switch {
	case rec.Duplicate:
		return "duplicate", secret
	case rec.Own:
		return "own_write", secret
	}
	return "accepted", secret
}

// verifiedBy says which signing secret made sig over timestamp and body:
// "current", "previous" (accepted only while a rotation retires it) or
// "none". Both are always compared, in constant time, so the answer's
// timing does not tell which one matched.
//
// Zendesk signs with one secret per webhook; resetting it replaces it at
// once (https://developer.zendesk.com/api-reference/webhooks/webhooks-api/webhooks/,
// "Reset Webhook Signing Secret"). A rotation without a gap therefore
// runs two webhooks side by side for a while, each with its own secret,
// and both deliver every event under the same event ID, so the second
// delivery is a duplicate that changes nothing (docs/security.md).
func (s *Server) verifiedBy(sig, timestamp string, body []byte) string {
	current := hmac.Equal([]byte(sig), []byte(Sign(s.cfg.WebhookSecret, timestamp, body)))
	previous := s.cfg.PreviousWebhookSecret != "" &&
		hmac.Equal([]byte(sig), []byte(Sign(s.cfg.PreviousWebhookSecret, timestamp, body)))
	switch {
	case current:
		return "current"
	case previous:
		return "previous"
	}
	return "none"
}

// badEvent answers a refused body: 400 for what is not clean JSON, 422 for
// JSON that is not a usable event.
func badEvent(w http.ResponseWriter, err error) {
	var be *ingest.BodyError
	if !errors.As(err, &be) {
		problem(w, http.StatusBadRequest, "malformed-json", "Malformed JSON", err.Error())
		return
	}
	status, title := http.StatusBadRequest, map[string]string{
		ingest.KindInvalidUTF8:  "Invalid UTF-8",
		ingest.KindNULCharacter: "NUL character",
		ingest.KindDuplicateKey: "Duplicate key",
		ingest.KindMalformed:    "Malformed JSON",
		ingest.KindUnknownShape: "Unknown event shape",
		ingest.KindInvalidEvent: "Invalid event",
	}[be.Kind]
	if be.Kind == ingest.KindUnknownShape || be.Kind == ingest.KindInvalidEvent {
		status = http.StatusUnprocessableEntity
	}
	problem(w, status, be.Kind, title, be.Detail)
}
