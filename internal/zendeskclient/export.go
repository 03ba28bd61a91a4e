package zendeskclient

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
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

// ExportTicketEvents reads a page of the time-based incremental ticket
// event export from start (Unix seconds), comments included. The next
// page starts at EndTime; rows at that second may repeat, so callers
// deduplicate by ID.
// https://developer.zendesk.com/api-reference/ticketing/ticket-management/incremental_exports/#incremental-ticket-event-export
func (c *Client) ExportTicketEvents(ctx context.Context, start int64) (EventPage, error) {
	q := url.Values{"start_time": {strconv.FormatInt(start, 10)}, "include": {"comment_events"}, "support_type_scope": {"all"}}
	var page EventPage
	err := c.getJSON(ctx, "export ticket events", "/incremental/ticket_events.json?"+q.Encode(), &page)
	return page, err
}
