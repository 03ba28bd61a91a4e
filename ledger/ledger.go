// Package ledger is supportflow's PostgreSQL action ledger. It makes the
// Zendesk and cancellation activities safe to replay: Zendesk does not
// deduplicate writes, Temporal runs activities at least once, and a stale
// attempt can still be running while its retry starts, so the
// deduplication happens here, before every external call.
//
// Each action of an approved proposal has one row keyed
// "{proposalId}:{actionIndex}", unique per account, moving
// pending -> applying -> applied | partial_failure | failed |
// needs_attention, and one action_leg row per leg (a subscription to
// cancel, the ticket update, the reply), moving pending -> done | failed |
// unknown. An attempt claims the action (Reserve) with a lease that its
// heartbeat extends for as long as it works; every write after the claim
// is fenced on id, claimant and state 'applying' and reports whether it
// won. Only 'applied' deduplicates a whole re-run; a re-run of anything
// else skips the legs recorded done. The ledger is generic over legs: what
// a kind is and how its replay is made safe is said in the root package
// (supportflow.SpecOf).
//
// The ledger writes the tables action and action_leg and nothing else:
// proposals and approvals are package internal/proposals', the ticket
// mirror internal/ingest's, the enrichment internal/enrichment's, the
// evaluation results internal/eval's. Every table has one writing package
// (TestContract_OneWriterPerTable in the root package).
package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/supportflow/supportflow"
)

// DB is what the ledger needs from a pool: a transaction and plain
// statements. *pgxpool.Pool satisfies it.
type DB interface {
	Begin(ctx context.Context) (pgx.Tx, error)
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

var _ DB = (*pgxpool.Pool)(nil)

// Ledger reads and writes the action ledger of one account.
type Ledger struct {
	db      DB
	account string
}

// New returns the ledger of account (for example the Zendesk subdomain)
// on db. An empty account is a programming error and panics.
func New(db DB, account string) *Ledger {
	if account == "" {
		panic("ledger: empty account")
	}
	return &Ledger{db: db, account: account}
}

// Account returns the account the ledger writes for.
func (l *Ledger) Account() string { return l.account }

// TicketLockKey is the pg_advisory_xact_lock key of one ticket of one
// account. Action reservation and the ticket-mirror writer (package
// ingest) both take it, so a reservation serializes against mirror writes
// for the same ticket; recording an approval and retrying a proposal
// (package proposals) take it too.
// It is a 64-bit FNV-1a hash of a namespaced string, so it does not collide
// with other advisory locks in practice (tern's migration lock included).
func TicketLockKey(account string, ticketID int64) int64 {
	h := fnv.New64a()
	h.Write([]byte("supportflow/ticket/"))
	h.Write([]byte(account))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatInt(ticketID, 10)))
	return int64(h.Sum64())
}

// ErrLeaseHeld is returned by Reserve (wrapped in a *LeaseHeldError) when
// another claimant holds a live lease on the action. The caller backs off
// and tries again; the lease lapses only if that claimant stops.
var ErrLeaseHeld = errors.New("ledger: action is being applied by another live claimant")

// LeaseHeldError says who holds the action and for how much longer.
type LeaseHeldError struct {
	Key       string
	Claimant  string
	ExpiresIn time.Duration
}

func (e *LeaseHeldError) Error() string {
	return fmt.Sprintf("ledger: action %s is held by %s for another %s", e.Key, e.Claimant, e.ExpiresIn.Round(time.Millisecond))
}

func (e *LeaseHeldError) Unwrap() error { return ErrLeaseHeld }

// RetryAfterDelay is the soonest a retry can succeed: when the lease lapses
// (if its holder has stopped extending it).
func (e *LeaseHeldError) RetryAfterDelay() time.Duration { return e.ExpiresIn }

// ErrUnresolved is returned by SettleFailed while a leg's outcome is
// unknown: the caller reads the receiver's state and tries again.
var ErrUnresolved = errors.New("ledger: a cancellation's outcome is still unknown")

