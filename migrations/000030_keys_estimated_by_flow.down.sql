DROP FUNCTION idempotency_keys_estimated_by_flow();
