package supportflow

import (
	"fmt"
	"time"
)

// Draft states, in the order a draft normally passes through them. The
// first four are live; the rest are terminal. A draft's state is returned
// by DraftQuery and kept in the SearchAttrState search attribute.
const (
	DraftGathering        = "gathering"
	DraftDrafting         = "drafting"
	DraftAwaitingApproval = "awaiting_approval"
	DraftExecuting        = "executing"
	DraftDone             = "done"
	DraftRejected         = "rejected"
	DraftSuperseded       = "superseded"
	DraftExpired          = "expired"
	DraftFailed           = "failed"
)

// DraftTerminal reports whether a draft state is final.
func DraftTerminal(state string) bool {
	switch state {
	case DraftDone, DraftRejected, DraftSuperseded, DraftExpired, DraftFailed:
		return true
	}
	return false
}

// DraftRequest starts a DraftReply workflow.
type DraftRequest struct {
	TicketID int64 `json:"ticket_id"`
	// Reason says who asked: "click", "scan", "supersede", "needs-attention"
	// (a held-back reply redrafted with its outcome) or
	// "activity-during-execution" (the customer wrote while the previous
	// proposal executed).
	Reason string `json:"reason,omitempty"`
	// Supersedes names the proposal this draft replaces after new customer
	// activity (set by the workflow when it continues as new).
	Supersedes string `json:"supersedes,omitempty"`
	// Generation counts the drafts of this workflow ID's chain of runs.
	Generation int `json:"generation,omitempty"`
	// Outcome says what became of the previous approved proposal when it
	// could not be carried out (a cancellation refused, so its reply was
	// held back). The new draft is written knowing it, so the customer is
	// still answered truthfully.
	Outcome string `json:"outcome,omitempty"`
}

// Validate checks a draft request before anything is started.
func (r DraftRequest) Validate() error {
	if err := ValidateTicketID(r.TicketID); err != nil {
		return err
	}
	if r.Supersedes != "" {
		if err := ValidateProposalID(r.Supersedes); err != nil {
			return err
		}
	}
	return nil
}

// DraftProposal is what a draft proposes: a public reply and the
// subscriptions to cancel, saved in PostgreSQL before it is shown.
type DraftProposal struct {
	ID                  string   `json:"id"`
	TicketID            int64    `json:"ticket_id"`
	Reply               string   `json:"reply"`
	CancelSubscriptions []string `json:"cancel_subscriptions,omitempty"`
	// UpdateTicket is the status and tags the reply sets on the ticket, in
	// the same Zendesk update (the worker's SUPPORTFLOW_REPLY_STATUS and
	// SUPPORTFLOW_REPLY_TAGS when it was drafted); nil for none.
	UpdateTicket *TicketUpdate `json:"update_ticket,omitempty"`
	// ConversationThrough is the time of the newest comment the draft saw.
	ConversationThrough time.Time `json:"conversation_through"`
	Model               string    `json:"model,omitempty"`
	// PromptTokens and CompletionTokens are what the model server counted
	// for the completion that wrote it (0 when it did not say).
	PromptTokens     int64 `json:"prompt_tokens,omitempty"`
	CompletionTokens int64 `json:"completion_tokens,omitempty"`
	// OmittedComments is how many middle comments of a long conversation
	// were left out to fit the model's token budget.
	OmittedComments int `json:"omitted_comments,omitempty"`
	// Cancellations describe CancelSubscriptions for the approver, in the
	// same order: whose plan each is and which comment asked for it. Only
	// for the person deciding; not part of what is approved (the
	// subscription IDs are). Empty in proposals from before it existed.
	Cancellations []CancellationView `json:"cancellations,omitempty"`
}

// CancellationView is what the approver sees of one proposed cancellation.
type CancellationView struct {
	SubscriptionID string `json:"subscription_id"`
	// Plan, Status and CustomerID are the subscription service's answer
	// when the draft was written; "" when it could not be read.
	Plan       string `json:"plan,omitempty"`
	Status     string `json:"status,omitempty"`
	CustomerID string `json:"customer_id,omitempty"`
	// AskedIn is the comment the model cited as asking for it; nil when it
	// cited none that is on the ticket.
	AskedIn *CommentRef `json:"asked_in,omitempty"`
}

