package zendeskclient

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/standin"
)

const (
	testEmail = "agent@example.com"
	testToken = "zd-token"
	testKey   = "p1:0"
)

// auditsServer answers GET /api/v2/tickets/7/audits.json with the pages
// page returns for the n-th request (from 0), and keeps every request's
// query.
type auditsServer struct {
	mu      sync.Mutex
	queries []url.Values
	page    func(n int, q url.Values) map[string]any
}

func newAuditsServer(t *testing.T, page func(n int, q url.Values) map[string]any) (*auditsServer, *Client) {
	t.Helper()
	s := &auditsServer{page: page}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet || r.URL.Path != "/api/v2/tickets/7/audits.json" {
			http.NotFound(w, r)
			return
		}
		s.mu.Lock()
		n := len(s.queries)
		s.queries = append(s.queries, r.URL.Query())
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(s.page(n, r.URL.Query()))
	}))
	t.Cleanup(srv.Close)
	c, err := New(Config{URL: srv.URL, Email: testEmail, APIToken: testToken, HTTPClient: srv.Client()})
	require.NoError(t, err)
	return s, c
}

func (s *auditsServer) requests() []url.Values {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]url.Values(nil), s.queries...)
}

// audit is an audit as Zendesk lists it, with a comment event, and key in
// its custom metadata when not empty.
func audit(id int64, at time.Time, key string) map[string]any {
	custom := map[string]any{}
	if key != "" {
		custom[MetadataKey] = key
	}
	return map[string]any{
		"id": id, "ticket_id": 7, "created_at": at.UTC().Format(time.RFC3339),
		"metadata": map[string]any{"custom": custom, "system": map[string]any{}},
		"events":   []any{map[string]any{"id": id + 1, "type": "Comment"}},
	}
}

// The reviewer's case: a page that leaves meta.has_more out but has a
// cursor and a next link is not the end. The old search stopped there and
// answered "not found" for a key on the second page.
func TestFindAction_PageWithoutHasMoreIsNotTheEnd(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s, c := newAuditsServer(t, func(n int, q url.Values) map[string]any {
		switch q.Get("page[after]") {
		case "":
			return map[string]any{
				"audits": []any{audit(300, now, ""), audit(200, now.Add(-time.Second), "")},
				"meta":   map[string]any{"after_cursor": "c1", "before_cursor": "c0"},
				"links":  map[string]any{"next": "https://example.zendesk.com/api/v2/tickets/7/audits.json?page%5Bafter%5D=c1&page%5Bsize%5D=100"},
			}
		case "c1":
			return map[string]any{
				"audits": []any{audit(100, now.Add(-2*time.Second), testKey)},
				"meta":   map[string]any{"has_more": false, "after_cursor": "c2", "before_cursor": "c1"},
			}
		}
		t.Errorf("unexpected page[after] %q", q.Get("page[after]"))
		return map[string]any{"audits": []any{}}
	})
	l, found, err := c.FindAction(t.Context(), 7, testKey, now.Add(-time.Hour), true)
	require.NoError(t, err)
	require.True(t, found, "the key on the page after one without has_more is found")
	assert.Equal(t, Landed{AuditID: 100, CommentID: 101}, l)
	reqs := s.requests()
	require.Len(t, reqs, 2, "has_more false ends the search, although the page has a cursor")
	assert.Equal(t, "c1", reqs[1].Get("page[after]"))
}

