// Package zendeskclient is supportflow's Zendesk client: go-zendesk
// (github.com/nukosuke/go-zendesk v0.18.0) pointed at an account, plus the
// two calls the ledger's exactly-once protocol needs that go-zendesk does
// not type: a ticket update carrying audit metadata, and a search of a
// ticket's audits for that metadata.
//
// Like go-zendesk it never retries: a failure surfaces to the activity and
// is retried under the one policy. Errors say what the caller can do next
// (Permanent, MayHaveLanded, RetryAfterDelay).
package zendeskclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nukosuke/go-zendesk/zendesk"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/httpretry"
	"github.com/supportflow/supportflow/internal/text"
)

// Config says which Zendesk account to talk to and how to authenticate.
type Config struct {
	// URL is the API base, e.g. "https://acme.zendesk.com" or a stand-in's
	// address; "/api/v2" is appended when missing. Empty means
	// https://{Subdomain}.zendesk.com.
	URL string
	// Subdomain is the account's subdomain; required when URL is empty.
	Subdomain string
	// Email and APIToken authenticate with Zendesk's API-token scheme.
	// Both are required. The token is never logged or put in an error.
	Email, APIToken string
	// HTTPClient is used for every call; nil means a client without an
	// overall timeout (every call carries its context's deadline).
	HTTPClient *http.Client
}

// Client talks to one Zendesk account.
type Client struct {
	api *zendesk.Client
}

// New builds a client. It fails on a missing credential or a bad URL.
func New(cfg Config) (*Client, error) {
	if cfg.Email == "" || cfg.APIToken == "" {
		return nil, errors.New("zendeskclient: ZENDESK_EMAIL and ZENDESK_API_TOKEN are required")
	}
	api, err := zendesk.NewClient(cfg.HTTPClient)
	if err != nil {
		return nil, fmt.Errorf("zendeskclient: %w", err)
	}
	switch {
	case cfg.URL != "":
		u := strings.TrimRight(cfg.URL, "/")
		if !strings.HasSuffix(u, "/api/v2") {
			u += "/api/v2"
		}
		if err := api.SetEndpointURL(u); err != nil {
			return nil, fmt.Errorf("zendeskclient: bad URL %q: %w", cfg.URL, err)
		}
	case cfg.Subdomain != "":
		if err := api.SetSubdomain(cfg.Subdomain); err != nil {
			return nil, fmt.Errorf("zendeskclient: bad subdomain %q: %w", cfg.Subdomain, err)
		}
	default:
		return nil, errors.New("zendeskclient: ZENDESK_URL or ZENDESK_SUBDOMAIN is required")
	}
	api.SetCredential(zendesk.NewAPITokenCredential(cfg.Email, cfg.APIToken))
	return &Client{api: api}, nil
}

// API exposes the underlying go-zendesk client for typed calls.
func (c *Client) API() *zendesk.Client { return c.api }

// MetadataKey is the audit metadata field that carries an action key.
// Zendesk stores a ticket update's metadata on the audit it creates, under
// metadata.custom.
const MetadataKey = "supportflow_action_key"

// Landed identifies a ticket update of ours: its audit and, when it
// carried a comment, the comment.
type Landed struct {
	AuditID   int64
	CommentID int64
}

// Stamp is a ticket's updated_at as Zendesk wrote it: the updated_stamp
// of a safe update.
type Stamp string

// TicketState is what a safe update needs to know of the ticket: its stamp
// and its tags (an update that adds tags sends the whole list).
type TicketState struct {
	Stamp  Stamp
	Status string
	Tags   []string
	// RequesterID is the ticket's requester now (0 when Zendesk did not
	// say): whose subscriptions a cancellation may touch.
	RequesterID int64
}

// ReadTicket reads the ticket's updated_at, status and tags, for a safe
// update, and its requester_id
// (https://developer.zendesk.com/api-reference/ticketing/tickets/tickets/#show-ticket).
func (c *Client) ReadTicket(ctx context.Context, ticketID int64) (TicketState, error) {
	op := "show ticket " + strconv.FormatInt(ticketID, 10)
	var resp struct {
		Ticket struct {
			UpdatedAt   string   `json:"updated_at"`
			Status      string   `json:"status"`
			Tags        []string `json:"tags"`
			RequesterID int64    `json:"requester_id"`
		} `json:"ticket"`
	}
	if err := c.getJSON(ctx, op, "/tickets/"+strconv.FormatInt(ticketID, 10)+".json", &resp); err != nil {
		return TicketState{}, err
	}
	if resp.Ticket.UpdatedAt == "" {
		return TicketState{}, &Error{Op: op, Err: fmt.Errorf("no updated_at in the answer")}
	}
	return TicketState{Stamp: Stamp(resp.Ticket.UpdatedAt), Status: resp.Ticket.Status, Tags: resp.Ticket.Tags, RequesterID: resp.Ticket.RequesterID}, nil
}

// Update is one ticket update of ours: a comment, a status, tags, or any
// of them together. Tags is the ticket's whole tag list afterwards
// (Zendesk's Update Ticket replaces it), nil to leave the tags alone.
type Update struct {
	Comment *supportflow.Comment
	Status  string
	Tags    []string
}

