package workflows

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/policy"
	"github.com/supportflow/supportflow/internal/text"
)

var (
	stateKey    = temporal.NewSearchAttributeKeyKeyword(supportflow.SearchAttrState)
	ticketKey   = temporal.NewSearchAttributeKeyKeyword(supportflow.SearchAttrTicketID)
	proposalKey = temporal.NewSearchAttributeKeyKeyword(supportflow.SearchAttrProposalID)
)

// LoadTicketDeadline is LoadTicket's start-to-close timeout: reading the
// ticket and its comments is bounded by two Zendesk call timeouts, plus a
// margin for the enrichment read.
func LoadTicketDeadline(d policy.Durations) time.Duration {
	d = d.Fill()
	return 2*d.ZendeskCallTimeout + d.DeadlineMargin
}

// draft is one DraftReply run's state, shared by its handlers.
type draft struct {
	w   *Workflows
	d   policy.Durations
	req supportflow.DraftRequest
	// ids are the IDs of the draft's account, derived from its own
	// workflow ID ({prefix}/draft/{ticket}), which its history holds: the
	// execution's ID is built from them.
	ids      supportflow.IDs
	st       supportflow.DraftStatus
	approval *supportflow.ApproveRequest
	reject   *supportflow.RejectRequest
	// saving is the proposal whose SaveProposal was scheduled, so that a
	// draft superseded while saving marks it superseded.
	saving    string
	supersede workflow.ReceiveChannel
	// seenThrough is the newest comment time the current draft has read
	// (zero before it loaded the ticket); ignoreStale (a versioned change)
	// makes customer activity no newer than it leave the draft alone.
	seenThrough time.Time
	ignoreStale bool
	// newsWhileExecuting is set when customer activity that is news to the
	// executed proposal (isNews) arrives while it executes: once the
	// execution settles, the ticket is drafted again (versionRedraftAfterActivity).
	newsWhileExecuting bool
	// promptTokens and completionTokens are what this run's drafts cost,
	// as the model server counted them (DraftProposal's usage); attention
	// is set when its execution held the reply back (needs_attention).
	// Shown in the run's current details (describe).
	promptTokens, completionTokens int64
	attention                      bool
	// failedWith classifies why the draft failed (errorKind).
	failedWith string
}

// DraftReply drafts a reply to a ticket and, once a human approves it,
// executes it. Its workflow ID is IDs.Draft(ticket) (DraftWorkflowID
// behind the account's prefix, if any), started with
// conflict policy USE_EXISTING, so a double click or a scan racing a click
// joins the running draft.
//
//	gathering -> drafting -> awaiting_approval -> executing -> done
//	                                     \-> rejected | superseded | expired
//	any live state -> failed (with the error)
//	executing -> done | failed, the customer wrote meanwhile -> next run
//
// The state is returned by DraftQuery and kept in the SupportflowState
// search attribute, beside SupportflowTicketID and SupportflowProposalID.
//
//   - approve (Update) takes the current proposal's ID; its validator
//     refuses any other proposal, or any state but awaiting_approval, so a
//     stale browser tab gets a clear StaleProposal error. Approval starts
//     ExecuteProposal as a child (execute/{proposalID}); the draft follows it
//     to done or to failed with its error. Approving the same proposal
//     again answers the same execution (AlreadyApproved).
//   - reject (Update) ends the draft rejected.
//   - supersede (signal, new customer activity): while gathering or
//     drafting, the in-flight activity is cancelled and the draft restarts
//     with the new conversation; while awaiting approval, the proposal is
//     marked superseded and a fresh draft starts (continue-as-new); once
//     executing, it is counted and does not stop the execution, but
//     activity newer than the conversation the proposal answered is
//     remembered, and once the execution has settled the ticket is drafted
//     again (continue-as-new, reason "activity-during-execution"), so the
//     customer's new message is answered.
//   - A proposal not approved within ProposalExpiry (72 h) ends expired.
//
// A draft that cannot be produced (the model failed its two attempts, the
// ticket does not exist) ends failed and the workflow fails with a
// DraftFailed error carrying the cause.
func (w *Workflows) DraftReply(ctx workflow.Context, req supportflow.DraftRequest) (supportflow.DraftStatus, error) {
	dr := &draft{
		w: w, d: w.durations(), req: req,
		st: supportflow.DraftStatus{
			TicketID: req.TicketID, State: supportflow.DraftGathering,
			Supersedes: req.Supersedes, Generation: req.Generation,
		},
		supersede: workflow.GetSignalChannel(ctx, supportflow.SupersedeSignal),
		ids:       supportflow.IDsOf(workflow.GetInfo(ctx).WorkflowExecution.ID, supportflow.DraftWorkflowID(req.TicketID)),
	}
	if err := dr.register(ctx); err != nil {
		return dr.st, err
	}
	if err := req.Validate(); err != nil {
		dr.st.State, dr.st.Error = supportflow.DraftFailed, err.Error()
		setDetails(ctx, "failed: invalid input") // not even its ticket ID is known to be one
		return dr.st, policy.AppError(err.Error(), supportflow.ErrTypeInvalidInput, err)
	}
	dr.setState(ctx, supportflow.DraftGathering)
	dr.ignoreStale = workflow.GetVersion(ctx, versionIgnoreStaleActivity, workflow.DefaultVersion, 1) == 1

	p, err := dr.produce(ctx)
	if err != nil {
		return dr.fail(ctx, err)
	}
	return dr.await(ctx, p)
}

