package standin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nukosuke/go-zendesk/zendesk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const (
	testEmail    = "agent@example.com"
	testZDToken  = "zd-secret-token"
	testTicketID = 4242
)

// newZendeskEnv starts a Zendesk stand-in with one seeded ticket and returns
// it with a go-zendesk client pointed at it.
func newZendeskEnv(t *testing.T, httpClient *http.Client) (*Zendesk, *zendesk.Client, *httptest.Server) {
	t.Helper()
	z := NewZendesk(testEmail, testZDToken)
	z.AddTicket(Ticket{
		ID:          testTicketID,
		Subject:     "Cancel my plan",
		Description: "Please cancel my subscription.",
		RequesterID: 77,
		Status:      "open",
		Tags:        []string{"billing"},
	})
	srv := httptest.NewServer(z)
	t.Cleanup(srv.Close)
	return z, newZendeskClient(t, srv.URL, testEmail, testZDToken, httpClient), srv
}

func newZendeskClient(t *testing.T, baseURL, email, token string, httpClient *http.Client) *zendesk.Client {
	t.Helper()
	if httpClient == nil {
		// A client of our own, so no test shares connections with another.
		httpClient = &http.Client{Transport: &http.Transport{}}
	}
	c, err := zendesk.NewClient(httpClient)
	require.NoError(t, err)
	// go-zendesk appends paths such as "/tickets/1.json" to this URL.
	require.NoError(t, c.SetEndpointURL(baseURL+"/api/v2"))
	c.SetCredential(zendesk.NewAPITokenCredential(email, token))
	return c
}

// commentPayload is the update-ticket body supportflow sends.
func commentPayload(body string, metadata map[string]any) map[string]any {
	return map[string]any{"ticket": map[string]any{
		"comment":  map[string]any{"body": body, "public": true},
		"metadata": metadata,
	}}
}

func putComment(ctx context.Context, c *zendesk.Client, ticketID int64, body string, metadata map[string]any) ([]byte, error) {
	return c.Put(ctx, fmt.Sprintf("/tickets/%d.json", ticketID), commentPayload(body, metadata))
}

func TestZendeskShowTicket(t *testing.T) {
	_, c, _ := newZendeskEnv(t, nil)

	tk, err := c.GetTicket(t.Context(), testTicketID)
	require.NoError(t, err)
	assert.Equal(t, int64(testTicketID), tk.ID)
	assert.Equal(t, "Cancel my plan", tk.Subject)
	assert.Equal(t, "Please cancel my subscription.", tk.Description)
	assert.Equal(t, "open", tk.Status)
	assert.Equal(t, int64(77), tk.RequesterID)
	assert.Equal(t, []string{"billing"}, tk.Tags)
	require.NotNil(t, tk.CreatedAt)
	require.NotNil(t, tk.UpdatedAt)
	assert.WithinDuration(t, time.Now(), *tk.CreatedAt, time.Minute)
}

func TestZendeskShowTicketErrors(t *testing.T) {
	_, c, srv := newZendeskEnv(t, nil)

	_, err := c.GetTicket(t.Context(), 999)
	var zerr zendesk.Error
	require.ErrorAs(t, err, &zerr)
	assert.Equal(t, http.StatusNotFound, zerr.Status())
	assert.JSONEq(t, `{"error":"RecordNotFound","description":"Not found"}`, readAll(t, zerr.Body()))

	req, err := http.NewRequest(http.MethodGet, srv.URL+"/api/v2/tickets/abc.json", nil)
	require.NoError(t, err)
	req.SetBasicAuth(testEmail+"/token", testZDToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	var body map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
	assert.Equal(t, "BadRequest", body["error"])
}

func TestZendeskBadCredentials(t *testing.T) {
	z, _, srv := newZendeskEnv(t, nil)

	for name, c := range map[string]*zendesk.Client{
		"wrong token": newZendeskClient(t, srv.URL, testEmail, "nope", nil),
		"wrong email": newZendeskClient(t, srv.URL, "other@example.com", testZDToken, nil),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := putComment(t.Context(), c, testTicketID, "hello", nil)
			var zerr zendesk.Error
			require.ErrorAs(t, err, &zerr)
			assert.Equal(t, http.StatusUnauthorized, zerr.Status())
			assert.JSONEq(t, `{"error":"Couldn't authenticate you"}`, readAll(t, zerr.Body()))
		})
	}
	// The password credential (no "/token" suffix) is not the API token one.
	c, err := zendesk.NewClient(&http.Client{Transport: &http.Transport{}})
	require.NoError(t, err)
	require.NoError(t, c.SetEndpointURL(srv.URL+"/api/v2"))
	c.SetCredential(zendesk.NewBasicAuthCredential(testEmail, testZDToken))
	_, err = c.GetTicket(t.Context(), testTicketID)
	var zerr zendesk.Error
	require.ErrorAs(t, err, &zerr)
	assert.Equal(t, http.StatusUnauthorized, zerr.Status())

	assert.Equal(t, 0, z.TotalComments())
	assert.Equal(t, 3, z.Requests("", "/api/v2/"))
}

