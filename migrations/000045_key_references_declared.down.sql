DROP TRIGGER idempotency_keys_let_go_on_delete ON idempotency_keys;
DROP FUNCTION let_go_of_deleted_keys();
DROP TABLE key_references;
