package zendeskclient

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/nukosuke/go-zendesk/zendesk"
)

// Comment authors in a Conversation: the requester, or anyone else. Kept
// for what "the customer spoke last" means (Conversation.LastAt); Role says
// who the someone else is.
const (
	AuthorCustomer = "customer"
	AuthorAgent    = "agent"
)

// Comment author roles (ConversationComment.Role), from the users
// Zendesk side-loads with the comments, each with its role: end-user,
// agent or admin (https://developer.zendesk.com/api-reference/ticketing/tickets/ticket_comments/#list-comments,
// https://developer.zendesk.com/api-reference/ticketing/users/users/).
const (
	// RoleRequester is the ticket's requester, whatever their Zendesk role.
	RoleRequester = "requester"
	// RoleEndUser is any other end user: someone copied on the ticket, a
	// follower, a user the client does not know the role of.
	RoleEndUser = "end_user"
	// RoleAgent is an agent or admin.
	RoleAgent = "agent"
	// RoleSupportflow is supportflow's own API user. Conversation never
	// sets it (the client does not know which user that is); the caller
	// that does relabels its comments (activities.LoadTicket).
	RoleSupportflow = "supportflow"
)

// MaxConversationComments bounds how many comments Conversation reads (the
// newest are kept): a draft needs the recent conversation, and a ticket with
// thousands of comments must not blow up a prompt or an activity result.
const MaxConversationComments = 200

// Conversation is a ticket with its public comments, oldest first.
type Conversation struct {
	TicketID      int64                 `json:"ticket_id"`
	Subject       string                `json:"subject"`
	Status        string                `json:"status"`
	RequesterID   int64                 `json:"requester_id"`
	RequesterName string                `json:"requester_name,omitempty"`
	UpdatedAt     time.Time             `json:"updated_at"`
	Comments      []ConversationComment `json:"comments"`
}

// ConversationComment is one public comment. It is part of Temporal
// histories (a draft's LoadTicket result): fields are only ever added.
type ConversationComment struct {
	ID int64 `json:"id"`
	// Author is AuthorCustomer for the requester, else AuthorAgent.
	Author string    `json:"author"`
	Body   string    `json:"body"`
	At     time.Time `json:"at"`
	// AuthorID is the comment author's Zendesk user ID; 0 in payloads
	// from before it was recorded.
	AuthorID int64 `json:"author_id,omitempty"`
	// Role is who the author is (RoleRequester, RoleEndUser, RoleAgent,
	// RoleSupportflow); "" in payloads from before it was recorded, where
	// Author is all that is known.
	Role string `json:"role,omitempty"`
}

// LastAt returns the time of the newest comment by author (zero if none).
func (c Conversation) LastAt(author string) time.Time {
	var t time.Time
	for _, cm := range c.Comments {
		if cm.Author == author && cm.At.After(t) {
			t = cm.At
		}
	}
	return t
}

// Through returns the time of the newest comment (zero if none).
func (c Conversation) Through() time.Time {
	var t time.Time
	for _, cm := range c.Comments {
		if cm.At.After(t) {
			t = cm.At
		}
	}
	return t
}

// Conversation reads a ticket and its public comments (internal notes are
// left out, so a draft can never quote one to the customer). Comments by
// the requester are the customer's (Author); every comment's Role says who
// wrote it, from the side-loaded users: the requester, another end user
// (also any author the side-load does not name, so nobody unknown passes
// for staff), or an agent (an agent or admin). It reads the ticket, then
// the comments with cursor pagination, 100 a page.
func (c *Client) Conversation(ctx context.Context, ticketID int64) (Conversation, error) {
	op := "read ticket " + strconv.FormatInt(ticketID, 10)
	t, err := c.api.GetTicket(ctx, ticketID)
	if err != nil {
		return Conversation{}, classify(ctx, op, err, false)
	}
	conv := Conversation{TicketID: t.ID, Subject: t.Subject, Status: t.Status, RequesterID: t.RequesterID}
	if t.UpdatedAt != nil {
		conv.UpdatedAt = *t.UpdatedAt
	}
	opts := &zendesk.ListTicketCommentsOptions{Include: "users", Sort: zendesk.TicketCommentCreatedAtAsc}
	opts.PageSize = zendesk.ListTicketCommentsMaxPageSize
	zendeskRoles := map[int64]string{} // user ID to Zendesk role, from every page's side-load
	for {
		res, err := c.api.ListTicketComments(ctx, ticketID, opts)
		if err != nil {
			return Conversation{}, classify(ctx, "list comments of ticket "+strconv.FormatInt(ticketID, 10), err, false)
		}
		for _, u := range res.Users {
			if u.ID == t.RequesterID && conv.RequesterName == "" {
				conv.RequesterName = u.Name
			}
			zendeskRoles[u.ID] = u.Role
		}
		for _, cm := range res.TicketComments {
			if cm.Public != nil && !*cm.Public {
				continue
			}
			author, role := AuthorAgent, RoleEndUser
			switch {
			case cm.AuthorID == t.RequesterID:
				author, role = AuthorCustomer, RoleRequester
			case zendeskRoles[cm.AuthorID] == "agent" || zendeskRoles[cm.AuthorID] == "admin":
				role = RoleAgent
			}
			body := strings.TrimSpace(cm.PlainBody)
			if body == "" {
				body = strings.TrimSpace(cm.Body)
			}
			conv.Comments = append(conv.Comments, ConversationComment{ID: cm.ID, Author: author, Body: body, At: cm.CreatedAt,
				AuthorID: cm.AuthorID, Role: role})
		}
		if len(conv.Comments) > MaxConversationComments {
			conv.Comments = conv.Comments[len(conv.Comments)-MaxConversationComments:]
		}
		if !res.Meta.HasMore || res.Meta.AfterCursor == "" {
			return conv, nil
		}
		opts.PageAfter = res.Meta.AfterCursor
	}
}
