-- The console's list of proposals (GET /proposals, package proposals'
-- ListProposals): an account's proposals newest first (created_at, then
-- proposal_id, descending), optionally of one state or one ticket, with a
-- limit. Each index serves one shape of the filter in that order, so the
-- list reads only the rows it returns. proposal_ticket (migration 2) is on
-- (account, ticket_id, conversation_through), which does not give this
-- order.
CREATE INDEX proposal_list ON proposal (account, created_at DESC, proposal_id DESC);
CREATE INDEX proposal_list_state ON proposal (account, state, created_at DESC, proposal_id DESC);
CREATE INDEX proposal_list_ticket ON proposal (account, ticket_id, created_at DESC, proposal_id DESC);

---- create above / drop below ----

DROP INDEX proposal_list_ticket;
DROP INDEX proposal_list_state;
DROP INDEX proposal_list;
