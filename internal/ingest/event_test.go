package ingest_test

import (
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow/internal/ingest"
)

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	require.NoError(t, err)
	return b
}

// The documented payloads read as Zendesk means them: string IDs, upper
// case statuses, whole-second detail times.
func TestParse_DocumentedPayloads(t *testing.T) {
	ev, err := ingest.Parse(fixture(t, "ticket_created.json"))
	require.NoError(t, err)
	assert.Equal(t, ingest.TypeTicketCreated, ev.Type)
	assert.True(t, ingest.Consumed(ev.Type))
	c, err := ev.Ticket()
	require.NoError(t, err)
	assert.Equal(t, int64(5158), c.TicketID)
	assert.Equal(t, "open", c.Status)
	assert.Equal(t, int64(8447388090494), c.RequesterID)
	assert.Equal(t, int64(8447388090494), c.ActorID)
	assert.Equal(t, time.Date(2025, 1, 8, 10, 12, 7, 0, time.UTC), c.UpdatedAt)
	assert.Equal(t, time.Date(2025, 1, 8, 10, 12, 7, 672717000, time.UTC), c.At, "kept to the microsecond PostgreSQL stores")
	assert.Nil(t, c.Comment)

	ev, err = ingest.Parse(fixture(t, "ticket_comment_added.json"))
	require.NoError(t, err)
	c, err = ev.Ticket()
	require.NoError(t, err)
	require.NotNil(t, c.Comment)
	assert.Equal(t, int64(58789194475545), c.Comment.ID)
	assert.Equal(t, int64(58789189659033), c.Comment.AuthorID)
	assert.False(t, c.Comment.Public)
	assert.Equal(t, c.UpdatedAt, c.Comment.At, "a comment's time is the update's")

	ev, err = ingest.Parse(fixture(t, "ticket_status_changed.json"))
	require.NoError(t, err)
	c, err = ev.Ticket()
	require.NoError(t, err)
	assert.Equal(t, "solved", c.Status)
}

// Every bad body is refused with its own kind, never accepted halfway.
func TestParse_BadBodies(t *testing.T) {
	good := string(fixture(t, "ticket_created.json"))
	for name, tc := range map[string]struct {
		body, kind string
	}{
		"invalid UTF-8":               {"{\"type\":\"zen:event-type:ticket.created\",\"id\":\"a\xff\"}", ingest.KindInvalidUTF8},
		"raw NUL":                     {"{\"type\":\"zen:event-type:ticket.created\",\"id\":\"a\x00\"}", ingest.KindNULCharacter},
		"escaped NUL":                 {`{"type":"zen:event-type:ticket.created","id":"a\u0000b"}`, ingest.KindNULCharacter},
		"escaped NUL in a key":        {`{"type":"zen:event-type:ticket.created","id":"a","x\u0000":1}`, ingest.KindNULCharacter},
		"duplicate top-level key":     {`{"type":"zen:event-type:ticket.created","id":"a","id":"b"}`, ingest.KindDuplicateKey},
		"duplicate nested key":        {`{"type":"zen:event-type:ticket.created","id":"a","detail":{"status":"OPEN","status":"CLOSED"}}`, ingest.KindDuplicateKey},
		"keys differing only in case": {`{"type":"zen:event-type:ticket.created","id":"a","detail":{"subject":"x","Subject":"y"}}`, ingest.KindDuplicateKey},
		"duplicate key in an array":   {`{"type":"zen:event-type:ticket.created","id":"a","x":[{"k":1,"k":2}]}`, ingest.KindDuplicateKey},
		"an array":                    {`[1,2]`, ingest.KindMalformed},
		"two objects":                 {`{"id":"a"}{"id":"b"}`, ingest.KindMalformed},
		"truncated":                   {good[:len(good)/2], ingest.KindMalformed},
		"not an event":                {`{"event":"ticket.updated","ticket":{"id":1}}`, ingest.KindUnknownShape},
		"not a Zendesk type":          {`{"type":"ticket.created","id":"a"}`, ingest.KindUnknownShape},
		"type of the wrong type":      {`{"type":7,"id":"a"}`, ingest.KindUnknownShape},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ingest.Parse([]byte(tc.body))
			var be *ingest.BodyError
			require.True(t, errors.As(err, &be), "%v", err)
			assert.Equal(t, tc.kind, be.Kind, be.Detail)
			assert.ErrorIs(t, err, ingest.ErrBadBody)
			assert.NotEmpty(t, be.Detail)
		})
	}
	// Keys may repeat in different objects; that is not a duplicate.
	_, err := ingest.Parse([]byte(`{"type":"zen:event-type:user.created","id":"a","detail":{"id":"1"},"event":{"id":"2"}}`))
	assert.NoError(t, err)
}

