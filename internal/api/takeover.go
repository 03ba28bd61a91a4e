package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/proposals"
	"github.com/supportflow/supportflow/internal/text"
)

// ReplyMyselfReason is the reason recorded on a proposal rejected by
// POST /proposals/{id}/reply-myself.
const ReplyMyselfReason = "agent replies from the editor"

// replyMyselfBody is reply-myself's optional body: the person in the
// calling app (the Zendesk agent) the token acts for.
type replyMyselfBody struct {
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
}

// ReplyTaken answers POST /proposals/{id}/reply-myself: the proposal is
// rejected and this caller, alone, took its reply to send it themselves.
type ReplyTaken struct {
	ProposalID string    `json:"proposal_id"`
	State      string    `json:"state"`
	Reply      string    `json:"reply"`
	TakenBy    string    `json:"taken_by"`
	OnBehalfOf string    `json:"on_behalf_of,omitempty"`
	TakenAt    time.Time `json:"taken_at"`
}

// TakenProblem is the 409 reply-already-taken problem: who took the reply
// and when (never the reply itself), as RFC 9457 extension members.
type TakenProblem struct {
	Problem
	TakenBy    string    `json:"taken_by"`
	OnBehalfOf string    `json:"on_behalf_of,omitempty"`
	TakenAt    time.Time `json:"taken_at"`
}

// replyMyself hands a proposal's reply to one agent to send from the
// helpdesk's editor, so that the customer gets it exactly once. It
// rejects the proposal (a rejected proposal is never executed, so
// supportflow never posts it) and then claims the proposal's
// reply_takeover row; only the request whose claim inserted the row gets
// the reply (200). The rejection alone proves nothing: the draft accepts
// a repeated rejection of the same proposal, so every other request,
// concurrent or later, gets 409 reply-already-taken with who took it and
// when. A proposal that cancels subscriptions is refused (409
// proposal-cancels): rejecting it would drop the cancellations its reply
// may announce. Refused rejections map as for reject.
func (s *Server) replyMyself(w http.ResponseWriter, r *http.Request) {
	var body replyMyselfBody
	if !s.decode(w, r, &body, true) {
		return
	}
	p, ok := s.proposal(w, r)
	if !ok {
		return
	}
	if n := len(p.CancelSubscriptions); n > 0 {
		problem(w, http.StatusConflict, "proposal-cancels", "Proposal cancels subscriptions",
			fmt.Sprintf("proposal %s cancels %d subscription(s): rejecting it to send its reply by hand would drop the cancellations; approve or reject it in the console", p.ID, n))
		return
	}
	if strings.TrimSpace(p.Reply) == "" {
		problem(w, http.StatusConflict, "proposal-has-no-reply", "Proposal has no reply", fmt.Sprintf("proposal %s proposes no reply to take", p.ID))
		return
	}
	if s.answerTaken(w, r, p.ID) {
		return
	}
	if p.State != supportflow.DraftAwaitingApproval {
		// Decided already (in the console, or by a takeover whose claim is
		// not written yet): never hand out a reply someone rejected.
		problem(w, http.StatusConflict, "proposal-not-awaiting-approval", "Proposal not awaiting approval",
			fmt.Sprintf("proposal %s is %s", p.ID, p.State))
		return
	}
	by := caller(r).name
	onBehalf := text.Clip(body.OnBehalfOf, 200)
	err := s.starter.Reject(r.Context(), p.TicketID, supportflow.RejectRequest{ProposalID: p.ID, RejectedBy: by, OnBehalfOf: onBehalf, Reason: ReplyMyselfReason})
	if err != nil {
		if s.answerTaken(w, r, p.ID) {
			return
		}
		s.decisionError(w, r, err)
		return
	}
	held, claimed, err := s.proposals.ClaimTakeover(r.Context(), proposals.Takeover{ProposalID: p.ID, TicketID: p.TicketID, TakenBy: by, OnBehalfOf: onBehalf})
	if err != nil {
		s.internal(w, r, err)
		return
	}
	if !claimed {
		s.log.Info("reply already taken", "proposal_id", p.ID, "ticket_id", p.TicketID, "token", by)
		writeTaken(w, held)
		return
	}
	s.log.Info("reply taken", "proposal_id", p.ID, "ticket_id", p.TicketID, "token", by)
	writeJSON(w, http.StatusOK, ReplyTaken{ProposalID: p.ID, State: supportflow.DraftRejected, Reply: p.Reply,
		TakenBy: held.TakenBy, OnBehalfOf: held.OnBehalfOf, TakenAt: held.TakenAt})
}

// answerTaken answers 409 reply-already-taken when someone took the
// proposal's reply, and reports whether it answered.
func (s *Server) answerTaken(w http.ResponseWriter, r *http.Request, proposalID string) bool {
	held, err := s.proposals.GetTakeover(r.Context(), proposalID)
	if errors.Is(err, supportflow.ErrNotFound) {
		return false
	}
	if err != nil {
		s.internal(w, r, err)
		return true
	}
	writeTaken(w, held)
	return true
}

func writeTaken(w http.ResponseWriter, t proposals.Takeover) {
	who := t.TakenBy
	if t.OnBehalfOf != "" {
		who = fmt.Sprintf("%s (through %s)", t.OnBehalfOf, t.TakenBy)
	}
	w.Header().Set("Content-Type", "application/problem+json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusConflict)
	_ = json.NewEncoder(w).Encode(TakenProblem{
		Problem: Problem{Type: "/problems/reply-already-taken", Title: "Reply already taken", Status: http.StatusConflict,
			Detail: fmt.Sprintf("%s took the reply of proposal %s at %s", who, t.ProposalID, t.TakenAt.UTC().Format(time.RFC3339))},
		TakenBy: t.TakenBy, OnBehalfOf: t.OnBehalfOf, TakenAt: t.TakenAt,
	})
}
