package starter

import (
	"context"
	"fmt"
	"strconv"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/supportflow/supportflow"
)

// RecordTicketEvent delivers a ticket event to the ticket's enrichment
// (workflow enrich/{ticketID}) by signal-with-start: the running
// enrichment merges it into its waiting lookup, or a new run starts. When
// the event is customer activity, the ticket's running draft (if any) is
// also told, and supersedes its proposal. An invalid event is refused with
// an error wrapping supportflow.ErrInvalidInput before anything is sent.
func (s *Starter) RecordTicketEvent(ctx context.Context, ev supportflow.TicketEvent) (runID string, err error) {
	if err := ev.Validate(); err != nil {
		return "", err
	}
	run, err := s.Client.SignalWithStartWorkflow(ctx, s.IDs.Enrich(ev.TicketID), supportflow.TicketEventSignal, ev,
		client.StartWorkflowOptions{
			TaskQueue:             s.taskQueue(),
			WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
			TypedSearchAttributes: temporal.NewSearchAttributes(
				temporal.NewSearchAttributeKeyKeyword(supportflow.SearchAttrTicketID).ValueSet(strconv.FormatInt(ev.TicketID, 10)),
				temporal.NewSearchAttributeKeyKeyword(supportflow.SearchAttrState).ValueSet(supportflow.EnrichWaiting)),
			Priority:      temporal.Priority{PriorityKey: supportflow.PriorityBackground},
			StaticSummary: fmt.Sprintf("enrich ticket %d", ev.TicketID),
		}, supportflow.EnrichTicketWorkflow, supportflow.EnrichRequest{TicketID: ev.TicketID})
	if err != nil {
		return "", fmt.Errorf("starter: ticket event for %d: %w", ev.TicketID, err)
	}
	if ev.CustomerActivity {
		if _, err := s.Supersede(ctx, ev.TicketID, supportflow.TicketActivity{At: ev.At, Source: "ticket-event"}); err != nil {
			return run.GetRunID(), err
		}
	}
	return run.GetRunID(), nil
}

// RedriveEnrichment looks a (dead-lettered) ticket up again at once: a
// redrive event, which has no delay. The lookup marks the dead letter
// re-driven, and resolved when it succeeds.
func (s *Starter) RedriveEnrichment(ctx context.Context, ticketID int64) error {
	_, err := s.RecordTicketEvent(ctx, supportflow.TicketEvent{TicketID: ticketID, Kind: supportflow.TicketRedrive, At: time.Now()})
	return err
}

// EnrichmentStatus returns a ticket's enrichment as its latest run sees
// it, while it runs or after it closed.
func (s *Starter) EnrichmentStatus(ctx context.Context, ticketID int64) (supportflow.EnrichmentStatus, error) {
	var st supportflow.EnrichmentStatus
	if err := supportflow.ValidateTicketID(ticketID); err != nil {
		return st, err
	}
	v, err := s.Client.QueryWorkflow(ctx, s.IDs.Enrich(ticketID), "", supportflow.EnrichmentQuery)
	if err != nil {
		return st, fmt.Errorf("starter: enrichment of ticket %d: %w", ticketID, err)
	}
	return st, v.Get(&st)
}