// UpdateTicket applies u to the ticket with actionKey in the update's
// audit metadata, so that a later attempt can find it (FindAction) even if
// this call's response is lost. It is a safe update: Zendesk applies it
// only while the ticket's updated_at is still stamp, and answers 409
// (Error.Conflict) otherwise. So a write that lands late, after another
// attempt has written, is refused by Zendesk itself, and a tag list read
// before cannot overwrite a tag added since. Zendesk does not
// deduplicate: two applied calls post two comments.
// https://developer.zendesk.com/documentation/ticketing/managing-tickets/creating-and-updating-tickets/#protecting-against-ticket-update-collisions
func (c *Client) UpdateTicket(ctx context.Context, ticketID int64, u Update, actionKey string, stamp Stamp) (Landed, error) {
	ticket := map[string]any{"metadata": map[string]any{MetadataKey: actionKey}}
	if u.Comment != nil {
		ticket["comment"] = map[string]any{"body": u.Comment.Body, "public": u.Comment.Public}
	}
	if u.Status != "" {
		ticket["status"] = u.Status
	}
	if u.Tags != nil {
		ticket["tags"] = u.Tags
	}
	if stamp != "" {
		ticket["safe_update"] = true
		ticket["updated_stamp"] = string(stamp)
	}
	op := "update ticket " + strconv.FormatInt(ticketID, 10)
	body, err := c.api.Put(ctx, "/tickets/"+strconv.FormatInt(ticketID, 10)+".json", map[string]any{"ticket": ticket})
	if err != nil {
		return Landed{}, classify(ctx, op, err, true)
	}
	var resp struct {
		Audit auditJSON `json:"audit"`
	}
	if err := json.Unmarshal(body, &resp); err != nil {
		// The write landed; only its answer is unreadable.
		return Landed{}, &Error{Op: op, MayLand: true, Err: fmt.Errorf("decode response: %w", err)}
	}
	l, ok := resp.Audit.landed(u.Comment != nil)
	if !ok {
		return Landed{}, &Error{Op: op, MayLand: true, Err: errors.New("response has no audit of the update")}
	}
	return l, nil
}

// maxAuditPages bounds FindAction's search: 100 pages of 100 audits. A
// ticket whose audits since the reservation do not fit is answered with an
// error, never with "not found".
const maxAuditPages = 100

// FindAction searches the ticket's audits, newest first, for one whose
// metadata carries actionKey, and returns it with its comment (withComment
// skips an audit of the key without one). found is false only when the
// listing showed every audit back to since (the action's reservation, less
// a margin for clocks: no attempt can have written before it) without the
// key; a listing it cannot read to that point is an error.
//
// It reads the audits with cursor pagination as Zendesk documents it:
// page[size]=100, sort=-created_at (cursor pagination sorts with sort, not
// with offset pagination's sort_order), include_boundary_indicators=true
// (without it meta.has_more may be left out), then page[after] set to the
// page's meta.after_cursor (or the cursor of links.next) until
// meta.has_more is false.
// https://developer.zendesk.com/api-reference/ticketing/tickets/ticket_audits/#list-audits-for-a-ticket
// https://developer.zendesk.com/api-reference/introduction/pagination/
// https://developer.zendesk.com/documentation/api-basics/pagination/comparing-cursor-pagination-and-offset-pagination/
func (c *Client) FindAction(ctx context.Context, ticketID int64, actionKey string, since time.Time, withComment bool) (l Landed, found bool, err error) {
	op := "list audits of ticket " + strconv.FormatInt(ticketID, 10)
	path := "/tickets/" + strconv.FormatInt(ticketID, 10) + "/audits.json?"
	after := ""
	seen := map[string]bool{}
	for pages := 0; ; pages++ {
		if pages == maxAuditPages {
			return Landed{}, false, &Error{Op: op, Err: fmt.Errorf("the key is not on the newest %d pages of audits, which do not reach back to %s", maxAuditPages, since.UTC().Format(time.RFC3339))}
		}
		q := url.Values{"page[size]": {"100"}, "sort": {"-created_at"}, "include_boundary_indicators": {"true"}}
		if after != "" {
			q.Set("page[after]", after)
		}
		var page auditPage
		if err := c.getJSON(ctx, op, path+q.Encode(), &page); err != nil {
			return Landed{}, false, err
		}
		// Stop early only on a page that is all older than since and
		// really newest-first: if Zendesk ignored sort, stopping at the
		// first old audit would miss the key on a later page.
		older, descending := 0, true
		for i, a := range page.Audits {
			if i > 0 && a.CreatedAt.After(page.Audits[i-1].CreatedAt) {
				descending = false
			}
			if !since.IsZero() && a.CreatedAt.Before(since) {
				older++
			}
			if metadataKey(a.Metadata) != actionKey {
				continue
			}
			if l, ok := a.landed(withComment); ok {
				return l, true, nil
			}
		}
		if descending && len(page.Audits) > 0 && older == len(page.Audits) {
			return Landed{}, false, nil
		}
		next, err := page.next()
		if err != nil {
			return Landed{}, false, &Error{Op: op, Err: err}
		}
		if next == "" {
			return Landed{}, false, nil
		}
		if seen[next] {
			return Landed{}, false, &Error{Op: op, Err: errors.New("the audits' cursor came back a second time: the listing does not advance")}
		}
		seen[next] = true
		after = next
	}
}

