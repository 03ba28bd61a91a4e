package workflows

// Version markers: every workflow.GetVersion change ID of supportflow's
// workflows, and only here. docs/versioning.md says how markers work here
// and how to retire one; TestVersionMarkers_OneList checks that every
// GetVersion call in this package names one of these constants, that every
// constant is called, and that every entry has its lines.
//
// A GetVersion call records a marker the first time a run reaches it, and
// returns the recorded version on replay: histories from before the change
// take its DefaultVersion branch, runs started since take version 1
// (https://docs.temporal.io/develop/go/versioning). The change ID
// is written into every history that reaches the call, so a constant's
// value never changes; its Go name may.
//
// Each entry says why it exists, where it is called, when it was added
// (the date and commit of the change that introduced the ID:
// git log -S'<id>' --format='%ad %h' --date=short -- workflows | tail -1),
// which committed histories (testdata/*.json) take each branch, and when
// it may be retired.
//
// The retire rule (docs/versioning.md says how, step by step). Let R be
// the time the deploy that added marker M finished rolling out: the last
// worker without M stopped. A run that started before R may have passed
// M's call on old code, recording nothing; a run started after R records
// M. M may be retired only when all of these hold:
//
//  1. No run that predates M is open or still retained: a Visibility count
//     (https://docs.temporal.io/list-filter) of executions of the workflow
//     types listed under "Where", started before R, is 0. Closed runs stay
//     listed until the namespace retention (30 days) deletes them
//     (https://docs.temporal.io/temporal-service/temporal-server#retention-period),
//     and until then a query, a reset or the Web UI's stack trace replays
//     their histories on today's workers, so they count like open ones.
//     Each run of a continue-as-new chain has its own start time: runs
//     continued after R do not count.
//  2. The committed histories that predate M (those listed under
//     "Histories" as taking DefaultVersion) move to testdata/retired/ in
//     the same change, with a line in testdata/retired/README naming the
//     marker that retired them. TestReplay_CommittedHistories replays
//     testdata/*.json only: every history left there must replay without
//     M's DefaultVersion branch.
//  3. The markers named under "Retire" as retiring together retire in the
//     same change.
//
// Retiring M deletes its DefaultVersion branch and keeps the call as
// workflow.GetVersion(ctx, M, 1, 1), so a run that predates M after all
// fails its workflow task at that call instead of taking the wrong path
// (https://docs.temporal.io/develop/go/versioning); the entry stays here,
// its "Retire:" line saying when it was retired. Removing the call itself
// is a later, separate change (on replay the SDK skips a version marker no
// call asks for); the ID then moves to retiredVersionIDs, never to be
// used again.
//
// The earliest a count can reach 0 follows from each type's longest run,
// plus the 30 days: an ExecuteProposal lasts its retry budgets plus
// UnresolvedLegBound (about a day; longer while the ledger is down, whose
// calls retry without limit); a DraftReply up to ProposalExpiry (72 h)
// awaiting approval, plus its execution; an EnrichTicket run ends once no
// event is pending; PruneRetention, ScanTickets, ReconcileTickets and
// EvaluateDrafts take minutes to hours. The count decides, never this
// arithmetic.
const (
	// versionResourceQueues runs each rate-limited service's activities
	// (Zendesk, model, BigQuery, subscriptions) on its own task queue, where
	// the fleet-wide rate applies.
	//
	// Where: activityOptions, for every activity of a kind with a resource:
	// DraftReply, ExecuteProposal, EnrichTicket, EvaluateDrafts,
	// ReconcileTickets.
	// Added: 2026-12-03 f6feebd.
	// Histories: version 1 in draft_reply_key_rotated and the three
	// execute_proposal histories settled from the receivers (fenced_applied,
	// lost_answers_replied, settled_needs_attention); every other history
	// with such an activity takes DefaultVersion.
	// Retire: the rule, over all five workflow types.
	versionResourceQueues = "resource-queues"

	// versionReplyLast marks the truthful order of an execution:
	// cancellations first, the reply only once every one of them succeeded
	// (before it the reply was posted first).
	//
	// Where: ExecuteProposal.
	// Added: 2026-12-03 25007e9.
	// Histories: DefaultVersion in execute_proposal_applied; version 1 in
	// every other execute_proposal history.
	// Retire: the rule.
	versionReplyLast = "execute-reply-last"

	// versionSettleOnCancel settles an action on a disconnected context when
	// its execution is cancelled (it used to stay 'applying').
	//
	// Where: ExecuteProposal, only in the path that settles from the ledger
	// alone (versionSettleFromReceivers at DefaultVersion).
	// Added: 2026-12-03 653dd07.
	// Histories: version 1 in execute_proposal_cancelled_settled.
	// Retire: alone by the rule; at the latest with
	// versionSettleFromReceivers, whose DefaultVersion branch holds this
	// call: deleting that branch deletes the call, and this ID moves to
	// retiredVersionIDs.
	versionSettleOnCancel = "execute-settle-on-cancel"

	// versionNeedsAttentionAttr sets SupportflowState = needs_attention on
	// an execution whose action ends needs_attention, so operators find it
	// in the Web UI.
	//
	// Where: ExecuteProposal, only in the path that settles from the ledger
	// alone (versionSettleFromReceivers at DefaultVersion).
	// Added: 2026-12-03 5f85bc7.
	// Histories: none reaches it (execute_proposal_cancellation_refused_note
	// posts the agents' note, but its action settled failed, not
	// needs_attention).
	// Retire: alone by the rule; at the latest with
	// versionSettleFromReceivers, like versionSettleOnCancel.
	versionNeedsAttentionAttr = "execute-needs-attention-attr"

	// versionSettleFromReceivers marks the execution that settles from what
	// the receivers say (SettleLegs: lost answers resolved, a Zendesk write
	// that may have landed fenced and searched, a bound on what cannot be
	// learned), goes on to the reply when every cancellation turns out to
	// have landed, says what was done from the ledger, and records the
	// proposal's end.
	//
	// Where: ExecuteProposal.
	// Added: 2026-12-04 de11f22.
	// Histories: version 1 in execute_proposal_fenced_applied,
	// lost_answers_replied and settled_needs_attention; DefaultVersion in
	// every other execute_proposal history.
	// Retire: the rule, together with versionOutcomeFromLedger (the same
	// change: the redraft's outcome reads what this settle records).
	versionSettleFromReceivers = "execute-settle-from-receivers"

	// versionStartChildFirst starts a draft's execution before marking its
	// proposal executing, so a draft terminated in between leaves an
	// execution that runs, never an approved proposal that never does.
	//
	// Where: DraftReply (execute).
	// Added: 2026-12-03 6bab1a5.
	// Histories: version 1 in draft_reply_execution_failed,
	// needs_attention_redrafted, reply_last_done and key_rotated;
	// DefaultVersion in draft_reply_approved_done.
	// Retire: the rule.
	versionStartChildFirst = "draft-start-child-first"

	// versionRedraftAfterAttention drafts a ticket again (continue-as-new
	// with the outcome) when its approved reply was held back
	// (needs_attention), so the customer is answered truthfully.
	//
	// Where: DraftReply (execute, after a failed execution).
	// Added: 2026-12-03 bc0438b.
	// Histories: version 1 in draft_reply_needs_attention_redrafted.
	// Retire: the rule.
	versionRedraftAfterAttention = "draft-redraft-after-attention"

	// versionOutcomeFromLedger writes the redraft's outcome from what the
	// ledger recorded after the settle (cancelled, not cancelled, a
	// classified reason) instead of a back end's error text; an execution
	// whose reply may be on the ticket after all (unknown) is not redrafted.
	//
	// Where: DraftReply (execute, after an execution held its reply back).
	// Added: 2026-12-04 de11f22.
	// Histories: DefaultVersion in draft_reply_needs_attention_redrafted.
	// Retire: the rule, together with versionSettleFromReceivers.
	versionOutcomeFromLedger = "draft-outcome-from-ledger"

	// versionIgnoreStaleActivity leaves a draft alone when the customer
	// activity signalled is not newer than the conversation it read (a late
	// or repeated delivery of the comment it answers).
	//
	// Where: DraftReply (start; read when activity arrives).
	// Added: 2026-12-03 b079c4b.
	// Histories: version 1 in draft_reply_key_rotated; DefaultVersion in the
	// other draft_reply histories.
	// Retire: the rule.
	versionIgnoreStaleActivity = "draft-ignore-stale-activity"

	// versionRedraftAfterActivity drafts a ticket again (continue-as-new,
	// reason "activity-during-execution", superseding the executed
	// proposal) when customer activity newer than the conversation the
	// proposal answered arrived while it executed: the approved reply made
	// the agent speak last, so nothing else would draft the customer's new
	// message. Read once the execution has settled, done or failed (a
	// held-back reply's own redraft comes first), and only when there is
	// such activity.
	//
	// Where: DraftReply (execute, after the execution settled).
	// Added: 2026-12-05 5a4f2f1.
	// Histories: none (no committed history has activity during an
	// execution).
	// Retire: the rule.
	versionRedraftAfterActivity = "draft-redraft-after-activity"

	// versionNoteOnChange makes live mode note each distinct content of a
	// ticket's enrichment once (contentNoteKey) instead of every lookup.
	//
	// Where: EnrichTicket (live mode, a customer found).
	// Added: 2026-12-03 5e55ce9 (the ID's first name,
	// "enrich-note-only-on-change", is in retiredVersionIDs).
	// Histories: none (the committed enrich_ticket histories are shadow
	// mode and never reach it).
	// Retire: the rule.
	versionNoteOnChange = "enrich-note-by-content"

	// versionSettleFailedNote settles a live note whose posting failed for
	// good (its ledger row used to stay 'applying').
	//
	// Where: EnrichTicket (live mode, a note that failed).
	// Added: 2026-12-03 653dd07.
	// Histories: none (shadow mode never reaches it).
	// Retire: the rule.
	versionSettleFailedNote = "enrich-settle-failed-note"

	// versionPruneTicketEvents adds the prune's ticket-event and
	// reconciliation-run step (PruneTicketEvents).
	//
	// Where: PruneRetention.
	// Added: 2026-12-03 2e15994.
	// Histories: none committed.
	// Retire: the rule (runs last minutes; the schedule starts one a day).
	versionPruneTicketEvents = "prune-ticket-events"
)

// retiredVersionIDs are change IDs that must never be used again: IDs
// whose call was removed, and IDs that were renamed before any history
// was committed with them but may have reached a deployed worker. A
// history recorded under one would meet a new call with the same ID and
// take a path it never ran.
var retiredVersionIDs = []string{
	// versionNoteOnChange's first name (2026-12-03 96448cb, renamed in
	// 5e55ce9).
	"enrich-note-only-on-change",
}
