package zendeskclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// This file holds the reads the reconciler needs and go-zendesk v0.18.0
// does not type: the incremental exports and the API user. The exports
// are limited to 10 requests a minute per account and leave out the most
// recent minute.
// https://developer.zendesk.com/api-reference/ticketing/ticket-management/incremental_exports/

// Me returns the ID of the user the API token belongs to, the actor of
// every change supportflow makes.
// https://developer.zendesk.com/api-reference/ticketing/users/users/#show-the-currently-authenticated-user
func (c *Client) Me(ctx context.Context) (int64, error) {
	var resp struct {
		User struct {
			ID int64 `json:"id"`
		} `json:"user"`
	}
	if err := c.getJSON(ctx, "show the API user", "/users/me.json", &resp); err != nil {
		return 0, err
	}
	if resp.User.ID <= 0 {
		return 0, &Error{Op: "show the API user", Err: fmt.Errorf("unreadable answer: no user id")}
	}
	return resp.User.ID, nil
}

// getJSON reads path (a GET that writes nothing) into v; a failed call is
// classified, an answer that does not decode is an *Error.
func (c *Client) getJSON(ctx context.Context, op, path string, v any) error {
	body, err := c.api.Get(ctx, path)
	if err != nil {
		return classify(ctx, op, err, false)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return &Error{Op: op, Err: fmt.Errorf("unreadable answer: %w", err)}
	}
	return nil
}