func TestZendeskPutCommentCarriesMetadata(t *testing.T) {
	z, c, _ := newZendeskEnv(t, nil)
	meta := map[string]any{"supportflow_action_id": "act-1", "attempt": float64(1)}

	raw, err := putComment(t.Context(), c, testTicketID, "We cancelled your plan.", meta)
	require.NoError(t, err)

	var resp struct {
		Ticket zendesk.Ticket      `json:"ticket"`
		Audit  zendesk.TicketAudit `json:"audit"`
	}
	require.NoError(t, json.Unmarshal(raw, &resp))
	assert.Equal(t, int64(testTicketID), resp.Ticket.ID)
	assert.Equal(t, int64(testTicketID), resp.Audit.TicketID)
	assert.NotZero(t, resp.Audit.ID)
	assert.Equal(t, ZendeskAgentID, resp.Audit.AuthorID)
	auditMeta, ok := resp.Audit.Metadata.(map[string]any)
	require.True(t, ok, "metadata is an object")
	assert.Equal(t, meta, auditMeta["custom"])
	assert.Equal(t, map[string]any{"client": "stand-in", "ip_address": "127.0.0.1"}, auditMeta["system"])
	require.Len(t, resp.Audit.Events, 1)
	ev, ok := resp.Audit.Events[0].(map[string]any)
	require.True(t, ok)
	assert.Equal(t, "Comment", ev["type"])
	assert.Equal(t, "We cancelled your plan.", ev["body"])
	assert.Equal(t, true, ev["public"])

	comments := z.Comments(testTicketID)
	require.Len(t, comments, 1)
	assert.Equal(t, "We cancelled your plan.", comments[0].Body)
	assert.True(t, comments[0].Public)
	assert.Equal(t, meta, comments[0].Metadata)
	assert.Equal(t, resp.Audit.ID, comments[0].AuditID)
	assert.Equal(t, int64(ev["id"].(float64)), comments[0].ID)
	assert.Equal(t, 1, z.CommentCount(testTicketID))
	assert.Equal(t, 1, z.TotalComments())

	// Mutating what Comments returned must not change the stand-in.
	comments[0].Metadata["attempt"] = float64(99)
	assert.Equal(t, float64(1), z.Comments(testTicketID)[0].Metadata["attempt"])
}

func TestZendeskCreateTicketCommentAndStatus(t *testing.T) {
	z, c, _ := newZendeskEnv(t, nil)

	// go-zendesk's own comment helper sends the same update-ticket request.
	_, err := c.CreateTicketComment(t.Context(), testTicketID, zendesk.NewPrivateTicketComment("internal note", 0))
	require.NoError(t, err)
	_, err = c.Put(t.Context(), fmt.Sprintf("/tickets/%d.json", testTicketID),
		map[string]any{"ticket": map[string]any{"status": "solved", "tags": []string{"billing", "cancelled"}}})
	require.NoError(t, err)

	comments := z.Comments(testTicketID)
	require.Len(t, comments, 1)
	assert.False(t, comments[0].Public)
	assert.Nil(t, comments[0].Metadata)
	tk, ok := z.Ticket(testTicketID)
	require.True(t, ok)
	assert.Equal(t, "solved", tk.Status)
	assert.Equal(t, []string{"billing", "cancelled"}, tk.Tags)
}