// A ticket event whose parts disagree is refused as invalid.
func TestTicket_InvalidEvents(t *testing.T) {
	for name, body := range map[string]string{
		"subject not a ticket":    `{"type":"zen:event-type:ticket.created","id":"a","time":"2025-01-08T10:12:07Z","subject":"zen:user:1","detail":{"id":"1","status":"OPEN","updated_at":"2025-01-08T10:12:07Z"}}`,
		"detail id disagrees":     `{"type":"zen:event-type:ticket.created","id":"a","time":"2025-01-08T10:12:07Z","subject":"zen:ticket:1","detail":{"id":"2","status":"OPEN","updated_at":"2025-01-08T10:12:07Z"}}`,
		"unknown status":          `{"type":"zen:event-type:ticket.created","id":"a","time":"2025-01-08T10:12:07Z","subject":"zen:ticket:1","detail":{"id":"1","status":"MAYBE","updated_at":"2025-01-08T10:12:07Z"}}`,
		"no updated_at":           `{"type":"zen:event-type:ticket.created","id":"a","time":"2025-01-08T10:12:07Z","subject":"zen:ticket:1","detail":{"id":"1","status":"OPEN"}}`,
		"bad time":                `{"type":"zen:event-type:ticket.created","id":"a","time":"yesterday","subject":"zen:ticket:1","detail":{"id":"1","status":"OPEN","updated_at":"2025-01-08T10:12:07Z"}}`,
		"no detail":               `{"type":"zen:event-type:ticket.created","id":"a","time":"2025-01-08T10:12:07Z","subject":"zen:ticket:1"}`,
		"comment without comment": `{"type":"zen:event-type:ticket.comment_added","id":"a","time":"2025-01-08T10:12:07Z","subject":"zen:ticket:1","detail":{"id":"1","status":"OPEN","updated_at":"2025-01-08T10:12:07Z"},"event":{}}`,
		"negative id":             `{"type":"zen:event-type:ticket.created","id":"a","time":"2025-01-08T10:12:07Z","subject":"zen:ticket:1","detail":{"id":"1","status":"OPEN","updated_at":"2025-01-08T10:12:07Z","requester_id":"-4"}}`,
		"id past int64":           `{"type":"zen:event-type:ticket.created","id":"a","time":"2025-01-08T10:12:07Z","subject":"zen:ticket:99999999999999999999","detail":{"id":"1","status":"OPEN","updated_at":"2025-01-08T10:12:07Z"}}`,
	} {
		t.Run(name, func(t *testing.T) {
			ev, err := ingest.Parse([]byte(body))
			require.NoError(t, err)
			_, err = ev.Ticket()
			var be *ingest.BodyError
			require.True(t, errors.As(err, &be), "%v", err)
			assert.Equal(t, ingest.KindInvalidEvent, be.Kind)
		})
	}
	// IDs may come as numbers too.
	ev, err := ingest.Parse([]byte(`{"type":"zen:event-type:ticket.created","id":"a","time":"2025-01-08T10:12:07Z","subject":"zen:ticket:1","detail":{"id":1,"status":"new","updated_at":"2025-01-08T10:12:07Z","requester_id":42}}`))
	require.NoError(t, err)
	c, err := ev.Ticket()
	require.NoError(t, err)
	assert.Equal(t, int64(42), c.RequesterID)
	assert.Equal(t, "new", c.Status)
}

