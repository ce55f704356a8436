DROP INDEX refunds_pending_since_idx;
