-- The action ledger: one row per approved action, keyed {proposalId}:{actionIndex}
-- and unique per account, so that a replayed activity, a retried attempt or a
-- second approval finds the earlier outcome instead of repeating the effect.
CREATE TABLE action (
    id                 bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account            text        NOT NULL,
    key                text        NOT NULL,
    proposal_id        text        NOT NULL,
    action_index       integer     NOT NULL CHECK (action_index >= 0),
    ticket_id          bigint      NOT NULL CHECK (ticket_id > 0),
    has_comment        boolean     NOT NULL,
    state              text        NOT NULL DEFAULT 'pending'
                       CHECK (state IN ('pending', 'applying', 'applied', 'partial_failure', 'failed')),
    -- The attempt currently working the action, and how long its claim is
    -- good for without another heartbeat.
    claimant           text,
    lease_expires_at   timestamptz,
    attempts           integer     NOT NULL DEFAULT 0,
    last_error         text,
    -- Set once the comment is known to have landed on the ticket.
    zendesk_audit_id   bigint,
    zendesk_comment_id bigint,
    comment_landed_at  timestamptz,
    created_at         timestamptz NOT NULL DEFAULT now(),
    updated_at         timestamptz NOT NULL DEFAULT now(),
    settled_at         timestamptz,
    CHECK (key = proposal_id || ':' || action_index)
);

CREATE UNIQUE INDEX action_account_key ON action (account, key);
-- For the retention prune and operators looking for stuck work.
CREATE INDEX action_state_updated ON action (state, updated_at);

-- One row per action and subscription: the cancellation leg's own ledger.
CREATE TABLE action_cancellation (
    action_id        bigint      NOT NULL REFERENCES action (id) ON DELETE CASCADE,
    subscription_id  text        NOT NULL,
    position         integer     NOT NULL,
    state            text        NOT NULL DEFAULT 'pending'
                     CHECK (state IN ('pending', 'cancelled', 'failed')),
    already_cancelled boolean    NOT NULL DEFAULT false,
    calls            integer     NOT NULL DEFAULT 0,
    last_error       text,
    created_at       timestamptz NOT NULL DEFAULT now(),
    updated_at       timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (action_id, subscription_id)
);

-- The local mirror of Zendesk tickets. Its writer takes the same per-ticket
-- advisory lock as action reservation, so the two serialize per ticket.
CREATE TABLE ticket_mirror (
    account            text        NOT NULL,
    ticket_id          bigint      NOT NULL CHECK (ticket_id > 0),
    subject            text        NOT NULL DEFAULT '',
    status             text        NOT NULL DEFAULT '',
    requester_id       bigint,
    zendesk_updated_at timestamptz NOT NULL,
    mirrored_at        timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account, ticket_id)
);

---- create above / drop below ----

DROP TABLE ticket_mirror;
DROP TABLE action_cancellation;
DROP TABLE action;
