package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/converter"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/console"
	"github.com/supportflow/supportflow/internal/proposals"
)

// The routes the supervisor console (package console) reads through, and
// the console itself:
//
//	GET /whoami                              [any token] the token's name and roles
//	GET /proposals?state=&ticket_id=&limit=  [app] proposals, newest first
//	GET /proposals/{id}                      [app] one proposal, its decision and execution
//	GET /tickets/{id}/draft/conversation     [app] the conversation the model saw (?proposal_id= for an earlier one)
//	GET /console/                            the console's page and assets (no token: they hold no data)

// mountConsole adds the console's routes and assets to the server's mux.
func (s *Server) mountConsole() {
	s.mux.HandleFunc("GET /whoami", s.whoami)
	for _, rt := range []route{
		{"GET /proposals", RoleApp, s.listProposals},
		{"GET /proposals/{id}", RoleApp, s.getProposal},
		{"GET /tickets/{id}/draft/conversation", RoleApp, s.getConversation},
	} {
		s.mux.HandleFunc(rt.pattern, s.authed(rt.role, rt.handler))
	}
	s.mux.Handle("GET /console/", http.StripPrefix("/console", console.Handler()))
	s.mux.HandleFunc("GET /console", func(w http.ResponseWriter, r *http.Request) {
		// Relative, so an API served below a path prefix (a proxy's
		// /supportflow/console) lands on its own console: http.Redirect
		// would make it absolute from the request's path.
		w.Header().Set("Location", "console/")
		w.WriteHeader(http.StatusMovedPermanently)
	})
}

// WhoAmI answers GET /whoami: the name decisions made with the token are
// recorded under, and its roles, so an app shows only what the token may
// do.
type WhoAmI struct {
	Name  string `json:"name"`
	Roles []Role `json:"roles"`
}

// whoami needs a valid token and no particular role.
func (s *Server) whoami(w http.ResponseWriter, r *http.Request) {
	i, ok := matchBearer(w, r, s.tokenSums, "supportflow")
	if !ok {
		return
	}
	t := s.tokens[i]
	writeJSON(w, http.StatusOK, WhoAmI{Name: t.name, Roles: slices.Clone(t.roles)})
}

// ProposalView is a proposal as GET /proposals and GET /proposals/{id}
// show it. Reply is only in GET /proposals/{id}; the list has its length.
type ProposalView struct {
	ID       string `json:"id"`
	TicketID int64  `json:"ticket_id"`
	State    string `json:"state"`
	Reply    string `json:"reply,omitempty"`
	// ReplyChars is the reply's length in characters (code points).
	ReplyChars          int                       `json:"reply_chars"`
	CancelSubscriptions []string                  `json:"cancel_subscriptions"`
	UpdateTicket        *supportflow.TicketUpdate `json:"update_ticket,omitempty"`
	Model               string                    `json:"model,omitempty"`
	ConversationThrough time.Time                 `json:"conversation_through"`
	CreatedAt           time.Time                 `json:"created_at"`
	UpdatedAt           time.Time                 `json:"updated_at"`
	// DecidedBy is the token that approved or rejected it.
	DecidedBy string `json:"decided_by,omitempty"`
	// RejectedBy and RejectionReason are set for a rejected proposal that
	// a token rejected (DecidedAt is when); a draft cancelled by an
	// operator is rejected with no one's name.
	RejectedBy      string `json:"rejected_by,omitempty"`
	RejectionReason string `json:"rejection_reason,omitempty"`
	// DecidedAt is when it left awaiting_approval for rejected,
	// superseded or expired (the row's last change); ApprovedAt for an
	// approval.
	DecidedAt *time.Time `json:"decided_at,omitempty"`
	// Error says how an execution failed, or why a draft ended.
	Error string `json:"error,omitempty"`
	// ApprovedBy, OnBehalfOf and ApprovedAt are the recorded approval.
	ApprovedBy string     `json:"approved_by,omitempty"`
	OnBehalfOf string     `json:"on_behalf_of,omitempty"`
	ApprovedAt *time.Time `json:"approved_at,omitempty"`
	// Actions are the execution's actions once approved (GET /actions/{key}).
	Actions []ActionLink `json:"actions,omitempty"`
	// CurrentProposalID (GET /proposals/{id} only) names a newer proposal
	// of the ticket that awaits approval, executes or went out: the one
	// that took this one's place.
	CurrentProposalID string `json:"current_proposal_id,omitempty"`
}