func TestZendeskTwoIdenticalPutsPostTwoComments(t *testing.T) {
	z, c, _ := newZendeskEnv(t, nil)
	meta := map[string]any{"supportflow_action_id": "act-1"}

	raw1, err := putComment(t.Context(), c, testTicketID, "same text", meta)
	require.NoError(t, err)
	raw2, err := putComment(t.Context(), c, testTicketID, "same text", meta)
	require.NoError(t, err)

	assert.Equal(t, 2, z.CommentCount(testTicketID), "Zendesk does not deduplicate updates")
	comments := z.Comments(testTicketID)
	require.Len(t, comments, 2)
	assert.Less(t, comments[0].ID, comments[1].ID)
	assert.Less(t, comments[0].AuditID, comments[1].AuditID)
	assert.NotEqual(t, auditID(t, raw1), auditID(t, raw2))

	res, err := c.ListTicketComments(t.Context(), testTicketID, nil)
	require.NoError(t, err)
	require.Len(t, res.TicketComments, 3, "description plus two comments")
	assert.Equal(t, "Please cancel my subscription.", res.TicketComments[0].Body)
	assert.Equal(t, "same text", res.TicketComments[1].Body)
	assert.Equal(t, comments[1].ID, res.TicketComments[2].ID)
	assert.Equal(t, map[string]any{"supportflow_action_id": "act-1"}, res.TicketComments[2].Metadata["custom"])
}

func TestZendeskPutValidation(t *testing.T) {
	z, c, srv := newZendeskEnv(t, nil)

	cases := []struct {
		name     string
		ticketID int64
		body     string
		status   int
		wantErr  string
	}{
		{"blank body", testTicketID, "  \n ", http.StatusUnprocessableEntity, "Comment body can't be blank"},
		{"too long", testTicketID, strings.Repeat("x", MaxCommentBytes+1), http.StatusUnprocessableEntity, "too long"},
		{"unknown ticket", 999, "hello", http.StatusNotFound, "RecordNotFound"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := putComment(t.Context(), c, tc.ticketID, tc.body, nil)
			var zerr zendesk.Error
			require.ErrorAs(t, err, &zerr)
			assert.Equal(t, tc.status, zerr.Status())
			assert.Contains(t, readAll(t, zerr.Body()), tc.wantErr)
		})
	}

	_, err := putComment(t.Context(), c, testTicketID, "", nil)
	var zerr zendesk.Error
	require.ErrorAs(t, err, &zerr)
	assert.JSONEq(t, `{"error":"RecordInvalid","description":"Record validation errors","details":{"base":[{"description":"Comment body can't be blank"}]}}`,
		readAll(t, zerr.Body()))

	// Exactly at the limit is accepted.
	_, err = putComment(t.Context(), c, testTicketID, strings.Repeat("y", MaxCommentBytes), nil)
	require.NoError(t, err)

	req, err := http.NewRequest(http.MethodPut, fmt.Sprintf("%s/api/v2/tickets/%d.json", srv.URL, testTicketID), strings.NewReader(`{"ticket": {`))
	require.NoError(t, err)
	req.SetBasicAuth(testEmail+"/token", testZDToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)

	assert.Equal(t, 1, z.CommentCount(testTicketID))
}

