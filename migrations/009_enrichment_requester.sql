-- Enrichment belongs to a ticket's requester: the requester whose lookup
-- wrote the row. A ticket whose requester changes keeps the row of the
-- previous one, which readers then ignore (ledger.GetEnrichment matches
-- the ticket's current requester), so the previous requester's
-- subscriptions never reach a prompt or a cancellation.
ALTER TABLE ticket_enrichment ADD COLUMN requester_id bigint;

-- Rows written by a lookup know its requester from their run. Not from
-- ticket_mirror: the mirror holds the ticket's current requester, which
-- after a change is not the one the row was looked up for. Rows without a
-- run (seeded, or whose run was pruned) stay NULL: an unknown requester,
-- matching none, until the next lookup rewrites them.
UPDATE ticket_enrichment e SET requester_id = r.requester_id
FROM enrichment_run r WHERE r.id = e.run_id;

---- create above / drop below ----

ALTER TABLE ticket_enrichment DROP COLUMN requester_id;