func proposalView(l proposals.Listed, withReply bool) ProposalView {
	v := ProposalView{ID: l.ID, TicketID: l.TicketID, State: l.State, ReplyChars: l.ReplyChars,
		CancelSubscriptions: l.CancelSubscriptions, UpdateTicket: l.UpdateTicket, Model: l.Model,
		ConversationThrough: l.ConversationThrough, CreatedAt: l.CreatedAt, UpdatedAt: l.UpdatedAt,
		DecidedBy: l.DecidedBy, Error: l.Error, ApprovedBy: l.ApprovedBy, OnBehalfOf: l.OnBehalfOf}
	if v.CancelSubscriptions == nil {
		v.CancelSubscriptions = []string{}
	}
	if withReply {
		v.Reply = l.Reply
	}
	switch l.State {
	case supportflow.DraftRejected, supportflow.DraftSuperseded, supportflow.DraftExpired:
		at := l.UpdatedAt
		v.DecidedAt = &at
	}
	if l.State == supportflow.DraftRejected && l.DecidedBy != "" {
		// The draft records a rejection's reason as the proposal's error.
		v.RejectedBy, v.RejectionReason, v.Error = l.DecidedBy, l.Error, ""
	}
	if !l.ApprovedAt.IsZero() {
		at := l.ApprovedAt
		v.ApprovedAt, v.DecidedAt = &at, &at
		v.Actions = proposalActions(l.ID)
	}
	return v
}

// ProposalList answers GET /proposals.
type ProposalList struct {
	Proposals []ProposalView `json:"proposals"`
	// Limit is the limit applied: a full page may have more behind it.
	Limit int `json:"limit"`
}

// DefaultListLimit is GET /proposals' limit when none is given.
const DefaultListLimit = 50

// listProposals answers the account's proposals, newest first, filtered
// by state and ticket, from PostgreSQL.
func (s *Server) listProposals(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	for k := range q {
		if k != "state" && k != "limit" && k != "ticket_id" {
			problem(w, http.StatusBadRequest, "invalid-filter", "Invalid filter",
				fmt.Sprintf("unknown query parameter %q: the filters are state, ticket_id and limit", k))
			return
		}
		if len(q[k]) > 1 {
			problem(w, http.StatusBadRequest, "invalid-filter", "Invalid filter", fmt.Sprintf("query parameter %q is given more than once", k))
			return
		}
	}
	f := proposals.ListFilter{State: q.Get("state"), Limit: DefaultListLimit}
	if f.State != "" && !slices.Contains(proposals.States, f.State) {
		problem(w, http.StatusBadRequest, "invalid-filter", "Invalid filter",
			fmt.Sprintf("state must be one of %s (or absent for every state)", strings.Join(proposals.States, ", ")))
		return
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > proposals.MaxListLimit {
			problem(w, http.StatusBadRequest, "invalid-filter", "Invalid filter",
				fmt.Sprintf("limit must be a whole number from 1 to %d (default %d)", proposals.MaxListLimit, DefaultListLimit))
			return
		}
		f.Limit = n
	}
	if v := q.Get("ticket_id"); v != "" {
		id, err := supportflow.ParseTicketID(v)
		if err != nil {
			problem(w, http.StatusBadRequest, "invalid-filter", "Invalid filter", "ticket_id: "+err.Error())
			return
		}
		f.TicketID = id
	}
	list, err := s.proposals.ListProposals(r.Context(), f)
	if err != nil {
		s.internal(w, r, err)
		return
	}
	out := ProposalList{Proposals: make([]ProposalView, 0, len(list)), Limit: f.Limit}
	for _, l := range list {
		out.Proposals = append(out.Proposals, proposalView(l, false))
	}
	writeJSON(w, http.StatusOK, out)
}

