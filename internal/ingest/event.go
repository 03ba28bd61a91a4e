// Package ingest is how supportflow learns about tickets: Zendesk's ticket
// event webhooks, recorded at least once and applied exactly once, and a
// reconciler that reads Zendesk's incremental exports and repairs whatever
// the webhooks missed.
//
// Every event, from either source, lands in PostgreSQL in one transaction:
// the ticket's mirror (under the ticket's advisory lock) and a ticket_event
// row keyed by the event's ID. Only then is it acknowledged. A relay then
// hands the row to Temporal (the ticket's enrichment, and the supersede of
// a running draft when the customer wrote) and marks it dispatched, so a
// crash anywhere between Zendesk's delivery and Temporal loses nothing and
// a retried delivery is a no-op.
package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/supportflow/supportflow/internal/text"
)

// Zendesk's ticket event types that supportflow reads. Every other type,
// ticket or not, is acknowledged and ignored.
// https://developer.zendesk.com/api-reference/webhooks/event-types/ticket-events
const (
	TypeTicketCreated       = "zen:event-type:ticket.created"
	TypeTicketCommentAdded  = "zen:event-type:ticket.comment_added"
	TypeTicketStatusChanged = "zen:event-type:ticket.status_changed"
)

// The ticket event types that end a ticket's life as a conversation
// (listed on the ticket events page above). Their detail may come without
// a status (null or absent): the ticket is then mirrored as "deleted", the
// status the Tickets API reports for a deleted ticket, so the scan never
// drafts for it. updated_at may be absent on them too: the envelope's time
// (to the second) stands in.
const (
	TypeTicketSoftDeleted        = "zen:event-type:ticket.soft_deleted"
	TypeTicketPermanentlyDeleted = "zen:event-type:ticket.permanently_deleted"
	TypeTicketMarkedAsSpam       = "zen:event-type:ticket.marked_as_spam"
)

// Types whose detail may lack a status without the ticket being deleted:
// an undeleted or merged ticket's status is then unknown, and the mirror
// keeps the one it has.
const (
	TypeTicketUndeleted = "zen:event-type:ticket.undeleted"
	TypeTicketMerged    = "zen:event-type:ticket.merged"
)

// TypeMessageAdded is the messaging event of a message added to a
// messaging ticket's conversation, by an end user, an agent, a trigger or
// the system (event.actor.type). Its detail holds only the ticket's id.
// Only end users' messages are the customer speaking; an agent's is an
// agent speaking; a trigger's or the system's (a bot's greeting) is
// neither. It is the only messaging event type Zendesk documents.
// https://developer.zendesk.com/api-reference/webhooks/event-types/messaging-events
const TypeMessageAdded = "zen:event-type:messaging_ticket.message_added"

// Messaging actor types (event.actor.type of TypeMessageAdded).
const (
	ActorEndUser = "end_user"
	ActorAgent   = "agent"
	ActorTrigger = "trigger"
	ActorSystem  = "system"
)

// SystemActorID is the actor_id ticket events carry for a change no user
// made: a trigger, an automation, Zendesk itself ("-1"). It is never the
// customer and never supportflow.
const SystemActorID int64 = -1

// ticketTypePrefix is the domain of ticket events. Every ticket event
// carries the ticket's current fields in detail, so an event of a ticket
// type we do not otherwise read (subject_changed, tags_changed ...) still
// refreshes the mirror.
const ticketTypePrefix = "zen:event-type:ticket."

// Consumed reports whether supportflow acts on an event type: the three
// above, every other ticket.* type (mirror refresh only) and a messaging
// ticket's message (TypeMessageAdded).
func Consumed(eventType string) bool {
	return strings.HasPrefix(eventType, ticketTypePrefix) || eventType == TypeMessageAdded
}

// ErrBadBody is wrapped by every reason a webhook body is refused. The
// kinds below say which; each is a 4xx, never a 5xx.
var ErrBadBody = errors.New("bad webhook body")

// BodyError is a refused body: Kind is a stable slug for the problem+json
// type, Detail says what was wrong.
type BodyError struct {
	Kind   string
	Detail string
}

func (e *BodyError) Error() string { return e.Kind + ": " + e.Detail }
func (e *BodyError) Unwrap() error { return ErrBadBody }

func bad(kind, format string, args ...any) error {
	return &BodyError{Kind: kind, Detail: fmt.Sprintf(format, args...)}
}

