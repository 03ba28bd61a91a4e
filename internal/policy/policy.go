// Package policy is the one place that says how long supportflow's work may
// take and how it is retried: heartbeat interval and timeout, per-attempt
// deadlines, the ledger lease, and the single retry policy (exponential
// backoff from 5 s, doubling, capped at 300 s, with half-to-full jitter)
// with an attempt budget per kind of work.
//
// Every duration has the product's value as its default; tests against the
// real dev server shrink them through the same configuration the worker
// reads, while time-skipping tests check the defaults themselves.
package policy

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"os"
	"time"

	"go.temporal.io/sdk/temporal"
)

// Durations configures every timer supportflow arms. The zero value of a
// field means "use the default"; use Defaults or Fill to get real values.
type Durations struct {
	// HeartbeatInterval is how often a running activity heartbeats to
	// Temporal and extends its ledger lease, on a ticker separate from the
	// work. Default 15 s.
	HeartbeatInterval time.Duration
	// HeartbeatTimeout is how long Temporal waits without a heartbeat before
	// it starts a new attempt. Default 60 s.
	HeartbeatTimeout time.Duration
	// Lease is how long a ledger claim stays live after its last extension.
	// It must outlive one external call (so a claim checked just before a
	// call cannot expire while the call is in flight). Default 60 s.
	Lease time.Duration
	// ZendeskCallTimeout bounds one Zendesk HTTP call. Default 30 s.
	ZendeskCallTimeout time.Duration
	// SubscriptionCallTimeout bounds one subscription-service call.
	// Default 30 s.
	SubscriptionCallTimeout time.Duration
	// DeadlineMargin is added to the sum of an activity's call timeouts to
	// give its start-to-close deadline room for the ledger writes.
	// Default 15 s.
	DeadlineMargin time.Duration
	// RetryBase is the first retry delay; each later one doubles.
	// Default 5 s.
	RetryBase time.Duration
	// RetryCap caps a retry delay. Default 300 s.
	RetryCap time.Duration
	// ModelAttemptTimeout is the start-to-close deadline of one model
	// attempt (streaming a draft). Default 300 s.
	ModelAttemptTimeout time.Duration
	// ProposalExpiry is how long a proposal may wait for approval before
	// the draft ends expired. Default 72 h.
	ProposalExpiry time.Duration
	// UnresolvedLegBound is how long an execution that gave up keeps
	// trying to learn from a receiver whether a leg whose answer was lost
	// landed, before the action ends needs_attention with the leg still
	// unknown (supportflow_legs_unresolved_total counts it, and an ERROR
	// log line names it). Default 24 h.
	UnresolvedLegBound time.Duration
	// ScanInterval is how often the schedule runs ScanTickets. Default 5 min.
	ScanInterval time.Duration
	// EnrichNewTicketDelay is how long after a new ticket its lookup waits
	// (BigQuery's replication lag). Default 10 min.
	EnrichNewTicketDelay time.Duration
	// EnrichUpdateDelay is how long after activity on an existing ticket its
	// lookup waits, so that a burst of updates makes one lookup. Default
	// 2 min.
	EnrichUpdateDelay time.Duration
	// LookupAttemptTimeout is the start-to-close deadline of one BigQuery
	// lookup attempt; the BigQuery client runs under it. Default 120 s.
	LookupAttemptTimeout time.Duration
	// ReconcileInterval is how often the schedule runs ReconcileTickets,
	// which repairs what the webhooks missed. Default 5 min.
	ReconcileInterval time.Duration
	// Retention is how long terminal rows (proposals, actions, lookup logs,
	// enrichment runs) are kept before the daily prune deletes them.
	// Default 30 days.
	Retention time.Duration
}

// Defaults returns the product's durations.
func Defaults() Durations {
	return Durations{
		HeartbeatInterval:       15 * time.Second,
		HeartbeatTimeout:        60 * time.Second,
		Lease:                   60 * time.Second,
		ZendeskCallTimeout:      30 * time.Second,
		SubscriptionCallTimeout: 30 * time.Second,
		DeadlineMargin:          15 * time.Second,
		RetryBase:               5 * time.Second,
		RetryCap:                300 * time.Second,
		ModelAttemptTimeout:     300 * time.Second,
		ProposalExpiry:          72 * time.Hour,
		UnresolvedLegBound:      24 * time.Hour,
		ScanInterval:            5 * time.Minute,
		EnrichNewTicketDelay:    10 * time.Minute,
		EnrichUpdateDelay:       2 * time.Minute,
		LookupAttemptTimeout:    120 * time.Second,
		Retention:               30 * 24 * time.Hour,
		ReconcileInterval:       5 * time.Minute,
	}
}