// ErrSettled is returned by Reserve to a stale attempt of the execution
// that settled the action. It is permanent.
var ErrSettled = errors.New("ledger: action already settled by this execution")

// ReserveRequest describes the action an attempt wants to claim.
type ReserveRequest struct {
	Key      string
	TicketID int64
	// Legs are the action's legs in order (supportflow.Action.Legs); the
	// first reserve creates one row each.
	Legs []supportflow.Leg
	// Claimant identifies the attempt (workflow, activity and attempt
	// number); it must differ between attempts so that fencing can tell a
	// stale attempt from its successor.
	Claimant string
	// Lease is how long the claim stays live without ExtendLease.
	Lease time.Duration
	// Run is the workflow run the attempt belongs to: an action this run
	// settled is not reopened by it (ErrSettled). Empty skips the check.
	Run string
	// Digest identifies the action's content (ContentDigest); a key
	// reserved before with another digest is supportflow.ErrConflict. Empty skips the
	// check.
	Digest string
}

// ContentDigest is the digest of what an action does: its ticket, comment,
// subscriptions and ticket update. Two proposals that share an ID but
// differ here are different actions. (An action without a ticket update
// keeps the digest it had before ticket updates existed.)
func ContentDigest(a supportflow.Action) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d\x00", a.TicketID)
	if a.Comment != nil {
		fmt.Fprintf(h, "c%t\x00%s\x00", a.Comment.Public, a.Comment.Body)
	}
	for _, s := range a.CancelSubscriptions {
		fmt.Fprintf(h, "s%s\x00", s)
	}
	if u := a.UpdateTicket; u != nil {
		fmt.Fprintf(h, "u%s\x00", u.Status)
		for _, t := range u.Tags {
			fmt.Fprintf(h, "t%s\x00", t)
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Leg states.
const (
	LegPending = "pending"
	LegDone    = "done"
	LegFailed  = "failed"
	// LegUnknown: the last call's answer was lost; the receiver's state
	// must be read before the leg is called again or declared failed.
	LegUnknown = "unknown"
)

// LegRow is one action_leg row.
type LegRow struct {
	Position int
	Kind     supportflow.LegKind
	Target   string
	State    string
	// ExternalID is the receiver's ID of the effect (a comment ID, an audit
	// ID); RequestID the receiver's ID of the request that carried it (the
	// Zendesk audit).
	ExternalID, RequestID string
	AlreadyDone           bool
	Calls                 int
	LastError             string
	DoneAt                *time.Time
}

// Leg returns the leg as the domain names it.
func (r LegRow) Leg() supportflow.Leg { return supportflow.Leg{Kind: r.Kind, Target: r.Target} }

// Legs is an action's legs in order.
type Legs []LegRow

// Find returns the leg of that kind and target.
func (ls Legs) Find(kind supportflow.LegKind, target string) (LegRow, bool) {
	for _, l := range ls {
		if l.Kind == kind && l.Target == target {
			return l, true
		}
	}
	return LegRow{}, false
}

// Of returns the legs of one kind, in order.
func (ls Legs) Of(kind supportflow.LegKind) Legs {
	var out Legs
	for _, l := range ls {
		if l.Kind == kind {
			out = append(out, l)
		}
	}
	return out
}

// InState returns the targets of the legs of kind in state.
func (ls Legs) InState(kind supportflow.LegKind, state string) []string {
	var out []string
	for _, l := range ls.Of(kind) {
		if l.State == state {
			out = append(out, l.Target)
		}
	}
	return out
}

// Reservation is the result of a successful Reserve.
type Reservation struct {
	ID int64
	// Applied is true when the action is already applied: the caller does
	// nothing (deduplicated) and holds no claim.
	Applied bool
	// PriorAttempts counts the claims before this one. When it is > 0 an
	// earlier attempt may have written without recording it.
	PriorAttempts int
	// TookOver is true when this claim replaced another claimant's expired
	// lease.
	TookOver bool
	// ReservedAt is when the action was first reserved: no attempt can
	// have written before it.
	ReservedAt time.Time
	// Legs are the action's legs with what is recorded of each.
	Legs Legs
}

// Reserve claims an action for req.Claimant, creating its row and its leg
// rows on first use, under the ticket's advisory lock. It returns
// Applied=true without a claim when the action is applied, a
// *LeaseHeldError when another claimant's lease is live, supportflow.ErrConflict when
// the key was recorded with another ticket, other legs or other content,
// and otherwise a claim: state 'applying', attempts+1, lease set, with
// every leg's recorded state.
func (l *Ledger) Reserve(ctx context.Context, req ReserveRequest) (Reservation, error) {
	proposalID, index, err := supportflow.ParseActionKey(req.Key)
	if err != nil {
		return Reservation{}, err
	}
	if req.Claimant == "" || req.Lease <= 0 || len(req.Legs) == 0 {
		return Reservation{}, fmt.Errorf("%w: reserve %s needs a claimant, a positive lease and at least one leg", supportflow.ErrInvalidInput, req.Key)
	}
	var kinds, targets []string
	for _, leg := range req.Legs {
		if _, ok := supportflow.SpecOf(leg.Kind); !ok || leg.Target == "" {
			return Reservation{}, fmt.Errorf("%w: reserve %s: leg %q on %q is not a known kind with a target", supportflow.ErrInvalidInput, req.Key, leg.Kind, leg.Target)
		}
		kinds, targets = append(kinds, string(leg.Kind)), append(targets, leg.Target)
	}
	var res Reservation
	err = pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		var (
			ticketID   int64
			state      string
			claimant   *string
			remaining  *time.Duration
			attempts   int
			digest     *string
			settledRun *string
			leased     bool // a lease is set (live or expired), not released
		)
		// One round trip: take the ticket lock, create the row and its legs
		// if absent (correct when 50 attempts race for one key), and read
		// them back under a row lock. The statements run in order.
		b := &pgx.Batch{}
		b.Queue(`SELECT pg_advisory_xact_lock($1)`, TicketLockKey(l.account, req.TicketID))
		b.Queue(`
INSERT INTO action (account, key, proposal_id, action_index, ticket_id)
VALUES ($1, $2, $3, $4, $5)
ON CONFLICT (account, key) DO NOTHING`, l.account, req.Key, proposalID, index, req.TicketID)
		b.Queue(`
SELECT id, ticket_id, state, claimant,
       CASE WHEN lease_expires_at > now() THEN lease_expires_at - now() END,
       attempts, created_at, content_digest, settled_run, lease_expires_at IS NOT NULL
FROM action WHERE account = $1 AND key = $2 FOR UPDATE`, l.account, req.Key).QueryRow(func(row pgx.Row) error {
			return row.Scan(&res.ID, &ticketID, &state, &claimant, &remaining, &attempts, &res.ReservedAt, &digest, &settledRun, &leased)
		})
		// Legs are created only for an action that has none yet (a row
		// created by SettleFailed has none), never added to an existing
		// list: a different list is a conflict, checked below.
		b.Queue(`
INSERT INTO action_leg (action_id, position, kind, target)
SELECT a.id, t.p - 1, t.k, t.tg
FROM action a, unnest($3::text[], $4::text[]) WITH ORDINALITY AS t(k, tg, p)
WHERE a.account = $1 AND a.key = $2
  AND NOT EXISTS (SELECT 1 FROM action_leg x WHERE x.action_id = a.id)`, l.account, req.Key, kinds, targets)
		b.Queue(legSelect+` WHERE action_id = (SELECT id FROM action WHERE account = $1 AND key = $2) ORDER BY position`,
			l.account, req.Key).Query(func(rows pgx.Rows) error {
			var err error
			res.Legs, err = collectLegs(rows)
			return err
		})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if ticketID != req.TicketID {
			return fmt.Errorf("%w: %s is ticket %d, asked for ticket %d", supportflow.ErrConflict, req.Key, ticketID, req.TicketID)
		}
		if !sameLegs(res.Legs, req.Legs) {
			return fmt.Errorf("%w: %s was recorded with other legs (%s), asked for %s", supportflow.ErrConflict, req.Key, describeLegs(res.Legs), describeRequest(req.Legs))
		}
		if req.Digest != "" && digest != nil && *digest != req.Digest {
			return fmt.Errorf("%w: %s was approved with another comment, other subscriptions or another ticket update", supportflow.ErrConflict, req.Key)
		}
		if state == supportflow.StateApplied {
			res.Applied = true
			return nil
		}
		if terminal(state) && req.Run != "" && settledRun != nil && *settledRun == req.Run {
			// Settled by this very run: an attempt still around (one that
			// was waiting out a lease when the run gave up) is stale.
			return fmt.Errorf("%w: %s was settled %s by this execution; a stale attempt does not reopen it", ErrSettled, req.Key, state)
		}
		if state == supportflow.StateApplying && remaining != nil && claimant != nil && *claimant != req.Claimant {
			return &LeaseHeldError{Key: req.Key, Claimant: *claimant, ExpiresIn: *remaining}
		}
		res.TookOver = state == supportflow.StateApplying && claimant != nil && *claimant != req.Claimant && remaining == nil && leased
		res.PriorAttempts = attempts
		_, err := tx.Exec(ctx, `
UPDATE action SET state = 'applying', claimant = $2, lease_expires_at = now() + $3::interval,
       attempts = attempts + 1, updated_at = now(), settled_at = NULL,
       content_digest = COALESCE(content_digest, NULLIF($4, ''))
WHERE id = $1`, res.ID, req.Claimant, req.Lease, req.Digest)
		return err
	})
	if err != nil {
		return Reservation{}, fmt.Errorf("ledger: reserve %s: %w", req.Key, err)
	}
	return res, nil
}

