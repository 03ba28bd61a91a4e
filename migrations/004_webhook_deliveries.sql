-- Zendesk webhook deliveries already accepted, by signature, so a replayed
-- delivery is refused. Rows older than the accepted clock skew can never
-- match a fresh delivery again and are pruned as new ones arrive.
CREATE TABLE webhook_delivery (
    signature   text        PRIMARY KEY,
    received_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX webhook_delivery_received ON webhook_delivery (received_at);

---- create above / drop below ----

DROP TABLE webhook_delivery;
