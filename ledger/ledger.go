// Package ledger is supportflow's PostgreSQL action ledger. It makes the
// Zendesk and cancellation activities safe to replay: Zendesk does not
// deduplicate writes, Temporal runs activities at least once, and a stale
// attempt can still be running while its retry starts, so the
// deduplication happens here, before every external call.
//
// Each action of an approved proposal has one row keyed
// "{proposalId}:{actionIndex}", unique per account, moving
// pending -> applying -> applied | partial_failure | failed. An attempt
// claims the row (Reserve) with a lease that its heartbeat extends for as
// long as it works; every write after the claim is fenced on id, claimant
// and state 'applying' and reports whether it won. Only 'applied'
// deduplicates a re-run: a re-run of a partial_failure skips the comment
// that landed and the subscriptions already cancelled.
package ledger

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
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
// account. Action reservation and the ticket-mirror writer both take it,
// so a reservation serializes against mirror writes for the same ticket.
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

// ErrConflict is returned when a key is reserved with a different ticket
// or legs than the row already recorded: two different proposals share an
// ID. It is permanent.
var ErrConflict = errors.New("ledger: action key already recorded with different content")

// ErrUnresolved is returned by SettleFailed while a cancellation's outcome
// is unknown: the caller reads its status and tries again.
var ErrUnresolved = errors.New("ledger: a cancellation's outcome is still unknown")

// ErrNotFound is returned by Get for a key with no row.
var ErrNotFound = errors.New("ledger: no such action")

// ReserveRequest describes the action an attempt wants to claim.
type ReserveRequest struct {
	Key           string
	TicketID      int64
	HasComment    bool
	Subscriptions []string
	// Claimant identifies the attempt (workflow, activity and attempt
	// number); it must differ between attempts so that fencing can tell a
	// stale attempt from its successor.
	Claimant string
	// Lease is how long the claim stays live without ExtendLease.
	Lease time.Duration
	// Digest identifies the action's content (ContentDigest); a key
	// reserved before with another digest is ErrConflict. Empty skips the
	// check.
	Digest string
}

