// Package starter is how the app starts and inspects supportflow's
// workflows. Every call is idempotent where a user would expect it: an
// approval that repeats joins the execution already running.
package starter

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"

	"github.com/supportflow/supportflow"
)

// Starter starts and queries supportflow workflows through a Temporal
// client.
type Starter struct {
	Client client.Client
	// TaskQueue is where workflows are started; "" means
	// supportflow.TaskQueue. It must match the workers' queue.
	TaskQueue string
	// IDs build the workflow and schedule IDs the starter starts, signals
	// and reads: the account's prefix (SUPPORTFLOW_ID_PREFIX), the same as
	// its workers'; the zero IDs have none.
	IDs supportflow.IDs
	// Proposals, when set, lets DraftStatus answer from PostgreSQL when no
	// worker answers the draft's query in time.
	Proposals ProposalReader
	// Approvals records approvals (Approve, ExecuteProposal) in
	// PostgreSQL, where every leg of an execution checks them; without it
	// both refuse with ErrNoApprovals.
	Approvals Approvals
	// QueryTimeout bounds the draft query before that fallback; 0 means
	// DefaultQueryTimeout.
	QueryTimeout time.Duration
	// Converter reads payloads the starter gets raw from the server (an
	// activity's heartbeat details in a workflow's description); it must
	// be the client's data converter. Nil means Temporal's default, which
	// cannot open sealed payloads.
	Converter converter.DataConverter
}

// converter is the data converter raw payloads are read with.
func (s *Starter) converter() converter.DataConverter {
	if s.Converter != nil {
		return s.Converter
	}
	return converter.GetDefaultDataConverter()
}

// ProposalReader reads a ticket's newest proposal (internal/proposals.Store).
type ProposalReader interface {
	LatestProposal(ctx context.Context, ticketID int64) (supportflow.ProposalRecord, error)
}

// DefaultQueryTimeout is how long DraftStatus waits for a worker to answer
// the draft's query: a query is answered by a worker, so without one it
// would wait for the caller's whole deadline.
const DefaultQueryTimeout = time.Second

// New returns a Starter using c and the default task queue; dc is c's
// data converter (codec.DataConverter), for the payloads the starter reads
// raw.
func New(c client.Client, dc converter.DataConverter) *Starter {
	return &Starter{Client: c, Converter: dc}
}

func (s *Starter) taskQueue() string { return cmp.Or(s.TaskQueue, supportflow.TaskQueue) }

// Execution identifies a proposal's execution.
type Execution struct {
	WorkflowID string
	RunID      string
	// Joined is true when the proposal was already executing and this call
	// joined that execution instead of starting another.
	Joined bool
}

// ErrNotRetryable is wrapped by Retry's refusals: the proposal was never
// approved, is still running, has nothing left to do, has been redrafted,
// or its ledger record is gone.
var ErrNotRetryable = errors.New("starter: nothing to retry")

// Proposals is what Retry reads and writes: the saved proposal, its
// approval and its action's ledger row (internal/proposals.Store).
type Proposals interface {
	GetProposal(ctx context.Context, proposalID string) (supportflow.ProposalRecord, error)
	GetApproval(ctx context.Context, proposalID string) (supportflow.Approval, error)
	// ActionState is the ledger state of an action (StateApplied ...),
	// or an error wrapping supportflow.ErrNotFound.
	ActionState(ctx context.Context, key string) (string, error)
	NewerLiveProposal(ctx context.Context, ticketID int64, proposalID string) (string, error)
	MarkRetrying(ctx context.Context, proposalID string) error
}

