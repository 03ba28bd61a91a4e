package supportflow

// The payloads of every activity: what the workflows send and receive,
// and so what Temporal keeps in every history. They are part of the
// contract: their JSON names are frozen (a committed history must decode
// into them with unknown fields refused and re-encode to the same JSON,
// TestContract_GoldenPayloads); a field is only ever added, with
// omitempty so that payloads written before it stay the same. Clients
// (Zendesk, BigQuery, the ledger) map to and from these types; none of
// their own structs travel in a payload.

import (
	"fmt"
	"time"
)

// ActionInput names one action of a proposal. Both legs' activities take
// it, so either can create the action's ledger row.
type ActionInput struct {
	Key    string `json:"key"`
	Action Action `json:"action"`
	// ReplyLast orders the legs truthfully: the cancellations run first
	// and the reply only once every one of them succeeded, so a reply never
	// promises what did not happen. Executions from before run the reply
	// first.
	ReplyLast bool `json:"reply_last,omitempty"`
}

// Validate refuses input that can never succeed: a malformed key, or an
// action that is not valid (errors wrap ErrInvalidInput).
func (in ActionInput) Validate() error {
	if _, _, err := ParseActionKey(in.Key); err != nil {
		return err
	}
	if err := in.Action.Validate(); err != nil {
		return fmt.Errorf("action %s: %w", in.Key, err)
	}
	return nil
}

// LoadTicketInput names the ticket a draft (or an evaluation) reads.
type LoadTicketInput struct {
	TicketID int64 `json:"ticket_id"`
	// ForEvaluation cuts the conversation just before the agents' newest
	// public reply and returns that reply as ActualReply, so a draft of the
	// earlier conversation can be scored against it.
	ForEvaluation bool `json:"for_evaluation,omitempty"`
}

// TicketContext is everything a draft is written from.
type TicketContext struct {
	Conversation Conversation `json:"conversation"`
	// Enrichment is the customer's commerce data; nil when the ticket has
	// not been enriched (yet).
	Enrichment *Enrichment `json:"enrichment,omitempty"`
	// ActualReply is the agent's reply a draft is scored against (only
	// with ForEvaluation).
	ActualReply string `json:"actual_reply,omitempty"`
	// OmittedComments counts the middle comments LoadTicket left out to
	// keep this payload within its bound (ContextBytes); the model is told.
	OmittedComments int `json:"omitted_comments,omitempty"`
}

// GenerateInput asks for one draft of a ticket.
type GenerateInput struct {
	ProposalID string        `json:"proposal_id"`
	Ticket     TicketContext `json:"ticket"`
	// Outcome, when set, says why the previous approved reply was not
	// sent; the model is told, so the new reply is truthful.
	Outcome string `json:"outcome,omitempty"`
}

// ProposalStateInput moves a proposal to a later state.
type ProposalStateInput struct {
	ProposalID string `json:"proposal_id"`
	State      string `json:"state"`
	DecidedBy  string `json:"decided_by,omitempty"`
	Error      string `json:"error,omitempty"`
}

// EvalResultInput is one ticket's outcome in an evaluation run.
type EvalResultInput struct {
	RunID       string `json:"run_id"`
	TicketID    int64  `json:"ticket_id"`
	Draft       string `json:"draft,omitempty"`
	ActualReply string `json:"actual_reply,omitempty"`
	// Error, when set, says why the ticket could not be drafted; it is
	// stored without a score.
	Error string `json:"error,omitempty"`
}

// PostReplyResult says how the Zendesk leg ended.
type PostReplyResult struct {
	AuditID   int64 `json:"audit_id"`
	CommentID int64 `json:"comment_id"`
	// Source says where the comment came from: "posted" by this attempt,
	// "ledger" (recorded earlier), "audit" (found on the ticket after an
	// earlier attempt's answer was lost) or "applied" (the whole action was
	// already applied).
	Source string `json:"source"`
	// State is the action's ledger state afterwards.
	State string `json:"state"`
}

// CancelResult says how the cancellation leg ended.
type CancelResult struct {
	// Cancelled lists every subscription of the action now recorded as
	// cancelled, in the action's order.
	Cancelled []string `json:"cancelled"`
	// Called lists the subscriptions this attempt sent to the service
	// (those not already recorded as cancelled).
	Called []string `json:"called"`
	State  string   `json:"state"`
}

// SettleInput names an action whose last attempt failed.
type SettleInput struct {
	Key      string `json:"key"`
	TicketID int64  `json:"ticket_id"`
	// HasComment was written by executions recorded before the ledger
	// kept an action's legs as rows; the ledger now knows them, so nothing
	// reads it. Kept so that those executions' payloads still decode
	// strictly and stay as they were.
	HasComment bool   `json:"has_comment,omitempty"`
	Error      string `json:"error"`
	// HeldBack says later legs (the reply) were held back because an
	// earlier one (a cancellation) was refused for good: the action ends
	// needs_attention.
	HeldBack bool `json:"held_back,omitempty"`
}

