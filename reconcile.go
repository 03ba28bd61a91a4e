package supportflow

// ReconcileTicketsWorkflow repairs what the ticket event webhooks missed,
// from Zendesk's incremental exports. A Temporal Schedule runs it.
const ReconcileTicketsWorkflow = "ReconcileTickets"

// ReconcileScheduleID is the ID of the Temporal Schedule that runs
// ReconcileTickets (every SUPPORTFLOW_RECONCILE_INTERVAL, 5 min by
// default), skipping a run while the previous one still runs.
const ReconcileScheduleID = "supportflow-reconcile-tickets"

// ReconcileQuery returns a ReconcileResult: a running reconciliation's
// progress, or a finished one's outcome.
const ReconcileQuery = "reconcile"

// ReconcileRequest starts a reconciliation. The zero value is the
// scheduled run.
type ReconcileRequest struct{}

// ReconcileResult is what a reconciliation read and repaired.
type ReconcileResult struct {
	// TicketsRead and EventsRead count the export rows read.
	TicketsRead int `json:"tickets_read"`
	EventsRead  int `json:"events_read"`
	// Requests counts the export requests made (Zendesk allows 10 a
	// minute).
	Requests int `json:"requests"`
	// Repaired counts tickets whose mirror was stale or missing: a
	// webhook delivery was lost. RepairedTickets lists them (at most
	// 1,000).
	Repaired        int     `json:"repaired"`
	RepairedTickets []int64 `json:"repaired_tickets,omitempty"`
	// CaughtUp is true when both exports reached the present and no ticket
	// is held; false when the budget ran out, the pass ended early or
	// tickets are held (the next run continues).
	CaughtUp bool `json:"caught_up"`
}
