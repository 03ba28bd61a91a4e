// Package supportflow is the contract: everything Temporal sees, in one
// dependency-free package that every other package points at.
//
//   - names: the task queue (and the resource queues derived from it in
//     policy), workflow types and IDs, activities (activity.go), signals,
//     queries, updates, search attributes and schedule IDs; version
//     markers are listed in workflows/versions.go, next to the code they
//     guard;
//   - payloads: every workflow's and activity's input and result
//     (payloads.go, draft.go, enrich.go, reconcile.go), with frozen JSON
//     names that the committed histories hold them to
//     (TestContract_GoldenPayloads);
//   - idempotency keys: ActionKey and the workflow IDs derived from
//     business identity;
//   - errors: the ApplicationError types with their retryability and HTTP
//     status, and the sentinel errors every layer wraps (errors.go).
//
// Clients (Zendesk, BigQuery, the model, the ledger) map to and from these
// types; the workflows import only this package, the SDK, policy and text
// (TestContract_WorkflowsDependOnTheContractOnly).
package supportflow

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// TaskQueue is the one task queue the supportflow worker polls.
const TaskQueue = "supportflow"

// Workflow type names. They are registered explicitly so that renaming a Go
// function never silently renames a workflow type with open executions.
const (
	ExecuteProposalWorkflow = "ExecuteProposal"
	DraftReplyWorkflow      = "DraftReply"
	ScanTicketsWorkflow     = "ScanTickets"
	EvaluateDraftsWorkflow  = "EvaluateDrafts"
	PruneRetentionWorkflow  = "PruneRetention"
)

// Query names.
const (
	// ActionsQuery returns []ActionStatus for an ExecuteProposal workflow.
	ActionsQuery = "actions"
	// DraftQuery returns a DraftStatus for a DraftReply workflow.
	DraftQuery = "draft"
	// EvaluationQuery returns an EvaluationStatus for an EvaluateDrafts
	// workflow.
	EvaluationQuery = "evaluation"
)

// Update and signal names of DraftReply.
const (
	// ApproveUpdate approves the draft's current proposal (ApproveRequest)
	// and answers an ApproveResult.
	ApproveUpdate = "approve"
	// RejectUpdate rejects the draft's current proposal (RejectRequest).
	RejectUpdate = "reject"
	// SupersedeSignal tells a draft that the customer wrote again
	// (TicketActivity).
	SupersedeSignal = "supersede"
)

// ExecuteWorkflowID is the workflow ID of a proposal's execution. It is
// derived from business identity so that a second approval of the same
// proposal joins the running execution instead of starting another one.
func ExecuteWorkflowID(proposalID string) string { return "execute/" + proposalID }

// DraftWorkflowID is the workflow ID of a ticket's draft: one draft per
// ticket at a time, so a double click or a scan racing a click joins it.
func DraftWorkflowID(ticketID int64) string { return "draft/" + strconv.FormatInt(ticketID, 10) }

// EvaluationWorkflowID is the workflow ID of an evaluation run.
func EvaluationWorkflowID(runID string) string { return "eval/" + runID }

// IDs builds the workflow and schedule IDs of one supportflow account, so
// that accounts sharing a Temporal namespace never meet on an ID: with a
// prefix, every ID is "{prefix}/" followed by the account-less ID
// (DraftWorkflowID, ScanScheduleID, ...); without one (the zero IDs), the
// IDs are exactly those, as every deployment before prefixes had them.
//
// The prefix is SUPPORTFLOW_ID_PREFIX. It must be set before an account's
// first start: changing it on a live deployment leaves the running drafts,
// enrichments and schedules under the old IDs, where nothing finds them.
// A workflow that starts children derives the prefix from its own ID
// (IDsOf, ScheduledIDsOf), which its history holds, so a replay builds
// the same IDs whatever the worker is configured with.
type IDs struct {
	// Prefix is the account's prefix; "" for none. ValidateIDPrefix says
	// which are allowed.
	Prefix string
}