// CommentRef points at one comment of the ticket's conversation.
type CommentRef struct {
	ID int64 `json:"id"`
	// AuthorRole is "requester", "end_user", "agent" or "supportflow".
	AuthorRole string    `json:"author_role"`
	At         time.Time `json:"at"`
	// Excerpt is the comment's start (at most 280 bytes), so the approver
	// reads the request beside the cancellation.
	Excerpt string `json:"excerpt,omitempty"`
}

// Proposal is the executable form of a draft: one action that cancels the
// subscriptions and then posts the reply publicly (with the ticket update,
// if any).
func (p DraftProposal) Proposal() Proposal {
	return Proposal{ID: p.ID, Actions: []Action{{
		TicketID:            p.TicketID,
		Comment:             &Comment{Body: p.Reply, Public: true},
		CancelSubscriptions: p.CancelSubscriptions,
		UpdateTicket:        p.UpdateTicket,
	}}}
}

// DraftProgress is how far the model has got.
type DraftProgress struct {
	// Step is the running activity's step ("loading ticket", "streaming").
	Step string `json:"step,omitempty"`
	// Tokens is the number of tokens the model has streamed so far in the
	// current attempt.
	Tokens int `json:"tokens"`
	// Attempt is the current attempt of the running activity (1-based).
	Attempt int32 `json:"attempt,omitempty"`
}

// DraftStatus is a draft as its workflow sees it.
type DraftStatus struct {
	TicketID int64  `json:"ticket_id"`
	State    string `json:"state"`
	// Proposal is the current proposal, from awaiting_approval on.
	Proposal *DraftProposal `json:"proposal,omitempty"`
	// Error says why the draft failed or how its execution ended.
	Error string `json:"error,omitempty"`
	// Progress is filled in by starter.DraftStatus from the running
	// activity's heartbeat details; the workflow itself cannot see them.
	Progress *DraftProgress `json:"progress,omitempty"`
	// Redrafts counts restarts of this run after new customer activity
	// while gathering or drafting.
	Redrafts int `json:"redrafts,omitempty"`
	// IgnoredActivity counts customer activity recorded while executing;
	// activity newer than the executed proposal's conversation redrafts
	// once the execution has settled.
	IgnoredActivity int    `json:"ignored_activity,omitempty"`
	Supersedes      string `json:"supersedes,omitempty"`
	Generation      int    `json:"generation,omitempty"`
	ApprovedBy      string `json:"approved_by,omitempty"`
	// ExecutionWorkflowID is the ExecuteProposal child, once approved.
	ExecutionWorkflowID string `json:"execution_workflow_id,omitempty"`
	// WorkerUnavailable says no worker answered the draft's query in
	// time: the status was read from PostgreSQL and Temporal's visibility
	// instead, so it may lag (and has no progress).
	WorkerUnavailable bool `json:"worker_unavailable,omitempty"`
}

// ApproveRequest approves a draft's proposal. ProposalID must name the
// draft's current proposal, so a stale browser tab cannot approve a reply
// its user never saw.
type ApproveRequest struct {
	ProposalID string `json:"proposal_id"`
	ApprovedBy string `json:"approved_by,omitempty"`
	// OnBehalfOf is the person in the calling app the approval was made
	// for, when ApprovedBy is the API token that made it.
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
}

// ApproveResult answers an approval.
type ApproveResult struct {
	ProposalID          string `json:"proposal_id"`
	ExecutionWorkflowID string `json:"execution_workflow_id"`
	// AlreadyApproved is true when this proposal had been approved before:
	// the approval joined the execution already under way.
	AlreadyApproved bool `json:"already_approved,omitempty"`
}

