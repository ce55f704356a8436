DROP FUNCTION assert_unchanged(bigint, text);
