-- Approval at the source of truth. An execution may write to Zendesk or
-- the subscription service only for a proposal a person approved: the API
-- (or the starter, for a proposal an app composed) records the approval
-- here, with the content digest of each action and the name of the token
-- that approved it, before the execution starts; every leg activity checks
-- it (ledger.CheckApproval) before its first write. Someone who can reach
-- the Temporal frontend but not this database cannot approve anything.
CREATE TABLE approval (
    account        text        NOT NULL,
    proposal_id    text        NOT NULL CHECK (proposal_id ~ '^[A-Za-z0-9._-]{1,128}$'),
    ticket_id      bigint      NOT NULL CHECK (ticket_id > 0),
    -- ledger.ContentDigest of each action, in order. NULL only on rows
    -- carried over below from before approvals were recorded: those admit
    -- an action whose content matches its ledger row or its stored
    -- proposal.
    action_digests text[],
    -- The API token's name (or the operator's) that approved, and the
    -- person in the calling app it approved for, when it said.
    approved_by    text        NOT NULL,
    on_behalf_of   text,
    approved_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (account, proposal_id)
);

-- Executions under way at the upgrade were approved under the old rules:
-- carry them over, so they finish. A proposal approved (or an action
-- reserved) is one the old release had started to execute.
INSERT INTO approval (account, proposal_id, ticket_id, approved_by, approved_at)
SELECT account, proposal_id, ticket_id, COALESCE(NULLIF(decided_by, ''), 'before-approvals'), updated_at
FROM proposal WHERE state IN ('executing', 'done', 'failed')
ON CONFLICT DO NOTHING;

INSERT INTO approval (account, proposal_id, ticket_id, approved_by, approved_at)
SELECT account, proposal_id, min(ticket_id), 'before-approvals', min(created_at)
FROM action WHERE key NOT LIKE 'attention-%'
GROUP BY account, proposal_id
ON CONFLICT DO NOTHING;

-- The workflow run that settled an action: a stale attempt of that run
-- (one that was waiting out a lease when the run gave up) must not reopen
-- it; only a later run (an operator's retry) may.
ALTER TABLE action ADD COLUMN settled_run text;

---- create above / drop below ----

ALTER TABLE action DROP COLUMN settled_run;
DROP TABLE approval;