// Fill returns d with every zero field replaced by its default.
func (d Durations) Fill() Durations {
	def := Defaults()
	return Durations{
		HeartbeatInterval:       cmp.Or(d.HeartbeatInterval, def.HeartbeatInterval),
		HeartbeatTimeout:        cmp.Or(d.HeartbeatTimeout, def.HeartbeatTimeout),
		Lease:                   cmp.Or(d.Lease, def.Lease),
		ZendeskCallTimeout:      cmp.Or(d.ZendeskCallTimeout, def.ZendeskCallTimeout),
		SubscriptionCallTimeout: cmp.Or(d.SubscriptionCallTimeout, def.SubscriptionCallTimeout),
		DeadlineMargin:          cmp.Or(d.DeadlineMargin, def.DeadlineMargin),
		RetryBase:               cmp.Or(d.RetryBase, def.RetryBase),
		RetryCap:                cmp.Or(d.RetryCap, def.RetryCap),
		ModelAttemptTimeout:     cmp.Or(d.ModelAttemptTimeout, def.ModelAttemptTimeout),
		ProposalExpiry:          cmp.Or(d.ProposalExpiry, def.ProposalExpiry),
		UnresolvedLegBound:      cmp.Or(d.UnresolvedLegBound, def.UnresolvedLegBound),
		ScanInterval:            cmp.Or(d.ScanInterval, def.ScanInterval),
		EnrichNewTicketDelay:    cmp.Or(d.EnrichNewTicketDelay, def.EnrichNewTicketDelay),
		EnrichUpdateDelay:       cmp.Or(d.EnrichUpdateDelay, def.EnrichUpdateDelay),
		LookupAttemptTimeout:    cmp.Or(d.LookupAttemptTimeout, def.LookupAttemptTimeout),
		Retention:               cmp.Or(d.Retention, def.Retention),
		ReconcileInterval:       cmp.Or(d.ReconcileInterval, def.ReconcileInterval),
	}
}

// ErrInvalidDurations is wrapped by every Validate error.
var ErrInvalidDurations = errors.New("invalid durations")

// Validate checks the relations the design relies on. A configuration that
// breaks them is refused at start-up rather than producing duplicate work.
func (d Durations) Validate() error {
	var errs []error
	check := func(ok bool, format string, args ...any) {
		if !ok {
			errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidDurations}, args...)...))
		}
	}
	for name, v := range map[string]time.Duration{
		"heartbeat interval": d.HeartbeatInterval, "heartbeat timeout": d.HeartbeatTimeout,
		"lease": d.Lease, "Zendesk call timeout": d.ZendeskCallTimeout,
		"subscription call timeout": d.SubscriptionCallTimeout, "retry base": d.RetryBase, "retry cap": d.RetryCap,
		"model attempt timeout": d.ModelAttemptTimeout, "proposal expiry": d.ProposalExpiry, "scan interval": d.ScanInterval,
		"unresolved leg bound":        d.UnresolvedLegBound,
		"new-ticket enrichment delay": d.EnrichNewTicketDelay, "update enrichment delay": d.EnrichUpdateDelay,
		"lookup attempt timeout": d.LookupAttemptTimeout, "retention": d.Retention,
		"reconcile interval": d.ReconcileInterval,
	} {
		check(v > 0, "%s must be positive, got %s", name, v)
	}
	check(d.DeadlineMargin >= 0, "deadline margin must not be negative, got %s", d.DeadlineMargin)
	check(d.HeartbeatInterval < d.HeartbeatTimeout, "heartbeat interval %s must be shorter than the heartbeat timeout %s", d.HeartbeatInterval, d.HeartbeatTimeout)
	check(d.HeartbeatInterval < d.Lease, "heartbeat interval %s must be shorter than the lease %s", d.HeartbeatInterval, d.Lease)
	check(d.Lease > d.ZendeskCallTimeout && d.Lease > d.SubscriptionCallTimeout,
		"lease %s must outlive one call (Zendesk %s, subscriptions %s)", d.Lease, d.ZendeskCallTimeout, d.SubscriptionCallTimeout)
	check(d.HeartbeatTimeout < d.ModelAttemptTimeout, "heartbeat timeout %s must be shorter than the model attempt timeout %s", d.HeartbeatTimeout, d.ModelAttemptTimeout)
	check(d.DeadlineMargin < d.LookupAttemptTimeout, "the deadline margin %s must be shorter than the lookup attempt timeout %s", d.DeadlineMargin, d.LookupAttemptTimeout)
	check(d.HeartbeatTimeout < d.LookupAttemptTimeout, "heartbeat timeout %s must be shorter than the lookup attempt timeout %s", d.HeartbeatTimeout, d.LookupAttemptTimeout)
	check(d.RetryBase <= d.RetryCap, "retry base %s must not exceed the cap %s", d.RetryBase, d.RetryCap)
	return errors.Join(errs...)
}