// Body error kinds.
const (
	KindInvalidUTF8  = "invalid-utf8"
	KindNULCharacter = "nul-character"
	KindDuplicateKey = "duplicate-key"
	KindMalformed    = "malformed-json"
	KindUnknownShape = "unknown-shape"
	KindInvalidEvent = "invalid-event"
)

// Event is the envelope of a Zendesk event webhook.
// https://developer.zendesk.com/api-reference/webhooks/event-types/webhook-event-types/
type Event struct {
	Type      string          `json:"type"`
	ID        string          `json:"id"`
	Time      string          `json:"time"`
	AccountID json.Number     `json:"account_id"`
	Subject   string          `json:"subject"`
	Version   string          `json:"zendesk_event_version"`
	Detail    json.RawMessage `json:"detail"`
	Event     json.RawMessage `json:"event"`
}

// ID is a Zendesk ID as ticket events send them: a string of digits (the
// documented form), a JSON number, or null (zero).
type ID int64

// UnmarshalJSON accepts "123", 123 and null.
func (id *ID) UnmarshalJSON(b []byte) error {
	s := string(bytes.TrimSpace(b))
	if s == "null" {
		*id = 0
		return nil
	}
	if unq, err := strconv.Unquote(s); err == nil {
		s = unq
	}
	if s == "" {
		*id = 0
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return fmt.Errorf("id %s is not a non-negative integer", text.Clip(string(b), 40))
	}
	*id = ID(n)
	return nil
}

// ActorID is a user ID that may also be SystemActorID: "-1" (or -1) for
// a change no user made. Other negative values are refused.
type ActorID int64

// UnmarshalJSON accepts what ID accepts, and -1.
func (a *ActorID) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	if unq, err := strconv.Unquote(s); err == nil {
		s = strings.TrimSpace(unq)
	}
	if s == "-1" {
		*a = ActorID(SystemActorID)
		return nil
	}
	var id ID
	if err := id.UnmarshalJSON(b); err != nil {
		return err
	}
	*a = ActorID(id)
	return nil
}

// Tags are a ticket's tags as ticket events send them: an array of
// strings (the documented form), one string of space-separated tags (as
// Zendesk spells a tag list elsewhere, and as some deliveries carry it),
// or null. supportflow does not read tags; it only must not refuse them.
type Tags []string

// UnmarshalJSON accepts ["a","b"], "a b" and null.
func (t *Tags) UnmarshalJSON(b []byte) error {
	s := bytes.TrimSpace(b)
	switch {
	case string(s) == "null":
		*t = nil
		return nil
	case len(s) > 0 && s[0] == '"':
		var one string
		if err := json.Unmarshal(s, &one); err != nil {
			return err
		}
		*t = strings.Fields(one)
		return nil
	}
	var many []string
	if err := json.Unmarshal(s, &many); err != nil {
		return errors.New("tags must be an array of strings or a string")
	}
	*t = many
	return nil
}

// TicketDetail is a ticket event's detail: the ticket's fields after the
// change. Statuses come upper-case ("OPEN"); IDs as strings.
type TicketDetail struct {
	ID          ID      `json:"id"`
	ActorID     ActorID `json:"actor_id"`
	RequesterID ID      `json:"requester_id"`
	SubmitterID ID      `json:"submitter_id"`
	AssigneeID  ID      `json:"assignee_id"`
	Subject     string  `json:"subject"`
	// Status is nil when null or absent (tolerated on deletion events).
	Status    *string `json:"status"`
	Tags      Tags    `json:"tags"`
	CreatedAt string  `json:"created_at"`
	UpdatedAt string  `json:"updated_at"`
	Via       *struct {
		Channel string `json:"channel"`
	} `json:"via"`
}

// CommentAdded is the event object of ticket.comment_added.
type CommentAdded struct {
	Comment *struct {
		ID       ID     `json:"id"`
		Body     string `json:"body"`
		IsPublic *bool  `json:"is_public"`
		Author   struct {
			ID ActorID `json:"id"`
			// IsStaff is nil when the event does not say.
			IsStaff *bool `json:"is_staff"`
		} `json:"author"`
	} `json:"comment"`
}

