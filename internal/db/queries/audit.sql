-- name: InsertAuditRecord :exec
-- One record per action per request: a phase that runs again after a
-- serialization failure rolls back with it, so there is never a duplicate.
INSERT INTO audit_records (user_id, action, resource_type, resource_id, data, idempotency_key_id)
VALUES (@user_id, @action, @resource_type, @resource_id, @data, @idempotency_key_id);
