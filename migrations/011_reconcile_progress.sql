-- The reconciler progresses page by page (issue 22): a cold start saves
-- the ticket export's start time before its first read, each run records
-- whether it caught up, how far behind its event cursor is, how many
-- tickets it holds and which seconds it stepped past, and a ticket it
-- cannot place is held apart instead of holding the cursor back.

-- start_time (Unix seconds) of the ticket export until its first page
-- gives an after_cursor: a cold start that fails resumes from it.
ALTER TABLE zendesk_export_cursor ADD COLUMN tickets_start bigint;

ALTER TABLE reconcile_run
    ADD COLUMN requests        integer          NOT NULL DEFAULT 0,
    -- Both exports reached the present and no ticket is held.
    ADD COLUMN caught_up       boolean          NOT NULL DEFAULT false,
    -- Seconds between the run's end and the event export's cursor.
    ADD COLUMN lag_seconds     double precision,
    -- Tickets held (reconcile_held) when the run ended.
    ADD COLUMN held            integer          NOT NULL DEFAULT 0,
    -- Seconds of the event export stepped past: more events in one second
    -- than a page holds (their tickets were held and placed from audits).
    ADD COLUMN stepped_seconds bigint[]         NOT NULL DEFAULT '{}',
    -- What ended the run early (no customer text: an operation and a
    -- status), NULL when it finished.
    ADD COLUMN error           text;

-- Tickets the reconciler could not place (who wrote a comment, whose a
-- change was) and retries on every pass, from since on, until placed.
CREATE TABLE reconcile_held (
    account    text        NOT NULL,
    ticket_id  bigint      NOT NULL CHECK (ticket_id > 0),
    reason     text        NOT NULL,
    -- The oldest change not yet placed: a retry reads the ticket's audits
    -- from here.
    since      timestamptz NOT NULL,
    first_seen timestamptz NOT NULL DEFAULT now(),
    last_seen  timestamptz NOT NULL DEFAULT now(),
    attempts   integer     NOT NULL DEFAULT 1,
    PRIMARY KEY (account, ticket_id)
);
CREATE INDEX reconcile_held_last_seen ON reconcile_held (account, last_seen);

---- create above / drop below ----

DROP TABLE reconcile_held;
ALTER TABLE reconcile_run DROP COLUMN error, DROP COLUMN stepped_seconds, DROP COLUMN held,
    DROP COLUMN lag_seconds, DROP COLUMN caught_up, DROP COLUMN requests;
ALTER TABLE zendesk_export_cursor DROP COLUMN tickets_start;