// IDPrefixSeparator separates an ID's account prefix from the rest.
const IDPrefixSeparator = "/"

// Scheduled-run names: the ID a schedule's action gives the runs it starts,
// which Temporal suffixes with "-" and the run's nominal time.
const (
	scanAction           = "scan-tickets"
	pruneAction          = "prune-retention"
	reconcileAction      = "reconcile-tickets"
	reconcileNowWorkflow = "reconcile-tickets-now"
)

var idPrefixPattern = regexp.MustCompile(`^[a-z0-9]([a-z0-9_-]{0,38}[a-z0-9])?$`)

// ValidateIDPrefix checks an account's ID prefix: empty (no prefix), or 1
// to 40 lower-case letters, digits, '-' and '_', starting and ending with
// a letter or digit. It never holds the separator, so an ID splits back
// into its prefix and the rest one way only.
func ValidateIDPrefix(prefix string) error {
	if prefix == "" || idPrefixPattern.MatchString(prefix) {
		return nil
	}
	return fmt.Errorf("%w: ID prefix %q must be 1-40 lower-case letters, digits, '-' or '_', starting and ending with a letter or digit", ErrInvalidInput, prefix)
}

func (ids IDs) id(s string) string {
	if ids.Prefix == "" {
		return s
	}
	return ids.Prefix + IDPrefixSeparator + s
}

// Draft is the workflow ID of a ticket's draft (DraftWorkflowID).
func (ids IDs) Draft(ticketID int64) string { return ids.id(DraftWorkflowID(ticketID)) }

// Enrich is the workflow ID of a ticket's enrichment (EnrichWorkflowID).
func (ids IDs) Enrich(ticketID int64) string { return ids.id(EnrichWorkflowID(ticketID)) }

// Execute is the workflow ID of a proposal's execution (ExecuteWorkflowID).
func (ids IDs) Execute(proposalID string) string { return ids.id(ExecuteWorkflowID(proposalID)) }

// Evaluation is the workflow ID of an evaluation run (EvaluationWorkflowID).
func (ids IDs) Evaluation(runID string) string { return ids.id(EvaluationWorkflowID(runID)) }

// ScanSchedule is the ID of the schedule that runs ScanTickets.
func (ids IDs) ScanSchedule() string { return ids.id(ScanScheduleID) }

// PruneSchedule is the ID of the schedule that runs PruneRetention.
func (ids IDs) PruneSchedule() string { return ids.id(PruneScheduleID) }

// ReconcileSchedule is the ID of the schedule that runs ReconcileTickets.
func (ids IDs) ReconcileSchedule() string { return ids.id(ReconcileScheduleID) }

// ScanAction, PruneAction and ReconcileAction are the IDs the schedules'
// actions give their runs: a run's workflow ID is the action's ID, "-" and
// its nominal time.
func (ids IDs) ScanAction() string      { return ids.id(scanAction) }
func (ids IDs) PruneAction() string     { return ids.id(pruneAction) }
func (ids IDs) ReconcileAction() string { return ids.id(reconcileAction) }

// ReconcileNow is the workflow ID of an on-demand reconciliation.
func (ids IDs) ReconcileNow() string { return ids.id(reconcileNowWorkflow) }

// IDsOf returns the IDs of the account a workflow belongs to, from its own
// workflow ID and that ID's account-less form (DraftWorkflowID(ticket) for
// a draft): the prefix is what precedes the separator and base. An ID of
// any other shape (a test's, one given by hand) has no prefix.
func IDsOf(workflowID, base string) IDs {
	if p, ok := strings.CutSuffix(workflowID, IDPrefixSeparator+base); ok && p != "" && ValidateIDPrefix(p) == nil {
		return IDs{Prefix: p}
	}
	return IDs{}
}

