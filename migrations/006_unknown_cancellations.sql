-- A cancellation whose answer was lost is 'unknown' until the service's
-- status read says what happened: never 'failed' on a guess.
ALTER TABLE action_cancellation DROP CONSTRAINT action_cancellation_state_check;
ALTER TABLE action_cancellation ADD CONSTRAINT action_cancellation_state_check
    CHECK (state IN ('pending', 'cancelled', 'failed', 'unknown'));

-- A digest of what the action does (ticket, comment, subscriptions): the
-- same key reused with other content is refused, never silently applied.
-- NULL for rows from before, which take the digest of their next reserve.
ALTER TABLE action ADD COLUMN content_digest text;

-- An action whose reply was held back because a cancellation was refused
-- for good: an agent must look (a private note on the ticket says why).
ALTER TABLE action DROP CONSTRAINT action_state_check;
ALTER TABLE action ADD CONSTRAINT action_state_check
    CHECK (state IN ('pending', 'applying', 'applied', 'partial_failure', 'failed', 'needs_attention'));

---- create above / drop below ----

UPDATE action SET state = 'partial_failure' WHERE state = 'needs_attention';
ALTER TABLE action DROP CONSTRAINT action_state_check;
ALTER TABLE action ADD CONSTRAINT action_state_check
    CHECK (state IN ('pending', 'applying', 'applied', 'partial_failure', 'failed'));

ALTER TABLE action DROP COLUMN content_digest;

UPDATE action_cancellation SET state = 'failed' WHERE state = 'unknown';
ALTER TABLE action_cancellation DROP CONSTRAINT action_cancellation_state_check;
ALTER TABLE action_cancellation ADD CONSTRAINT action_cancellation_state_check
    CHECK (state IN ('pending', 'cancelled', 'failed'));
