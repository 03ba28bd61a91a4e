-- Order within a second. Zendesk's updated_at is whole seconds, so two
-- updates of one ticket in one second carry the same one, and a late
-- delivery of the older could overwrite the newer. The mirror now keeps,
-- for the copy its fields (status, subject, requester) came from:
--   fields_event_time: the webhook envelope's time (sub-second), NULL when
--                      the copy came from the incremental export or from
--                      before this migration;
--   fields_final:      the copy was read from the export after its second
--                      had passed, so no update of that second follows it:
--                      it wins a tie against any webhook of that second.
-- A copy of the same updated_at replaces the stored one only if it is
-- final, or the stored one is not final and is older by event time (or of
-- unknown order: rows from before this migration behave as before).
ALTER TABLE ticket_mirror
    ADD COLUMN fields_event_time timestamptz,
    ADD COLUMN fields_final      boolean NOT NULL DEFAULT false;

---- create above / drop below ----

ALTER TABLE ticket_mirror
    DROP COLUMN fields_final,
    DROP COLUMN fields_event_time;