// ScanIDsOf returns the IDs of the account a ScanTickets run belongs to,
// from its workflow ID: a run its schedule started is named
// ScanAction()-{time}, so "{prefix}/scan-tickets-…" has the prefix and
// anything else has none. A scan started by hand for a prefixed account
// must be named the same way.
func ScanIDsOf(workflowID string) IDs {
	if p, rest, ok := strings.Cut(workflowID, IDPrefixSeparator); ok && strings.HasPrefix(rest, scanAction) && ValidateIDPrefix(p) == nil {
		return IDs{Prefix: p}
	}
	return IDs{}
}

// Task-queue priorities (1 first, 5 last; Temporal's default is 3): work a
// person waits on is handed to workers before work machines queued earlier
// on the same task queue, the resource queues included (an approved reply's
// Zendesk write overtakes a scan's ticket reads). A workflow's activities
// and children inherit its priority unless given their own.
// https://docs.temporal.io/develop/task-queue-priority-fairness
const (
	// PriorityExecution: executions of approved proposals and operator
	// retries (a person approved; the customer waits for the reply).
	PriorityExecution = 1
	// PriorityRequestedDraft: a draft a person asked for (API, starter).
	PriorityRequestedDraft = 2
	// PriorityScannedDraft: a draft a scan started.
	PriorityScannedDraft = 3
	// PriorityBackground: scans, evaluations, enrichment, reconciliation.
	PriorityBackground = 4
	// PriorityMaintenance: the retention prune.
	PriorityMaintenance = 5
)

// ScanScheduleID is the ID of the Temporal Schedule that runs ScanTickets.
const ScanScheduleID = "supportflow-scan-tickets"

// PruneScheduleID is the ID of the Temporal Schedule that runs
// PruneRetention daily.
const PruneScheduleID = "supportflow-prune-retention"

// Search attributes supportflow sets, so the Web UI and the app can filter
// workflows by them. Each must be registered on the namespace as a Keyword
// (see SearchAttributes).
const (
	// SearchAttrState is a draft's state (DraftGathering ...).
	SearchAttrState = "SupportflowState"
	// SearchAttrTicketID is the Zendesk ticket a workflow works on.
	SearchAttrTicketID = "SupportflowTicketID"
	// SearchAttrProposalID is the draft's current proposal.
	SearchAttrProposalID = "SupportflowProposalID"
)

// SearchAttributes maps every custom search attribute to its type, as
// `temporal operator search-attribute create` takes them.
var SearchAttributes = map[string]string{
	SearchAttrState:      "Keyword",
	SearchAttrTicketID:   "Keyword",
	SearchAttrProposalID: "Keyword",
}

// MaxCommentBytes is Zendesk's limit on a comment body (64 KiB). A longer
// body is rejected before anything is written.
const MaxCommentBytes = 64 * 1024

// MaxActions bounds a proposal's actions so that a workflow's history stays
// small; a proposal with more is rejected as invalid input.
const MaxActions = 50

// MaxSubscriptionsPerAction bounds the cancellation leg of one action.
const MaxSubscriptionsPerAction = 50

// Proposal is what a human approved: an ordered list of actions.
type Proposal struct {
	// ID identifies the proposal. It becomes part of the workflow ID and of
	// every action key, so it is restricted to [A-Za-z0-9._-], 1-128 chars.
	ID      string   `json:"id"`
	Actions []Action `json:"actions"`
}

// Action is one step of a proposal: a Zendesk leg (an optional comment on
// the ticket), then a cancellation leg (optional subscriptions to cancel).
// At least one leg must be present.
type Action struct {
	TicketID int64 `json:"ticket_id"`
	// Comment, when nil, skips the Zendesk leg.
	Comment *Comment `json:"comment,omitempty"`
	// CancelSubscriptions lists subscription IDs to cancel, in order. Empty
	// skips the cancellation leg. Duplicates are rejected.
	CancelSubscriptions []string `json:"cancel_subscriptions,omitempty"`
	// UpdateTicket, when set, sets the ticket's status and adds tags, in
	// the same Zendesk update as the comment (or alone without one).
	UpdateTicket *TicketUpdate `json:"update_ticket,omitempty"`
}