// Env lists the environment variables FromEnv reads, with the field each
// sets. Values use Go duration syntax ("15s", "250ms").
var Env = []struct {
	Name, Help string
	Default    time.Duration
	field      func(*Durations) *time.Duration
}{
	{"SUPPORTFLOW_HEARTBEAT_INTERVAL", "activity heartbeat and lease extension interval", 15 * time.Second, func(d *Durations) *time.Duration { return &d.HeartbeatInterval }},
	{"SUPPORTFLOW_HEARTBEAT_TIMEOUT", "heartbeat silence before Temporal starts a new attempt", 60 * time.Second, func(d *Durations) *time.Duration { return &d.HeartbeatTimeout }},
	{"SUPPORTFLOW_LEASE", "ledger claim lifetime without an extension", 60 * time.Second, func(d *Durations) *time.Duration { return &d.Lease }},
	{"SUPPORTFLOW_ZENDESK_CALL_TIMEOUT", "timeout of one Zendesk call", 30 * time.Second, func(d *Durations) *time.Duration { return &d.ZendeskCallTimeout }},
	{"SUPPORTFLOW_SUBSCRIPTION_CALL_TIMEOUT", "timeout of one subscription-service call", 30 * time.Second, func(d *Durations) *time.Duration { return &d.SubscriptionCallTimeout }},
	{"SUPPORTFLOW_DEADLINE_MARGIN", "added to an activity's call timeouts for its deadline", 15 * time.Second, func(d *Durations) *time.Duration { return &d.DeadlineMargin }},
	{"SUPPORTFLOW_RETRY_BASE", "first retry delay, doubling per attempt", 5 * time.Second, func(d *Durations) *time.Duration { return &d.RetryBase }},
	{"SUPPORTFLOW_RETRY_CAP", "largest retry delay", 300 * time.Second, func(d *Durations) *time.Duration { return &d.RetryCap }},
	{"SUPPORTFLOW_MODEL_ATTEMPT_TIMEOUT", "deadline of one model attempt (streaming a draft)", 300 * time.Second, func(d *Durations) *time.Duration { return &d.ModelAttemptTimeout }},
	{"SUPPORTFLOW_PROPOSAL_EXPIRY", "how long a proposal waits for approval before it expires", 72 * time.Hour, func(d *Durations) *time.Duration { return &d.ProposalExpiry }},
	{"SUPPORTFLOW_UNRESOLVED_LEG_BOUND", "how long a settle keeps trying to learn whether a leg with a lost answer landed before the action ends needs_attention", 24 * time.Hour, func(d *Durations) *time.Duration { return &d.UnresolvedLegBound }},
	{"SUPPORTFLOW_ENRICH_NEW_TICKET_DELAY", "wait after a new ticket before its BigQuery lookup (replication lag)", 10 * time.Minute, func(d *Durations) *time.Duration { return &d.EnrichNewTicketDelay }},
	{"SUPPORTFLOW_ENRICH_UPDATE_DELAY", "wait after a ticket's latest update before its lookup", 2 * time.Minute, func(d *Durations) *time.Duration { return &d.EnrichUpdateDelay }},
	{"SUPPORTFLOW_LOOKUP_ATTEMPT_TIMEOUT", "deadline of one BigQuery lookup attempt", 120 * time.Second, func(d *Durations) *time.Duration { return &d.LookupAttemptTimeout }},
	{"SUPPORTFLOW_RETENTION", "how long terminal rows are kept before the daily prune", 30 * 24 * time.Hour, func(d *Durations) *time.Duration { return &d.Retention }},
	{"SUPPORTFLOW_RECONCILE_INTERVAL", "how often the scheduled reconciliation reads Zendesk's incremental exports to repair missed webhooks", 5 * time.Minute, func(d *Durations) *time.Duration { return &d.ReconcileInterval }},
	{"SUPPORTFLOW_SCAN_INTERVAL", "how often the scheduled scan looks for tickets to draft", 5 * time.Minute, func(d *Durations) *time.Duration { return &d.ScanInterval }},
}