// ContentDigest is the digest of what an action does: its ticket, comment
// and subscriptions. Two proposals that share an ID but differ here are
// different actions.
func ContentDigest(a supportflow.Action) string {
	h := sha256.New()
	fmt.Fprintf(h, "%d\x00", a.TicketID)
	if a.Comment != nil {
		fmt.Fprintf(h, "c%t\x00%s\x00", a.Comment.Public, a.Comment.Body)
	}
	for _, s := range a.CancelSubscriptions {
		fmt.Fprintf(h, "s%s\x00", s)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// Reservation is the result of a successful Reserve.
type Reservation struct {
	ID int64
	// Applied is true when the action is already applied: the caller does
	// nothing (deduplicated) and holds no claim.
	Applied bool
	// PriorAttempts counts the claims before this one. When it is > 0 an
	// earlier attempt may have written to Zendesk without recording it, so
	// the caller must look for its audit before posting.
	PriorAttempts int
	// TookOver is true when this claim replaced another claimant's expired
	// lease.
	TookOver bool
	// ReservedAt is when the action was first reserved: no attempt can
	// have written to Zendesk before it.
	ReservedAt time.Time
	// AuditID and CommentID are non-zero once the comment is known to have
	// landed.
	AuditID, CommentID int64
	// Cancelled lists the subscriptions whose cancellation already
	// succeeded; the caller passes only the rest to the service.
	Cancelled []string
	// Unknown lists the subscriptions whose last call's answer was lost;
	// the caller reads their status before calling again.
	Unknown []string
}

// CommentLanded reports whether the Zendesk leg is done.
func (r Reservation) CommentLanded() bool { return r.CommentID != 0 }

// Reserve claims an action for req.Claimant, creating its row (and one
// cancellation row per subscription) on first use, under the ticket's
// advisory lock. It returns Applied=true without a claim when the action
// is applied, a *LeaseHeldError when another claimant's lease is live, and
// otherwise a claim: state 'applying', attempts+1, lease set.
func (l *Ledger) Reserve(ctx context.Context, req ReserveRequest) (Reservation, error) {
	proposalID, index, err := supportflow.ParseActionKey(req.Key)
	if err != nil {
		return Reservation{}, err
	}
	if req.Claimant == "" || req.Lease <= 0 {
		return Reservation{}, fmt.Errorf("%w: reserve %s needs a claimant and a positive lease", supportflow.ErrInvalidInput, req.Key)
	}
	var res Reservation
	err = pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		var (
			ticketID   int64
			hasComment bool
			state      string
			claimant   *string
			remaining  *time.Duration
			attempts   int
			auditID    *int64
			commentID  *int64
			digest     *string
		)
		// One round trip: take the ticket lock, create the row if absent
		// (correct when 50 attempts race for one key), and read it back
		// under a row lock. The statements run in order on the server.
		b := &pgx.Batch{}
		b.Queue(`SELECT pg_advisory_xact_lock($1)`, TicketLockKey(l.account, req.TicketID))
		b.Queue(`
INSERT INTO action (account, key, proposal_id, action_index, ticket_id, has_comment)
VALUES ($1, $2, $3, $4, $5, $6)
ON CONFLICT (account, key) DO NOTHING`, l.account, req.Key, proposalID, index, req.TicketID, req.HasComment)
		b.Queue(`
SELECT id, ticket_id, has_comment, state, claimant,
       CASE WHEN lease_expires_at > now() THEN lease_expires_at - now() END,
       attempts, zendesk_audit_id, zendesk_comment_id, created_at, content_digest
FROM action WHERE account = $1 AND key = $2 FOR UPDATE`, l.account, req.Key).QueryRow(func(row pgx.Row) error {
			return row.Scan(&res.ID, &ticketID, &hasComment, &state, &claimant, &remaining, &attempts, &auditID, &commentID, &res.ReservedAt, &digest)
		})
		if err := tx.SendBatch(ctx, b).Close(); err != nil {
			return err
		}
		if ticketID != req.TicketID || hasComment != req.HasComment {
			return fmt.Errorf("%w: %s is ticket %d (comment %t), asked for ticket %d (comment %t)",
				ErrConflict, req.Key, ticketID, hasComment, req.TicketID, req.HasComment)
		}
		if req.Digest != "" && digest != nil && *digest != req.Digest {
			return fmt.Errorf("%w: %s was approved with another comment or other subscriptions", ErrConflict, req.Key)
		}
		if state == supportflow.StateApplied {
			res.Applied = true
			return nil
		}
		if state == supportflow.StateApplying && remaining != nil && claimant != nil && *claimant != req.Claimant {
			return &LeaseHeldError{Key: req.Key, Claimant: *claimant, ExpiresIn: *remaining}
		}
		res.TookOver = state == supportflow.StateApplying && claimant != nil && *claimant != req.Claimant && remaining == nil
		res.PriorAttempts = attempts
		if auditID != nil {
			res.AuditID = *auditID
		}
		if commentID != nil {
			res.CommentID = *commentID
		}
		// One more round trip: claim, create the cancellation rows on first
		// use, and read which subscriptions already succeeded.
		b = &pgx.Batch{}
		b.Queue(`
UPDATE action SET state = 'applying', claimant = $2, lease_expires_at = now() + $3::interval,
       attempts = attempts + 1, updated_at = now(), settled_at = NULL,
       content_digest = COALESCE(content_digest, NULLIF($4, ''))
WHERE id = $1`, res.ID, req.Claimant, req.Lease, req.Digest)
		if len(req.Subscriptions) > 0 {
			b.Queue(`
INSERT INTO action_cancellation (action_id, subscription_id, position)
SELECT $1, s, p - 1 FROM unnest($2::text[]) WITH ORDINALITY AS t(s, p)
ON CONFLICT (action_id, subscription_id) DO NOTHING`, res.ID, req.Subscriptions)
			b.Queue(`
SELECT subscription_id, state FROM action_cancellation
WHERE action_id = $1 AND state IN ('cancelled', 'unknown') ORDER BY position`, res.ID).Query(func(rows pgx.Rows) error {
				for rows.Next() {
					var sub, state string
					if err := rows.Scan(&sub, &state); err != nil {
						return err
					}
					if state == "cancelled" {
						res.Cancelled = append(res.Cancelled, sub)
					} else {
						res.Unknown = append(res.Unknown, sub)
					}
				}
				return rows.Err()
			})
		}
		return tx.SendBatch(ctx, b).Close()
	})
	if err != nil {
		return Reservation{}, fmt.Errorf("ledger: reserve %s: %w", req.Key, err)
	}
	return res, nil
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

// complete is true, inside an UPDATE of action, when the action has
// nothing left to do: its comment (if any) landed, counting one this very
// statement records as $3, and every cancellation succeeded.
const complete = `(NOT has_comment OR zendesk_comment_id IS NOT NULL OR $3::bigint IS NOT NULL)
   AND NOT EXISTS (SELECT 1 FROM action_cancellation c
                   WHERE c.action_id = action.id AND c.state <> 'cancelled')`

// finish is the tail of a fenced write that ends an attempt's work on a
// leg: the action becomes 'applied' when it is complete; otherwise it stays
// 'applying' with the lease released, so the next leg or attempt can claim
// it at once.
const finish = `
state = CASE WHEN ` + complete + ` THEN 'applied' ELSE 'applying' END,
lease_expires_at = NULL,
settled_at = CASE WHEN ` + complete + ` THEN now() END,
updated_at = now()`

// RecordComment records that the comment landed (audit and comment IDs)
// and ends the Zendesk leg: the action is applied if nothing else is left,
// else its lease is released for the cancellation leg. A comment already
// recorded keeps its IDs. It returns the resulting state, or won=false and
// no change when the claim was lost.
func (l *Ledger) RecordComment(ctx context.Context, id int64, claimant string, auditID, commentID int64) (state string, won bool, err error) {
	err = l.db.QueryRow(ctx, `
UPDATE action SET zendesk_audit_id = COALESCE(zendesk_audit_id, $4),
       zendesk_comment_id = COALESCE(zendesk_comment_id, $3),
       comment_landed_at = COALESCE(comment_landed_at, now()),
       last_error = NULL, `+finish+`
WHERE `+fenced+` RETURNING state`, id, claimant, commentID, auditID).Scan(&state)
	return l.fencedResult(state, err, "record comment", id)
}

// Finish ends the attempt's work without a new comment: applied when
// nothing is left, else the lease is released (with errMsg, if any, kept as
// the last error).
func (l *Ledger) Finish(ctx context.Context, id int64, claimant, errMsg string) (state string, won bool, err error) {
	err = l.db.QueryRow(ctx, `
UPDATE action SET last_error = NULLIF($4, ''), `+finish+`
WHERE `+fenced+` RETURNING state`, id, claimant, nil, errMsg).Scan(&state)
	return l.fencedResult(state, err, "finish", id)
}

func (l *Ledger) fencedResult(state string, err error, op string, id int64) (string, bool, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return "", false, nil
	}
	if err != nil {
		return "", false, fmt.Errorf("ledger: %s %d: %w", op, id, err)
	}
	return state, true, nil
}

