package workerapp

import (
	"context"

	"go.temporal.io/sdk/activity"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/activities"
	"github.com/supportflow/supportflow/internal/enrichment"
	"github.com/supportflow/supportflow/internal/ingest"
)

// ActivityRegistry is where activities are registered: a worker, or a
// test environment.
type ActivityRegistry interface {
	RegisterActivityWithOptions(a any, options activity.RegisterOptions)
}

// RegisterActivities is the one table of activity implementations: each
// contract activity (supportflow.ActivityNames) is registered under its
// name, with an implementation whose argument and result types the
// compiler holds to the contract's. Renaming a method changes nothing
// Temporal sees; a method whose signature drifts from the contract does
// not compile.
func RegisterActivities(r ActivityRegistry, a *activities.Activities, en *enrichment.Activities, rc *ingest.Reconciler) {
	reg(r, supportflow.LoadTicket, a.LoadTicket)
	reg(r, supportflow.GenerateDraft, a.GenerateDraft)
	regNoResult(r, supportflow.SaveProposal, a.SaveProposal)
	regNoResult(r, supportflow.SetProposalState, a.SetProposalState)
	reg(r, supportflow.FindDraftCandidates, a.FindDraftCandidates)
	reg(r, supportflow.RecordEvalResult, a.RecordEvalResult)
	regNoResult(r, supportflow.RecordEvalSummary, a.RecordEvalSummary)
	regNoArg(r, supportflow.PruneLedger, a.PruneLedger)
	reg(r, supportflow.PostReply, a.PostReply)
	reg(r, supportflow.CancelSubscriptions, a.CancelSubscriptions)
	reg(r, supportflow.SettleAction, a.SettleAction)
	reg(r, supportflow.SettleLegs, a.SettleLegs)
	reg(r, supportflow.LookupCustomer, en.LookupCustomer)
	regNoResult(r, supportflow.DeadLetterTicket, en.DeadLetterTicket)
	regNoArg(r, supportflow.PruneEnrichment, en.PruneEnrichment)
	reg(r, supportflow.ReconcileTickets, rc.ReconcileTickets)
	regNoArg(r, supportflow.PruneTicketEvents, rc.PruneTicketEvents)
}

func reg[I, O any](r ActivityRegistry, a supportflow.Activity[I, O], fn func(context.Context, I) (O, error)) {
	r.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: a.Name})
}

func regNoResult[I any](r ActivityRegistry, a supportflow.Activity[I, supportflow.None], fn func(context.Context, I) error) {
	r.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: a.Name})
}

func regNoArg[O any](r ActivityRegistry, a supportflow.Activity[supportflow.None, O], fn func(context.Context) (O, error)) {
	r.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: a.Name})
}