const legSelect = `
SELECT position, kind, target, state, COALESCE(external_id, ''), COALESCE(request_id, ''),
       already_done, calls, COALESCE(last_error, ''), done_at
FROM action_leg`

func collectLegs(rows pgx.Rows) (Legs, error) {
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) (LegRow, error) {
		var l LegRow
		err := r.Scan(&l.Position, &l.Kind, &l.Target, &l.State, &l.ExternalID, &l.RequestID,
			&l.AlreadyDone, &l.Calls, &l.LastError, &l.DoneAt)
		return l, err
	})
}

func sameLegs(have Legs, want []supportflow.Leg) bool {
	if len(have) != len(want) {
		return false
	}
	for i, l := range have {
		if l.Leg() != want[i] {
			return false
		}
	}
	return true
}

func describeLegs(ls Legs) string {
	legs := make([]supportflow.Leg, len(ls))
	for i, l := range ls {
		legs[i] = l.Leg()
	}
	return describeRequest(legs)
}

func describeRequest(legs []supportflow.Leg) string {
	parts := make([]string, len(legs))
	for i, l := range legs {
		parts[i] = string(l.Kind) + " " + l.Target
	}
	return "[" + strings.Join(parts, ", ") + "]"
}

// fenced is the condition every write after the claim carries.
const fenced = `id = $1 AND claimant = $2 AND state = 'applying'`

