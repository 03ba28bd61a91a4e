package ingest_test

import (
	"errors"
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
