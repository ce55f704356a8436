DROP FUNCTION assert_lock_held(bigint);
