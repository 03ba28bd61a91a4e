-- Who took a proposal's reply into the Zendesk editor ("Reply myself" in
-- the sidebar app, POST /proposals/{id}/reply-myself). The API claims this
-- row, then rejects the proposal, and hands the reply out only to the
-- request whose claim stands once the rejection is recorded as its own, so
-- two agents (or two tabs) can never both send it.
-- Written by package proposals only.
CREATE TABLE reply_takeover (
    account      text        NOT NULL,
    proposal_id  text        NOT NULL CHECK (proposal_id ~ '^[A-Za-z0-9._-]{1,128}$'),
    ticket_id    bigint      NOT NULL CHECK (ticket_id > 0),
    -- The API token's name, and the person in the calling app (the
    -- Zendesk agent) it acted for, when it said.
    taken_by     text        NOT NULL,
    on_behalf_of text,
    taken_at     timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account, proposal_id)
);

---- create above / drop below ----

DROP TABLE reply_takeover;
