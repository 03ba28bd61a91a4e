-- Review fixes to the reconciler (issue 22): a crowded second is stepped
-- past only once every ticket changed in it is held, whatever the number
-- of passes its listing takes; the lag is measured from the last time the
-- event export reached its end, not from the cursor (which stays at the
-- last event's second on a quiet account); held tickets that can never be
-- placed are let go and the run says so.

ALTER TABLE zendesk_export_cursor
    -- The event export's second being listed through the ticket export
    -- (more events than a page): NULL when none. The event cursor stays on
    -- it until the listing ends.
    ADD COLUMN crowded_second bigint,
    -- The listing's after_cursor; NULL before its first page.
    ADD COLUMN crowded_cursor text,
    -- When a pass last read the event export to its end (end_of_stream):
    -- every change older than that, less Zendesk's minute, has been read.
    ADD COLUMN caught_up_at   timestamptz;

ALTER TABLE reconcile_run
    -- Held tickets let go without being placed (deleted in Zendesk, too
    -- many audits, too many attempts or too old); IDs only.
    ADD COLUMN given_up bigint[] NOT NULL DEFAULT '{}';

---- create above / drop below ----

ALTER TABLE reconcile_run DROP COLUMN given_up;
ALTER TABLE zendesk_export_cursor DROP COLUMN caught_up_at, DROP COLUMN crowded_cursor, DROP COLUMN crowded_second;