// ExtendLease pushes the claim's expiry to now()+lease. It returns false,
// and changes nothing, when the claimant no longer holds the action; the
// caller must then stop working.
func (l *Ledger) ExtendLease(ctx context.Context, id int64, claimant string, lease time.Duration) (bool, error) {
	tag, err := l.db.Exec(ctx, `UPDATE action SET lease_expires_at = now() + $3::interval WHERE `+fenced, id, claimant, lease)
	if err != nil {
		return false, fmt.Errorf("ledger: extend lease of %d: %w", id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// LegOutcome is what one call ended with for one leg.
type LegOutcome struct {
	Kind   supportflow.LegKind
	Target string
	// State is LegDone, LegFailed or LegUnknown (the answer was lost).
	State string
	// ExternalID and RequestID are the receiver's IDs, when done.
	ExternalID, RequestID string
	// AlreadyDone: the receiver said it was already so.
	AlreadyDone bool
	Error       string
	// Resolved marks an outcome read from the receiver's state, not from a
	// call: it does not count as a call.
	Resolved bool
}

// RecordLegs writes outcomes, fenced on the claim: all or none. A leg
// recorded done is never changed again (its IDs are kept). It returns
// false, and changes nothing, when the claim was lost.
func (l *Ledger) RecordLegs(ctx context.Context, id int64, claimant string, outcomes ...LegOutcome) (bool, error) {
	_, won, err := l.record(ctx, id, claimant, outcomes, false, "")
	if err != nil {
		return false, fmt.Errorf("ledger: record legs of %d: %w", id, err)
	}
	return won, nil
}

// complete is true, inside an UPDATE of action, when every leg is done.
const complete = `NOT EXISTS (SELECT 1 FROM action_leg l WHERE l.action_id = action.id AND l.state <> 'done')`

// Finish records outcomes (if any) and ends the attempt's work, in one
// transaction: the action becomes 'applied' when every leg is done;
// otherwise it stays 'applying' with the lease released, so the next leg
// or attempt can claim it at once, with errMsg (if any) kept as the last
// error. It returns won=false, and changes nothing, when the claim was
// lost.
func (l *Ledger) Finish(ctx context.Context, id int64, claimant, errMsg string, outcomes ...LegOutcome) (state string, won bool, err error) {
	state, won, err = l.record(ctx, id, claimant, outcomes, true, errMsg)
	if err != nil {
		return "", false, fmt.Errorf("ledger: finish %d: %w", id, err)
	}
	return state, won, nil
}

// record is RecordLegs and Finish: one transaction whose statements go in
// one round trip, each fenced on the claim, so a lost claim changes
// nothing.
func (l *Ledger) record(ctx context.Context, id int64, claimant string, outcomes []LegOutcome, finish bool, errMsg string) (state string, won bool, err error) {
	for _, o := range outcomes {
		switch o.State {
		case LegDone, LegFailed, LegUnknown:
		default:
			return "", false, fmt.Errorf("%w: leg outcome state %q", supportflow.ErrInvalidInput, o.State)
		}
	}
	err = pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		b := &pgx.Batch{}
		b.Queue(`SELECT EXISTS (SELECT 1 FROM action WHERE `+fenced+` FOR UPDATE)`, id, claimant).QueryRow(func(row pgx.Row) error {
			return row.Scan(&won)
		})
		missing := 0
		for _, o := range outcomes {
			calls := 1
			if o.Resolved {
				calls = 0
			}
			// Unfenced on its own: the claim was checked (and locked) by the
			// first statement, and a lost claim rolls all of it back.
			b.Queue(`
UPDATE action_leg SET
  -- done is final; unknown (an earlier call may have landed) only
  -- becomes done or stays unknown: a later call that failed says nothing
  -- of the earlier one, which may still land.
  state = CASE WHEN state = 'done' THEN state WHEN state = 'unknown' AND $4 = 'failed' THEN state ELSE $4 END,
  external_id = CASE WHEN state = 'done' THEN external_id ELSE COALESCE(NULLIF($5, ''), external_id) END,
  request_id = CASE WHEN state = 'done' THEN request_id ELSE COALESCE(NULLIF($6, ''), request_id) END,
  already_done = already_done OR $7,
  calls = calls + $8,
  last_error = CASE WHEN state = 'done' THEN last_error WHEN $4 = 'done' THEN NULL ELSE COALESCE(NULLIF($9, ''), last_error) END,
  done_at = CASE WHEN state = 'done' THEN done_at WHEN $4 = 'done' THEN now() END,
  updated_at = now()
WHERE action_id = $1 AND kind = $2 AND target = $3`,
				id, string(o.Kind), o.Target, o.State, o.ExternalID, o.RequestID, o.AlreadyDone, calls, o.Error).Exec(func(tag pgconn.CommandTag) error {
				if tag.RowsAffected() != 1 {
					missing++
				}
				return nil
			})
		}
		if finish {
			b.Queue(`
UPDATE action SET last_error = NULLIF($3, ''),
  state = CASE WHEN `+complete+` THEN 'applied' ELSE 'applying' END,
  lease_expires_at = NULL,
  settled_at = CASE WHEN `+complete+` THEN now() END,
  updated_at = now()
WHERE `+fenced+` RETURNING state`, id, claimant, errMsg).QueryRow(func(row pgx.Row) error {
				err := row.Scan(&state)
				if errors.Is(err, pgx.ErrNoRows) {
					return nil
				}
				return err
			})
		}
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if !won {
			return errNotHeld // roll back (nothing was written anyway)
		}
		if missing > 0 {
			return fmt.Errorf("%w: action %d lacks %d of the legs recorded", supportflow.ErrInvalidInput, id, missing)
		}
		return nil
	})
	if errors.Is(err, errNotHeld) {
		return "", false, nil
	}
	return state, won, err
}

var errNotHeld = errors.New("claim not held")

// SettleFailed ends an action whose last attempt failed: 'partial_failure'
// when some leg landed, 'failed' when none did, 'needs_attention' when
// heldBack says later legs (the reply) were held back because an earlier
// one failed for good, and one of them is indeed still pending after a
// failed leg (a reply that landed before, under the old order, is not held
// back). It refuses, with a *LeaseHeldError, while a live claimant still
// works the action (a stale attempt), and returns the state unchanged for
// an action already terminal. An action never reserved gets a row
// (without legs), so its failure is visible too.
//
// resolved gives the receiver's answer for every leg left 'unknown' (true:
// it landed); it is applied first, so a lost answer is never settled as a
// failure. A leg still unknown without a resolution keeps the action from
// settling (ErrUnresolved). When every leg turns out done, the action is
// 'applied'. (Settle is the general form; this is what executions from
// before it call.)
func (l *Ledger) SettleFailed(ctx context.Context, key string, ticketID int64, errMsg string, resolved map[supportflow.Leg]bool, heldBack bool) (string, error) {
	var outcomes []LegOutcome
	for leg, landed := range resolved {
		o := LegOutcome{Kind: leg.Kind, Target: leg.Target, State: LegFailed, Resolved: true}
		if landed {
			o.State = LegDone
		}
		outcomes = append(outcomes, o)
	}
	a, err := l.Settle(ctx, SettleRequest{Key: key, TicketID: ticketID, Error: errMsg, Outcomes: outcomes, HeldBack: heldBack, onlyUnknown: true})
	return a.State, err
}

// SettleMode says how far Settle goes.
type SettleMode int

const (
	// SettleFinal makes the action terminal; a leg still unknown refuses
	// (ErrUnresolved).
	SettleFinal SettleMode = iota
	// SettleResolveOnly records what the receivers said and leaves the
	// action open (applying, no claim), so the execution can go on (to the
	// reply, once every cancellation turns out done).
	SettleResolveOnly
	// SettleGiveUp makes the action terminal even with legs still unknown:
	// needs_attention, for a person to find out.
	SettleGiveUp
)

// SettleRequest is what Settle records.
type SettleRequest struct {
	Key      string
	TicketID int64
	// Error is the failure to keep as the action's last error.
	Error string
	// Outcomes are what the receivers say of legs not done (a status
	// read, an audit search): each replaces the leg's state, never a done
	// leg's.
	Outcomes []LegOutcome
	HeldBack bool
	Mode     SettleMode
	// Run is the workflow run that settles; a stale attempt of that run
	// cannot reopen the action (Reserve).
	Run string
	// onlyUnknown applies outcomes only to unknown legs (SettleFailed).
	onlyUnknown bool
}

// Settle is the one place an action's failure becomes terminal, called by
// the workflow once retries are over (see SettleFailed for the states and
// SettleMode for how far it goes). It returns the action as recorded
// afterwards, legs included; an action already terminal is returned as it
// is. It refuses, with a *LeaseHeldError, while a live claimant still
// works the action.
func (l *Ledger) Settle(ctx context.Context, req SettleRequest) (Action, error) {
	proposalID, index, err := supportflow.ParseActionKey(req.Key)
	if err != nil {
		return Action{}, err
	}
	for _, o := range req.Outcomes {
		switch o.State {
		case LegDone, LegFailed, LegUnknown:
		default:
			return Action{}, fmt.Errorf("%w: leg outcome state %q", supportflow.ErrInvalidInput, o.State)
		}
	}
	err = pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
INSERT INTO action (account, key, proposal_id, action_index, ticket_id)
VALUES ($1, $2, $3, $4, $5) ON CONFLICT (account, key) DO NOTHING`,
			l.account, req.Key, proposalID, index, req.TicketID); err != nil {
			return err
		}
		var (
			id        int64
			state     string
			claimant  *string
			remaining *time.Duration
		)
		if err := tx.QueryRow(ctx, `
SELECT id, state, claimant, CASE WHEN lease_expires_at > now() THEN lease_expires_at - now() END
FROM action WHERE account = $1 AND key = $2 FOR UPDATE`, l.account, req.Key).Scan(&id, &state, &claimant, &remaining); err != nil {
			return err
		}
		if terminal(state) {
			return nil
		}
		if remaining != nil {
			return &LeaseHeldError{Key: req.Key, Claimant: deref(claimant), ExpiresIn: *remaining}
		}
		only := ""
		if req.onlyUnknown {
			only = ` AND state = 'unknown'`
		}
		for _, o := range req.Outcomes {
			if _, err := tx.Exec(ctx, `UPDATE action_leg SET state = $4,
  external_id = COALESCE(NULLIF($5, ''), external_id), request_id = COALESCE(NULLIF($6, ''), request_id),
  already_done = already_done OR $7,
  last_error = CASE WHEN $4 = 'done' THEN NULL ELSE COALESCE(NULLIF($8, ''), last_error) END,
  done_at = CASE WHEN $4 = 'done' THEN now() END, updated_at = now()
WHERE action_id = $1 AND kind = $2 AND target = $3 AND state <> 'done'`+only,
				id, string(o.Kind), o.Target, o.State, o.ExternalID, o.RequestID, o.AlreadyDone, o.Error); err != nil {
				return err
			}
		}
		// Every leg turned out done (a lost answer resolved as landed; an
		// action of cancellations only after the quick look): the action is
		// applied, not failed.
		tag, err := tx.Exec(ctx, `UPDATE action SET state = 'applied', last_error = NULL, lease_expires_at = NULL,
settled_at = now(), updated_at = now(), settled_run = NULLIF($2, '')
WHERE id = $1 AND EXISTS (SELECT 1 FROM action_leg l WHERE l.action_id = action.id) AND `+complete, id, req.Run)
		if err != nil || tag.RowsAffected() == 1 || req.Mode == SettleResolveOnly {
			// Applied, or (resolving only) left open for the execution.
			return err
		}
		var unknown int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM action_leg WHERE action_id = $1 AND state = 'unknown'`, id).Scan(&unknown); err != nil {
			return err
		}
		if unknown > 0 && req.Mode != SettleGiveUp {
			return fmt.Errorf("%w: %d legs of %s", ErrUnresolved, unknown, req.Key)
		}
		_, err = tx.Exec(ctx, `
UPDATE action SET
  state = CASE WHEN $4 AND EXISTS (SELECT 1 FROM action_leg u WHERE u.action_id = action.id AND u.state = 'unknown')
               THEN 'needs_attention'
               WHEN $3 AND EXISTS (
                 -- a leg refused for good, and a later one (the reply)
                 -- that never ran because of it
                 SELECT 1 FROM action_leg f JOIN action_leg later
                   ON later.action_id = f.action_id AND later.position > f.position AND later.state = 'pending'
                 WHERE f.action_id = action.id AND f.state = 'failed')
               THEN 'needs_attention'
               WHEN EXISTS (SELECT 1 FROM action_leg l WHERE l.action_id = action.id AND l.state = 'done')
               THEN 'partial_failure' ELSE 'failed' END,
  last_error = COALESCE(NULLIF($2, ''), last_error),
  lease_expires_at = NULL, settled_at = now(), updated_at = now(), settled_run = NULLIF($5, '')
WHERE id = $1`, id, req.Error, req.HeldBack, req.Mode == SettleGiveUp, req.Run)
		return err
	})
	if err != nil {
		return Action{}, fmt.Errorf("ledger: settle %s: %w", req.Key, err)
	}
	return l.Get(ctx, req.Key)
}

