-- Enrichment from BigQuery. Every figure BigQuery reports is a bigint (a run
-- that bills more than 2.1 GB overflows int4) and every BigQuery identifier
-- is text (a job ID looks like "proj:US.job_0Ab", not a UUID).

-- One row per lookup that returned: what BigQuery ran and billed.
CREATE TABLE enrichment_run (
    id              bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account         text        NOT NULL,
    ticket_id       bigint      NOT NULL CHECK (ticket_id > 0),
    requester_id    bigint      NOT NULL,
    found           boolean     NOT NULL,
    job_id          text        NOT NULL,
    bytes_billed    bigint      NOT NULL CHECK (bytes_billed >= 0),
    bytes_processed bigint      NOT NULL CHECK (bytes_processed >= 0),
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX enrichment_run_ticket ON enrichment_run (account, ticket_id, created_at DESC);

ALTER TABLE ticket_enrichment ADD COLUMN run_id bigint REFERENCES enrichment_run (id) ON DELETE SET NULL;

-- One row per lookup attempt, written when it starts and completed when it
-- ends, so an attempt that dies mid-lookup still leaves its row ('running').
CREATE TABLE lookup_log (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    account     text        NOT NULL,
    ticket_id   bigint      NOT NULL CHECK (ticket_id > 0),
    workflow_id text        NOT NULL,
    run_id      text        NOT NULL,
    activity_id text        NOT NULL,
    attempt     integer     NOT NULL CHECK (attempt >= 1),
    outcome     text        NOT NULL DEFAULT 'running'
                CHECK (outcome IN ('running', 'found', 'not_found', 'error')),
    error       text,
    job_id      text,
    started_at  timestamptz NOT NULL DEFAULT now(),
    finished_at timestamptz,
    UNIQUE (account, workflow_id, run_id, activity_id, attempt)
);
CREATE INDEX lookup_log_ticket ON lookup_log (account, ticket_id, started_at DESC);

-- A ticket whose lookup failed its last attempt. One row per ticket: a
-- ticket dead-lettered again updates its row; a later successful lookup
-- marks it resolved.
CREATE TABLE enrichment_dead_letter (
    account          text        NOT NULL,
    ticket_id        bigint      NOT NULL CHECK (ticket_id > 0),
    -- The requester the lookup was for, so a re-drive can look it up
    -- again without a new event naming it.
    requester_id     bigint,
    attempts         integer     NOT NULL,
    last_error       text        NOT NULL,
    reason           text        NOT NULL,
    dead_lettered_at timestamptz NOT NULL DEFAULT now(),
    redriven_at      timestamptz,
    resolved_at      timestamptz,
    PRIMARY KEY (account, ticket_id)
);

---- create above / drop below ----

DROP TABLE enrichment_dead_letter;
DROP TABLE lookup_log;
ALTER TABLE ticket_enrichment DROP COLUMN run_id;
DROP TABLE enrichment_run;