// CancellationOutcome is what one call to the subscription service ended
// with.
type CancellationOutcome struct {
	// Cancelled is true when the subscription is now cancelled (including
	// when it already was).
	Cancelled        bool
	AlreadyCancelled bool
	// Unknown is true when the call may have landed but its answer was
	// lost: the row says 'unknown' until a status read resolves it.
	Unknown bool
	// Error is the failure, when Cancelled is false.
	Error string
}

// RecordCancellation writes the outcome of one call for one subscription,
// fenced on the claim. A recorded success is never overwritten. It returns
// false, and changes nothing, when the claim was lost.
func (l *Ledger) RecordCancellation(ctx context.Context, id int64, claimant, subscriptionID string, o CancellationOutcome) (bool, error) {
	state := "failed"
	switch {
	case o.Cancelled:
		state = "cancelled"
	case o.Unknown:
		state = "unknown"
	}
	tag, err := l.db.Exec(ctx, `
UPDATE action_cancellation c
SET state = CASE WHEN c.state = 'cancelled' THEN c.state ELSE $4 END,
    already_cancelled = c.already_cancelled OR $5,
    calls = c.calls + 1,
    last_error = NULLIF($6, ''),
    updated_at = now()
FROM action a
WHERE c.action_id = a.id AND c.subscription_id = $3
  AND a.id = $1 AND a.claimant = $2 AND a.state = 'applying'`,
		id, claimant, subscriptionID, state, o.AlreadyCancelled, o.Error)
	if err != nil {
		return false, fmt.Errorf("ledger: record cancellation %s of %d: %w", subscriptionID, id, err)
	}
	return tag.RowsAffected() == 1, nil
}