func TestZendeskAuditsPagination(t *testing.T) {
	z, c, _ := newZendeskEnv(t, nil)
	const posts = 120
	for i := range posts {
		_, err := putComment(t.Context(), c, testTicketID, fmt.Sprintf("comment %d", i), map[string]any{"n": i})
		require.NoError(t, err)
	}
	require.Equal(t, posts, z.CommentCount(testTicketID))

	// Default page size is 100.
	first, page, err := c.GetTicketAudits(t.Context(), testTicketID, zendesk.PageOptions{})
	require.NoError(t, err)
	assert.Len(t, first, 100)
	assert.Equal(t, int64(posts+1), page.Count)
	require.True(t, page.HasNext())
	assert.Contains(t, *page.NextPage, "page=2")
	assert.True(t, strings.HasPrefix(*page.NextPage, "http://"), "next_page is absolute")
	assert.False(t, page.HasPrev())

	var all []zendesk.TicketAudit
	for p := 1; ; p++ {
		audits, page, err := c.GetTicketAudits(t.Context(), testTicketID, zendesk.PageOptions{PerPage: 50, Page: p})
		require.NoError(t, err)
		all = append(all, audits...)
		if !page.HasNext() {
			assert.Equal(t, 3, p)
			assert.Len(t, audits, posts+1-100)
			break
		}
		require.Less(t, p, 10, "pagination must end")
	}
	require.Len(t, all, posts+1)

	// The creation audit comes first, with a Create event and no custom
	// metadata; then the comments in order.
	createMeta := all[0].Metadata.(map[string]any)
	assert.Equal(t, map[string]any{}, createMeta["custom"])
	var types []string
	for _, ev := range all[0].Events {
		types = append(types, ev.(map[string]any)["type"].(string))
	}
	assert.Contains(t, types, "Create")
	for i, a := range all[1:] {
		assert.Equal(t, map[string]any{"n": float64(i)}, a.Metadata.(map[string]any)["custom"])
		if i > 0 {
			assert.Greater(t, a.ID, all[i].ID)
		}
	}

	// Above the maximum, pages hold 100.
	audits, _, err := c.GetTicketAudits(t.Context(), testTicketID, zendesk.PageOptions{PerPage: 500})
	require.NoError(t, err)
	assert.Len(t, audits, 100)
}

// auditsPage is a List Audits for a Ticket answer with cursor pagination;
// raw keeps meta as sent, to tell a missing has_more from false.
type auditsPage struct {
	Audits []struct {
		ID int64 `json:"id"`
	} `json:"audits"`
	Meta struct {
		HasMore      *bool  `json:"has_more"`
		AfterCursor  string `json:"after_cursor"`
		BeforeCursor string `json:"before_cursor"`
	} `json:"meta"`
	Links struct {
		Next string `json:"next"`
		Prev string `json:"prev"`
	} `json:"links"`
	raw map[string]json.RawMessage
}

func (p auditsPage) ids() []int64 {
	ids := make([]int64, 0, len(p.Audits))
	for _, a := range p.Audits {
		ids = append(ids, a.ID)
	}
	return ids
}

// getAudits lists the test ticket's audits with query (or the absolute
// URL of a links.next or links.prev).
func getAudits(t *testing.T, c *zendesk.Client, srvURL, query string) auditsPage {
	t.Helper()
	path := fmt.Sprintf("/tickets/%d/audits.json?%s", testTicketID, query)
	if strings.HasPrefix(query, srvURL) {
		path = strings.TrimPrefix(query, srvURL+"/api/v2")
	}
	body, err := c.Get(t.Context(), path)
	require.NoError(t, err)
	var p auditsPage
	require.NoError(t, json.Unmarshal(body, &p))
	var top map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(body, &top))
	require.NoError(t, json.Unmarshal(top["meta"], &p.raw))
	return p
}

