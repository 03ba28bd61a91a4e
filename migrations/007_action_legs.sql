-- Legs as data: an action is an ordered list of legs, one row each, so a
-- new kind of effect is a new value of `kind`, not new columns and SQL.
-- What a kind is (its receiver, its order, how a replay of it is made
-- safe) is said once, in the root package's leg table (legs.go).
--
-- Rolling deploys: this migration drops the old columns and table, so
-- workers of the previous release stop working on it. Stop them (or let
-- the new release's workers migrate first and roll quickly): executions
-- they held resume on the new workers, which read the moved rows.
CREATE TABLE action_leg (
    action_id    bigint      NOT NULL REFERENCES action (id) ON DELETE CASCADE,
    -- The leg's place in the action: legs that change the customer's
    -- account come first, the ticket update next, the public reply last.
    position     integer     NOT NULL CHECK (position >= 0),
    kind         text        NOT NULL CHECK (kind ~ '^[a-z_]{1,40}$'),
    -- What the leg acts on: a subscription ID, a ticket ID.
    target       text        NOT NULL CHECK (target <> ''),
    state        text        NOT NULL DEFAULT 'pending'
                 CHECK (state IN ('pending', 'done', 'failed', 'unknown')),
    -- The receiver's ID of the effect (a comment ID, an audit ID) and of
    -- the request that carried it (the Zendesk audit), once known.
    external_id  text,
    request_id   text,
    -- The receiver said it was already so (a subscription already cancelled).
    already_done boolean     NOT NULL DEFAULT false,
    calls        integer     NOT NULL DEFAULT 0,
    last_error   text,
    done_at      timestamptz,
    created_at   timestamptz NOT NULL DEFAULT now(),
    updated_at   timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (action_id, position),
    UNIQUE (action_id, kind, target)
);

-- Existing rows move: cancellations keep their order and come first (the
-- truthful order), the comment becomes the last leg.
INSERT INTO action_leg (action_id, position, kind, target, state, already_done, calls, last_error, done_at, created_at, updated_at)
SELECT c.action_id, c.position, 'cancel_subscription', c.subscription_id,
       CASE c.state WHEN 'cancelled' THEN 'done' ELSE c.state END,
       c.already_cancelled, c.calls, c.last_error,
       CASE WHEN c.state = 'cancelled' THEN c.updated_at END, c.created_at, c.updated_at
FROM action_cancellation c;

-- Only for a row some attempt claimed (or whose comment landed): a row the
-- settle step created without a claim has no cancellation rows either,
-- and gets its whole list of legs from its next reserve.
INSERT INTO action_leg (action_id, position, kind, target, state, external_id, request_id, done_at, created_at, updated_at)
SELECT a.id,
       (SELECT COALESCE(max(c.position) + 1, 0) FROM action_cancellation c WHERE c.action_id = a.id),
       'reply', a.ticket_id::text,
       CASE WHEN a.zendesk_comment_id IS NOT NULL THEN 'done' ELSE 'pending' END,
       a.zendesk_comment_id::text, a.zendesk_audit_id::text, a.comment_landed_at, a.created_at, a.updated_at
FROM action a WHERE a.has_comment AND (a.attempts > 0 OR a.zendesk_comment_id IS NOT NULL);

DROP TABLE action_cancellation;
ALTER TABLE action DROP COLUMN has_comment,
                   DROP COLUMN zendesk_audit_id,
                   DROP COLUMN zendesk_comment_id,
                   DROP COLUMN comment_landed_at;

-- A proposal's ticket update (status and tags set with the reply), NULL
-- for none; part of what the approver saw, so saved with the proposal.
ALTER TABLE proposal ADD COLUMN update_ticket jsonb;

-- What the model server counted for the completion that wrote a proposal.
ALTER TABLE proposal ADD COLUMN prompt_tokens bigint NOT NULL DEFAULT 0,
                     ADD COLUMN completion_tokens bigint NOT NULL DEFAULT 0;

---- create above / drop below ----

ALTER TABLE proposal DROP COLUMN update_ticket,
                     DROP COLUMN prompt_tokens,
                     DROP COLUMN completion_tokens;

ALTER TABLE action ADD COLUMN has_comment boolean NOT NULL DEFAULT false,
                   ADD COLUMN zendesk_audit_id bigint,
                   ADD COLUMN zendesk_comment_id bigint,
                   ADD COLUMN comment_landed_at timestamptz;
UPDATE action a SET has_comment = true,
       zendesk_comment_id = l.external_id::bigint,
       zendesk_audit_id = l.request_id::bigint,
       comment_landed_at = l.done_at
FROM action_leg l WHERE l.action_id = a.id AND l.kind = 'reply';
ALTER TABLE action ALTER COLUMN has_comment DROP DEFAULT;

CREATE TABLE action_cancellation (
    action_id        bigint      NOT NULL REFERENCES action (id) ON DELETE CASCADE,
    subscription_id  text        NOT NULL,
    position         integer     NOT NULL,
    state            text        NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'cancelled', 'failed', 'unknown')),
    already_cancelled boolean    NOT NULL DEFAULT false,
    calls            integer     NOT NULL DEFAULT 0,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (action_id, subscription_id)
);
INSERT INTO action_cancellation (action_id, subscription_id, position, state, already_cancelled, calls, last_error, created_at, updated_at)
SELECT action_id, target, position, CASE state WHEN 'done' THEN 'cancelled' ELSE state END,
       already_done, calls, last_error, created_at, updated_at
FROM action_leg WHERE kind = 'cancel_subscription';

DROP TABLE action_leg;
