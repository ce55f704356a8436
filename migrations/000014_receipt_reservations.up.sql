-- A receipt is reserved for one attempt at sending it, until sending_until,
-- in a short transaction of its own; the attempt sends with no transaction
-- open and then records sent_at. A second attempt while the reservation
-- holds waits instead of sending a second copy; once it lapses (the first
-- attempt died), it may send. NULL: not reserved.
ALTER TABLE receipts ADD COLUMN sending_until timestamptz;
