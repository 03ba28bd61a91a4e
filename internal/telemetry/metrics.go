package telemetry

import (
	"context"
	"errors"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
)

// Metrics are supportflow's own metrics: what the workflows and activities
// did, beyond what Temporal counts for them. Every method is safe on a nil
// *Metrics (a no-op), so code and tests that have no telemetry pass nil.
//
// Label values come from the callers' fixed vocabularies (a leg, an
// outcome, an activity type); never pass anything per-ticket or
// per-customer, since each distinct value is a new series.
type Metrics struct {
	actionLegs  metric.Int64Counter
	deadLetters metric.Int64Counter
	retries     metric.Int64Counter
	lookups     metric.Int64Counter
	drafts      metric.Int64Counter
	repairs     metric.Int64Counter
	modelTokens metric.Int64Counter
	refused     metric.Int64Counter
	unresolved  metric.Int64Counter
	deliveries  metric.Int64Counter
	reconciles  metric.Int64Counter
}

// newMetrics creates the instruments on meter. The names carry no _total:
// the Prometheus exporter appends it to every monotonic counter.
func newMetrics(meter metric.Meter) (*Metrics, error) {
	var m Metrics
	var errs []error
	counter := func(name, desc string) metric.Int64Counter {
		c, err := meter.Int64Counter(name, metric.WithDescription(desc))
		errs = append(errs, err)
		return c
	}
	m.actionLegs = counter("supportflow_action_legs",
		"Legs of approved actions finished, by leg (zendesk, cancellations) and outcome.")
	m.deadLetters = counter("supportflow_enrichment_dead_letters",
		"Enrichment requests given up on and dead-lettered, by reason.")
	m.retries = counter("supportflow_activity_retries",
		"Activity attempts that failed and were scheduled for a retry, by activity type.")
	m.lookups = counter("supportflow_enrichment_lookups",
		"Customer lookups made for enrichment, by outcome (found, not_found, error).")
	m.drafts = counter("supportflow_drafts",
		"Reply drafts requested from the model, by outcome (generated, invalid_output, failed).")
	m.repairs = counter("supportflow_reconcile_repairs",
		"Tickets whose mirror the reconciler repaired because a webhook delivery was missed, by what was missing (ticket, comment).")
	m.modelTokens = counter("supportflow_model_tokens",
		"Tokens the model server counted for drafts, by kind (prompt, completion), including attempts whose answer was refused.")
	m.refused = counter("supportflow_legs_refused",
		"Leg attempts refused before any write, by reason (not_approved, not_owned).")
	m.unresolved = counter("supportflow_legs_unresolved",
		"Actions ended needs_attention because a leg's outcome could not be learned from its receiver within the bound, by receiver (zendesk, subscriptions). Alert on any increase.")
	m.deliveries = counter("supportflow_webhook_deliveries",
		"Zendesk webhook deliveries answered, by answer (accepted, duplicate, ignored, own_write, refused, unauthorized, unavailable) and by the signing secret that verified it (current, previous, none). Zendesk deactivates a webhook whose deliveries keep failing: alert on unavailable, refused and unauthorized.")
	m.reconciles = counter("supportflow_reconcile_runs",
		"Reconciliation passes finished, by result (caught_up; behind: stopped at its request budget, a stuck second or a held ticket; error: ended on an error, keeping what it applied).")
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return &m, nil
}

// add counts one event on c with the given labels; nil-safe through the
// callers, which check m first.
func add(c metric.Int64Counter, attrs ...attribute.KeyValue) {
	c.Add(context.Background(), 1, metric.WithAttributeSet(attribute.NewSet(attrs...)))
}

// ActionLeg counts one leg of an approved action reaching an outcome:
// supportflow_action_legs_total{leg, outcome}. leg is "zendesk" or
// "cancellations"; outcome is what happened to it, e.g. "posted",
// "ledger", "audit", "applied", "cancelled", "failed" or "lost_claim".
func (m *Metrics) ActionLeg(leg, outcome string) {
	if m == nil {
		return
	}
	add(m.actionLegs, attribute.String("leg", leg), attribute.String("outcome", outcome))
}