// Fuzzing Parse never panics and never accepts a NUL or invalid UTF-8.
func FuzzParse(f *testing.F) {
	f.Add([]byte(`{"type":"zen:event-type:ticket.created","id":"a"}`))
	f.Add([]byte(`{"a":{"b":[1,{"c":2,"c":3}]}}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		ev, err := ingest.Parse(body)
		if err != nil {
			return
		}
		if _, err := ev.Ticket(); err != nil {
			return
		}
	})
}

// Every shape Zendesk sends loosely parses, as documented: a CC'd end
// user's comment with is_staff, a system actor ("-1") with tags as one
// string, deletion events without a status (or an updated_at), and
// messaging messages whose detail holds only the ticket's id.
func TestTicket_ToleratedShapes(t *testing.T) {
	read := func(name string) ingest.TicketChange {
		t.Helper()
		ev, err := ingest.Parse(fixture(t, name))
		require.NoError(t, err, name)
		require.True(t, ingest.Consumed(ev.Type), name)
		c, err := ev.Ticket()
		require.NoError(t, err, name)
		return c
	}

	c := read("ticket_comment_added_cc.json")
	require.NotNil(t, c.Comment)
	assert.True(t, c.Comment.Public)
	assert.NotEqual(t, c.RequesterID, c.Comment.AuthorID, "not the requester")
	require.NotNil(t, c.Comment.Staff)
	assert.False(t, *c.Comment.Staff)
	assert.Equal(t, time.Date(2025, 1, 8, 10, 31, 12, 508311000, time.UTC), c.At, "the envelope time keeps its sub-second part")

	c = read("ticket_status_changed_system.json")
	assert.Equal(t, ingest.SystemActorID, c.ActorID)
	assert.Equal(t, "closed", c.Status)

	c = read("ticket_soft_deleted.json")
	assert.Equal(t, "deleted", c.Status, "a null status on a deletion event: the ticket is deleted")
	assert.Equal(t, time.Date(2025, 1, 9, 8, 2, 55, 0, time.UTC), c.UpdatedAt)

	c = read("ticket_permanently_deleted.json")
	assert.Equal(t, "deleted", c.Status)
	assert.Equal(t, ingest.SystemActorID, c.ActorID)
	assert.Equal(t, time.Date(2025, 2, 8, 8, 3, 1, 0, time.UTC), c.UpdatedAt, "no updated_at: the event's time, to the second")

	c = read("messaging_message_added_end_user.json")
	require.NotNil(t, c.Message)
	assert.Equal(t, ingest.ActorEndUser, c.Message.ActorType)
	assert.Equal(t, int64(58789189659033), c.Message.ActorID)
	assert.Equal(t, time.Date(2026, 6, 9, 9, 2, 17, 0, time.UTC), c.Message.At, "to the second, as comments' created_at")
	assert.Equal(t, int64(71447), c.TicketID)
	assert.Empty(t, c.Status, "a messaging event says nothing of the ticket's fields")

	c = read("messaging_message_added_bot.json")
	require.NotNil(t, c.Message)
	assert.Equal(t, ingest.ActorSystem, c.Message.ActorType)
	assert.Zero(t, c.Message.ActorID, "a bot's id is not a user id")

	// Inline variants of each loose field.
	const head = `{"type":"zen:event-type:%s","id":"a","time":"2025-01-08T10:12:07.5Z","subject":"zen:ticket:1",`
	for name, tc := range map[string]struct {
		body   string
		status string
		actor  int64
	}{
		"actor_id -1 as a number": {fmt.Sprintf(head, "ticket.status_changed") + `"detail":{"id":"1","actor_id":-1,"status":"OPEN","updated_at":"2025-01-08T10:12:07Z"}}`, "open", -1},
		"tags as a string":        {fmt.Sprintf(head, "ticket.tags_changed") + `"detail":{"id":"1","status":"OPEN","tags":"a b","updated_at":"2025-01-08T10:12:07Z"}}`, "open", 0},
		"tags null":               {fmt.Sprintf(head, "ticket.tags_changed") + `"detail":{"id":"1","status":"OPEN","tags":null,"updated_at":"2025-01-08T10:12:07Z"}}`, "open", 0},
		"soft deleted, no status": {fmt.Sprintf(head, "ticket.soft_deleted") + `"detail":{"id":"1","updated_at":"2025-01-08T10:12:07Z"}}`, "deleted", 0},
		"spam, null status":       {fmt.Sprintf(head, "ticket.marked_as_spam") + `"detail":{"id":"1","status":null,"updated_at":"2025-01-08T10:12:07Z"}}`, "deleted", 0},
		"undeleted, no status":    {fmt.Sprintf(head, "ticket.undeleted") + `"detail":{"id":"1","updated_at":"2025-01-08T10:12:07Z"}}`, "", 0},
		"merged, no status":       {fmt.Sprintf(head, "ticket.merged") + `"detail":{"id":"1","updated_at":"2025-01-08T10:12:07Z"}}`, "", 0},
		"deleted, status given":   {fmt.Sprintf(head, "ticket.soft_deleted") + `"detail":{"id":"1","status":"DELETED","updated_at":"2025-01-08T10:12:07Z"}}`, "deleted", 0},
		"comment without is_staff": {fmt.Sprintf(head, "ticket.comment_added") + `"detail":{"id":"1","status":"OPEN","updated_at":"2025-01-08T10:12:07Z"},` +
			`"event":{"comment":{"id":"9","is_public":true,"author":{"id":"5"}}}}`, "open", 0},
		"message without actor": {fmt.Sprintf(head, "messaging_ticket.message_added") + `"detail":{"id":"1"},"event":{"message":{"id":"m"}}}`, "", 0},
		"message with numeric ids": {fmt.Sprintf(head, "messaging_ticket.message_added") + `"detail":{"id":"1"},` +
			`"event":{"actor":{"id":58789189659033,"type":"end_user"},"conversation_id":77,"message":{"id":12,"body":"hi"}}}`, "", 58789189659033},
		"message with null ids": {fmt.Sprintf(head, "messaging_ticket.message_added") + `"detail":{"id":"1"},` +
			`"event":{"actor":{"id":null,"type":"end_user"},"conversation_id":null,"message":{"id":null}}}`, "", 0},
	} {
		t.Run(name, func(t *testing.T) {
			ev, err := ingest.Parse([]byte(tc.body))
			require.NoError(t, err)
			c, err := ev.Ticket()
			require.NoError(t, err)
			assert.Equal(t, tc.status, c.Status)
			assert.Equal(t, tc.actor, c.ActorID)
		})
	}

	// Still refused: what is truly malformed.
	for name, body := range map[string]string{
		"status absent on a status change": fmt.Sprintf(head, "ticket.status_changed") + `"detail":{"id":"1","updated_at":"2025-01-08T10:12:07Z"}}`,
		"actor_id -2":                      fmt.Sprintf(head, "ticket.status_changed") + `"detail":{"id":"1","actor_id":"-2","status":"OPEN","updated_at":"2025-01-08T10:12:07Z"}}`,
		"tags an object":                   fmt.Sprintf(head, "ticket.tags_changed") + `"detail":{"id":"1","status":"OPEN","tags":{"a":1},"updated_at":"2025-01-08T10:12:07Z"}}`,
		"deleted with a bad time":          fmt.Sprintf(head, "ticket.soft_deleted") + `"detail":{"id":"1","updated_at":"soon"}}`,
		"message of another ticket":        fmt.Sprintf(head, "messaging_ticket.message_added") + `"detail":{"id":"2"},"event":{}}`,
		"message with a bad event":         fmt.Sprintf(head, "messaging_ticket.message_added") + `"detail":{"id":"1"},"event":{"actor":"x"}}`,
		"message with an object for an id": fmt.Sprintf(head, "messaging_ticket.message_added") + `"detail":{"id":"1"},"event":{"actor":{"id":{"a":1},"type":"end_user"}}}`,
	} {
		t.Run("refused: "+name, func(t *testing.T) {
			ev, err := ingest.Parse([]byte(body))
			require.NoError(t, err)
			_, err = ev.Ticket()
			var be *ingest.BodyError
			require.True(t, errors.As(err, &be), "%v", err)
			assert.Equal(t, ingest.KindInvalidEvent, be.Kind)
		})
	}
	// Other messaging types stay ignored.
	assert.False(t, ingest.Consumed("zen:event-type:messaging_ticket.conversation_closed"))
}

// Who is waiting: any end user is a customer, staff and supportflow are
// not, the system is no one; without is_staff, the requester rule.
func TestSpeaker(t *testing.T) {
	yes, no := true, false
	const requester, own, colleague, agent = 10, 99, 11, 12
	for name, tc := range map[string]struct {
		author int64
		staff  *bool
		want   string
	}{
		"the requester":                   {requester, &no, ingest.SpeakerCustomer},
		"a CC'd end user":                 {colleague, &no, ingest.SpeakerCustomer},
		"an agent":                        {agent, &yes, ingest.SpeakerAgent},
		"supportflow":                     {own, &yes, ingest.SpeakerAgent},
		"supportflow, whatever it says":   {own, &no, ingest.SpeakerAgent},
		"the system":                      {ingest.SystemActorID, &no, ingest.SpeakerNone},
		"no is_staff: the requester":      {requester, nil, ingest.SpeakerCustomer},
		"no is_staff: anyone else":        {colleague, nil, ingest.SpeakerAgent},
		"no is_staff, no author":          {0, nil, ingest.SpeakerAgent},
		"an end user who is the own user": {own, nil, ingest.SpeakerAgent},
	} {
		assert.Equal(t, tc.want, ingest.Speaker(tc.author, tc.staff, requester, own), name)
	}
	assert.Equal(t, ingest.SpeakerCustomer, ingest.MessageSpeaker(ingest.ActorEndUser, 5, own))
	assert.Equal(t, ingest.SpeakerAgent, ingest.MessageSpeaker(ingest.ActorAgent, 6, own))
	assert.Equal(t, ingest.SpeakerAgent, ingest.MessageSpeaker(ingest.ActorEndUser, own, own), "our own user is never the customer")
	for _, typ := range []string{ingest.ActorTrigger, ingest.ActorSystem, "", "robot"} {
		assert.Equal(t, ingest.SpeakerNone, ingest.MessageSpeaker(typ, 0, own), typ)
	}
}
