// Package activities holds supportflow's Temporal activities: methods on
// Activities, which owns every client they use. Nothing here builds a
// client or retries on its own; a failure is returned and retried under the
// one policy (internal/policy).
package activities

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/supportflow/supportflow"
	"github.com/supportflow/supportflow/internal/enrichment"
	"github.com/supportflow/supportflow/internal/eval"
	"github.com/supportflow/supportflow/internal/policy"
	"github.com/supportflow/supportflow/internal/proposals"
	"github.com/supportflow/supportflow/internal/subscriptions"
	"github.com/supportflow/supportflow/internal/telemetry"
	"github.com/supportflow/supportflow/internal/zendeskclient"
	"github.com/supportflow/supportflow/ledger"
)

// Zendesk is what the activities need from Zendesk.
type Zendesk interface {
	ReadTicket(ctx context.Context, ticketID int64) (zendeskclient.TicketState, error)
	UpdateTicket(ctx context.Context, ticketID int64, u zendeskclient.Update, actionKey string, stamp zendeskclient.Stamp) (zendeskclient.Landed, error)
	FindAction(ctx context.Context, ticketID int64, actionKey string, since time.Time, withComment bool) (zendeskclient.Landed, bool, error)
	Conversation(ctx context.Context, ticketID int64) (supportflow.Conversation, error)
}

// Subscriptions is what the activities need from the subscription service.
type Subscriptions interface {
	Cancel(ctx context.Context, subscriptionID, idempotencyKey string) (subscriptions.Cancellation, error)
	Status(ctx context.Context, subscriptionID string) (string, error)
	// Lookup reads whose a subscription is (and its status and plan), so
	// a cancellation runs only for the ticket's requester.
	Lookup(ctx context.Context, subscriptionID string) (subscriptions.Subscription, error)
}

// Activities holds the clients of supportflow's activities. Register a
// filled-in value with the worker; workflows call its methods through a
// nil *Activities.
type Activities struct {
	Zendesk       Zendesk
	Subscriptions Subscriptions
	// Model drafts replies.
	Model Model
	// Ledger is the action ledger (actions and their legs).
	Ledger *ledger.Ledger
	// Proposals keeps the drafted proposals and the approvals every leg
	// checks before it writes.
	Proposals *proposals.Store
	// Enrichment is read for a ticket's customer data (written by the
	// enrichment activities).
	Enrichment *enrichment.Store
	// Evals keeps evaluation results.
	Evals *eval.Store
	// Durations are the heartbeat interval, lease and call timeouts.
	Durations policy.Durations
	// Logger receives operational logs; nil means slog.Default(). Secrets
	// never reach it.
	Logger *slog.Logger
	// Metrics counts outcomes; nil counts nothing.
	Metrics *telemetry.Metrics
	// PromptTokenBudget bounds a draft's estimated prompt tokens (0: no
	// bound); a longer conversation is trimmed (Messages).
	PromptTokenBudget int
	// ReplyUpdate, when set, is the ticket update (status, tags) every
	// drafted reply carries, applied with the reply in one Zendesk update.
	ReplyUpdate *supportflow.TicketUpdate
	// ZendeskUserID is supportflow's own Zendesk API user (the
	// ZENDESK_API_USER_ID setting), so a draft's prompt tells supportflow's
	// earlier replies from a human agent's. 0 (unknown) labels them by
	// their Zendesk role, as an agent's.
	ZendeskUserID int64
}

func (a *Activities) log(ctx context.Context) *slog.Logger {
	l := a.Logger
	if l == nil {
		l = slog.Default()
	}
	info := activity.GetInfo(ctx)
	return l.With("workflow_id", info.WorkflowExecution.ID, "run_id", info.WorkflowExecution.RunID,
		"activity", info.ActivityType.Name, "activity_id", info.ActivityID, "attempt", info.Attempt)
}

// validate rejects input that can never succeed, before anything is
// written.
func validate(in supportflow.ActionInput) error {
	if err := in.Validate(); err != nil {
		return invalid(err)
	}
	return nil
}

func reserveRequest(in supportflow.ActionInput, claimant, run string, d policy.Durations) ledger.ReserveRequest {
	return ledger.ReserveRequest{
		Key:      in.Key,
		TicketID: in.Action.TicketID,
		Legs:     in.Action.Legs(),
		Claimant: claimant,
		Lease:    d.Lease,
		Digest:   ledger.ContentDigest(in.Action),
		Run:      run,
	}
}

