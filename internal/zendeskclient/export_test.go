package zendeskclient

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow/internal/standin"
)

func newStandinClient(t *testing.T) (*standin.Zendesk, *Client) {
	t.Helper()
	zd := standin.NewZendesk("a@b.test", "tok")
	srv := httptest.NewServer(zd)
	t.Cleanup(srv.Close)
	c, err := New(Config{URL: srv.URL, Email: "a@b.test", APIToken: "tok"})
	require.NoError(t, err)
	return zd, c
}

// Roles come from Show Many Users: the requester and a CC'd colleague
// are end users, a human agent and the API user staff; an unknown ID is
// left out.
func TestUserRoles_ShowMany(t *testing.T) {
	zd, c := newStandinClient(t)
	zd.AddUser(standin.User{ID: 501, Role: standin.RoleEndUser})
	zd.AddUser(standin.User{ID: 502, Role: standin.RoleAgent})
	zd.AddTicket(standin.Ticket{ID: 7, Subject: "s", Description: "d", RequesterID: 500})
	roles, err := c.UserRoles(context.Background(), []int64{500, 501, 502, standin.ZendeskAgentID, 999})
	require.NoError(t, err)
	assert.Equal(t, map[int64]string{500: "end-user", 501: "end-user", 502: "agent", standin.ZendeskAgentID: "admin"}, roles)
}

// A second with more events than a page: the page ends where it started,
// not at the end of the stream; TicketAudits reads who made each update
// and our action key.
func TestExportTicketEvents_StuckSecondAndAudits(t *testing.T) {
	zd, c := newStandinClient(t)
	zd.SetExports(standin.ExportConfig{Lag: -1, Limit: 1000, EventsPageLimit: 2})
	at := time.Now().Add(-time.Minute).Truncate(time.Second)
	for id := int64(1); id <= 3; id++ {
		zd.AddTicket(standin.Ticket{ID: id, Subject: "s", Description: "d", RequesterID: 100 + id})
		zd.AddComment(id, standin.SeedComment{Body: "again", At: at})
	}
	page, err := c.ExportTicketEvents(context.Background(), at.Unix(), 0)
	require.NoError(t, err)
	assert.Len(t, page.Events, 2)
	assert.False(t, page.EndOfStream)
	assert.Equal(t, at.Unix(), page.EndTime, "end_time == start_time: the second holds more than a page")

	_, err = c.UpdateTicket(context.Background(), 1, Update{Status: "pending"}, "key-1", "")
	require.NoError(t, err)
	audits, err := c.TicketAudits(context.Background(), 1, at)
	require.NoError(t, err)
	require.Len(t, audits, 3, "our update, the creation and the customer's comment")
	assert.Equal(t, standin.ZendeskAgentID, audits[0].AuthorID, "newest first")
	assert.Equal(t, "key-1", audits[0].ActionKey)
	for _, a := range audits[1:] {
		assert.Equal(t, int64(101), a.AuthorID)
		assert.Empty(t, a.ActionKey)
		require.Len(t, a.Comments, 1)
		assert.True(t, a.Comments[0].Public)
	}
	none, err := c.TicketAudits(context.Background(), 1, time.Now().Add(time.Hour))
	require.NoError(t, err)
	assert.Empty(t, none, "nothing since a later time")
}