// Cursor pagination as List Audits for a Ticket and the pagination pages
// document it: page[size], sort (newest first with -created_at),
// meta.has_more only with include_boundary_indicators=true, after_cursor
// and links.next to go on, page[before] to go back; cursors name records,
// so an audit added between two pages neither repeats nor hides one.
func TestZendeskAuditsCursorPagination(t *testing.T) {
	_, c, srv := newZendeskEnv(t, nil)
	const posts = 120
	for i := range posts {
		_, err := putComment(t.Context(), c, testTicketID, fmt.Sprintf("comment %d", i), map[string]any{"n": i})
		require.NoError(t, err)
	}
	all := getAudits(t, c, srv.URL, "page[size]=100&sort=created_at&include_boundary_indicators=true")
	rest := getAudits(t, c, srv.URL, all.Links.Next)
	ascending := append(all.ids(), rest.ids()...)
	require.Len(t, ascending, posts+1)
	require.False(t, *rest.Meta.HasMore)

	first := getAudits(t, c, srv.URL, "page[size]=50&sort=-created_at&include_boundary_indicators=true")
	require.Len(t, first.Audits, 50)
	assert.Equal(t, ascending[posts], first.Audits[0].ID, "newest first")
	require.NotNil(t, first.Meta.HasMore)
	assert.True(t, *first.Meta.HasMore)
	assert.NotEmpty(t, first.Meta.AfterCursor)
	next, err := url.Parse(first.Links.Next)
	require.NoError(t, err)
	assert.Equal(t, srv.URL, next.Scheme+"://"+next.Host, "links.next is absolute")
	assert.Equal(t, first.Meta.AfterCursor, next.Query().Get("page[after]"))
	assert.Equal(t, "-created_at", next.Query().Get("sort"))
	assert.Equal(t, "50", next.Query().Get("page[size]"))

	// A comment posted between two pages is newer than the cursor: not on
	// the next pages, and none of them repeats or skips one.
	_, err = putComment(t.Context(), c, testTicketID, "meanwhile", nil)
	require.NoError(t, err)
	seen := first.ids()
	page := first
	for n := 1; *page.Meta.HasMore; n++ {
		require.Less(t, n, 10, "pagination must end")
		page = getAudits(t, c, srv.URL, page.Links.Next)
		seen = append(seen, page.ids()...)
	}
	assert.Len(t, page.Audits, posts+1-100)
	want := slices.Clone(ascending)
	slices.Reverse(want)
	assert.Equal(t, want, seen)
	assert.NotEmpty(t, page.Meta.AfterCursor, "the last page has cursors too; has_more false says it is the last")

	// page[before] goes back to the previous page.
	second := getAudits(t, c, srv.URL, "page[size]=50&sort=-created_at&include_boundary_indicators=true&page[after]="+first.Meta.AfterCursor)
	back := getAudits(t, c, srv.URL, second.Links.Prev)
	assert.Equal(t, first.ids(), back.ids())
	assert.Equal(t, first.ids(), getAudits(t, c, srv.URL, "page[size]=50&sort=-created_at&page[before]="+second.Meta.BeforeCursor).ids())

	// Without include_boundary_indicators there is no has_more; sort alone
	// orders cursor pagination (sort_order, offset pagination's, is
	// ignored), ascending by default.
	plain := getAudits(t, c, srv.URL, "page[size]=50&sort_order=desc")
	assert.NotContains(t, plain.raw, "has_more")
	assert.Contains(t, plain.raw, "after_cursor")
	assert.Equal(t, ascending[:50], plain.ids())
}

// What List Audits for a Ticket refuses: offset and cursor pagination
// together, page[after] with page[before], a cursor that is not one of the
// listing's (or of another order); and what the stand-in cannot do, a sort
// other than by created_at. Offset pagination sorts with sort_order.
func TestZendeskAuditsListRefusals(t *testing.T) {
	_, c, srv := newZendeskEnv(t, nil)
	for i := range 3 {
		_, err := putComment(t.Context(), c, testTicketID, fmt.Sprint("comment ", i), nil)
		require.NoError(t, err)
	}
	desc := getAudits(t, c, srv.URL, "page[size]=2&sort=-created_at")
	for name, query := range map[string]string{
		"offset and cursor":     "page=2&page[size]=10",
		"after and before":      "page[size]=2&page[after]=" + desc.Meta.AfterCursor + "&page[before]=" + desc.Meta.BeforeCursor,
		"unknown sort":          "page[size]=2&sort=name",
		"not a cursor":          "page[size]=2&page[after]=12",
		"cursor of other order": "page[size]=2&sort=created_at&page[after]=" + desc.Meta.AfterCursor,
		"bad sort_order":        "sort_order=sideways",
	} {
		_, err := c.Get(t.Context(), fmt.Sprintf("/tickets/%d/audits.json?%s", testTicketID, query))
		var zerr zendesk.Error
		if assert.ErrorAs(t, err, &zerr, name) {
			assert.Equal(t, http.StatusBadRequest, zerr.Status(), name)
		}
	}

	audits, _, err := c.GetTicketAudits(t.Context(), testTicketID, zendesk.PageOptions{})
	require.NoError(t, err)
	require.Len(t, audits, 4)
	body, err := c.Get(t.Context(), fmt.Sprintf("/tickets/%d/audits.json?sort_order=desc&per_page=2", testTicketID))
	require.NoError(t, err)
	var offset struct {
		Audits []struct {
			ID int64 `json:"id"`
		} `json:"audits"`
		NextPage *string `json:"next_page"`
	}
	require.NoError(t, json.Unmarshal(body, &offset))
	require.Len(t, offset.Audits, 2)
	assert.Equal(t, []int64{audits[3].ID, audits[2].ID}, []int64{offset.Audits[0].ID, offset.Audits[1].ID})
	assert.NotNil(t, offset.NextPage)
}