// Retry runs an approved proposal whose execution failed again, with the
// same action keys, so what landed is skipped and the rest runs (the
// reply last). It refuses with ErrNotRetryable a proposal that was never
// approved, is still being applied, is applied, has been redrafted (a
// newer proposal of the ticket awaits approval or went out, or the ticket
// is being drafted again right now), or whose ledger row is gone (pruned
// after the retention period: what landed is no longer known, so the
// reply could go out twice); an unknown proposal is supportflow.ErrNotFound.
// The proposal is marked executing under its ticket's lock, so a redraft's
// approval waits for the retry's outcome. by names who asked (an API
// token's name, or the operator), for the logs.
func (s *Starter) Retry(ctx context.Context, l Proposals, proposalID, by string) (Execution, error) {
	if err := supportflow.ValidateProposalID(proposalID); err != nil {
		return Execution{}, err
	}
	p, err := l.GetProposal(ctx, proposalID)
	if err != nil {
		return Execution{}, err
	}
	if p.State != supportflow.DraftFailed && p.State != supportflow.DraftExecuting {
		return Execution{}, fmt.Errorf("%w: proposal %s is %s; only an approved proposal whose execution failed can be retried", ErrNotRetryable, p.ID, p.State)
	}
	if _, err := l.GetApproval(ctx, p.ID); errors.Is(err, supportflow.ErrNotFound) {
		return Execution{}, fmt.Errorf("%w: proposal %s has no recorded approval", ErrNotRetryable, p.ID)
	} else if err != nil {
		return Execution{}, err
	}
	// A redraft (after a held-back reply, or new customer activity) has
	// taken this proposal's place: running the old reply too would send
	// the customer two answers.
	newer, err := l.NewerLiveProposal(ctx, p.TicketID, p.ID)
	if err != nil {
		return Execution{}, err
	}
	if newer != "" {
		return Execution{}, fmt.Errorf("%w: proposal %s has been redrafted as %s; approve or reject that one (a rejected redraft lets this one be retried)", ErrNotRetryable, p.ID, newer)
	}
	if state := s.runningDraftState(ctx, p.TicketID); state != "" {
		return Execution{}, fmt.Errorf("%w: ticket %d is being drafted again (%s is %s); approve or reject that draft instead", ErrNotRetryable, p.TicketID, s.IDs.Draft(p.TicketID), state)
	}
	key := supportflow.ActionKey(p.ID, 0)
	state, err := l.ActionState(ctx, key)
	switch {
	case errors.Is(err, supportflow.ErrNotFound):
		// Every execution that ran leaves a row (the settle creates one for
		// an action never reserved), so none means the prune took it.
		return Execution{}, fmt.Errorf("%w: action %s has no ledger record (pruned after the retention period, or never started), so what landed is unknown and a retry could send the reply twice; draft the ticket again instead", ErrNotRetryable, key)
	case err != nil:
		return Execution{}, err
	case state == supportflow.StateApplied:
		return Execution{}, fmt.Errorf("%w: action %s is applied", ErrNotRetryable, key)
	case state == supportflow.StateApplying && p.State == supportflow.DraftExecuting:
		return Execution{}, fmt.Errorf("%w: action %s is still being applied", ErrNotRetryable, key)
	}
	if err := l.MarkRetrying(ctx, p.ID); err != nil {
		if errors.Is(err, supportflow.ErrAnswerConflict) || errors.Is(err, supportflow.ErrNotAwaitingApproval) {
			return Execution{}, fmt.Errorf("%w: %w", ErrNotRetryable, err)
		}
		return Execution{}, err
	}
	// The stored proposal, ticket update included: the same content under
	// the same keys, so what landed is skipped.
	return s.start(ctx, p.DraftProposal.Proposal())
}

// runningDraftState is the state of the ticket's running draft workflow
// ("" when none runs, or it cannot be told).
func (s *Starter) runningDraftState(ctx context.Context, ticketID int64) string {
	d, err := s.Client.DescribeWorkflowExecution(ctx, s.IDs.Draft(ticketID), "")
	if err != nil || d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		return ""
	}
	state := "running"
	if p := d.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()[supportflow.SearchAttrState]; p != nil {
		var v string
		if converter.GetDefaultDataConverter().FromPayload(p, &v) == nil && v != "" {
			state = v
		}
	}
	switch state {
	case supportflow.DraftRejected, supportflow.DraftExpired, supportflow.DraftDone:
		// Ending, and never drafting again from there (a failed or
		// superseded draft may continue as new: still refused).
		return ""
	}
	return state
}

