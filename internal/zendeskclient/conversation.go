package zendeskclient

import (
	"context"
	"strconv"
	"strings"

	"github.com/nukosuke/go-zendesk/zendesk"
	"github.com/supportflow/supportflow"
)

// MaxConversationComments bounds how many comments Conversation reads (the
// newest are kept): a draft needs the recent conversation, and a ticket with
// thousands of comments must not blow up a prompt or an activity result.
const MaxConversationComments = 200

// Conversation reads a ticket and its public comments (internal notes are
// left out, so a draft can never quote one to the customer). Comments by
// the requester are the customer's (Author); every comment's Role says who
// wrote it, from the side-loaded users: the requester, another end user
// (also any author the side-load does not name, so nobody unknown passes
// for staff), or an agent (an agent or admin). It reads the ticket, then
// the comments with cursor pagination, 100 a page.
func (c *Client) Conversation(ctx context.Context, ticketID int64) (supportflow.Conversation, error) {
	op := "read ticket " + strconv.FormatInt(ticketID, 10)
	t, err := c.api.GetTicket(ctx, ticketID)
	if err != nil {
		return supportflow.Conversation{}, classify(ctx, op, err, false)
	}
	conv := supportflow.Conversation{TicketID: t.ID, Subject: t.Subject, Status: t.Status, RequesterID: t.RequesterID}
	if t.UpdatedAt != nil {
		conv.UpdatedAt = *t.UpdatedAt
	}
	opts := &zendesk.ListTicketCommentsOptions{Include: "users", Sort: zendesk.TicketCommentCreatedAtAsc}
	opts.PageSize = zendesk.ListTicketCommentsMaxPageSize
	zendeskRoles := map[int64]string{} // user ID to Zendesk role, from every page's side-load
	for {
		res, err := c.api.ListTicketComments(ctx, ticketID, opts)
		if err != nil {
			return supportflow.Conversation{}, classify(ctx, "list comments of ticket "+strconv.FormatInt(ticketID, 10), err, false)
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
			author, role := supportflow.AuthorAgent, supportflow.RoleEndUser
			switch {
			case cm.AuthorID == t.RequesterID:
				author, role = supportflow.AuthorCustomer, supportflow.RoleRequester
			case zendeskRoles[cm.AuthorID] == "agent" || zendeskRoles[cm.AuthorID] == "admin":
				role = supportflow.RoleAgent
			}
			body := strings.TrimSpace(cm.PlainBody)
			if body == "" {
				body = strings.TrimSpace(cm.Body)
			}
			conv.Comments = append(conv.Comments, supportflow.ConversationComment{ID: cm.ID, Author: author, Body: body, At: cm.CreatedAt,
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