// SettleFailed ends an action whose last attempt failed: 'partial_failure'
// when some effect landed (the comment, or at least one cancellation),
// 'failed' when none did. It is the one place a failure becomes terminal
// and is called by the workflow once retries are over. It refuses, with a
// *LeaseHeldError, while a live claimant still works the action (a stale
// attempt), and returns the state unchanged for an action already
// terminal. An action never reserved gets a row, so its failure is
// visible too.
//
// resolved gives the status read of every subscription left 'unknown'
// (true: cancelled); it is applied first, so a lost answer is never
// settled as a failure. A row still unknown without a resolution keeps
// the action from settling (ErrUnresolved).
//
// heldBack says the reply was held back because a cancellation was
// refused for good: the action ends 'needs_attention' instead.
func (l *Ledger) SettleFailed(ctx context.Context, key string, ticketID int64, hasComment bool, errMsg string, resolved map[string]bool, heldBack bool) (string, error) {
	proposalID, index, err := supportflow.ParseActionKey(key)
	if err != nil {
		return "", err
	}
	var state string
	err = pgx.BeginFunc(ctx, l.db, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `
INSERT INTO action (account, key, proposal_id, action_index, ticket_id, has_comment)
VALUES ($1, $2, $3, $4, $5, $6) ON CONFLICT (account, key) DO NOTHING`,
			l.account, key, proposalID, index, ticketID, hasComment); err != nil {
			return err
		}
		var (
			id        int64
			claimant  *string
			remaining *time.Duration
		)
		if err := tx.QueryRow(ctx, `
SELECT id, state, claimant, CASE WHEN lease_expires_at > now() THEN lease_expires_at - now() END
FROM action WHERE account = $1 AND key = $2 FOR UPDATE`, l.account, key).Scan(&id, &state, &claimant, &remaining); err != nil {
			return err
		}
		switch state {
		case supportflow.StateApplied, supportflow.StateFailed, supportflow.StatePartialFailure, supportflow.StateNeedsAttention:
			return nil
		}
		if remaining != nil {
			return &LeaseHeldError{Key: key, Claimant: deref(claimant), ExpiresIn: *remaining}
		}
		for sub, cancelled := range resolved {
			to := "failed"
			if cancelled {
				to = "cancelled"
			}
			if _, err := tx.Exec(ctx, `UPDATE action_cancellation SET state = $3, updated_at = now()
WHERE action_id = $1 AND subscription_id = $2 AND state = 'unknown'`, id, sub, to); err != nil {
				return err
			}
		}
		var unknown int
		if err := tx.QueryRow(ctx, `SELECT count(*) FROM action_cancellation WHERE action_id = $1 AND state = 'unknown'`, id).Scan(&unknown); err != nil {
			return err
		}
		if unknown > 0 {
			return fmt.Errorf("%w: %d cancellations of %s", ErrUnresolved, unknown, key)
		}
		// Every leg may have succeeded after all (a lost answer resolved
		// as cancelled): the action is applied, not failed.
		var done bool
		if err := tx.QueryRow(ctx, `SELECT (NOT has_comment OR zendesk_comment_id IS NOT NULL)
   AND NOT EXISTS (SELECT 1 FROM action_cancellation c WHERE c.action_id = $1 AND c.state <> 'cancelled')
FROM action WHERE id = $1`, id).Scan(&done); err != nil {
			return err
		}
		if done && len(resolved) > 0 {
			return tx.QueryRow(ctx, `UPDATE action SET state = 'applied', last_error = NULL, lease_expires_at = NULL,
settled_at = now(), updated_at = now() WHERE id = $1 RETURNING state`, id).Scan(&state)
		}
		return tx.QueryRow(ctx, `
UPDATE action SET
  state = CASE WHEN $3 AND zendesk_comment_id IS NULL
                    AND EXISTS (SELECT 1 FROM action_cancellation c WHERE c.action_id = action.id AND c.state = 'failed')
               THEN 'needs_attention'
               WHEN zendesk_comment_id IS NOT NULL
                 OR EXISTS (SELECT 1 FROM action_cancellation c WHERE c.action_id = action.id AND c.state = 'cancelled')
               THEN 'partial_failure' ELSE 'failed' END,
  last_error = COALESCE(NULLIF($2, ''), last_error),
  lease_expires_at = NULL, settled_at = now(), updated_at = now()
WHERE id = $1 RETURNING state`, id, errMsg, heldBack).Scan(&state)
	})
	if err != nil {
		return "", fmt.Errorf("ledger: settle %s: %w", key, err)
	}
	return state, nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Action is one ledger row with its cancellations, as operators and the