func (dr *draft) register(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, supportflow.DraftQuery, func() (supportflow.DraftStatus, error) {
		return dr.st, nil
	}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, supportflow.ApproveUpdate,
		func(ctx workflow.Context, r supportflow.ApproveRequest) (supportflow.ApproveResult, error) {
			res := supportflow.ApproveResult{ProposalID: r.ProposalID, ExecutionWorkflowID: dr.ids.Execute(r.ProposalID)}
			if dr.approval != nil {
				res.AlreadyApproved = true
				return res, nil
			}
			dr.approval = &r
			dr.st.ApprovedBy = r.ApprovedBy
			dr.st.ExecutionWorkflowID = res.ExecutionWorkflowID
			return res, nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, r supportflow.ApproveRequest) error {
			if dr.approval != nil && dr.approval.ProposalID == r.ProposalID {
				return nil // a second click on the same approval joins it
			}
			return dr.checkCurrent(r.ProposalID, "approve")
		}}); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, supportflow.RejectUpdate,
		func(ctx workflow.Context, r supportflow.RejectRequest) error {
			if dr.reject == nil {
				dr.reject = &r
			}
			return nil
		},
		workflow.UpdateHandlerOptions{Validator: func(ctx workflow.Context, r supportflow.RejectRequest) error {
			if dr.reject != nil && dr.reject.ProposalID == r.ProposalID {
				return nil
			}
			return dr.checkCurrent(r.ProposalID, "reject")
		}})
}

// checkCurrent refuses a decision on anything but the current proposal
// while it awaits approval.
func (dr *draft) checkCurrent(proposalID, verb string) error {
	stale := func(format string, args ...any) error {
		return policy.AppError(fmt.Sprintf("cannot %s proposal %q: ", verb, proposalID)+fmt.Sprintf(format, args...), supportflow.ErrTypeStaleProposal, nil)
	}
	switch {
	case proposalID == "":
		return stale("no proposal id given")
	case dr.approval != nil:
		return stale("proposal %s was already approved", dr.approval.ProposalID)
	case dr.reject != nil:
		return stale("proposal %s was already rejected", dr.reject.ProposalID)
	case dr.st.State != supportflow.DraftAwaitingApproval || dr.st.Proposal == nil:
		return stale("the draft of ticket %d is %s, not awaiting approval", dr.st.TicketID, dr.st.State)
	case dr.st.Proposal.ID != proposalID:
		return stale("the current proposal of ticket %d is %s", dr.st.TicketID, dr.st.Proposal.ID)
	}
	return nil
}

// setState records a state in the query result and the search attributes.
func (dr *draft) setState(ctx workflow.Context, state string) {
	dr.st.State = state
	updates := []temporal.SearchAttributeUpdate{
		stateKey.ValueSet(state),
		ticketKey.ValueSet(strconv.FormatInt(dr.req.TicketID, 10)),
	}
	if dr.st.Proposal != nil {
		updates = append(updates, proposalKey.ValueSet(dr.st.Proposal.ID))
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, updates...); err != nil {
		workflow.GetLogger(ctx).Warn("upserting search attributes failed", "error_type", policy.ErrorClass(err))
	}
	dr.describe(ctx)
}

