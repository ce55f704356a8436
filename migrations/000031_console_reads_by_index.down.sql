DROP INDEX receipts_unsent_created_idx;
DROP INDEX receipts_created_idx;
DROP INDEX events_payment_idx;