// Comment is a reply on a Zendesk ticket.
type Comment struct {
	Body string `json:"body"`
	// Public is true for a reply the customer sees, false for an internal
	// note.
	Public bool `json:"public"`
}

// Action states, as stored in the ledger and reported by the actions query.
const (
	StatePending        = "pending"
	StateApplying       = "applying"
	StateApplied        = "applied"
	StatePartialFailure = "partial_failure"
	StateFailed         = "failed"
	// StateNeedsAttention: a cancellation was refused for good, so the
	// reply (which would have promised it) was held back; a private note
	// tells the agents, and the ticket is drafted again.
	StateNeedsAttention = "needs_attention"
)

// ActionStatus is the state of one action as the workflow last saw it.
type ActionStatus struct {
	Key       string `json:"key"`
	TicketID  int64  `json:"ticket_id"`
	State     string `json:"state"`
	Error     string `json:"error,omitempty"`
	CommentID int64  `json:"comment_id,omitempty"`
	// Cancelled lists the subscriptions whose cancellation is recorded as
	// done.
	Cancelled []string `json:"cancelled,omitempty"`
	// NotCancelled lists those recorded as not cancelled (refused, or
	// failed for good), and Unknown the legs whose outcome could not be
	// learned ("kind target"); both read from the ledger after the settle.
	NotCancelled []string `json:"not_cancelled,omitempty"`
	Unknown      []string `json:"unknown,omitempty"`
	// Reason is why the action did not apply, classified in a few words
	// (never a service's error text): what a note or a redraft may repeat.
	Reason string `json:"reason,omitempty"`
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

// ticketIDPattern is a ticket ID as text: a positive decimal without sign
// or leading zeros, at most 18 digits (so it always fits an int64).
var ticketIDPattern = regexp.MustCompile(`^[1-9][0-9]{0,17}$`)

// ParseTicketID reads a ticket ID given as text (a URL path, a command's
// argument): the one rule for it. Anything else is an error wrapping
// ErrInvalidInput that quotes at most 40 bytes of s.
func ParseTicketID(s string) (int64, error) {
	if !ticketIDPattern.MatchString(s) {
		if len(s) > 40 {
			s = s[:40] + "…"
		}
		return 0, fmt.Errorf("%w: ticket id %q must be a positive decimal integer", ErrInvalidInput, s)
	}
	id, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: ticket id %q: %v", ErrInvalidInput, s, err)
	}
	return id, nil
}

// ParseProposalID reads a proposal ID given as text; errors as
// ValidateProposalID.
func ParseProposalID(s string) (string, error) {
	if err := ValidateProposalID(s); err != nil {
		return "", err
	}
	return s, nil
}

// ValidateTicketID reports whether id can be a Zendesk ticket ID.
func ValidateTicketID(id int64) error {
	if id <= 0 {
		return fmt.Errorf("%w: ticket id %d must be positive", ErrInvalidInput, id)
	}
	return nil
}

// ValidateProposalID reports whether id can be used in workflow IDs and
// action keys.
func ValidateProposalID(id string) error {
	if !idPattern.MatchString(id) {
		return fmt.Errorf("%w: proposal id %q must be 1-128 characters of [A-Za-z0-9._-]", ErrInvalidInput, id)
	}
	return nil
}

// AttentionPrefix starts the proposal part of the keys of the private
// notes an execution writes to tell the agents what happened; no proposal
// ID may start with it.
const AttentionPrefix = "attention-"

// EnrichmentNotePrefix starts the proposal part of the keys of the private
// notes the enrichment writes in live mode; no proposal ID may start with
// it either.
const EnrichmentNotePrefix = "enrich-"

// NotePrefixes are the reserved prefixes of supportflow's own private
// notes, which run without an approval.
var NotePrefixes = []string{AttentionPrefix, EnrichmentNotePrefix}