// checkApproved refuses, before any write, an action that has no recorded
// approval or is not what was approved (proposals.Store.CheckApproval): a
// proposal is approved through the API or the starter, which record it in
// PostgreSQL, never by starting ExecuteProposal on Temporal. The only
// writes without an approval are supportflow's own private notes to the
// agents (keys under supportflow.NotePrefixes, which no proposal ID may
// use), a private comment and nothing else.
func (a *Activities) checkApproved(ctx context.Context, in supportflow.ActionInput) error {
	if isAttentionNote(in) {
		return nil
	}
	err := a.Proposals.CheckApproval(ctx, in.Key, ledger.ContentDigest(in.Action))
	switch {
	case err == nil:
		return nil
	case errors.Is(err, proposals.ErrNotApproved):
		a.Metrics.LegRefused("not_approved")
		a.log(ctx).Warn("refused an action that was not approved", "action_key", in.Key, "ticket_id", in.Action.TicketID, "reason", err.Error())
		return policy.AppError(err.Error(), supportflow.ErrTypeNotApproved, err)
	case errors.Is(err, supportflow.ErrInvalidInput):
		return invalid(err)
	}
	return err
}

// isAttentionNote reports whether in is one of supportflow's private notes
// to the agents.
func isAttentionNote(in supportflow.ActionInput) bool {
	proposalID, _, _ := supportflow.ParseActionKey(in.Key)
	act := in.Action
	return slices.ContainsFunc(supportflow.NotePrefixes, func(p string) bool { return strings.HasPrefix(proposalID, p) }) &&
		act.Comment != nil && !act.Comment.Public && len(act.CancelSubscriptions) == 0 && act.UpdateTicket == nil
}

// claimantOf names this attempt uniquely: a retry of the same activity is a
// different claimant, so the ledger can fence the stale one out.
func claimantOf(ctx context.Context) string {
	info := activity.GetInfo(ctx)
	return fmt.Sprintf("%s/%s/%s#%d", info.WorkflowExecution.ID, info.WorkflowExecution.RunID, info.ActivityID, info.Attempt)
}

func invalid(err error) error {
	return policy.AppError(err.Error(), supportflow.ErrTypeInvalidInput, err)
}

func rejected(err error) error {
	return policy.AppError(err.Error(), supportflow.ErrTypeRejected, err)
}

// errLostClaim is the cause a fenced write that lost reports.
var errLostClaim = errors.New("the action's claim was taken over by a newer attempt")

func lostClaim(key string) error {
	return policy.AppError(
		fmt.Sprintf("action %s: %v; stopped without writing", key, errLostClaim), supportflow.ErrTypeLostClaim, errLostClaim)
}

// reserve claims the action, waiting inside the attempt while another
// live claimant (a predecessor whose write may still land) holds its
// lease: the wait heartbeats, so Temporal knows the attempt is alive, and
// costs no attempt from the budget. It gives up only when the attempt's
// context ends.
func (a *Activities) reserve(ctx context.Context, req ledger.ReserveRequest) (ledger.Reservation, error) {
	for {
		res, err := a.Ledger.Reserve(ctx, req)
		var held *ledger.LeaseHeldError
		if !errors.As(err, &held) {
			return res, err
		}
		a.log(ctx).Info("waiting for a live predecessor's lease", "action_key", req.Key, "holder", held.Claimant, "expires_in", held.ExpiresIn)
		activity.RecordHeartbeat(ctx, Progress{Step: "waiting for " + held.Claimant + " to finish or lapse"})
		wait := min(held.ExpiresIn+50*time.Millisecond, a.Durations.Fill().HeartbeatInterval)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return res, err
		case <-t.C:
		}
	}
}

// reserveError maps a Reserve failure to an activity error: a live lease
// elsewhere is retried (no sooner than it can lapse); bad input and a key
// reused with different content are permanent; anything else is retried.
func reserveError(err error) error {
	var held *ledger.LeaseHeldError
	switch {
	case errors.As(err, &held):
		return policy.AppError(err.Error(), supportflow.ErrTypeLeaseHeld, err)
	case errors.Is(err, supportflow.ErrInvalidInput):
		return invalid(err)
	case errors.Is(err, supportflow.ErrConflict):
		return invalid(err)
	case errors.Is(err, ledger.ErrSettled):
		return rejected(err)
	}
	return err
}

// classified is implemented by the Zendesk and subscription clients'
// errors.
type classified interface {
	Permanent() bool
	MayHaveLanded() bool
}

func isPermanent(err error) bool {
	var c classified
	return errors.As(err, &c) && c.Permanent()
}

// mayHaveLanded is true unless the error proves the request was not
// applied: unknown errors are treated as ambiguous.
func mayHaveLanded(err error) bool {
	var c classified
	if errors.As(err, &c) {
		return c.MayHaveLanded()
	}
	return true
}