// MessageAdded is the event object of TypeMessageAdded. The documented
// IDs are strings ("zd:answerBot" for a bot, digits for a user); a number
// is read as its digits, so a message is never refused for the shape of
// an ID it does not depend on.
type MessageAdded struct {
	Actor *struct {
		ID   TextID `json:"id"`
		Type string `json:"type"`
	} `json:"actor"`
	ConversationID TextID `json:"conversation_id"`
	Message        *struct {
		ID TextID `json:"id"`
	} `json:"message"`
}

// TextID is an identifier kept as text that Zendesk may send as a string,
// a number or null ("").
type TextID string

// UnmarshalJSON accepts "abc", 123 and null.
func (id *TextID) UnmarshalJSON(b []byte) error {
	s := bytes.TrimSpace(b)
	switch {
	case string(s) == "null":
		*id = ""
		return nil
	case len(s) > 0 && s[0] == '"':
		var v string
		if err := json.Unmarshal(s, &v); err != nil {
			return err
		}
		*id = TextID(v)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(s, &n); err != nil {
		return fmt.Errorf("id %s is neither a string nor a number", text.Clip(string(b), 40))
	}
	*id = TextID(n.String())
	return nil
}

// Change is the event object of ticket.status_changed (and other
// *_changed types): the values before and after.
type Change struct {
	Current  json.RawMessage `json:"current"`
	Previous json.RawMessage `json:"previous"`
}

// TicketChange is what a consumed ticket event tells supportflow.
type TicketChange struct {
	EventID   string
	EventType string
	TicketID  int64
	// At is when the event happened (its envelope time).
	At time.Time
	// UpdatedAt is the ticket's updated_at after the change; the mirror
	// never goes back to an older copy.
	UpdatedAt time.Time
	Subject   string
	// Status is lower case, as the Tickets API spells it; "" when the
	// event did not say (an undeleted or merged ticket): the mirror keeps
	// the status it has.
	Status      string
	RequesterID int64
	// ActorID is who made the change; SystemActorID for a trigger, an
	// automation or Zendesk itself.
	ActorID int64
	// Comment is set for ticket.comment_added.
	Comment *ChangeComment
	// Message is set for TypeMessageAdded, whose detail carries none of
	// the ticket's fields (UpdatedAt, Subject, Status and RequesterID are
	// then zero): only who spoke is learned.
	Message *ChangeMessage
}

// ChangeComment is the comment a ticket.comment_added event added.
type ChangeComment struct {
	ID       int64
	AuthorID int64
	// Staff is the author's is_staff; nil when the event did not say.
	Staff  *bool
	Public bool
	At     time.Time
}

// ChangeMessage is the message a TypeMessageAdded event added.
type ChangeMessage struct {
	// ActorType is event.actor.type: ActorEndUser, ActorAgent,
	// ActorTrigger, ActorSystem, or whatever else Zendesk sent ("" when
	// absent).
	ActorType string
	// ActorID is the actor's Zendesk user ID when event.actor.id is one
	// (a bot's is not: "zd:answerBot"), else 0.
	ActorID int64
	// At is the envelope's time to the whole second, the precision of a
	// comment's created_at in the Ticket Comments API, which a draft's
	// conversation_through is compared with.
	At time.Time
}

// statuses are the ticket statuses the mirror stores (lower case).
var statuses = map[string]bool{"new": true, "open": true, "pending": true, "hold": true, "solved": true, "closed": true, "deleted": true, "archived": true, "scrubbed": true}

// maxEventIDLen bounds an event ID (Zendesk's are UUIDs).
const maxEventIDLen = 128

// Parse checks a webhook body and reads the envelope. It refuses, with a
// *BodyError, a body that is not valid UTF-8, that holds a NUL character
// (PostgreSQL cannot store one in text), that repeats a key in any object
// (which JSON decoders resolve differently, so it is ambiguous), that is
// not one JSON object, or that lacks the envelope's type and id.
func Parse(body []byte) (Event, error) {
	var ev Event
	if err := CheckJSON(body); err != nil {
		return ev, err
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if err := dec.Decode(&ev); err != nil {
		var ute *json.UnmarshalTypeError
		if errors.As(err, &ute) {
			return ev, bad(KindUnknownShape, "field %q has the wrong type (%s)", ute.Field, ute.Value)
		}
		return ev, bad(KindMalformed, "%v", err)
	}
	if ev.Type == "" || ev.ID == "" {
		return ev, bad(KindUnknownShape, "not a Zendesk event: type and id are required")
	}
	if !strings.HasPrefix(ev.Type, "zen:event-type") {
		return ev, bad(KindUnknownShape, "type %q is not a Zendesk event type", text.Clip(ev.Type, 60))
	}
	if len(ev.ID) > maxEventIDLen {
		return ev, bad(KindInvalidEvent, "id is longer than %d characters", maxEventIDLen)
	}
	return ev, nil
}

// Ticket reads a consumed ticket event. Errors are *BodyError
// (invalid-event): a subject that is not zen:ticket:N or disagrees with
// detail.id, an unreadable time, an unknown status, a comment event
// without its comment. Zendesk's looser shapes are accepted: actor_id
// "-1" (SystemActorID), tags as a string, no status on a deletion event,
// no is_staff on a comment's author.
func (ev Event) Ticket() (TicketChange, error) {
	c := TicketChange{EventID: ev.ID, EventType: ev.Type}
	num, ok := strings.CutPrefix(ev.Subject, "zen:ticket:")
	id, err := strconv.ParseInt(num, 10, 64)
	if !ok || err != nil || id <= 0 {
		return c, bad(KindInvalidEvent, "subject %q must be zen:ticket:{positive id}", text.Clip(ev.Subject, 60))
	}
	c.TicketID = id
	if c.At, err = parseTime(ev.Time); err != nil {
		return c, bad(KindInvalidEvent, "time: %v", err)
	}
	if len(ev.Detail) == 0 || string(ev.Detail) == "null" {
		return c, bad(KindInvalidEvent, "detail is required for %s", ev.Type)
	}
	var d TicketDetail
	if err := json.Unmarshal(ev.Detail, &d); err != nil {
		return c, bad(KindInvalidEvent, "detail: %v", err)
	}
	if int64(d.ID) != id {
		return c, bad(KindInvalidEvent, "detail.id %d does not match subject %s", d.ID, ev.Subject)
	}
	if ev.Type == TypeMessageAdded {
		return ev.message(c)
	}
	deletion := ev.Type == TypeTicketSoftDeleted || ev.Type == TypeTicketPermanentlyDeleted || ev.Type == TypeTicketMarkedAsSpam
	loose := deletion || ev.Type == TypeTicketUndeleted || ev.Type == TypeTicketMerged
	if d.UpdatedAt == "" && loose {
		// The event's own time, to the second of Zendesk's updated_at.
		c.UpdatedAt = c.At.Truncate(time.Second)
	} else if c.UpdatedAt, err = parseTime(d.UpdatedAt); err != nil {
		return c, bad(KindInvalidEvent, "detail.updated_at: %v", err)
	}
	switch {
	case d.Status != nil && *d.Status != "":
		c.Status = strings.ToLower(*d.Status)
		if !statuses[c.Status] {
			return c, bad(KindInvalidEvent, "detail.status %q is not a ticket status", text.Clip(*d.Status, 20))
		}
	case deletion:
		c.Status = "deleted"
	case loose:
		c.Status = "" // unknown: the mirror keeps its own
	default:
		return c, bad(KindInvalidEvent, "detail.status is required for %s", text.Clip(ev.Type, 80))
	}
	if len(d.Subject) > 1024 {
		return c, bad(KindInvalidEvent, "detail.subject is longer than 1024 bytes")
	}
	c.Subject, c.RequesterID, c.ActorID = d.Subject, int64(d.RequesterID), int64(d.ActorID)
	if ev.Type == TypeTicketCommentAdded {
		var ca CommentAdded
		if err := json.Unmarshal(ev.Event, &ca); err != nil {
			return c, bad(KindInvalidEvent, "event: %v", err)
		}
		if ca.Comment == nil || ca.Comment.ID <= 0 || ca.Comment.IsPublic == nil {
			return c, bad(KindInvalidEvent, "event.comment with its id and is_public is required for %s", ev.Type)
		}
		// The comment's own time is not in the event; the ticket's
		// updated_at is the time of the update that added it, which is
		// also the comment's created_at in the exports the reconciler
		// reads, so both sources agree on "who spoke last".
		c.Comment = &ChangeComment{ID: int64(ca.Comment.ID), AuthorID: int64(ca.Comment.Author.ID),
			Staff: ca.Comment.Author.IsStaff, Public: *ca.Comment.IsPublic, At: c.UpdatedAt}
	}
	return c, nil
}

// message reads TypeMessageAdded: who wrote (event.actor.type), and when.
// A message without an actor is accepted and read as no one's (it moves
// neither "who spoke last").
func (ev Event) message(c TicketChange) (TicketChange, error) {
	var ma MessageAdded
	if len(ev.Event) > 0 && string(ev.Event) != "null" {
		if err := json.Unmarshal(ev.Event, &ma); err != nil {
			return c, bad(KindInvalidEvent, "event: %v", err)
		}
	}
	m := &ChangeMessage{At: c.At.Truncate(time.Second)}
	if ma.Actor != nil {
		m.ActorType = text.Clip(ma.Actor.Type, 40)
		if n, err := strconv.ParseInt(string(ma.Actor.ID), 10, 64); err == nil && n > 0 {
			m.ActorID = n
		}
	}
	c.Message, c.ActorID = m, m.ActorID
	return c, nil
}

// Times outside [minEventTime, now+maxClockSkew] are refused: an event
// from before Zendesk's ticket events, or from the future, would freeze a
// ticket's mirror ("newest wins") or never encode for Temporal.
var minEventTime = time.Date(2007, 1, 1, 0, 0, 0, 0, time.UTC)

const maxClockSkew = time.Hour

// parseTime reads an RFC 3339 time (Zendesk sends whole seconds in
// detail and nanoseconds in the envelope), kept to the microsecond that
// PostgreSQL stores, so a stored time compares equal to its source.
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, errors.New("missing")
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time", text.Clip(s, 40))
	}
	t = t.UTC().Truncate(time.Microsecond)
	if t.Before(minEventTime) || t.After(time.Now().Add(maxClockSkew)) {
		return time.Time{}, fmt.Errorf("%s is out of range (%s to an hour from now)", t.Format(time.RFC3339), minEventTime.Format("2006"))
	}
	return t, nil
}