// ExecuteProposal records approvedBy's approval of p (a proposal the app
// composed itself) and starts its execution, or joins the running one
// (workflow ID execute/{proposalID}, conflict policy USE_EXISTING), so a
// double approval runs each action once. A proposal whose earlier
// execution has closed runs again: the ledger makes applied actions
// no-ops and re-runs only what failed. The same proposal ID with other
// content is refused (supportflow.ErrConflict).
//
// Invalid proposals are refused with an error wrapping
// supportflow.ErrInvalidInput, before anything is recorded or started.
func (s *Starter) ExecuteProposal(ctx context.Context, p supportflow.Proposal, approvedBy string) (Execution, error) {
	if err := p.Validate(); err != nil {
		return Execution{}, err
	}
	if approvedBy == "" {
		return Execution{}, fmt.Errorf("%w: an approval needs the approver's name", supportflow.ErrInvalidInput)
	}
	if s.Approvals == nil {
		return Execution{}, ErrNoApprovals
	}
	// A drafted proposal is approved through its draft (Approve), which
	// checks that it is the one awaiting approval and that nothing else
	// answers the ticket.
	if _, err := s.Approvals.GetProposal(ctx, p.ID); err == nil {
		return Execution{}, fmt.Errorf("%w: proposal %s was drafted; approve it through its draft (Approve, POST /proposals/{id}/approve)", supportflow.ErrInvalidInput, p.ID)
	} else if !errors.Is(err, supportflow.ErrNotFound) {
		return Execution{}, err
	}
	if _, err := s.Approvals.RecordApproval(ctx, p, approvedBy, "", false); err != nil {
		return Execution{}, err
	}
	return s.start(ctx, p)
}

// start starts (or joins) the execution of a proposal whose approval is
// recorded.
func (s *Starter) start(ctx context.Context, p supportflow.Proposal) (Execution, error) {
	if err := p.Validate(); err != nil {
		return Execution{}, err
	}
	id := s.IDs.Execute(p.ID)
	// The start call does not say whether it joined; a running execution
	// seen just before it is the one it joins. A start racing in between
	// is reported as started, which is harmless: either way there is one.
	running := s.runningRun(ctx, id)
	run, err := s.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                s.taskQueue(),
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		Priority:                 temporal.Priority{PriorityKey: supportflow.PriorityExecution},
		StaticSummary:            executionSummary(p),
	}, supportflow.ExecuteProposalWorkflow, p)
	if err != nil {
		return Execution{}, fmt.Errorf("starter: execute proposal %s: %w", p.ID, err)
	}
	return Execution{WorkflowID: id, RunID: run.GetRunID(), Joined: running != "" && running == run.GetRunID()}, nil
}

// WaitExecution blocks until the proposal's latest execution closes and
// returns each action's final state. A failed action is reported in the
// statuses and as an error.
func (s *Starter) WaitExecution(ctx context.Context, proposalID string) ([]supportflow.ActionStatus, error) {
	var statuses []supportflow.ActionStatus
	err := s.Client.GetWorkflow(ctx, s.IDs.Execute(proposalID), "").Get(ctx, &statuses)
	return statuses, err
}

// ActionStates returns each action's state as the proposal's latest
// execution sees it, while it runs or after it closed.
func (s *Starter) ActionStates(ctx context.Context, proposalID string) ([]supportflow.ActionStatus, error) {
	if err := supportflow.ValidateProposalID(proposalID); err != nil {
		return nil, err
	}
	v, err := s.Client.QueryWorkflow(ctx, s.IDs.Execute(proposalID), "", supportflow.ActionsQuery)
	if err != nil {
		return nil, fmt.Errorf("starter: action states of %s: %w", proposalID, err)
	}
	var statuses []supportflow.ActionStatus
	if err := v.Get(&statuses); err != nil {
		return nil, errors.Join(fmt.Errorf("starter: decode action states of %s", proposalID), err)
	}
	return statuses, nil
}

// executionSummary is the execution's one line in the Web UI: IDs and
// counts, never customer text.
func executionSummary(p supportflow.Proposal) string {
	if len(p.Actions) == 0 {
		return "execute proposal " + p.ID
	}
	return fmt.Sprintf("execute proposal %s · ticket %d · %d action(s)", p.ID, p.Actions[0].TicketID, len(p.Actions))
}