// terminal reports whether an action state is final.
func terminal(state string) bool {
	switch state {
	case supportflow.StateApplied, supportflow.StateFailed, supportflow.StatePartialFailure, supportflow.StateNeedsAttention:
		return true
	}
	return false
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Action is one ledger row with its legs, as operators and the API see it.
type Action struct {
	ID             int64
	Account, Key   string
	ProposalID     string
	Index          int
	TicketID       int64
	State          string
	Claimant       string
	LeaseExpiresAt *time.Time
	Attempts       int
	LastError      string
	CreatedAt      time.Time
	UpdatedAt      time.Time
	SettledAt      *time.Time
	Legs           Legs
}

// CommentID is the ID of the reply's comment once it landed, else 0.
func (a Action) CommentID() int64 {
	for _, l := range a.Legs.Of(supportflow.LegReply) {
		if l.State == LegDone {
			id, _ := strconv.ParseInt(l.ExternalID, 10, 64)
			return id
		}
	}
	return 0
}

// ActionState reads the state of one action (supportflow.StatePending
// ...); errors as Get's.
func (l *Ledger) ActionState(ctx context.Context, key string) (string, error) {
	a, err := l.Get(ctx, key)
	return a.State, err
}

// Get reads one action and its legs. A malformed key is an error wrapping
// supportflow.ErrInvalidInput; an unknown one wraps supportflow.ErrNotFound.
func (l *Ledger) Get(ctx context.Context, key string) (Action, error) {
	if _, _, err := supportflow.ParseActionKey(key); err != nil {
		return Action{}, err
	}
	var (
		a                   Action
		claimant, lastError *string
	)
	err := l.db.QueryRow(ctx, `
SELECT id, account, key, proposal_id, action_index, ticket_id, state, claimant,
       lease_expires_at, attempts, last_error, created_at, updated_at, settled_at
FROM action WHERE account = $1 AND key = $2`, l.account, key).Scan(
		&a.ID, &a.Account, &a.Key, &a.ProposalID, &a.Index, &a.TicketID, &a.State, &claimant,
		&a.LeaseExpiresAt, &a.Attempts, &lastError, &a.CreatedAt, &a.UpdatedAt, &a.SettledAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Action{}, fmt.Errorf("%w: %s", supportflow.ErrNotFound, key)
	}
	if err != nil {
		return Action{}, fmt.Errorf("ledger: get %s: %w", key, err)
	}
	a.Claimant, a.LastError = deref(claimant), deref(lastError)
	rows, err := l.db.Query(ctx, legSelect+` WHERE action_id = $1 ORDER BY position`, a.ID)
	if err != nil {
		return Action{}, fmt.Errorf("ledger: get %s legs: %w", key, err)
	}
	if a.Legs, err = collectLegs(rows); err != nil {
		return Action{}, fmt.Errorf("ledger: get %s legs: %w", key, err)
	}
	return a, nil
}
