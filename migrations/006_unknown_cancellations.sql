-- A cancellation whose answer was lost is 'unknown' until the service's
-- status read says what happened: never 'failed' on a guess.
ALTER TABLE action_cancellation DROP CONSTRAINT action_cancellation_state_check;
ALTER TABLE action_cancellation ADD CONSTRAINT action_cancellation_state_check
    CHECK (state IN ('pending', 'cancelled', 'failed', 'unknown'));

---- create above / drop below ----

UPDATE action_cancellation SET state = 'failed' WHERE state = 'unknown';
ALTER TABLE action_cancellation DROP CONSTRAINT action_cancellation_state_check;
ALTER TABLE action_cancellation ADD CONSTRAINT action_cancellation_state_check
    CHECK (state IN ('pending', 'cancelled', 'failed'));
