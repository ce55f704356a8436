ALTER TABLE receipts DROP COLUMN sending_until;