func TestZendeskFaultStatus500(t *testing.T) {
	z, c, _ := newZendeskEnv(t, nil)
	z.Inject(Fault{Method: http.MethodPut, Path: fmt.Sprintf("/api/v2/tickets/%d.json", testTicketID), Status: http.StatusInternalServerError})

	_, err := putComment(t.Context(), c, testTicketID, "hello", nil)
	var zerr zendesk.Error
	require.ErrorAs(t, err, &zerr)
	assert.Equal(t, http.StatusInternalServerError, zerr.Status())
	var body map[string]any
	require.NoError(t, json.Unmarshal([]byte(readAll(t, zerr.Body())), &body))
	assert.NotEmpty(t, body["error"])
	assert.Equal(t, 0, z.CommentCount(testTicketID), "a faulted status does not apply the request")

	// Times 0 means once.
	_, err = putComment(t.Context(), c, testTicketID, "hello", nil)
	require.NoError(t, err)
	assert.Equal(t, 1, z.CommentCount(testTicketID))
	assert.Equal(t, 2, z.Requests(http.MethodPut, "/api/v2/tickets/"))
}

func TestZendeskFault429RetryAfter(t *testing.T) {
	z, c, _ := newZendeskEnv(t, nil)
	z.Inject(Fault{Method: http.MethodPut, Status: http.StatusTooManyRequests, RetryAfter: 1500 * time.Millisecond})

	_, err := putComment(t.Context(), c, testTicketID, "hello", nil)
	var zerr zendesk.Error
	require.ErrorAs(t, err, &zerr)
	assert.Equal(t, http.StatusTooManyRequests, zerr.Status())
	assert.Equal(t, "2", zerr.Headers().Get("Retry-After"), "rounded up to whole seconds")
	assert.Equal(t, 0, z.CommentCount(testTicketID))
}

func TestZendeskFaultDelay(t *testing.T) {
	// The client gives up before the delayed request is handled; the
	// stand-in still applies it, as a real server would.
	z, c, _ := newZendeskEnv(t, &http.Client{Transport: &http.Transport{}, Timeout: 50 * time.Millisecond})
	z.Inject(Fault{Method: http.MethodPut, Delay: 300 * time.Millisecond})

	_, err := putComment(t.Context(), c, testTicketID, "slow", nil)
	require.Error(t, err)
	var zerr zendesk.Error
	assert.False(t, errors.As(err, &zerr), "a timeout, not an HTTP error")
	assert.Equal(t, 0, z.CommentCount(testTicketID), "not applied during the delay")
	assert.Eventually(t, func() bool { return z.CommentCount(testTicketID) == 1 }, 2*time.Second, 10*time.Millisecond)
}

func TestZendeskFaultDelayAfterApply(t *testing.T) {
	z, c, _ := newZendeskEnv(t, &http.Client{Transport: &http.Transport{}, Timeout: 100 * time.Millisecond})
	z.Inject(Fault{Method: http.MethodPut, DelayAfterApply: 400 * time.Millisecond})

	_, err := putComment(t.Context(), c, testTicketID, "landed", nil)
	require.Error(t, err, "the response comes too late")
	assert.Equal(t, 1, z.CommentCount(testTicketID), "applied before the delay")

	// Without the client deadline the delayed response does arrive.
	z.Inject(Fault{Method: http.MethodPut, DelayAfterApply: 50 * time.Millisecond})
	_, c2, _ := newZendeskEnvFor(t, z)
	start := time.Now()
	_, err = putComment(t.Context(), c2, testTicketID, "landed again", nil)
	require.NoError(t, err)
	assert.GreaterOrEqual(t, time.Since(start), 50*time.Millisecond)
	assert.Equal(t, 2, z.CommentCount(testTicketID))
}

// newZendeskEnvFor serves an existing stand-in on a new server.
func newZendeskEnvFor(t *testing.T, z *Zendesk) (*Zendesk, *zendesk.Client, *httptest.Server) {
	t.Helper()
	srv := httptest.NewServer(z)
	t.Cleanup(srv.Close)
	return z, newZendeskClient(t, srv.URL, testEmail, testZDToken, nil), srv
}