// FromEnv reads the durations from the environment (unset means default)
// and validates them. A value that does not parse is an error naming the
// variable; nothing falls back silently.
func FromEnv() (Durations, error) {
	var d Durations
	for _, e := range Env {
		v, ok := os.LookupEnv(e.Name)
		if !ok || v == "" {
			continue
		}
		parsed, err := time.ParseDuration(v)
		if err != nil {
			return Durations{}, fmt.Errorf("%w: %s=%q: %v", ErrInvalidDurations, e.Name, v, err)
		}
		*e.field(&d) = parsed
	}
	d = d.Fill()
	return d, d.Validate()
}

// Kind is a kind of work with its own attempt budget.
type Kind string

const (
	// KindZendesk is a write to Zendesk (PostReply).
	KindZendesk Kind = "zendesk"
	// KindSubscriptions is the cancellation leg (CancelSubscriptions).
	KindSubscriptions Kind = "subscriptions"
	// KindModel is a model call (GenerateDraft): two attempts, because a
	// model that failed twice is down, and a human is waiting.
	KindModel Kind = "model"
	// KindZendeskRead is reading a ticket and its conversation.
	KindZendeskRead Kind = "zendesk_read"
	// KindBigQuery is a customer lookup: after 5 attempts the ticket is
	// dead-lettered.
	KindBigQuery Kind = "bigquery"
	// KindLedger is bookkeeping that must eventually succeed (settling an
	// action after its last attempt failed).
	KindLedger Kind = "ledger"
)

// Resources are the rate-limited services a worker's activities call. Work
// that calls one runs on that resource's own task queue (ResourceQueue),
// where the server enforces a fleet-wide rate and each worker a
// concurrency cap, so a burst of work waits in the queue instead of
// meeting the service's rate limit with 429s.
var Resources = []string{ResourceZendesk, ResourceModel, ResourceBigQuery, ResourceSubscriptions}

// The resources.
const (
	ResourceZendesk       = "zendesk"
	ResourceModel         = "model"
	ResourceBigQuery      = "bigquery"
	ResourceSubscriptions = "subscriptions"
)

// ResourceOf is the resource a kind of work calls, "" for none (ledger
// bookkeeping stays on the workflows' own queue).
func ResourceOf(k Kind) string {
	switch k {
	case KindZendesk, KindZendeskRead:
		return ResourceZendesk
	case KindModel:
		return ResourceModel
	case KindBigQuery:
		return ResourceBigQuery
	case KindSubscriptions:
		return ResourceSubscriptions
	}
	return ""
}

// ResourceQueue is the task queue of a resource's work for workflows on
// base.
func ResourceQueue(base, resource string) string { return base + "-" + resource }

// Budgets is the number of attempts per kind; 0 means unlimited.
var Budgets = map[Kind]int32{
	KindZendesk:       10,
	KindSubscriptions: 10,
	KindModel:         2,
	KindZendeskRead:   5,
	KindBigQuery:      5,
	KindLedger:        0,
}

// RetryPolicy is the Temporal retry policy for a kind of work. Its backoff
// shape matches RetryDelay so that retries the worker cannot annotate
// (timeouts, decided by the server) still follow the policy, only without
// jitter; every failure the worker sees gets RetryDelay through the
// interceptor.
func (d Durations) RetryPolicy(kind Kind) *temporal.RetryPolicy {
	budget, ok := Budgets[kind]
	if !ok {
		panic(fmt.Sprintf("policy: unknown kind %q", kind))
	}
	return &temporal.RetryPolicy{
		InitialInterval:    d.RetryBase,
		BackoffCoefficient: 2,
		MaximumInterval:    d.RetryCap,
		MaximumAttempts:    budget,
	}
}

// NominalDelay is the delay before retrying after the given attempt (1 for
// the first) failed, before jitter: base x 2^(attempt-1), capped.
func (d Durations) NominalDelay(attempt int32) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	f := float64(d.RetryBase) * math.Pow(2, float64(attempt-1))
	if f >= float64(d.RetryCap) || math.IsInf(f, 0) {
		return d.RetryCap
	}
	return time.Duration(f)
}

// RetryDelay applies half-to-full jitter to NominalDelay: u is a uniform
// random number in [0, 1), so the delay lies in [nominal/2, nominal).
// Jitter spreads retries of work that failed together (an outage) so they
// do not return together.
func (d Durations) RetryDelay(attempt int32, u float64) time.Duration {
	n := d.NominalDelay(attempt)
	return time.Duration(float64(n) * (0.5 + 0.5*u))
}