// API see it.
type Action struct {
	ID             int64
	Account, Key   string
	ProposalID     string
	Index          int
	TicketID       int64
	HasComment     bool
	State          string
	Claimant       string
	LeaseExpiresAt *time.Time
	Attempts       int
	LastError      string
	AuditID        int64
	CommentID      int64
	CreatedAt      time.Time
	UpdatedAt      time.Time
	SettledAt      *time.Time
	Cancellations  []Cancellation
}

// Cancellation is one action_cancellation row.
type Cancellation struct {
	SubscriptionID   string
	State            string
	AlreadyCancelled bool
	Calls            int
	LastError        string
}

// Get reads one action and its cancellations. A malformed key is an error
// wrapping supportflow.ErrInvalidInput; an unknown one wraps ErrNotFound.
func (l *Ledger) Get(ctx context.Context, key string) (Action, error) {
	if _, _, err := supportflow.ParseActionKey(key); err != nil {
		return Action{}, err
	}
	var (
		a                   Action
		claimant, lastError *string
		auditID, commentID  *int64
	)
	err := l.db.QueryRow(ctx, `
SELECT id, account, key, proposal_id, action_index, ticket_id, has_comment, state, claimant,
       lease_expires_at, attempts, last_error, zendesk_audit_id, zendesk_comment_id,
       created_at, updated_at, settled_at
FROM action WHERE account = $1 AND key = $2`, l.account, key).Scan(
		&a.ID, &a.Account, &a.Key, &a.ProposalID, &a.Index, &a.TicketID, &a.HasComment, &a.State, &claimant,
		&a.LeaseExpiresAt, &a.Attempts, &lastError, &auditID, &commentID,
		&a.CreatedAt, &a.UpdatedAt, &a.SettledAt)
	if errors.Is(err, pgx.ErrNoRows) {
		return Action{}, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	if err != nil {
		return Action{}, fmt.Errorf("ledger: get %s: %w", key, err)
	}
	a.Claimant, a.LastError = deref(claimant), deref(lastError)
	if auditID != nil {
		a.AuditID = *auditID
	}
	if commentID != nil {
		a.CommentID = *commentID
	}
	rows, err := l.db.Query(ctx, `
SELECT subscription_id, state, already_cancelled, calls, COALESCE(last_error, '')
FROM action_cancellation WHERE action_id = $1 ORDER BY position`, a.ID)
	if err != nil {
		return Action{}, fmt.Errorf("ledger: get %s cancellations: %w", key, err)
	}
	a.Cancellations, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (Cancellation, error) {
		var c Cancellation
		err := r.Scan(&c.SubscriptionID, &c.State, &c.AlreadyCancelled, &c.Calls, &c.LastError)
		return c, err
	})
	if err != nil {
		return Action{}, fmt.Errorf("ledger: get %s cancellations: %w", key, err)
	}
	return a, nil
}