// describe sets the draft's current details, which the Web UI shows:
// "ticket 123 · awaiting approval · proposal 123-…-1 · model tokens 812
// prompt + 164 completion". IDs, counts and states only.
func (dr *draft) describe(ctx workflow.Context) {
	state := stateWords(draftStateWords, dr.st.State)
	switch {
	case dr.attention:
		state = "needs attention: the reply was held back"
	case dr.st.State == supportflow.DraftFailed && dr.failedWith != "":
		state += " (" + dr.failedWith + ")"
	}
	var proposal, redrafts, generation string
	if dr.st.Proposal != nil {
		proposal = "proposal " + dr.st.Proposal.ID
	}
	if dr.st.Redrafts > 0 {
		redrafts = "restarted " + plural(dr.st.Redrafts, "time") + " for new customer activity"
	}
	if dr.req.Generation > 0 {
		generation = fmt.Sprintf("draft %d of this ticket's thread", dr.req.Generation+1)
	}
	setDetails(ctx, ticketPart(dr.req.TicketID), state, proposal, tokensPart(dr.promptTokens, dr.completionTokens), redrafts, generation)
}

// fail ends the draft failed with err's message.
func (dr *draft) fail(ctx workflow.Context, err error) (supportflow.DraftStatus, error) {
	dr.st.Error = errorMessage(err)
	dr.failedWith = errorKind(err)
	dr.setState(ctx, supportflow.DraftFailed)
	dr.settle(ctx)
	return dr.st, policy.AppError(
		fmt.Sprintf("draft of ticket %d failed: %s", dr.req.TicketID, dr.st.Error), supportflow.ErrTypeDraftFailed, err)
}

// settle waits for running update handlers before the run closes.
func (dr *draft) settle(ctx workflow.Context) {
	_ = workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
}

// proposalID names the k-th proposal of this run. It is derived from the
// run, so it is stable across activity retries and replays and unique
// across the ticket's drafts.
func (dr *draft) proposalID(ctx workflow.Context, k int) string {
	run := strings.ReplaceAll(workflow.GetInfo(ctx).WorkflowExecution.RunID, "-", "")
	return fmt.Sprintf("%d-%s-%d", dr.req.TicketID, run, k)
}

// produce gathers, drafts and saves a proposal, restarting from gathering
// when the customer writes again before it is saved.
func (dr *draft) produce(ctx workflow.Context) (supportflow.DraftProposal, error) {
	for k := 1; ; k++ {
		actx, cancel := workflow.WithCancel(ctx)
		fut, set := workflow.NewFuture(ctx)
		id := dr.proposalID(ctx, k)
		workflow.Go(actx, func(gctx workflow.Context) {
			p, err := dr.gatherAndDraft(gctx, id)
			set.Set(p, err)
		})
		superseded, done := false, false
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(fut, func(workflow.Future) { done = true })
		sel.AddReceive(dr.supersede, func(c workflow.ReceiveChannel, _ bool) {
			superseded = dr.takeActivity(ctx)
		})
		for !done && !superseded {
			sel.Select(ctx)
		}
		if !superseded {
			cancel()
			var p supportflow.DraftProposal
			err := fut.Get(ctx, &p)
			return p, err
		}
		// New customer activity: stop the in-flight activity and start over
		// with the new conversation.
		cancel()
		_ = fut.Get(ctx, nil)
		dr.st.Redrafts++
		workflow.GetLogger(ctx).Info("customer wrote again while drafting; redrafting", "ticket_id", dr.req.TicketID, "redrafts", dr.st.Redrafts)
		if dr.saving == id {
			// The save may have landed before the cancel.
			dr.markProposal(ctx, id, supportflow.DraftSuperseded, "", "the customer wrote again while it was saved")
		}
		dr.setState(ctx, supportflow.DraftGathering)
	}
}