// The parameters follow List Audits for a Ticket and the pagination pages:
// cursor pagination (page[size], at most 100), newest first with sort (not
// sort_order, offset pagination's parameter), has_more asked for with
// include_boundary_indicators, and nothing of offset pagination.
func TestFindAction_SendsTheDocumentedParameters(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s, c := newAuditsServer(t, func(n int, q url.Values) map[string]any {
		if n == 0 {
			return map[string]any{"audits": []any{audit(200, now, "")}, "meta": map[string]any{"has_more": true, "after_cursor": "c1"}}
		}
		return map[string]any{"audits": []any{audit(100, now, "")}, "meta": map[string]any{"has_more": false, "after_cursor": "c2"}}
	})
	_, found, err := c.FindAction(t.Context(), 7, testKey, time.Time{}, false)
	require.NoError(t, err)
	assert.False(t, found)
	reqs := s.requests()
	require.Len(t, reqs, 2)
	for i, q := range reqs {
		assert.Equal(t, "100", q.Get("page[size]"), i)
		assert.Equal(t, "-created_at", q.Get("sort"), i)
		assert.Equal(t, "true", q.Get("include_boundary_indicators"), i)
		for _, offsetOnly := range []string{"sort_order", "sort_by", "page", "per_page", "page[before]"} {
			assert.False(t, q.Has(offsetOnly), "request %d sends %s", i, offsetOnly)
		}
	}
	assert.False(t, reqs[0].Has("page[after]"))
	assert.Equal(t, "c1", reqs[1].Get("page[after]"))
}

// Without has_more and without after_cursor, links.next still carries the
// cursor; without either, and on an empty page, the listing has ended.
func TestFindAction_CursorFromTheNextLinkAndTheEnd(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s, c := newAuditsServer(t, func(n int, q url.Values) map[string]any {
		switch n {
		case 0:
			return map[string]any{"audits": []any{audit(300, now, "")},
				"links": map[string]any{"next": "https://example.zendesk.com/api/v2/tickets/7/audits.json?page%5Bafter%5D=from-link&page%5Bsize%5D=100"}}
		case 1:
			return map[string]any{"audits": []any{audit(200, now, "")}, "meta": map[string]any{"after_cursor": "c2"}}
		default:
			return map[string]any{"audits": []any{}, "meta": map[string]any{"after_cursor": nil}, "links": map[string]any{"next": "https://example.zendesk.com/x?page%5Bafter%5D=c3"}}
		}
	})
	_, found, err := c.FindAction(t.Context(), 7, testKey, time.Time{}, false)
	require.NoError(t, err)
	assert.False(t, found)
	reqs := s.requests()
	require.Len(t, reqs, 3, "an empty page without has_more ends the listing, whatever link it has")
	assert.Equal(t, "from-link", reqs[1].Get("page[after]"))
	assert.Equal(t, "c2", reqs[2].Get("page[after]"))

	s, c = newAuditsServer(t, func(int, url.Values) map[string]any {
		return map[string]any{"audits": []any{audit(300, now, "")}, "meta": map[string]any{}}
	})
	_, found, err = c.FindAction(t.Context(), 7, testKey, time.Time{}, false)
	require.NoError(t, err)
	assert.False(t, found)
	assert.Len(t, s.requests(), 1, "no has_more, no cursor, no link: the end")
}

// A listing that cannot be read to its end is an error, never "not
// found" (which would let the caller write again or settle the leg
// failed), and the search is bounded: has_more without a cursor, a cursor
// that comes back, a listing longer than the budget.
func TestFindAction_UnreadableListingIsAnErrorAndBounded(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for name, tc := range map[string]struct {
		page     func(n int, q url.Values) map[string]any
		requests int
		error    string
	}{
		"has_more without a cursor": {
			page: func(int, url.Values) map[string]any {
				return map[string]any{"audits": []any{audit(1, now, "")}, "meta": map[string]any{"has_more": true}}
			},
			requests: 1, error: "no after_cursor",
		},
		"the same cursor again": {
			page: func(n int, _ url.Values) map[string]any {
				// It ends (as the budget's case), so that a search that
				// follows it round fails this test instead of hanging it.
				return map[string]any{"audits": []any{audit(1, now, "")}, "meta": map[string]any{"has_more": n < 10, "after_cursor": "same"}}
			},
			requests: 2, error: "does not advance",
		},
		"the same cursor again, without has_more": {
			page: func(n int, _ url.Values) map[string]any {
				if n >= 10 {
					return map[string]any{"audits": []any{}}
				}
				return map[string]any{"audits": []any{audit(1, now, "")}, "meta": map[string]any{"after_cursor": "same"}}
			},
			requests: 2, error: "does not advance",
		},
		"more pages than the budget": {
			page: func(n int, _ url.Values) map[string]any {
				// It ends too.
				more := n < 2*maxAuditPages
				return map[string]any{"audits": []any{audit(int64(n+1), now, "")}, "meta": map[string]any{"has_more": more, "after_cursor": fmt.Sprint("c", n)}}
			},
			requests: maxAuditPages, error: "pages of audits",
		},
	} {
		t.Run(name, func(t *testing.T) {
			s, c := newAuditsServer(t, tc.page)
			_, found, err := c.FindAction(t.Context(), 7, testKey, time.Time{}, false)
			require.Error(t, err)
			assert.False(t, found)
			assert.Contains(t, err.Error(), tc.error)
			var zerr *Error
			require.ErrorAs(t, err, &zerr)
			assert.False(t, zerr.Permanent(), "retried")
			assert.False(t, zerr.MayHaveLanded(), "a read")
			assert.Len(t, s.requests(), tc.requests)
		})
	}
}