// auditPage is one page of List Audits for a Ticket with cursor
// pagination. has_more is a pointer: a page may leave it out.
type auditPage struct {
	Audits []struct {
		auditJSON
		CreatedAt time.Time `json:"created_at"`
		Metadata  any       `json:"metadata"`
	} `json:"audits"`
	Meta struct {
		HasMore     *bool  `json:"has_more"`
		AfterCursor string `json:"after_cursor"`
	} `json:"meta"`
	Links struct {
		Next string `json:"next"`
	} `json:"links"`
}

// next returns the page[after] of the next page, "" at the end of the
// listing. meta.has_more decides when the page has it: false is the end
// (whatever cursor or link is there), true needs a cursor. A page without
// has_more goes on while it has audits and a cursor, meta.after_cursor or
// the page[after] of links.next: a missing field is no "no more".
// https://developer.zendesk.com/api-reference/introduction/pagination/
func (p auditPage) next() (string, error) {
	cursor := p.Meta.AfterCursor
	if cursor == "" && p.Links.Next != "" {
		if u, err := url.Parse(p.Links.Next); err == nil {
			cursor = u.Query().Get("page[after]")
		}
	}
	switch {
	case p.Meta.HasMore != nil && !*p.Meta.HasMore:
		return "", nil
	case p.Meta.HasMore != nil:
		if cursor == "" {
			return "", errors.New("meta.has_more is true but the page has no after_cursor and no next link")
		}
		return cursor, nil
	case len(p.Audits) == 0:
		// Nothing after the cursor: the end, whatever link is there.
		return "", nil
	}
	return cursor, nil
}

func metadataKey(md any) string {
	m, _ := md.(map[string]any)
	custom, _ := m["custom"].(map[string]any)
	k, _ := custom[MetadataKey].(string)
	return k
}

type auditJSON struct {
	ID     int64 `json:"id"`
	Events []struct {
		ID   int64  `json:"id"`
		Type string `json:"type"`
	} `json:"events"`
}

// landed reads an audit of ours; withComment requires a comment event.
func (a auditJSON) landed(withComment bool) (Landed, bool) {
	if a.ID == 0 {
		return Landed{}, false
	}
	l := Landed{AuditID: a.ID}
	for _, e := range a.Events {
		if e.Type == "Comment" && e.ID != 0 {
			l.CommentID = e.ID
			break
		}
	}
	return l, !withComment || l.CommentID != 0
}

// Error is a failed Zendesk call, classified by what the caller can do
// next.
type Error struct {
	Op string
	// Status is the HTTP status, 0 when no response arrived.
	Status int
	// RetryAfter is the server's Retry-After on a 429 or 503.
	RetryAfter time.Duration
	// MayLand is true when the request may have been applied although it
	// failed (no response, a 5xx, an unreadable answer to a write).
	MayLand bool
	Err     error
}

func (e *Error) Error() string {
	if e.Status != 0 {
		return fmt.Sprintf("zendesk: %s: HTTP %d: %v", e.Op, e.Status, e.Err)
	}
	return fmt.Sprintf("zendesk: %s: %v", e.Op, e.Err)
}

func (e *Error) Unwrap() error { return e.Err }

// Permanent reports whether the same request can never succeed: 400, 401,
// 403, 404, 413 and 422. Retrying it only repeats the failure.
func (e *Error) Permanent() bool { return httpretry.PermanentStatus(e.Status) }

// Conflict reports a safe update refused because the ticket changed since
// its stamp was read: nothing was written; read the ticket again.
func (e *Error) Conflict() bool { return e.Status == http.StatusConflict }

// MayHaveLanded reports whether a write may have taken effect.
func (e *Error) MayHaveLanded() bool { return e.MayLand }

// RetryAfterDelay is the wait the server asked for (0 when none).
func (e *Error) RetryAfterDelay() time.Duration { return e.RetryAfter }

func classify(ctx context.Context, op string, err error, write bool) error {
	var zerr zendesk.Error
	if errors.As(err, &zerr) {
		e := &Error{Op: op, Status: zerr.Status(), Err: errors.New(text.Clip(zerr.Error(), 512))}
		e.RetryAfter = httpretry.RetryAfter(zerr.Headers(), time.Now())
		e.MayLand = write && zerr.Status() >= 500 && zerr.Status() != http.StatusServiceUnavailable
		return e
	}
	// No answer: the request may or may not have been applied.
	if ctx.Err() != nil {
		err = fmt.Errorf("%w (%v)", err, context.Cause(ctx))
	}
	return &Error{Op: op, MayLand: write, Err: err}
}