// takeActivity takes every pending supersede signal and reports whether
// any is news to the current draft. Activity no newer than the newest
// comment the draft read (a late or repeated delivery of the comment it
// answers) is not: restarting for it would draft the same conversation
// again. Zendesk's comment times are whole seconds, so the activity's time
// is compared at that precision. Without the versioned change, all
// activity is news.
func (dr *draft) takeActivity(ctx workflow.Context) bool {
	news := false
	for {
		var act supportflow.TicketActivity
		if !dr.supersede.ReceiveAsync(&act) {
			break
		}
		if dr.isNews(act) {
			news = true
		}
	}
	if !news {
		workflow.GetLogger(ctx).Info("customer activity the draft has already read; not redrafting",
			"ticket_id", dr.req.TicketID, "seen_through", dr.seenThrough)
	}
	return news
}

// isNews says whether customer activity is news to the current draft: newer
// (to Zendesk's whole second) than the newest comment it read, or of
// unknown time, or before the draft read anything. Without the versioned
// change (versionIgnoreStaleActivity), all activity is news.
func (dr *draft) isNews(act supportflow.TicketActivity) bool {
	return !dr.ignoreStale || dr.seenThrough.IsZero() || act.At.IsZero() || act.At.Truncate(time.Second).After(dr.seenThrough)
}

// noteWhileExecuting records customer activity that arrived while the
// approved proposal executes: counted (IgnoredActivity: the execution goes
// on), and remembered when it is news to the proposal.
func (dr *draft) noteWhileExecuting(act supportflow.TicketActivity) {
	dr.st.IgnoredActivity++
	if dr.isNews(act) {
		dr.newsWhileExecuting = true
	}
}

// takeWhileExecuting takes the supersede signals still buffered (delivered
// in the same workflow task as the execution's end) into noteWhileExecuting.
func (dr *draft) takeWhileExecuting() {
	for {
		var act supportflow.TicketActivity
		if !dr.supersede.ReceiveAsync(&act) {
			return
		}
		dr.noteWhileExecuting(act)
	}
}

// drainSupersede takes every pending supersede signal: activity that
// arrives together restarts the draft once.
func (dr *draft) drainSupersede(ctx workflow.Context) int {
	n := 0
	for {
		var act supportflow.TicketActivity
		if !dr.supersede.ReceiveAsync(&act) {
			return n
		}
		n++
	}
}

func (dr *draft) gatherAndDraft(ctx workflow.Context, proposalID string) (supportflow.DraftProposal, error) {
	w, d := dr.w, dr.d
	dr.setState(ctx, supportflow.DraftGathering)
	var tc supportflow.TicketContext
	lctx := w.activityOptions(ctx, policy.KindZendeskRead, LoadTicketDeadline(d), true, fmt.Sprintf("load ticket %d", dr.req.TicketID))
	if err := call(lctx, supportflow.LoadTicket, supportflow.LoadTicketInput{TicketID: dr.req.TicketID}).Get(ctx, &tc); err != nil {
		return supportflow.DraftProposal{}, err
	}
	dr.seenThrough = tc.Conversation.Through()
	dr.setState(ctx, supportflow.DraftDrafting)
	var p supportflow.DraftProposal
	gctx := w.activityOptions(ctx, policy.KindModel, d.ModelAttemptTimeout, true, onTicket("model draft", dr.req.TicketID))
	if err := call(gctx, supportflow.GenerateDraft, supportflow.GenerateInput{ProposalID: proposalID, Ticket: tc, Outcome: dr.req.Outcome}).Get(ctx, &p); err != nil {
		return supportflow.DraftProposal{}, err
	}
	// Spent whether or not this draft is the one shown (new customer
	// activity may still restart it).
	dr.promptTokens += p.PromptTokens
	dr.completionTokens += p.CompletionTokens
	dr.describe(ctx)
	// The save is not cancelled by new customer activity: a cancelled
	// save could still land after the draft marked it superseded, leaving
	// a proposal awaiting approval forever. It finishes, and produce marks
	// it superseded.
	dr.saving = proposalID
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	sctx := w.activityOptions(dctx, policy.KindLedger, d.Lease, false, onTicket("save proposal", dr.req.TicketID))
	if err := call(sctx, supportflow.SaveProposal, p).Get(dctx, nil); err != nil {
		return supportflow.DraftProposal{}, err
	}
	return p, nil
}

