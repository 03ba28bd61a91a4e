package supportflow

// Activity names one activity type and the Go types of its one argument
// (I) and its result (O). The workflows call activities only through
// these (workflows.call), and the worker registers each implementation
// under its Name from one table (internal/workerapp), typed against the
// same I and O: renaming a Go method or changing its signature no longer
// renames an activity or changes its payload without failing to compile.
//
// None as I means the activity takes no argument; as O, that it returns
// only an error. (Not an empty struct: those activities already run, and
// an argument or a result where there was none would change the payloads
// recorded for them.)
type Activity[I, O any] struct{ Name string }

// None marks an activity with no argument (as I) or no result (as O).
type None struct{}

// The activity types. Their names are frozen: open histories schedule
// them by name. ReconcileTickets is also a workflow's name (Temporal keeps
// workflow and activity types apart); it stays, because runs recorded
// before this list schedule it.
var (
	// LoadTicket reads a ticket's conversation and its customer's
	// enrichment (heartbeats).
	LoadTicket = Activity[LoadTicketInput, TicketContext]{"LoadTicket"}
	// GenerateDraft asks the model for a draft (heartbeats its tokens).
	GenerateDraft = Activity[GenerateInput, DraftProposal]{"GenerateDraft"}
	// SaveProposal stores a draft's proposal before it is shown.
	SaveProposal = Activity[DraftProposal, None]{"SaveProposal"}
	// SetProposalState records a proposal's later state.
	SetProposalState = Activity[ProposalStateInput, None]{"SetProposalState"}
	// FindDraftCandidates lists up to the argument's number of tickets
	// that need a draft.
	FindDraftCandidates = Activity[int, []int64]{"FindDraftCandidates"}
	// RecordEvalResult stores (and scores) one ticket of an evaluation run.
	RecordEvalResult = Activity[EvalResultInput, float64]{"RecordEvalResult"}
	// RecordEvalSummary stores an evaluation run's summary.
	RecordEvalSummary = Activity[EvaluationStatus, None]{"RecordEvalSummary"}
	// PruneLedger deletes the ledger's rows past retention.
	PruneLedger = Activity[None, map[string]int64]{"PruneLedger"}
	// PostReply runs an action's Zendesk legs (the ticket update and the
	// reply, in one update), once, through the ledger.
	PostReply = Activity[ActionInput, PostReplyResult]{"PostReply"}
	// CancelSubscriptions runs an action's cancellation legs, once each.
	CancelSubscriptions = Activity[ActionInput, CancelResult]{"CancelSubscriptions"}
	// SettleAction ends an action the execution gave up on (the
	// executions from before SettleLegs); it returns the final state.
	SettleAction = Activity[SettleInput, string]{"SettleAction"}
	// SettleLegs settles an action from what the receivers say.
	SettleLegs = Activity[SettleLegsInput, SettleLegsResult]{"SettleLegs"}
	// LookupCustomer looks a ticket's requester up in BigQuery and records
	// the result.
	LookupCustomer = Activity[LookupInput, LookupOutput]{"LookupCustomer"}
	// DeadLetterTicket records a ticket whose lookups were spent.
	DeadLetterTicket = Activity[DeadLetterInput, None]{"DeadLetterTicket"}
	// PruneEnrichment deletes enrichment rows past retention.
	PruneEnrichment = Activity[None, map[string]int64]{"PruneEnrichment"}
	// ReconcileTickets runs one reconciliation pass over Zendesk's
	// incremental exports; its argument is the calling workflow's ID.
	ReconcileTickets = Activity[string, ReconcileResult]{"ReconcileTickets"}
	// PruneTicketEvents deletes ingested ticket events past retention.
	PruneTicketEvents = Activity[None, map[string]int64]{"PruneTicketEvents"}
)

// ActivityType is an Activity whatever its types: its name and fresh
// values of its argument and result, for code that handles every activity
// alike (the worker's registration test, the golden-payload test).
type ActivityType interface {
	ActivityName() string
	// NewInput and NewResult return a pointer to a zero argument or
	// result, or nil for None.
	NewInput() any
	NewResult() any
}

// ActivityName is a's name.
func (a Activity[I, O]) ActivityName() string { return a.Name }

// NewInput returns a new *I (nil when I is None).
func (a Activity[I, O]) NewInput() any { return newUnlessNone[I]() }

// NewResult returns a new *O (nil when O is None).
func (a Activity[I, O]) NewResult() any { return newUnlessNone[O]() }

func newUnlessNone[T any]() any {
	p := new(T)
	if _, none := any(*p).(None); none {
		return nil
	}
	return p
}

// AllActivities lists every activity type the worker registers.
// TestContract_EveryActivityRegisteredByName holds the worker's
// registration table to it.
var AllActivities = []ActivityType{
	LoadTicket, GenerateDraft, SaveProposal, SetProposalState,
	FindDraftCandidates, RecordEvalResult, RecordEvalSummary, PruneLedger,
	PostReply, CancelSubscriptions, SettleAction, SettleLegs,
	LookupCustomer, DeadLetterTicket, PruneEnrichment,
	ReconcileTickets, PruneTicketEvents,
}

// ActivityNames are AllActivities' names, in the same order.
var ActivityNames = func() []string {
	out := make([]string, len(AllActivities))
	for i, a := range AllActivities {
		out[i] = a.ActivityName()
	}
	return out
}()

// WorkflowPayloads names a workflow type's input and result types.
type WorkflowPayloads struct {
	Name string
	// NewInput and NewResult return a pointer to a zero value (NewInput
	// is nil for a workflow without input).
	NewInput, NewResult func() any
}

// AllWorkflows lists every workflow type with its payloads, as the
// workflows package registers them.
var AllWorkflows = []WorkflowPayloads{
	{ExecuteProposalWorkflow, func() any { return new(Proposal) }, func() any { return new([]ActionStatus) }},
	{DraftReplyWorkflow, func() any { return new(DraftRequest) }, func() any { return new(DraftStatus) }},
	{ScanTicketsWorkflow, func() any { return new(ScanRequest) }, func() any { return new(ScanResult) }},
	{EvaluateDraftsWorkflow, func() any { return new(EvaluationRequest) }, func() any { return new(EvaluationStatus) }},
	{EnrichTicketWorkflow, func() any { return new(EnrichRequest) }, func() any { return new(EnrichmentStatus) }},
	{PruneRetentionWorkflow, nil, func() any { return new(map[string]int64) }},
	{ReconcileTicketsWorkflow, func() any { return new(ReconcileRequest) }, func() any { return new(ReconcileResult) }},
}

// SignalPayloads maps every signal name to a new value of its payload.
var SignalPayloads = map[string]func() any{
	SupersedeSignal:   func() any { return new(TicketActivity) },
	TicketEventSignal: func() any { return new(TicketEvent) },
}

// UpdatePayloads maps every update name to new values of its request and
// its result (NewResult nil: the update answers nothing but an error).
var UpdatePayloads = map[string]struct{ NewRequest, NewResult func() any }{
	ApproveUpdate: {func() any { return new(ApproveRequest) }, func() any { return new(ApproveResult) }},
	RejectUpdate:  {func() any { return new(RejectRequest) }, nil},
}
