package supportflow

import (
	"fmt"
	"strconv"
	"time"
)

// EnrichTicketWorkflow is the workflow type that enriches one ticket with
// its customer's commerce data; EnrichWorkflowID is its ID.
const EnrichTicketWorkflow = "EnrichTicket"

// EnrichWorkflowID is the workflow ID of a ticket's enrichment: one per
// ticket, fed by signal-with-start, so events for a ticket always reach
// the same workflow and merge there.
func EnrichWorkflowID(ticketID int64) string { return "enrich/" + strconv.FormatInt(ticketID, 10) }

// TicketEventSignal carries a TicketEvent to a ticket's enrichment.
const TicketEventSignal = "ticket-event"

// EnrichmentQuery returns an EnrichmentStatus.
const EnrichmentQuery = "enrichment"

// Ticket event kinds.
const (
	// TicketCreated: a new ticket. Its lookup waits for BigQuery's
	// replication lag (10 minutes by default).
	TicketCreated = "created"
	// TicketUpdated: activity on an existing ticket (2 minutes by default).
	TicketUpdated = "updated"
	// TicketRedrive: an operator re-drives a dead-lettered ticket; the
	// lookup runs at once.
	TicketRedrive = "redrive"
)

// TicketEvent is something that happened to a ticket.
type TicketEvent struct {
	TicketID int64  `json:"ticket_id"`
	Kind     string `json:"kind"`
	// At is when it happened; zero means when the workflow received it. A
	// time in the future counts as now.
	At time.Time `json:"at"`
	// RequesterID is the ticket's requester, when the event knows it; the
	// lookup otherwise reads it from the ticket mirror.
	RequesterID int64 `json:"requester_id,omitempty"`
	// CustomerActivity says the customer wrote (a new public comment by
	// the requester): a running draft of the ticket is superseded.
	CustomerActivity bool `json:"customer_activity,omitempty"`
}

// Validate checks an event before anything is started.
func (e TicketEvent) Validate() error {
	if err := ValidateTicketID(e.TicketID); err != nil {
		return err
	}
	switch e.Kind {
	case TicketCreated, TicketUpdated, TicketRedrive:
	default:
		return fmt.Errorf("%w: ticket event kind %q must be %s, %s or %s", ErrInvalidInput, e.Kind, TicketCreated, TicketUpdated, TicketRedrive)
	}
	if e.RequesterID < 0 {
		return fmt.Errorf("%w: requester id %d must not be negative", ErrInvalidInput, e.RequesterID)
	}
	return nil
}

// EnrichRequest starts (or continues as new) a ticket's enrichment.
type EnrichRequest struct {
	TicketID int64 `json:"ticket_id"`
	// Pending are events not yet looked up, carried across continue-as-new.
	Pending []TicketEvent `json:"pending,omitempty"`
	// Lookups counts the lookups of the runs before this one.
	Lookups int `json:"lookups,omitempty"`
}

// Enrichment states (SearchAttrState of an EnrichTicket workflow).
const (
	EnrichWaiting    = "waiting"
	EnrichLookingUp  = "looking_up"
	EnrichEnriched   = "enriched"
	EnrichDeadLetter = "dead_letter"
)

// EnrichmentStatus is a ticket's enrichment as its workflow sees it.
type EnrichmentStatus struct {
	TicketID int64  `json:"ticket_id"`
	State    string `json:"state"`
	// NextLookupAt is when the waiting lookup runs.
	NextLookupAt time.Time `json:"next_lookup_at,omitzero"`
	// Merged counts the events the next (or last) lookup covers.
	Merged  int `json:"merged"`
	Lookups int `json:"lookups"`
	// Found says whether the last lookup found the customer.
	Found bool   `json:"found"`
	Error string `json:"error,omitempty"`
}

// Enrichment modes.
const (
	// EnrichmentShadow writes only supportflow's own enrichment tables.
	EnrichmentShadow = "shadow"
	// EnrichmentLive also puts the result on the ticket as a private note
	// for agents, once per lookup, through the action ledger.
	EnrichmentLive = "live"
)
