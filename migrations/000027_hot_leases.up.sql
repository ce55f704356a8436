-- The background work's claims are HOT updates (issue 29, F / B in
-- docs/BENCHMARKS.md): a claim leases its rows in a column no index names,
-- instead of moving next_attempt_at, which the due indexes name.
--
-- A claim that moved next_attempt_at was not HOT: it wrote a new entry into
-- every index of its table (webhook_deliveries: the primary key,
-- webhook_deliveries_pending_idx and webhook_deliveries_due_idx; receipts:
-- the primary key and receipts_due_idx), about three of the seven index
-- entries a delivery cost and two of a receipt's five. Now the claim sets
-- leased_until (deliveries) or only sending_until, the reservation receipts
-- already had (migration 000014), and its scan skips rows whose lease is
-- live; next_attempt_at moves only when the retry schedule moves it. A
-- dispatcher or sender that dies mid-attempt leaves its rows due again when
-- their leases lapse, as before.
--
-- leased_until: NULL, or the end of the lease of the attempt in flight.
ALTER TABLE webhook_deliveries ADD COLUMN leased_until timestamptz;

-- Room on each heap page for the claim's new row version (a HOT update
-- needs free space on the page of the version it replaces), as payments got
-- in migration 000024. A delivery and a receipt are each updated twice
-- within moments of their insert (the claim, then the record of the
-- attempt, which is not HOT: it takes the row out of the due indexes), and
-- rarely after that; pruning frees the old versions once nobody can see
-- them, but not before the next rows' claims need the room. Measured in
-- make bench's F and G (cmd/paymentsbench, 16 and 64 clients): with
-- fillfactor 70, 80-89 % of the deliveries' claims and 59-74 % of the
-- receipts' were HOT; with 50, 96-100 % and 87-95 %. The price is space:
-- the tables keep half of each page free (the rows are small, and never
-- deleted).
ALTER TABLE webhook_deliveries SET (fillfactor = 50);
ALTER TABLE receipts SET (fillfactor = 50);