// DeadLetter counts one enrichment request dead-lettered:
// supportflow_enrichment_dead_letters_total{reason}, where reason is
// "retries_exhausted" or "not_retryable".
func (m *Metrics) DeadLetter(reason string) {
	if m == nil {
		return
	}
	add(m.deadLetters, attribute.String("reason", reason))
}

// Retry counts one failed activity attempt that will be retried:
// supportflow_activity_retries_total{activity_type}.
func (m *Metrics) Retry(activityType string) {
	if m == nil {
		return
	}
	add(m.retries, attribute.String("activity_type", activityType))
}

// Lookup counts one enrichment lookup:
// supportflow_enrichment_lookups_total{outcome}, where outcome is "found",
// "not_found" or "error".
func (m *Metrics) Lookup(outcome string) {
	if m == nil {
		return
	}
	add(m.lookups, attribute.String("outcome", outcome))
}

// ModelTokens adds one completion's usage:
// supportflow_model_tokens_total{kind="prompt"|"completion"}.
func (m *Metrics) ModelTokens(prompt, completion int64) {
	if m == nil {
		return
	}
	m.modelTokens.Add(context.Background(), prompt, metric.WithAttributeSet(attribute.NewSet(attribute.String("kind", "prompt"))))
	m.modelTokens.Add(context.Background(), completion, metric.WithAttributeSet(attribute.NewSet(attribute.String("kind", "completion"))))
}

// Draft counts one reply draft: supportflow_drafts_total{outcome}, where
// outcome is "generated", "invalid_output", "failed", or a model failure's
// kind ("quota_exhausted", "context_length_exceeded", "truncated",
// "rate_limited").
func (m *Metrics) Draft(outcome string) {
	if m == nil {
		return
	}
	add(m.drafts, attribute.String("outcome", outcome))
}

// Repair counts one ticket repaired by the reconciler:
// supportflow_reconcile_repairs_total{what}, what being "ticket" (its
// fields were stale or missing) or "comment" (who spoke last was).
func (m *Metrics) Repair(what string) {
	if m == nil {
		return
	}
	add(m.repairs, attribute.String("what", what))
}

// LegRefused counts one leg refused before any write:
// supportflow_legs_refused_total{reason}, reason being "not_approved" (no
// recorded approval, or content other than approved) or "not_owned" (a
// subscription not the ticket's requester's).
func (m *Metrics) LegRefused(reason string) {
	if m == nil {
		return
	}
	add(m.refused, attribute.String("reason", reason))
}

// LegUnresolved counts one action ended needs_attention because a leg's
// outcome stayed unknown past the bound:
// supportflow_legs_unresolved_total{receiver}.
func (m *Metrics) LegUnresolved(receiver string) {
	if m == nil {
		return
	}
	add(m.unresolved, attribute.String("receiver", receiver))
}

// WebhookDelivery counts one webhook delivery answered:
// supportflow_webhook_deliveries_total{answer, secret}. answer is one of
// "accepted", "duplicate", "ignored", "own_write", "refused" (a 4xx for
// the body), "unauthorized" (signature or timestamp) or "unavailable"
// (503: PostgreSQL failed, Zendesk retries). secret is which signing
// secret verified it: "current", "previous" (during a rotation) or
// "none".
func (m *Metrics) WebhookDelivery(answer, secret string) {
	if m == nil {
		return
	}
	add(m.deliveries, attribute.String("answer", answer), attribute.String("secret", secret))
}

// ReconcileRun counts one reconciliation pass finished:
// supportflow_reconcile_runs_total{result}, result being "caught_up",
// "behind" (it stopped at its request budget, a stuck second or a held
// ticket) or "error" (it ended on an error, keeping what it applied).
func (m *Metrics) ReconcileRun(result string) {
	if m == nil {
		return
	}
	add(m.reconciles, attribute.String("result", result))
}