func TestZendeskFaultDropAfterApply(t *testing.T) {
	z, c, _ := newZendeskEnv(t, nil)
	// Warm up the connection so the drop happens on a reused one, where
	// net/http would retry a request it considered replayable.
	_, err := c.GetTicket(t.Context(), testTicketID)
	require.NoError(t, err)
	z.Inject(Fault{Method: http.MethodPut, DropAfterApply: true})

	_, err = putComment(t.Context(), c, testTicketID, "lost response", nil)
	require.Error(t, err)
	var zerr zendesk.Error
	assert.False(t, errors.As(err, &zerr), "a transport error, not an HTTP error: %v", err)
	assert.Equal(t, 1, z.CommentCount(testTicketID), "the write landed although its response was lost")
	assert.Equal(t, 1, z.Requests(http.MethodPut, "/api/v2/tickets/"), "no hidden retry")

	// A naive retry posts a duplicate: this is what supportflow must avoid.
	_, err = putComment(t.Context(), c, testTicketID, "lost response", nil)
	require.NoError(t, err)
	assert.Equal(t, 2, z.CommentCount(testTicketID))
}

func TestZendeskFaultTimesAndMatching(t *testing.T) {
	z, c, _ := newZendeskEnv(t, nil)
	put := func() error {
		_, err := putComment(t.Context(), c, testTicketID, "x", nil)
		return err
	}

	// A fault for another method or path does not apply.
	z.Inject(Fault{Method: http.MethodGet, Status: http.StatusInternalServerError, Times: -1})
	z.Inject(Fault{Path: "/api/v2/tickets/1.json", Status: http.StatusInternalServerError, Times: -1})
	require.NoError(t, put())
	z.ClearFaults()

	// Times: 2 fails exactly two requests.
	z.Inject(Fault{Path: "/api/v2/tickets/*", Status: http.StatusBadGateway, Times: 2})
	assert.Error(t, put())
	assert.Error(t, put())
	assert.NoError(t, put())

	// Injection order: the first matching fault is used up first.
	z.Inject(Fault{Method: http.MethodPut, Status: http.StatusServiceUnavailable})
	z.Inject(Fault{Method: http.MethodPut, Status: http.StatusTooManyRequests})
	assertStatus(t, put(), http.StatusServiceUnavailable)
	assertStatus(t, put(), http.StatusTooManyRequests)
	assert.NoError(t, put())

	// Negative Times lasts until cleared.
	z.Inject(Fault{Status: http.StatusInternalServerError, Times: -1})
	for range 5 {
		assertStatus(t, put(), http.StatusInternalServerError)
	}
	_, err := c.GetTicket(t.Context(), testTicketID)
	assertStatus(t, err, http.StatusInternalServerError)
	z.ClearFaults()
	assert.NoError(t, put())

	assert.Equal(t, 4, z.CommentCount(testTicketID))
	assert.Equal(t, 13, z.Requests(http.MethodPut, ""))
	assert.Equal(t, 1, z.Requests(http.MethodGet, "/api/v2/tickets/"))
}

func TestZendeskFaultArrived(t *testing.T) {
	z, c, _ := newZendeskEnv(t, nil)
	arrived := make(chan string, 1)
	z.Inject(Fault{Method: http.MethodPut, Delay: 300 * time.Millisecond, Arrived: arrived})

	done := make(chan error, 1)
	go func() {
		_, err := putComment(context.Background(), c, testTicketID, "mid-call", nil)
		done <- err
	}()

	select {
	case path := <-arrived:
		assert.Equal(t, fmt.Sprintf("/api/v2/tickets/%d.json", testTicketID), path)
	case <-time.After(5 * time.Second):
		require.FailNow(t, "request never arrived")
	}
	// The test can act here, while the call is in flight.
	assert.Equal(t, 0, z.CommentCount(testTicketID))
	require.NoError(t, <-done)
	assert.Equal(t, 1, z.CommentCount(testTicketID))

	// A full channel never blocks the stand-in.
	full := make(chan string)
	z.Inject(Fault{Arrived: full})
	_, err := putComment(t.Context(), c, testTicketID, "again", nil)
	require.NoError(t, err)
}

