package api

import (
	"cmp"
	"context"
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
	ProposalID string `json:"proposal_id"`
	State      string `json:"state"`
	Reply      string `json:"reply"`
	// UpdateTicket is the status and tags the proposal would have set
	// with its reply; nothing sets them now, the caller may.
	UpdateTicket *supportflow.TicketUpdate `json:"update_ticket,omitempty"`
	TakenBy      string                    `json:"taken_by"`
	OnBehalfOf   string                    `json:"on_behalf_of,omitempty"`
	TakenAt      time.Time                 `json:"taken_at"`
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
// helpdesk's editor, so that the customer gets it exactly once. It claims
// the proposal's reply_takeover row first (only one request can), then
// rejects the proposal (a rejected proposal is never executed, so
// supportflow never posts it), and hands the reply out only once the
// proposal is recorded rejected by this very request: under this token's
// name with ReplyMyselfReason. The draft accepts a repeated rejection of
// the same proposal, so "rejected" alone proves nothing: a supervisor who
// rejected it in the console a moment earlier wins, and the claim is
// released (409 proposal-not-awaiting-approval). A refused rejection
// releases the claim too, and so does one whose outcome is unknown (503):
// asking again is safe, and a request that finds the proposal rejected by
// this token for this reason with nobody holding the reply resumes there.
// A proposal that cancels subscriptions is refused (409 proposal-cancels):
// rejecting it would drop the cancellations its reply may announce. The
// status and tags the proposal would have set are not set; the answer's
// update_ticket carries them for the caller.
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
	by := caller(r).name
	ours := func(rec supportflow.ProposalRecord) bool {
		return rec.State == supportflow.DraftRejected && rec.DecidedBy == by && rec.Error == ReplyMyselfReason
	}
	resume := ours(p)
	if p.State != supportflow.DraftAwaitingApproval && !resume {
		// Decided already, in the console or by another takeover: never
		// hand out a reply someone else rejected.
		problem(w, http.StatusConflict, "proposal-not-awaiting-approval", "Proposal not awaiting approval",
			fmt.Sprintf("proposal %s is %s", p.ID, p.State))
		return
	}
	// The client going away must not leave a claim without a rejection,
	// or a rejection without its claim settled.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), replyMyselfTimeout)
	defer cancel()
	// The answer must be writable after the whole budget, whatever the
	// server's write timeout (it counts from the request's headers).
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(replyMyselfTimeout + 10*time.Second))
	onBehalf := text.Clip(body.OnBehalfOf, 200)
	held, claimed, err := s.proposals.ClaimTakeover(ctx, proposals.Takeover{ProposalID: p.ID, TicketID: p.TicketID, TakenBy: by, OnBehalfOf: onBehalf})
	if err != nil {
		s.internal(w, r, err)
		return
	}
	if !claimed {
		s.log.Info("reply already taken", "proposal_id", p.ID, "ticket_id", p.TicketID, "token", by)
		writeTaken(w, held)
		return
	}
	// A release gets its own time: it follows a rejection that may have
	// used up the request's.
	release := func() {
		rctx, rcancel := context.WithTimeout(context.WithoutCancel(r.Context()), 10*time.Second)
		defer rcancel()
		if err := s.proposals.ReleaseTakeover(rctx, held); err != nil {
			s.log.Error("release a reply takeover", "proposal_id", p.ID, "error", err)
		}
	}
	if !resume {
		if err := s.starter.Reject(ctx, p.TicketID, supportflow.RejectRequest{ProposalID: p.ID, RejectedBy: by, OnBehalfOf: onBehalf, Reason: ReplyMyselfReason}); err != nil {
			release()
			s.decisionError(w, r, err)
			return
		}
		rec, err := s.awaitDecided(ctx, p.ID)
		if err != nil {
			release()
			s.internal(w, r, err)
			return
		}
		if !ours(rec) {
			release()
			problem(w, http.StatusConflict, "proposal-not-awaiting-approval", "Proposal not awaiting approval",
				fmt.Sprintf("proposal %s was %s by %s first", p.ID, rec.State, cmp.Or(rec.DecidedBy, "someone else")))
			return
		}
	}
	s.log.Info("reply taken", "proposal_id", p.ID, "ticket_id", p.TicketID, "token", by, "resumed", resume)
	writeJSON(w, http.StatusOK, ReplyTaken{ProposalID: p.ID, State: supportflow.DraftRejected, Reply: p.Reply, UpdateTicket: p.UpdateTicket,
		TakenBy: held.TakenBy, OnBehalfOf: held.OnBehalfOf, TakenAt: held.TakenAt})
}

// replyMyselfTimeout bounds a takeover's claim, rejection and wait for the
// rejection to be recorded: under the Zendesk app's 20 s request timeout,
// so that the app hears the answer the server settled on.
const replyMyselfTimeout = 15 * time.Second

// awaitDecided waits until the draft has recorded its decision on the
// proposal in PostgreSQL (the rejection's token and reason), polling.
func (s *Server) awaitDecided(ctx context.Context, proposalID string) (supportflow.ProposalRecord, error) {
	for {
		rec, err := s.proposals.GetProposal(ctx, proposalID)
		if err == nil && rec.State != supportflow.DraftAwaitingApproval {
			return rec, nil
		}
		select {
		case <-ctx.Done():
			return rec, fmt.Errorf("proposal %s: the rejection is not recorded yet: %w", proposalID, cmp.Or(err, ctx.Err()))
		case <-time.After(100 * time.Millisecond):
		}
	}
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
