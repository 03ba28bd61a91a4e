package activities

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/supportflow/supportflow/internal/subscriptions"
)

// subscriptionOwner decides whether subscriptionID belongs to ticketID's
// current requester, so that a cancellation never runs on another
// customer's subscription (a requester changed since the draft, an
// execution started with another ticket's proposal). It reads the
// requester from Zendesk itself (the mirror may not have seen a change
// yet), that requester's enrichment (never an earlier requester's:
// enrichment.Store.GetEnrichment), and the subscription service's record of the
// subscription.
//
// Owned when the service names the enrichment's customer as the
// subscription's, or when the service names no customer (or refuses the
// read for good, e.g. 404) and the enrichment lists the subscription among
// the requester's active ones. The service is the source of truth: when it
// names another customer, the subscription is not owned even if the
// enrichment (a lookup that may be stale) lists it.
//
// reason says, for a person, why it is not owned: IDs only, never customer
// text. err is only for a read that failed and may succeed on a retry
// (PostgreSQL, a subscription service that timed out, 5xx, 429).
func (a *Activities) subscriptionOwner(ctx context.Context, ticketID int64, subscriptionID string) (owned bool, reason string, err error) {
	callCtx, cancel := context.WithTimeout(ctx, a.Durations.Fill().ZendeskCallTimeout)
	ticket, err := a.Zendesk.ReadTicket(callCtx, ticketID)
	cancel()
	if err != nil && isPermanent(err) {
		return false, fmt.Sprintf("Zendesk refused to read ticket %d, so its requester is unknown", ticketID), nil
	}
	if err != nil {
		return false, "", fmt.Errorf("owner of subscription %s: requester of ticket %d: %w", subscriptionID, ticketID, err)
	}
	requester := ticket.RequesterID
	if requester <= 0 {
		return false, fmt.Sprintf("ticket %d has no known requester", ticketID), nil
	}
	e, found, err := a.Enrichment.GetEnrichment(ctx, ticketID, requester)
	if err != nil {
		return false, "", fmt.Errorf("owner of subscription %s: %w", subscriptionID, err)
	}
	if !found {
		return false, fmt.Sprintf("ticket %d has no customer data for its current requester %d (the requester may have changed since the draft)",
			ticketID, requester), nil
	}
	listed := slices.Contains(e.ActiveSubscriptions, subscriptionID)

	callCtx, cancel = context.WithTimeout(ctx, a.Durations.Fill().SubscriptionCallTimeout)
	sub, err := a.Subscriptions.Lookup(callCtx, subscriptionID)
	cancel()
	if err != nil && !isPermanent(err) {
		return false, "", fmt.Errorf("owner of subscription %s: %w", subscriptionID, err)
	}
	switch {
	case err != nil:
		if listed {
			return true, "", nil
		}
		return false, fmt.Sprintf("the subscription service refused to read subscription %s (%s) and requester %d's customer data does not list it",
			subscriptionID, lookupRefusal(err), requester), nil
	case sub.CustomerID == "":
		if listed {
			return true, "", nil
		}
		return false, fmt.Sprintf("the subscription service does not say whose subscription %s is and requester %d's customer data does not list it",
			subscriptionID, requester), nil
	case e.CustomerID != "" && sub.CustomerID == e.CustomerID:
		return true, "", nil
	default:
		return false, fmt.Sprintf("subscription %s belongs to customer %s, not to customer %s of ticket %d's requester %d",
			subscriptionID, sub.CustomerID, e.CustomerID, ticketID, requester), nil
	}
}

// lookupRefusal is a refused read in a few words: its status and code,
// never the service's message (which may quote anything).
func lookupRefusal(err error) string {
	var e *subscriptions.Error
	switch {
	case !errors.As(err, &e):
		return "refused"
	case e.Status == 0:
		return "refused before sending"
	case e.Code != "":
		return fmt.Sprintf("HTTP %d %s", e.Status, e.Code)
	}
	return fmt.Sprintf("HTTP %d", e.Status)
}