// A newest-first page all older than since ends the search without the
// next page: no attempt wrote before the reservation.
func TestFindAction_StopsAtSince(t *testing.T) {
	t.Parallel()
	now := time.Now()
	s, c := newAuditsServer(t, func(int, url.Values) map[string]any {
		return map[string]any{"audits": []any{audit(2, now.Add(-time.Hour), ""), audit(1, now.Add(-2*time.Hour), "")},
			"meta": map[string]any{"has_more": true, "after_cursor": "c1"}}
	})
	_, found, err := c.FindAction(t.Context(), 7, testKey, now.Add(-time.Minute), false)
	require.NoError(t, err)
	assert.False(t, found)
	assert.Len(t, s.requests(), 1)
}

// Against the Zendesk stand-in, which pages as the documentation says (and
// leaves has_more out unless include_boundary_indicators asks for it): our
// update between 150 older and 150 later ones is found on the second page,
// newest first; a key that is not there is searched for through every
// page. (Read oldest first, or stopped at the first page without has_more,
// the search would miss it.)
func TestFindAction_OnTheStandIn(t *testing.T) {
	t.Parallel()
	z := standin.NewZendesk(testEmail, testToken)
	srv := httptest.NewServer(z)
	t.Cleanup(srv.Close)
	c, err := New(Config{URL: srv.URL, Email: testEmail, APIToken: testToken, HTTPClient: srv.Client()})
	require.NoError(t, err)
	ticket := z.AddTicket(standin.Ticket{Subject: "x"})
	start := time.Now()
	for i := range 150 {
		z.AddComment(ticket, standin.SeedComment{Body: fmt.Sprint("earlier ", i)})
	}
	st, err := c.ReadTicket(t.Context(), ticket)
	require.NoError(t, err)
	ours, err := c.UpdateTicket(t.Context(), ticket, Update{Comment: &supportflow.Comment{Body: "ours", Public: true}}, testKey, st.Stamp)
	require.NoError(t, err)
	for i := range 150 {
		z.AddComment(ticket, standin.SeedComment{Body: fmt.Sprint("later ", i)})
	}
	path := fmt.Sprintf("/api/v2/tickets/%d/audits", ticket)

	l, found, err := c.FindAction(t.Context(), ticket, testKey, start.Add(-time.Minute), true)
	require.NoError(t, err)
	require.True(t, found)
	assert.Equal(t, ours, l)
	assert.Equal(t, 2, z.Requests(http.MethodGet, path), "newest first, ours is the 151st audit: on the second page of 100")

	_, found, err = c.FindAction(t.Context(), ticket, "p2:0", start.Add(-time.Minute), false)
	require.NoError(t, err)
	assert.False(t, found)
	assert.Equal(t, 2+4, z.Requests(http.MethodGet, path), "302 audits: every page read, then has_more false")
}