// getProposal answers one proposal with its reply, decision and the
// newer proposal that took its place, if any.
func (s *Server) getProposal(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := supportflow.ValidateProposalID(id); err != nil {
		problem(w, http.StatusBadRequest, "invalid-proposal-id", "Invalid proposal id", err.Error())
		return
	}
	l, err := s.proposals.GetListed(r.Context(), id)
	if errors.Is(err, supportflow.ErrNotFound) {
		problem(w, http.StatusNotFound, "unknown-proposal", "Unknown proposal", fmt.Sprintf("proposal %s does not exist", id))
		return
	}
	if err != nil {
		s.internal(w, r, err)
		return
	}
	v := proposalView(l, true)
	if v.CurrentProposalID, err = s.proposals.NewerLiveProposal(r.Context(), l.TicketID, l.ID); err != nil {
		s.internal(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// ConversationView answers GET /tickets/{id}/draft/conversation: the
// ticket as the model was given it for one proposal.
type ConversationView struct {
	TicketID   int64  `json:"ticket_id"`
	ProposalID string `json:"proposal_id"`
	// Drafted is true once the model answered; until then Comments are
	// what the draft read, which the prompt may still trim.
	Drafted       bool                  `json:"drafted"`
	Subject       string                `json:"subject"`
	RequesterName string                `json:"requester_name,omitempty"`
	Comments      []ConversationComment `json:"comments"`
	// OmittedComments is how many comments of a long conversation the
	// model was not shown (the first and the newest are kept).
	OmittedComments int `json:"omitted_comments"`
	// ActiveSubscriptions are the customer's, as the model was told
	// (empty without the commerce data).
	ActiveSubscriptions []string `json:"active_subscriptions"`
	// PreviousAttempt is what the model was told of an earlier approved
	// reply that was held back.
	PreviousAttempt string `json:"previous_attempt,omitempty"`
	// Cancellations describe the proposal's cancellations (plan, status,
	// the comment that asked), once drafted.
	Cancellations []supportflow.CancellationView `json:"cancellations"`
}

// ConversationComment is one comment the model saw. AuthorRole is
// "requester" (the customer), "end_user" (someone else copied on the
// ticket), "agent" or "supportflow" (an earlier reply of this system).
type ConversationComment struct {
	ID         int64     `json:"id"`
	AuthorRole string    `json:"author_role"`
	At         time.Time `json:"at"`
	Body       string    `json:"body"`
}

// runIDPattern is a proposal ID of a drafted proposal: the ticket, the
// draft run's ID without dashes, the proposal's number in the run
// (workflows' proposalID).
var runIDPattern = regexp.MustCompile(`^([0-9]+)-([0-9a-f]{32})-[0-9]+$`)

// draftRunOf returns the run of the draft workflow that drafted the
// proposal, from its ID; false for a proposal not named by a draft.
func draftRunOf(ticketID int64, proposalID string) (string, bool) {
	m := runIDPattern.FindStringSubmatch(proposalID)
	if m == nil || m[1] != strconv.FormatInt(ticketID, 10) {
		return "", false
	}
	h := m[2]
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:], true
}

// conversationReadTimeout bounds getConversation's read of a draft's
// history.
const conversationReadTimeout = 10 * time.Second

// getConversation reads the conversation the model was given from the
// draft's Temporal history: the input of the GenerateDraft activity that
// wrote the proposal (the ticket as LoadTicket read it, bounded), and its
// result (how many more comments the prompt left out, the cancellations'
// descriptions). That is exactly what the model saw, whatever has been
// written on the ticket since; Zendesk's current conversation is not, and
// the API holds no Zendesk credentials. Without ?proposal_id= it is the
// newest draft of the ticket's latest run. The history is kept for the
// namespace's retention period after the draft closes; after that the
// answer is 404 conversation-gone.
func (s *Server) getConversation(w http.ResponseWriter, r *http.Request) {
	ticket, ok := ticketID(w, r)
	if !ok {
		return
	}
	for k := range r.URL.Query() {
		if k != "proposal_id" {
			problem(w, http.StatusBadRequest, "invalid-filter", "Invalid filter", fmt.Sprintf("unknown query parameter %q: the only one is proposal_id", k))
			return
		}
	}
	proposalID, runID := r.URL.Query().Get("proposal_id"), ""
	if proposalID != "" {
		if err := supportflow.ValidateProposalID(proposalID); err != nil {
			problem(w, http.StatusBadRequest, "invalid-proposal-id", "Invalid proposal id", err.Error())
			return
		}
		run, ok := draftRunOf(ticket, proposalID)
		if !ok {
			problem(w, http.StatusNotFound, "no-conversation", "No conversation",
				fmt.Sprintf("proposal %s was not drafted for ticket %d by supportflow's draft, so no conversation is kept for it", proposalID, ticket))
			return
		}
		runID = run
	}
	dc := s.starter.Converter
	if dc == nil {
		dc = converter.GetDefaultDataConverter()
	}
	// A long or slow history read must not hold the request (and the
	// page's poll) open without end.
	ctx, cancel := context.WithTimeout(r.Context(), conversationReadTimeout)
	defer cancel()
	it := s.temporal.GetWorkflowHistory(ctx, s.starter.IDs.Draft(ticket), runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	var (
		in       *supportflow.GenerateInput
		inEvent  int64
		result   *supportflow.DraftProposal
		decodeOK = true
	)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			var nf *serviceerror.NotFound
			if errors.As(err, &nf) {
				problem(w, http.StatusNotFound, "conversation-gone", "Conversation not kept",
					fmt.Sprintf("ticket %d has no draft whose history Temporal still keeps (never drafted, or its retention period ended)", ticket))
				return
			}
			s.internal(w, r, err)
			return
		}
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			a := e.GetActivityTaskScheduledEventAttributes()
			if a.GetActivityType().GetName() != supportflow.GenerateDraft.Name {
				continue
			}
			var gi supportflow.GenerateInput
			if err := dc.FromPayloads(a.GetInput(), &gi); err != nil {
				decodeOK = false
				continue
			}
			if proposalID == "" || gi.ProposalID == proposalID {
				in, inEvent, result = &gi, e.GetEventId(), nil
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			a := e.GetActivityTaskCompletedEventAttributes()
			if in == nil || a.GetScheduledEventId() != inEvent {
				continue
			}
			var p supportflow.DraftProposal
			if err := dc.FromPayloads(a.GetResult(), &p); err == nil {
				result = &p
			}
		}
	}
	if in == nil {
		if !decodeOK {
			// Not a passing outage (a 503 would be retried): this process's
			// payload keys do not open the history, a configuration error.
			s.log.Error("request failed", "method", r.Method, "path", r.URL.Path,
				"error", "the draft's history could not be decoded with this process's payload keys")
			problem(w, http.StatusInternalServerError, "conversation-undecodable", "Conversation cannot be decoded",
				fmt.Sprintf("the draft history of ticket %d cannot be decoded with the API's payload keys (check that the API and the worker share them)", ticket))
			return
		}
		if proposalID != "" {
			problem(w, http.StatusNotFound, "no-conversation", "No conversation",
				fmt.Sprintf("the draft of ticket %d that named proposal %s never gave the model a conversation", ticket, proposalID))
			return
		}
		problem(w, http.StatusNotFound, "no-conversation-yet", "No conversation yet",
			fmt.Sprintf("the draft of ticket %d has not given the model a conversation yet (it is reading the ticket, or ended before)", ticket))
		return
	}
	writeJSON(w, http.StatusOK, conversationView(ticket, *in, result))
}

// conversationView is what the model saw: a long conversation's first
// comment and its newest, as many as the prompt kept (activities.Messages
// keeps the first comment and the newest ones, and the result counts all
// it left out).
func conversationView(ticket int64, in supportflow.GenerateInput, result *supportflow.DraftProposal) ConversationView {
	c := in.Ticket.Conversation
	v := ConversationView{TicketID: ticket, ProposalID: in.ProposalID, Subject: c.Subject, RequesterName: c.RequesterName,
		Comments: []ConversationComment{}, OmittedComments: in.Ticket.OmittedComments, ActiveSubscriptions: []string{},
		PreviousAttempt: in.Outcome, Cancellations: []supportflow.CancellationView{}}
	if e := in.Ticket.Enrichment; e != nil && e.ActiveSubscriptions != nil {
		v.ActiveSubscriptions = e.ActiveSubscriptions
	}
	comments := c.Comments
	if result != nil {
		v.Drafted = true
		if extra := result.OmittedComments - in.Ticket.OmittedComments; extra > 0 && len(comments) > extra+1 {
			comments = append(comments[:1:1], comments[1+extra:]...)
			v.OmittedComments = result.OmittedComments
		}
		if result.Cancellations != nil {
			v.Cancellations = result.Cancellations
		}
	}
	for _, cm := range comments {
		v.Comments = append(v.Comments, ConversationComment{ID: cm.ID, AuthorRole: authorRole(cm), At: cm.At, Body: cm.Body})
	}
	return v
}

// authorRole is how the prompt labelled a comment's author
// (activities.promptRole): its Role, or for a comment from before roles
// were recorded, requester or agent by its Author.
func authorRole(c supportflow.ConversationComment) string {
	if c.Role != "" {
		return c.Role
	}
	if c.Author == supportflow.AuthorCustomer {
		return supportflow.RoleRequester
	}
	return supportflow.RoleAgent
}
