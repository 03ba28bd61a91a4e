package supportflow

import (
	"errors"
	"net/http"
	"time"
)

// Application error types: what a caller sees in a failed workflow or
// activity and can match on with temporal.ApplicationError.Type().
const (
	// ErrTypeInvalidInput marks bad input; never retried.
	ErrTypeInvalidInput = "InvalidInput"
	// ErrTypeRejected marks a permanent refusal by Zendesk or the
	// subscription service (404, 422 ...); never retried.
	ErrTypeRejected = "Rejected"
	// ErrTypeLeaseHeld marks an attempt that found another live claimant
	// working the action; retried after backoff.
	ErrTypeLeaseHeld = "LeaseHeld"
	// ErrTypeLostClaim marks an attempt whose claim was taken over while it
	// worked; it stopped without writing. Retried (and then deduplicated).
	ErrTypeLostClaim = "LostClaim"
	// ErrTypeActionFailed marks an ExecuteProposal that ended with an action
	// in failed or partial_failure.
	ErrTypeActionFailed = "ActionFailed"
	// ErrTypeInvalidModelOutput marks a model answer that is not the JSON
	// the drafting prompt asks for; the attempt fails and is retried within
	// the model's budget.
	ErrTypeInvalidModelOutput = "InvalidModelOutput"
	// ErrTypeStaleProposal marks an approval or rejection of a proposal
	// that is not the draft's current one awaiting approval.
	ErrTypeStaleProposal = "StaleProposal"
	// ErrTypeDraftFailed marks a draft that could not be produced.
	ErrTypeDraftFailed = "DraftFailed"
	// ErrTypeNotApproved marks a leg refused before any write because its
	// action has no recorded approval, or is not what was approved (an
	// execution started around the API). Never retried.
	ErrTypeNotApproved = "NotApproved"
	// ErrTypeModelQuotaExhausted: the model account is out of quota (429
	// insufficient_quota); someone must add credit. Not retried.
	ErrTypeModelQuotaExhausted = "ModelQuotaExhausted"
	// ErrTypeModelContextTooLong: the prompt exceeded the model's context
	// window (lower SUPPORTFLOW_MODEL_PROMPT_TOKENS). Not retried.
	ErrTypeModelContextTooLong = "ModelContextTooLong"
	// ErrTypeModelTruncated: the answer hit the token limit
	// (finish_reason length; raise SUPPORTFLOW_MODEL_MAX_TOKENS). Not
	// retried.
	ErrTypeModelTruncated = "ModelTruncated"
)

// ErrorType is one kind of failure a caller can see: the ApplicationError
// type a workflow or activity fails with, whether Temporal retries it
// (policy.AppError makes every such error from the table), and the HTTP
// status the API answers when it reaches a request (Refusal).
type ErrorType struct {
	Type       string
	Retryable  bool
	HTTPStatus int
}

// ErrorTypes is the one table of them.
var ErrorTypes = []ErrorType{
	{ErrTypeInvalidInput, false, http.StatusBadRequest},
	{ErrTypeRejected, false, http.StatusUnprocessableEntity},
	{ErrTypeLeaseHeld, true, http.StatusConflict},
	{ErrTypeLostClaim, true, http.StatusConflict},
	{ErrTypeActionFailed, false, http.StatusConflict},
	{ErrTypeInvalidModelOutput, true, http.StatusBadGateway},
	{ErrTypeStaleProposal, false, http.StatusConflict},
	{ErrTypeDraftFailed, false, http.StatusConflict},
	{ErrTypeNotApproved, false, http.StatusForbidden},
	{ErrTypeModelQuotaExhausted, false, http.StatusServiceUnavailable},
	{ErrTypeModelContextTooLong, false, http.StatusUnprocessableEntity},
	{ErrTypeModelTruncated, false, http.StatusUnprocessableEntity},
}

// LookupErrorType returns the table's entry for an ApplicationError type.
func LookupErrorType(t string) (ErrorType, bool) {
	for _, e := range ErrorTypes {
		if e.Type == t {
			return e, true
		}
	}
	return ErrorType{}, false
}

// Sentinel errors, matched with errors.Is. Every layer wraps one of these
// rather than defining its own; a route of the API answers each in its own
// words, and any route that does not, by Refusal.
var (
	// ErrInvalidInput is wrapped by every validation error, so callers can
	// test with errors.Is.
	ErrInvalidInput = errors.New("invalid input")
	// ErrNotFound: no such action, proposal, approval or ticket.
	ErrNotFound = errors.New("not found")
	// ErrConflict: an action key or proposal ID already recorded with
	// different content (two different proposals share an ID). Permanent.
	ErrConflict = errors.New("already recorded with different content")
	// ErrNotAwaitingApproval: a drafted proposal that is not awaiting
	// approval (superseded, expired, rejected, or executed under another
	// approval).
	ErrNotAwaitingApproval = errors.New("proposal is not awaiting approval")
	// ErrAnswerConflict: approving or retrying the proposal would give its
	// ticket a second answer (another proposal of the ticket is executing,
	// answered it after this one was drafted, or has redrafted it).
	ErrAnswerConflict = errors.New("another proposal answers this ticket")
)

// sentinelStatus is each sentinel's HTTP status.
var sentinelStatus = []struct {
	err    error
	status int
}{
	{ErrInvalidInput, http.StatusBadRequest},
	{ErrNotFound, http.StatusNotFound},
	{ErrConflict, http.StatusConflict},
	{ErrNotAwaitingApproval, http.StatusConflict},
	{ErrAnswerConflict, http.StatusConflict},
}

// Refusal says how the API answers err where its route has no answer of
// its own: the table's status of the ApplicationError type err carries (a
// workflow's or an update's refusal) and that type, else the status of the
// sentinel it wraps and the sentinel's own words; ok is false for neither
// (an unexpected failure). name is never err's message, which may quote a
// customer. The type is read through its Type method, so this package
// needs no SDK.
func Refusal(err error) (status int, name string, ok bool) {
	var typed interface{ Type() string }
	if errors.As(err, &typed) {
		if e, found := LookupErrorType(typed.Type()); found {
			return e.HTTPStatus, e.Type, true
		}
	}
	for _, s := range sentinelStatus {
		if errors.Is(err, s.err) {
			return s.status, s.err.Error(), true
		}
	}
	return 0, "", false
}

// Approval is a person's approval of a proposal, as recorded.
type Approval struct {
	ProposalID string
	TicketID   int64
	// ActionDigests are ContentDigest of each action, in order; nil for an
	// approval carried over from before approvals were recorded.
	ActionDigests []string
	// ApprovedBy is the API token's (or operator's) name; OnBehalfOf the
	// person in the calling app, when given.
	ApprovedBy, OnBehalfOf string
	ApprovedAt             time.Time
}

// ProposalRecord is a saved draft proposal and its state, as the
// proposal store keeps it.
type ProposalRecord struct {
	DraftProposal
	State     string
	DecidedBy string
	Error     string
	CreatedAt time.Time
	UpdatedAt time.Time
}