// markProposal records a proposal's state in PostgreSQL. It retries until
// it succeeds (the ledger kind has no attempt budget); it runs on a
// disconnected context so that it completes even while the draft is being
// torn down.
func (dr *draft) markProposal(ctx workflow.Context, proposalID, state, by, errMsg string) {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	mctx := dr.w.activityOptions(dctx, policy.KindLedger, dr.d.Lease, false,
		onTicket("mark proposal "+stateWords(draftStateWords, state), dr.req.TicketID))
	in := supportflow.ProposalStateInput{ProposalID: proposalID, State: state, DecidedBy: by, Error: errMsg}
	if err := call(mctx, supportflow.SetProposalState, in).Get(dctx, nil); err != nil {
		workflow.GetLogger(ctx).Error("recording the proposal's state failed", "proposal_id", proposalID, "state", state, "error_type", policy.ErrorClass(err))
	}
}

// await shows the proposal and waits for a decision, new customer
// activity or expiry.
func (dr *draft) await(ctx workflow.Context, p supportflow.DraftProposal) (supportflow.DraftStatus, error) {
	dr.st.Proposal = &p
	dr.setState(ctx, supportflow.DraftAwaitingApproval)
	dr.seenThrough = p.ConversationThrough
	var (
		decided bool
		err     error
	)
	for expires := workflow.Now(ctx).Add(dr.d.ProposalExpiry); ; {
		decided, err = workflow.AwaitWithTimeout(ctx, expires.Sub(workflow.Now(ctx)), func() bool {
			return dr.approval != nil || dr.reject != nil || dr.supersede.Len() > 0
		})
		if err != nil || !decided || dr.approval != nil || dr.reject != nil || !dr.ignoreStale {
			break
		}
		if dr.takeActivity(ctx) {
			break // news: superseded below (its signals are taken)
		}
	}
	// Every outcome but approval sets the final state before its first
	// blocking call, so the approve validator refuses from here on: an
	// approval must never be accepted by a draft that is already ending.
	switch {
	case err != nil:
		// The draft workflow itself was cancelled (an operator).
		dr.st.Error = "the draft was cancelled while awaiting approval"
		dr.setState(ctx, supportflow.DraftRejected)
		dr.markProposal(ctx, p.ID, supportflow.DraftRejected, "", dr.st.Error)
		return dr.st, err
	case dr.approval != nil:
		return dr.execute(ctx, p)
	case dr.reject != nil:
		dr.st.Error = dr.reject.Reason
		dr.setState(ctx, supportflow.DraftRejected)
		dr.markProposal(ctx, p.ID, supportflow.DraftRejected, dr.reject.RejectedBy, dr.reject.Reason)
		dr.settle(ctx)
		return dr.st, nil
	case decided:
		dr.setState(ctx, supportflow.DraftSuperseded)
		n := dr.drainSupersede(ctx)
		workflow.GetLogger(ctx).Info("customer wrote again; superseding the proposal", "proposal_id", p.ID, "signals", n)
		dr.markProposal(ctx, p.ID, supportflow.DraftSuperseded, "", "")
		dr.settle(ctx)
		return dr.st, workflow.NewContinueAsNewErrorWithOptions(ctx, redraftOnCurrentBuild, supportflow.DraftReplyWorkflow, supportflow.DraftRequest{
			TicketID: dr.req.TicketID, Reason: "supersede", Supersedes: p.ID, Generation: dr.req.Generation + 1,
		})
	default:
		dr.st.Error = fmt.Sprintf("not approved within %s", dr.d.ProposalExpiry)
		dr.setState(ctx, supportflow.DraftExpired)
		dr.markProposal(ctx, p.ID, supportflow.DraftExpired, "", "")
		dr.settle(ctx)
		return dr.st, nil
	}
}

// failedStatuses are the action statuses an ActionFailed error carries
// (nil for any other error).
func failedStatuses(err error) []supportflow.ActionStatus {
	var app *temporal.ApplicationError
	if !errors.As(err, &app) || app.Type() != supportflow.ErrTypeActionFailed || !app.HasDetails() {
		return nil
	}
	var statuses []supportflow.ActionStatus
	if app.Details(&statuses) != nil {
		return nil
	}
	return statuses
}

