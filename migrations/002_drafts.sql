-- Drafting: what the scan needs to know about a ticket's conversation, the
-- proposals drafts make, the enrichment a draft reads, and evaluation runs.

-- Who spoke last on a mirrored ticket. A ticket needs a draft when the
-- customer's newest public comment is newer than the agents' newest one.
ALTER TABLE ticket_mirror
    ADD COLUMN last_customer_comment_at timestamptz,
    ADD COLUMN last_agent_comment_at    timestamptz;

CREATE INDEX ticket_mirror_needs_reply ON ticket_mirror (account, last_customer_comment_at)
    WHERE status IN ('new', 'open');

-- One row per proposal a draft saved. Saving is idempotent on
-- (account, proposal_id); the same ID with different content is refused.
CREATE TABLE proposal (
    account              text        NOT NULL,
    proposal_id          text        NOT NULL CHECK (proposal_id ~ '^[A-Za-z0-9._-]{1,128}$'),
    ticket_id            bigint      NOT NULL CHECK (ticket_id > 0),
    state                text        NOT NULL DEFAULT 'awaiting_approval'
                         CHECK (state IN ('awaiting_approval', 'executing', 'done', 'rejected',
                                          'superseded', 'expired', 'failed')),
    reply                text        NOT NULL,
    cancel_subscriptions text[]      NOT NULL DEFAULT '{}',
    model                text        NOT NULL DEFAULT '',
    -- The newest comment the draft saw; the scan compares it with the
    -- customer's newest comment.
    conversation_through timestamptz NOT NULL,
    decided_by           text,
    error                text,
    created_at           timestamptz NOT NULL DEFAULT now(),
    updated_at           timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account, proposal_id)
);

CREATE INDEX proposal_ticket ON proposal (account, ticket_id, conversation_through DESC);
CREATE INDEX proposal_state_updated ON proposal (state, updated_at);

-- The commerce data of a ticket's customer, written by the enrichment
-- workflow and read by drafts when present.
CREATE TABLE ticket_enrichment (
    account              text        NOT NULL,
    ticket_id            bigint      NOT NULL CHECK (ticket_id > 0),
    customer_id          text        NOT NULL,
    customer_email       text        NOT NULL DEFAULT '',
    lifetime_orders      bigint      NOT NULL DEFAULT 0,
    active_subscriptions text[]      NOT NULL DEFAULT '{}',
    looked_up_at         timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account, ticket_id)
);

-- Evaluation runs: one row per drafted ticket, and a summary per run.
CREATE TABLE eval_result (
    account      text             NOT NULL,
    run_id       text             NOT NULL,
    ticket_id    bigint           NOT NULL CHECK (ticket_id > 0),
    draft        text             NOT NULL DEFAULT '',
    actual_reply text             NOT NULL DEFAULT '',
    score        double precision CHECK (score BETWEEN 0 AND 1),
    error        text,
    created_at   timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (account, run_id, ticket_id)
);

CREATE TABLE eval_run (
    account     text             NOT NULL,
    run_id      text             NOT NULL,
    set_name    text             NOT NULL,
    tickets     integer          NOT NULL,
    drafted     integer          NOT NULL,
    failed      integer          NOT NULL,
    mean_score  double precision NOT NULL,
    finished_at timestamptz      NOT NULL DEFAULT now(),
    PRIMARY KEY (account, run_id)
);

---- create above / drop below ----

DROP TABLE eval_run;
DROP TABLE eval_result;
DROP TABLE ticket_enrichment;
DROP TABLE proposal;
DROP INDEX ticket_mirror_needs_reply;
ALTER TABLE ticket_mirror
    DROP COLUMN last_agent_comment_at,
    DROP COLUMN last_customer_comment_at;
