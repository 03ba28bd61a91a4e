package zendeskclient

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/nukosuke/go-zendesk/zendesk"
)

// Comment authors in a Conversation.
const (
	AuthorCustomer = "customer"
	AuthorAgent    = "agent"
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

// ConversationComment is one public comment.
type ConversationComment struct {
	ID int64 `json:"id"`
	// Author is AuthorCustomer for the requester, else AuthorAgent.
	Author string    `json:"author"`
	Body   string    `json:"body"`
	At     time.Time `json:"at"`
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
// the requester are the customer's; every other author is an agent. It
// reads the ticket, then the comments with cursor pagination, 100 a page.
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
	for {
		res, err := c.api.ListTicketComments(ctx, ticketID, opts)
		if err != nil {
			return Conversation{}, classify(ctx, "list comments of ticket "+strconv.FormatInt(ticketID, 10), err, false)
		}
		for _, u := range res.Users {
			if u.ID == t.RequesterID && conv.RequesterName == "" {
				conv.RequesterName = u.Name
			}
		}
		for _, cm := range res.TicketComments {
			if cm.Public != nil && !*cm.Public {
				continue
			}
			author := AuthorAgent
			if cm.AuthorID == t.RequesterID {
				author = AuthorCustomer
			}
			body := strings.TrimSpace(cm.PlainBody)
			if body == "" {
				body = strings.TrimSpace(cm.Body)
			}
			conv.Comments = append(conv.Comments, ConversationComment{ID: cm.ID, Author: author, Body: body, At: cm.CreatedAt})
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