// heldBackOutcome describes an execution that ended needs_attention, from
// the statuses its ActionFailed error carries; "" for any other failure.
func heldBackOutcome(err error) string {
	for _, st := range failedStatuses(err) {
		if st.State == supportflow.StateNeedsAttention {
			return fmt.Sprintf("The previous approved reply was NOT sent: cancelling the subscriptions failed (%s). "+
				"Cancelled so far: %v. Do not say anything was cancelled that is not in that list; tell the customer "+
				"what was and was not done.", text.Clip(st.Error, 500), st.Cancelled)
		}
	}
	return ""
}

// heldBackOutcomeFromLedger describes an execution that ended
// needs_attention with its reply held back, for the redraft's prompt:
// only what the ledger says, in classified words. "" when the reply was
// not held back (it may have landed: its outcome is unknown), so no
// second answer is drafted.
func heldBackOutcomeFromLedger(err error) string {
	for _, st := range failedStatuses(err) {
		if st.State != supportflow.StateNeedsAttention {
			continue
		}
		if st.CommentID != 0 || slices.ContainsFunc(st.Unknown, func(u string) bool {
			return !strings.HasPrefix(u, string(supportflow.LegCancelSubscription)+" ")
		}) {
			return ""
		}
		out := fmt.Sprintf("The previous approved reply was NOT sent: %s. Cancelled: %s. Not cancelled: %s.",
			cmp.Or(st.Reason, "a cancellation could not be done"), listOrNone(st.Cancelled), listOrNone(st.NotCancelled))
		if len(st.Unknown) > 0 {
			out += " Not known yet whether these were cancelled: " + strings.Join(st.Unknown, ", ") + "."
		}
		return out + " Do not say anything was cancelled that is not listed as cancelled; tell the customer what was and was not done."
	}
	return ""
}

// execute runs the approved proposal as a child ExecuteProposal and
// follows it. The child runs on a disconnected context with parent-close
// policy ABANDON: neither cancelling nor terminating the draft stops an
// approved reply from going out, and a cancelled draft still follows its
// execution to the end.
func (dr *draft) execute(ctx workflow.Context, p supportflow.DraftProposal) (supportflow.DraftStatus, error) {
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	dr.setState(ctx, supportflow.DraftExecuting)
	// The child starts before the proposal is marked executing, so a draft
	// terminated in between leaves an execution that runs, never an
	// approved proposal that never does. Histories from before mark first.
	childFirst := workflow.GetVersion(ctx, versionStartChildFirst, workflow.DefaultVersion, 1) == 1
	if !childFirst {
		dr.markProposal(ctx, p.ID, supportflow.DraftExecuting, dr.approval.ApprovedBy, "")
	}
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			var act supportflow.TicketActivity
			dr.supersede.Receive(ctx, &act)
			dr.noteWhileExecuting(act)
		}
	})
	cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
		WorkflowID: dr.ids.Execute(p.ID),
		// An approved execution runs first, whatever its draft's priority
		// (the SDK does not compare priorities on replay).
		Priority:              temporal.Priority{PriorityKey: supportflow.PriorityExecution},
		ParentClosePolicy:     enumspb.PARENT_CLOSE_POLICY_ABANDON,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		TypedSearchAttributes: temporal.NewSearchAttributes(
			ticketKey.ValueSet(strconv.FormatInt(p.TicketID, 10)), proposalKey.ValueSet(p.ID)),
	})
	var statuses []supportflow.ActionStatus
	child := workflow.ExecuteChildWorkflow(cctx, supportflow.ExecuteProposalWorkflow, p.Proposal())
	if childFirst {
		_ = child.GetChildWorkflowExecution().Get(ctx, nil) // started (or refused: reported below)
		dr.markProposal(ctx, p.ID, supportflow.DraftExecuting, dr.approval.ApprovedBy, "")
	}
	err := child.Get(ctx, &statuses)
	var started *temporal.ChildWorkflowExecutionAlreadyStartedError
	if err != nil {
		if errors.As(err, &started) {
			err = fmt.Errorf("%s was started outside this draft; follow it there: %w", dr.ids.Execute(p.ID), err)
		}
		dr.st.Error = errorMessage(err)
		dr.markProposal(ctx, p.ID, supportflow.DraftFailed, "", dr.st.Error)
		dr.attention = slices.ContainsFunc(failedStatuses(err), func(st supportflow.ActionStatus) bool {
			return st.State == supportflow.StateNeedsAttention
		})
		dr.setState(ctx, supportflow.DraftFailed)
		dr.settle(ctx)
		outcome := heldBackOutcome(err)
		if outcome != "" && workflow.GetVersion(ctx, versionOutcomeFromLedger, workflow.DefaultVersion, 1) == 1 {
			outcome = heldBackOutcomeFromLedger(err)
		}
		if outcome != "" &&
			workflow.GetVersion(ctx, versionRedraftAfterAttention, workflow.DefaultVersion, 1) == 1 {
			// The reply was held back because a cancellation was refused:
			// draft again, knowing it, so the customer is answered truthfully.
			// (The redraft reads the conversation as it is now, so it also
			// answers anything the customer wrote during the execution.)
			workflow.GetLogger(ctx).Info("the approved reply was held back; drafting again with the outcome", "proposal_id", p.ID)
			return dr.st, workflow.NewContinueAsNewErrorWithOptions(ctx, redraftOnCurrentBuild, supportflow.DraftReplyWorkflow, supportflow.DraftRequest{
				TicketID: dr.req.TicketID, Reason: "needs-attention", Supersedes: p.ID, Generation: dr.req.Generation + 1,
				Outcome: outcome,
			})
		}
		// The execution failed otherwise: its reply did not go out, or may
		// be on the ticket after all. A customer who wrote meanwhile is
		// still answered: the redraft reads the ticket as it now stands.
		// An execution started outside this draft has not settled here;
		// it is followed there, and not redrafted.
		if !errors.As(err, &started) && dr.redraftForActivity(ctx) {
			return dr.st, dr.redraftAfterActivity(ctx, p)
		}
		return dr.st, policy.AppError(
			fmt.Sprintf("executing proposal %s failed: %s", p.ID, dr.st.Error), supportflow.ErrTypeActionFailed, err)
	}
	dr.markProposal(ctx, p.ID, supportflow.DraftDone, "", "")
	dr.setState(ctx, supportflow.DraftDone)
	dr.settle(ctx)
	if dr.redraftForActivity(ctx) {
		return dr.st, dr.redraftAfterActivity(ctx, p)
	}
	return dr.st, nil
}