// CheckJSON refuses what a JSON decoder would accept but supportflow must
// not: invalid UTF-8 (Go's decoder silently replaces it), a NUL character
// anywhere (raw or escaped as \u0000), a key repeated in one object
// (decoders disagree on which copy wins), and anything but exactly one
// object.
func CheckJSON(body []byte) error {
	if !utf8.Valid(body) {
		return bad(KindInvalidUTF8, "the body is not valid UTF-8")
	}
	if bytes.IndexByte(body, 0) >= 0 {
		return bad(KindNULCharacter, "the body holds a NUL character")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	// One frame per open container: for an object, its keys so far and
	// whether the next token is a key.
	type frame struct {
		keys      map[string]bool // nil for an array
		expectKey bool
	}
	var stack []*frame
	valueRead := func() {
		if n := len(stack); n > 0 && stack[n-1].keys != nil {
			stack[n-1].expectKey = true
		}
	}
	for first := true; ; first = false {
		tok, err := dec.Token()
		if err != nil {
			return bad(KindMalformed, "%v", err)
		}
		if d, ok := tok.(json.Delim); first && (!ok || d != '{') {
			return bad(KindMalformed, "the body must be one JSON object")
		}
		if n := len(stack); n > 0 && stack[n-1].keys != nil && stack[n-1].expectKey {
			if key, ok := tok.(string); ok {
				if strings.ContainsRune(key, 0) {
					return bad(KindNULCharacter, "a key holds a NUL character")
				}
				// Go's decoder matches field names without regard to case,
				// so "subject" and "Subject" are the same field to it: both
				// present is as ambiguous as one key twice.
				folded := strings.ToLower(key)
				if stack[n-1].keys[folded] {
					return bad(KindDuplicateKey, "the key %q appears twice in one object (keys are compared without case)", text.Clip(key, 60))
				}
				stack[n-1].keys[folded] = true
				stack[n-1].expectKey = false
				continue
			}
		}
		switch v := tok.(type) {
		case json.Delim:
			switch v {
			case '{':
				stack = append(stack, &frame{keys: map[string]bool{}, expectKey: true})
			case '[':
				stack = append(stack, &frame{})
			default: // '}' or ']'
				stack = stack[:len(stack)-1]
				valueRead()
			}
		case string:
			if strings.ContainsRune(v, 0) {
				return bad(KindNULCharacter, "a string holds a NUL character (\\u0000)")
			}
			valueRead()
		default:
			valueRead()
		}
		if len(stack) == 0 {
			// The object closed: only white space may follow.
			if _, err := dec.Token(); !errors.Is(err, io.EOF) {
				return bad(KindMalformed, "the body has data after its JSON object")
			}
			return nil
		}
	}
}