func TestZendeskAddTicket(t *testing.T) {
	z := NewZendesk(testEmail, testZDToken)
	a := z.AddTicket(Ticket{Subject: "a"})
	b := z.AddTicket(Ticket{Subject: "b"})
	assert.Equal(t, int64(1), a)
	assert.Equal(t, int64(2), b)
	assert.Equal(t, int64(100), z.AddTicket(Ticket{ID: 100}))
	assert.Equal(t, int64(101), z.AddTicket(Ticket{}))
	assert.Panics(t, func() { z.AddTicket(Ticket{ID: 100}) })

	tk, ok := z.Ticket(a)
	require.True(t, ok)
	assert.Equal(t, "new", tk.Status)
	assert.Nil(t, z.Comments(a), "the description is not a posted comment")
	assert.Equal(t, 0, z.CommentCount(a))
	assert.Equal(t, 0, z.CommentCount(12345))
}

func TestListen(t *testing.T) {
	z := NewZendesk(testEmail, testZDToken)
	z.AddTicket(Ticket{ID: 7, Subject: "listen"})
	srv, err := Listen(z, "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = srv.Close() })
	require.True(t, strings.HasPrefix(srv.URL(), "http://127.0.0.1:"))

	c := newZendeskClient(t, srv.URL(), testEmail, testZDToken, nil)
	tk, err := c.GetTicket(t.Context(), 7)
	require.NoError(t, err)
	assert.Equal(t, "listen", tk.Subject)

	// DropAfterApply also works on a plain http.Server.
	z.Inject(Fault{Method: http.MethodPut, DropAfterApply: true})
	_, err = putComment(t.Context(), c, 7, "dropped", nil)
	require.Error(t, err)
	assert.Equal(t, 1, z.CommentCount(7))

	require.NoError(t, srv.Close())
	assert.NoError(t, srv.Close(), "Close is idempotent")
	_, err = c.GetTicket(t.Context(), 7)
	assert.Error(t, err, "closed server refuses connections")
}

func assertStatus(t *testing.T, err error, status int) {
	t.Helper()
	var zerr zendesk.Error
	if assert.ErrorAs(t, err, &zerr) {
		assert.Equal(t, status, zerr.Status())
	}
}

func auditID(t *testing.T, raw []byte) int64 {
	t.Helper()
	var resp struct {
		Audit struct {
			ID int64 `json:"id"`
		} `json:"audit"`
	}
	require.NoError(t, json.Unmarshal(raw, &resp))
	require.NotZero(t, resp.Audit.ID)
	return resp.Audit.ID
}

func readAll(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	require.NoError(t, err)
	return string(b)
}

// List comments side-loads every user the comments refer to, each with its
// role: the requester, the API user, and seeded users (a CC'd end user, a
// human agent) who wrote comments.
func TestZendeskListCommentsSideloadsAuthorsWithRoles(t *testing.T) {
	z, c, _ := newZendeskEnv(t, nil)
	z.AddUser(User{ID: 501, Name: "Cy", Role: RoleEndUser})
	z.AddUser(User{ID: 601, Name: "Dee", Role: RoleAgent})
	z.AddComment(testTicketID, SeedComment{AuthorID: 501, Body: "cc here"})
	z.AddComment(testTicketID, SeedComment{AuthorID: 601, Body: "agent here"})
	z.AddComment(testTicketID, SeedComment{Agent: true, Body: "api user here"})

	res, err := c.ListTicketComments(t.Context(), testTicketID, &zendesk.ListTicketCommentsOptions{Include: "users"})
	require.NoError(t, err)
	var authors []int64
	for _, cm := range res.TicketComments {
		authors = append(authors, cm.AuthorID)
	}
	assert.Equal(t, []int64{77, 501, 601, ZendeskAgentID}, authors)
	roles := map[int64]string{}
	for _, u := range res.Users {
		roles[u.ID] = u.Role + "/" + u.Name
	}
	assert.Equal(t, map[int64]string{77: "end-user/Customer 77", 501: "end-user/Cy", 601: "agent/Dee", ZendeskAgentID: "agent/Support Agent"}, roles)

	res, err = c.ListTicketComments(t.Context(), testTicketID, nil)
	require.NoError(t, err)
	assert.Empty(t, res.Users, "users only when asked for")
}
