-- Back to foreign keys to users. No row can name a missing user (none was
-- deleted: the trigger refused it), so the constraints are added as they were.
DROP TRIGGER users_are_never_deleted ON users;
DROP FUNCTION users_are_never_deleted();

ALTER TABLE idempotency_keys ADD CONSTRAINT idempotency_keys_user_id_fkey FOREIGN KEY (user_id) REFERENCES users (id);
ALTER TABLE payments ADD CONSTRAINT payments_user_id_fkey FOREIGN KEY (user_id) REFERENCES users (id);
ALTER TABLE audit_records ADD CONSTRAINT audit_records_user_id_fkey FOREIGN KEY (user_id) REFERENCES users (id);
ALTER TABLE refunds ADD CONSTRAINT refunds_user_id_fkey FOREIGN KEY (user_id) REFERENCES users (id);
ALTER TABLE events ADD CONSTRAINT events_user_id_fkey FOREIGN KEY (user_id) REFERENCES users (id);
ALTER TABLE webhook_endpoints ADD CONSTRAINT webhook_endpoints_user_id_fkey FOREIGN KEY (user_id) REFERENCES users (id);
ALTER TABLE webhook_deliveries ADD CONSTRAINT webhook_deliveries_user_id_fkey FOREIGN KEY (user_id) REFERENCES users (id);