// SettleLegsInput names an action whose execution gave up on a leg, and
// how far SettleLegs may go.
type SettleLegsInput struct {
	Key      string `json:"key"`
	TicketID int64  `json:"ticket_id"`
	// Error is the failure, kept as the action's last error for operators
	// (GET /actions/{key}); the notes and the redraft say a classified
	// reason instead, never this.
	Error string `json:"error,omitempty"`
	// HeldBack: the reply was held back because a cancellation was refused
	// for good (needs_attention).
	HeldBack bool `json:"held_back,omitempty"`
	// ZendeskMayHaveLanded: PostReply ran and gave up on something other
	// than a refusal (retries spent, a timeout), so a write of it may have
	// landed, or still land, even where the ledger says pending.
	ZendeskMayHaveLanded bool `json:"zendesk_may_have_landed,omitempty"`
	// Fenced: the execution has written to the ticket since (the agents'
	// note), so any write of ours still in flight carries a stale stamp
	// and is refused; what the audits show now is final.
	Fenced bool `json:"fenced,omitempty"`
	// ResolveOnly records what the receivers say and leaves the action
	// open, so the execution can go on to the reply.
	ResolveOnly bool `json:"resolve_only,omitempty"`
	// GiveUp ends the action needs_attention with whatever is still
	// unknown (the bound on resolving it has passed).
	GiveUp bool `json:"give_up,omitempty"`
}

// SettleLegsResult is the action as the ledger records it after the
// settle: what the workflow, the agents' note and the redraft say was
// done comes from here, never from an error.
type SettleLegsResult struct {
	State string `json:"state"`
	// Cancelled and NotCancelled list the subscriptions whose cancellation
	// is recorded done, and failed, in the action's order; Unknown the
	// legs still unknown ("kind target").
	Cancelled    []string `json:"cancelled,omitempty"`
	NotCancelled []string `json:"not_cancelled,omitempty"`
	Unknown      []string `json:"unknown,omitempty"`
	// AllCancelled: every cancellation leg is done.
	AllCancelled bool `json:"all_cancelled,omitempty"`
	// ReplyLanded and CommentID: the reply is on the ticket.
	ReplyLanded bool  `json:"reply_landed,omitempty"`
	CommentID   int64 `json:"comment_id,omitempty"`
	// NeedsFence: a Zendesk leg may have landed; write to the ticket (the
	// agents' note) and settle again with Fenced.
	NeedsFence bool `json:"needs_fence,omitempty"`
}

// LookupInput names the ticket to look up.
type LookupInput struct {
	TicketID int64 `json:"ticket_id"`
	// RequesterID, when 0, is read from the ticket mirror.
	RequesterID int64 `json:"requester_id,omitempty"`
	// Redrive says an operator re-drove the ticket; its dead letter records
	// when.
	Redrive bool `json:"redrive,omitempty"`
}

// LookupOutput is a recorded lookup.
type LookupOutput struct {
	// RunID is the enrichment_run row the lookup wrote.
	RunID          int64    `json:"run_id"`
	RequesterID    int64    `json:"requester_id"`
	Found          bool     `json:"found"`
	Customer       Customer `json:"customer"`
	JobID          string   `json:"job_id"`
	BytesBilled    int64    `json:"bytes_billed"`
	BytesProcessed int64    `json:"bytes_processed"`
}

// DeadLetterInput dead-letters a ticket.
type DeadLetterInput struct {
	TicketID int64 `json:"ticket_id"`
	// RequesterID is kept for a re-drive; 0 when unknown.
	RequesterID int64  `json:"requester_id,omitempty"`
	Attempts    int    `json:"attempts"`
	LastError   string `json:"last_error"`
	Reason      string `json:"reason"`
}

// Enrichment is the commerce data of a ticket's requester.
type Enrichment struct {
	CustomerID          string    `json:"customer_id"`
	CustomerEmail       string    `json:"customer_email,omitempty"`
	LifetimeOrders      int64     `json:"lifetime_orders"`
	ActiveSubscriptions []string  `json:"active_subscriptions"`
	LookedUpAt          time.Time `json:"looked_up_at"`
}

// Customer is a requester's commerce data.
//
// Its JSON names are the Go field names: histories recorded before the
// contract held the client's untagged struct, and the tags freeze them.
type Customer struct {
	CustomerID string `json:"CustomerID"`
	// Email is "" when the customer has none on record.
	Email string `json:"Email"`
	// LifetimeOrders is how many orders the customer ever placed.
	LifetimeOrders int64 `json:"LifetimeOrders"`
	// ActiveSubscriptions are the IDs of the customer's active
	// subscriptions, sorted; empty but not nil when there are none.
	ActiveSubscriptions []string `json:"ActiveSubscriptions"`
}

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