// RejectRequest rejects a draft's current proposal.
type RejectRequest struct {
	ProposalID string `json:"proposal_id"`
	RejectedBy string `json:"rejected_by,omitempty"`
	// OnBehalfOf is the person in the calling app the rejection was made
	// for, when RejectedBy is the API token that made it.
	OnBehalfOf string `json:"on_behalf_of,omitempty"`
	Reason     string `json:"reason,omitempty"`
}

// TicketActivity is new customer activity on a ticket (SupersedeSignal).
type TicketActivity struct {
	At     time.Time `json:"at"`
	Source string    `json:"source,omitempty"`
}

// EvaluationRequest starts an EvaluateDrafts run over a named set of past
// tickets.
type EvaluationRequest struct {
	// RunID names the run (workflow ID eval/{RunID}); [A-Za-z0-9._-].
	RunID string `json:"run_id"`
	// Set names the ticket set, for reports.
	Set       string  `json:"set"`
	TicketIDs []int64 `json:"ticket_ids"`
	// Concurrency bounds the drafts in flight; 0 means 4.
	Concurrency int `json:"concurrency,omitempty"`
}

// MaxEvaluationTickets bounds one run, keeping its history well inside
// Temporal's limits.
const MaxEvaluationTickets = 1000

// MaxEvaluationConcurrency bounds an evaluation's drafts in flight.
const MaxEvaluationConcurrency = 32

// Validate checks an evaluation request before anything is started.
func (r EvaluationRequest) Validate() error {
	if !idPattern.MatchString(r.RunID) {
		return fmt.Errorf("%w: run id %q must be 1-128 characters of [A-Za-z0-9._-]", ErrInvalidInput, r.RunID)
	}
	if !idPattern.MatchString(r.Set) {
		return fmt.Errorf("%w: set name %q must be 1-128 characters of [A-Za-z0-9._-]", ErrInvalidInput, r.Set)
	}
	if len(r.TicketIDs) == 0 || len(r.TicketIDs) > MaxEvaluationTickets {
		return fmt.Errorf("%w: an evaluation needs 1-%d tickets, got %d", ErrInvalidInput, MaxEvaluationTickets, len(r.TicketIDs))
	}
	if r.Concurrency < 0 || r.Concurrency > MaxEvaluationConcurrency {
		return fmt.Errorf("%w: concurrency %d must be 0-%d", ErrInvalidInput, r.Concurrency, MaxEvaluationConcurrency)
	}
	seen := make(map[int64]bool, len(r.TicketIDs))
	for _, id := range r.TicketIDs {
		if err := ValidateTicketID(id); err != nil {
			return err
		}
		if seen[id] {
			return fmt.Errorf("%w: ticket %d listed twice", ErrInvalidInput, id)
		}
		seen[id] = true
	}
	return nil
}

// EvaluationStatus is an evaluation run's progress and, once done, its
// summary.
type EvaluationStatus struct {
	RunID  string `json:"run_id"`
	Set    string `json:"set"`
	Total  int    `json:"total"`
	Done   int    `json:"done"`
	Failed int    `json:"failed"`
	// MeanScore is the mean score of the drafted tickets (see package
	// eval for the metric).
	MeanScore float64 `json:"mean_score"`
	Finished  bool    `json:"finished"`
}

// ScanRequest bounds one scan.
type ScanRequest struct {
	// Limit is the most drafts one scan starts; 0 means DefaultScanLimit.
	Limit int `json:"limit,omitempty"`
}

// DefaultScanLimit bounds a scan's starts, and so its history, when the
// request does not.
const DefaultScanLimit = 200

// MaxScanLimit is the largest Limit a scan accepts.
const MaxScanLimit = 1000

// ScanResult says what a scan found and did.
type ScanResult struct {
	// Candidates are the tickets that need a draft.
	Candidates []int64 `json:"candidates"`
	// Started are the tickets whose draft this scan started.
	Started []int64 `json:"started"`
	// Running are the candidates whose draft was already running; the scan
	// left them alone.
	Running []int64 `json:"running"`
	// Failed are the candidates whose draft could not be started.
	Failed []int64 `json:"failed,omitempty"`
}