// Validate checks a proposal before anything is started or written. Every
// problem is reported as an error wrapping ErrInvalidInput.
func (p Proposal) Validate() error {
	if err := ValidateProposalID(p.ID); err != nil {
		return err
	}
	for _, prefix := range NotePrefixes {
		if strings.HasPrefix(p.ID, prefix) {
			return fmt.Errorf("%w: proposal id %q: the prefix %q is reserved for supportflow's notes to the agents", ErrInvalidInput, p.ID, prefix)
		}
	}
	if len(p.Actions) == 0 {
		return fmt.Errorf("%w: proposal %s has no actions", ErrInvalidInput, p.ID)
	}
	if len(p.Actions) > MaxActions {
		return fmt.Errorf("%w: proposal %s has %d actions, more than %d", ErrInvalidInput, p.ID, len(p.Actions), MaxActions)
	}
	for i, a := range p.Actions {
		if err := a.Validate(); err != nil {
			return fmt.Errorf("action %d: %w", i, err)
		}
	}
	return nil
}

// Validate checks one action.
func (a Action) Validate() error {
	if err := ValidateTicketID(a.TicketID); err != nil {
		return err
	}
	if a.Comment == nil && len(a.CancelSubscriptions) == 0 && a.UpdateTicket == nil {
		return fmt.Errorf("%w: action has no comment, no subscriptions to cancel and no ticket update", ErrInvalidInput)
	}
	if a.UpdateTicket != nil {
		if err := a.UpdateTicket.Validate(); err != nil {
			return err
		}
	}
	if a.Comment != nil {
		if strings.TrimSpace(a.Comment.Body) == "" {
			return fmt.Errorf("%w: comment body is empty", ErrInvalidInput)
		}
		if len(a.Comment.Body) > MaxCommentBytes {
			return fmt.Errorf("%w: comment body is %d bytes, over Zendesk's limit of %d", ErrInvalidInput, len(a.Comment.Body), MaxCommentBytes)
		}
	}
	if len(a.CancelSubscriptions) > MaxSubscriptionsPerAction {
		return fmt.Errorf("%w: %d subscriptions to cancel, more than %d", ErrInvalidInput, len(a.CancelSubscriptions), MaxSubscriptionsPerAction)
	}
	seen := make(map[string]bool, len(a.CancelSubscriptions))
	for _, s := range a.CancelSubscriptions {
		if !idPattern.MatchString(s) {
			return fmt.Errorf("%w: subscription id %q must be 1-128 characters of [A-Za-z0-9._-]", ErrInvalidInput, s)
		}
		if seen[s] {
			return fmt.Errorf("%w: subscription %s listed twice", ErrInvalidInput, s)
		}
		seen[s] = true
	}
	return nil
}

// ActionKey is the idempotency key of a proposal's i-th action:
// "{proposalID}:{i}". It is derived from business identity, never from a
// run ID, so it survives continue-as-new, resets and re-approvals.
func ActionKey(proposalID string, index int) string {
	return proposalID + ":" + strconv.Itoa(index)
}

// ParseActionKey splits a key made by ActionKey. A malformed key (missing
// separator, bad proposal ID, negative or non-decimal index) is an error
// wrapping ErrInvalidInput.
func ParseActionKey(key string) (proposalID string, index int, err error) {
	i := strings.LastIndexByte(key, ':')
	if i < 0 {
		return "", 0, fmt.Errorf("%w: action key %q has no ':'", ErrInvalidInput, key)
	}
	proposalID, num := key[:i], key[i+1:]
	if err := ValidateProposalID(proposalID); err != nil {
		return "", 0, fmt.Errorf("action key %q: %w", key, err)
	}
	index, convErr := strconv.Atoi(num)
	if convErr != nil || index < 0 || strconv.Itoa(index) != num || index >= MaxActions {
		return "", 0, fmt.Errorf("%w: action key %q has a bad index %q", ErrInvalidInput, key, num)
	}
	return proposalID, index, nil
}