// redraftForActivity says whether customer activity that is news to the
// executed proposal arrived while it executed, so the ticket is drafted
// again now that the execution has settled: the approved reply made the
// agent speak last, and neither the scan nor a supersede would otherwise
// draft the customer's new message. The version marker is read only when
// there is such activity, so no other history gains a command.
func (dr *draft) redraftForActivity(ctx workflow.Context) bool {
	dr.takeWhileExecuting()
	if !dr.newsWhileExecuting {
		return false
	}
	return workflow.GetVersion(ctx, versionRedraftAfterActivity, workflow.DefaultVersion, 1) == 1
}

// redraftAfterActivity continues as new to draft the ticket again, after
// an execution during which the customer wrote.
func (dr *draft) redraftAfterActivity(ctx workflow.Context, p supportflow.DraftProposal) error {
	workflow.GetLogger(ctx).Info("the customer wrote while the approved proposal executed; drafting again",
		"proposal_id", p.ID, "state", dr.st.State)
	return workflow.NewContinueAsNewErrorWithOptions(ctx, redraftOnCurrentBuild, supportflow.DraftReplyWorkflow, supportflow.DraftRequest{
		TicketID: dr.req.TicketID, Reason: ReasonActivityDuringExecution, Supersedes: p.ID, Generation: dr.req.Generation + 1,
	})
}

// ReasonActivityDuringExecution is the DraftRequest.Reason of a draft
// started because the customer wrote while the previous proposal executed.
const ReasonActivityDuringExecution = "activity-during-execution"

// redraftOnCurrentBuild starts a draft continued as new (the customer wrote
// again, a held-back reply is redrafted) on the deployment's current build:
// a pinned run's next run would otherwise stay pinned to its build, and a
// ticket's chain of drafts would keep an old build alive for ever. The new
// run is a fresh history, so it needs no replay on the code it leaves; from
// its first task on it is pinned to the build that ran it. (Without worker
// versioning the option does nothing.)
// https://docs.temporal.io/worker-versioning#continue-as-new
var redraftOnCurrentBuild = workflow.ContinueAsNewErrorOptions{
	InitialVersioningBehavior: workflow.ContinueAsNewVersioningBehaviorAutoUpgrade,
}