// ExportedTicket is a ticket row of the incremental ticket export.
type ExportedTicket struct {
	ID          int64     `json:"id"`
	Subject     string    `json:"subject"`
	Status      string    `json:"status"`
	RequesterID int64     `json:"requester_id"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
}

// TicketPage is one page of the cursor-based ticket export.
type TicketPage struct {
	Tickets     []ExportedTicket `json:"tickets"`
	AfterCursor string           `json:"after_cursor"`
	EndOfStream bool             `json:"end_of_stream"`
}

// ExportTickets reads a page of the cursor-based incremental ticket
// export: from cursor when it is set, else from start (which must be at
// least a minute in the past). Keep the page's AfterCursor for the next
// page and, once EndOfStream, for the next export.
// https://developer.zendesk.com/api-reference/ticketing/ticket-management/incremental_exports/#incremental-ticket-export-cursor-based
func (c *Client) ExportTickets(ctx context.Context, cursor string, start time.Time, perPage int) (TicketPage, error) {
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor)
	} else {
		q.Set("start_time", strconv.FormatInt(start.Unix(), 10))
	}
	q.Set("exclude_deleted", "false")
	q.Set("support_type_scope", "all")
	if perPage > 0 {
		q.Set("per_page", strconv.Itoa(perPage))
	}
	var page TicketPage
	if err := c.getJSON(ctx, "export tickets", "/incremental/tickets/cursor.json?"+q.Encode(), &page); err != nil {
		return page, err
	}
	if page.AfterCursor == "" && !page.EndOfStream {
		return page, &Error{Op: "export tickets", Err: fmt.Errorf("a page without after_cursor that is not the end")}
	}
	return page, nil
}

// TicketEventRow is a ticket event of the incremental ticket event
// export: one ticket update and its child events.
type TicketEventRow struct {
	ID          int64        `json:"id"`
	TicketID    int64        `json:"ticket_id"`
	Timestamp   int64        `json:"timestamp"`
	UpdaterID   int64        `json:"updater_id"`
	ChildEvents []ChildEvent `json:"child_events"`
}

// ChildEvent is one change of a ticket event; with include=comment_events
// a comment carries its author, visibility and time.
type ChildEvent struct {
	ID        int64     `json:"id"`
	EventType string    `json:"event_type"`
	AuthorID  int64     `json:"author_id"`
	Public    *bool     `json:"public"`
	CreatedAt time.Time `json:"created_at"`
}

// EventPage is one page of the ticket event export.
type EventPage struct {
	Events      []TicketEventRow `json:"ticket_events"`
	EndTime     int64            `json:"end_time"`
	EndOfStream bool             `json:"end_of_stream"`
}

// MaxExportPerPage is the most rows a time-based export page may be asked
// for (per_page); it is also Zendesk's default.
// https://developer.zendesk.com/documentation/ticketing/managing-tickets/using-the-incremental-export-api/#time-based-incremental-exports
const MaxExportPerPage = 1000

// ExportTicketEvents reads a page of the time-based incremental ticket
// event export from start (Unix seconds), comments included, perPage rows
// at most (0: Zendesk's default of 1,000). The next page starts at
// EndTime; rows at that second may repeat, so callers deduplicate by ID. A
// page whose EndTime is start and that is not the end of the stream holds
// only events of that second: there are more of them than a page.
// https://developer.zendesk.com/api-reference/ticketing/ticket-management/incremental_exports/#incremental-ticket-event-export
func (c *Client) ExportTicketEvents(ctx context.Context, start int64, perPage int) (EventPage, error) {
	q := url.Values{"start_time": {strconv.FormatInt(start, 10)}, "include": {"comment_events"}, "support_type_scope": {"all"}}
	if perPage > 0 {
		q.Set("per_page", strconv.Itoa(min(perPage, MaxExportPerPage)))
	}
	var page EventPage
	err := c.getJSON(ctx, "export ticket events", "/incremental/ticket_events.json?"+q.Encode(), &page)
	return page, err
}

// maxShowMany is how many IDs one Show Many Users request takes.
const maxShowMany = 100

// UserRoles returns the Zendesk role ("end-user", "agent" or "admin") of
// each user of ids that Zendesk knows, reading Show Many Users 100 IDs a
// request. A user Zendesk does not return (deleted, or never existed) is
// left out of the map.
// https://developer.zendesk.com/api-reference/ticketing/users/users/#show-many-users
func (c *Client) UserRoles(ctx context.Context, ids []int64) (map[int64]string, error) {
	roles := make(map[int64]string, len(ids))
	for len(ids) > 0 {
		n := min(len(ids), maxShowMany)
		batch := ids[:n]
		ids = ids[n:]
		parts := make([]string, len(batch))
		for i, id := range batch {
			parts[i] = strconv.FormatInt(id, 10)
		}
		var resp struct {
			Users []struct {
				ID   int64  `json:"id"`
				Role string `json:"role"`
			} `json:"users"`
		}
		if err := c.getJSON(ctx, "show many users", "/users/show_many.json?"+url.Values{"ids": {strings.Join(parts, ",")}}.Encode(), &resp); err != nil {
			return nil, err
		}
		for _, u := range resp.Users {
			if u.ID > 0 && u.Role != "" {
				roles[u.ID] = u.Role
			}
		}
	}
	return roles, nil
}

// TicketAudit is one update of a ticket as its audit tells it: who made
// it, when, whether it carried supportflow's action key (MetadataKey),
// and its comments.
type TicketAudit struct {
	ID        int64
	AuthorID  int64
	CreatedAt time.Time
	// ActionKey is the update's supportflow action key ("" when none):
	// the update was supportflow's own.
	ActionKey string
	Comments  []AuditComment
}

// AuditComment is a comment an audit added.
type AuditComment struct {
	ID       int64
	AuthorID int64
	Public   bool
}

// TicketAudits returns the ticket's audits created at or after since
// (every audit when since is zero), newest first, read with cursor
// pagination (as FindAction reads them) until an audit older than since.
// At most maxAuditPages pages are read; a ticket with more audits since
// then is an error wrapping ErrTooManyAudits.
// https://developer.zendesk.com/api-reference/ticketing/tickets/ticket_audits/#list-audits-for-a-ticket
func (c *Client) TicketAudits(ctx context.Context, ticketID int64, since time.Time) ([]TicketAudit, error) {
	return c.TicketAuditsPaced(ctx, ticketID, since, maxAuditPages, nil)
}

// TicketAuditsPaced is TicketAudits reading at most maxPages pages (0 or
// more than maxAuditPages means maxAuditPages; over it, an error wrapping
// ErrTooManyAudits) and calling wait, when set, before every page request:
// each page is a request that counts toward the account's rate limit, so a
// caller that paces its reads paces pages, not calls. An error from wait
// ends the read with that error.
// https://developer.zendesk.com/api-reference/introduction/rate-limits/
func (c *Client) TicketAuditsPaced(ctx context.Context, ticketID int64, since time.Time, maxPages int,
	wait func(context.Context) error) ([]TicketAudit, error) {
	if maxPages <= 0 || maxPages > maxAuditPages {
		maxPages = maxAuditPages
	}
	op := "list audits of ticket " + strconv.FormatInt(ticketID, 10)
	path := "/tickets/" + strconv.FormatInt(ticketID, 10) + "/audits.json?"
	var out []TicketAudit
	after := ""
	seen := map[string]bool{}
	for pages := 0; pages < maxPages; pages++ {
		if wait != nil {
			if err := wait(ctx); err != nil {
				return nil, err
			}
		}
		q := url.Values{"page[size]": {"100"}, "sort": {"-created_at"}, "include_boundary_indicators": {"true"}}
		if after != "" {
			q.Set("page[after]", after)
		}
		var page struct {
			Audits []struct {
				ID        int64     `json:"id"`
				AuthorID  int64     `json:"author_id"`
				CreatedAt time.Time `json:"created_at"`
				Metadata  any       `json:"metadata"`
				Events    []struct {
					ID       int64  `json:"id"`
					Type     string `json:"type"`
					AuthorID int64  `json:"author_id"`
					Public   *bool  `json:"public"`
				} `json:"events"`
			} `json:"audits"`
			Meta  json.RawMessage `json:"meta"`
			Links json.RawMessage `json:"links"`
		}
		if err := c.getJSON(ctx, op, path+q.Encode(), &page); err != nil {
			return nil, err
		}
		older := 0
		for _, a := range page.Audits {
			if !since.IsZero() && a.CreatedAt.Before(since) {
				older++
				continue
			}
			ta := TicketAudit{ID: a.ID, AuthorID: a.AuthorID, CreatedAt: a.CreatedAt, ActionKey: metadataKey(a.Metadata)}
			for _, e := range a.Events {
				if e.Type == "Comment" {
					ta.Comments = append(ta.Comments, AuditComment{ID: e.ID, AuthorID: e.AuthorID, Public: e.Public == nil || *e.Public})
				}
			}
			out = append(out, ta)
		}
		if len(page.Audits) > 0 && older == len(page.Audits) {
			return out, nil
		}
		// The page's has_more and cursor decide what comes next, as for
		// FindAction (auditPage.next, which needs only the audits' count).
		var ap auditPage
		ap.Audits = make([]struct {
			auditJSON
			CreatedAt time.Time `json:"created_at"`
			Metadata  any       `json:"metadata"`
		}, len(page.Audits))
		if len(page.Meta) > 0 {
			_ = json.Unmarshal(page.Meta, &ap.Meta)
		}
		if len(page.Links) > 0 {
			_ = json.Unmarshal(page.Links, &ap.Links)
		}
		next, err := ap.next()
		if err != nil {
			return nil, &Error{Op: op, Err: err}
		}
		if next == "" {
			return out, nil
		}
		if seen[next] {
			return nil, &Error{Op: op, Err: errors.New("the audits' cursor came back a second time: the listing does not advance")}
		}
		seen[next] = true
		after = next
	}
	return nil, &Error{Op: op, Err: fmt.Errorf("%w: more than %d pages since %s", ErrTooManyAudits, maxPages, since.UTC().Format(time.RFC3339))}
}

// ErrTooManyAudits is wrapped by TicketAudits' error when the ticket has
// more audits since the given time than it reads (maxAuditPages pages):
// asking again only finds more.
var ErrTooManyAudits = errors.New("too many audits")
