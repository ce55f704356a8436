-- name: GetPayment :one
-- A payment of one user: another user's payment is simply not found.
SELECT * FROM payments
WHERE id = @id AND user_id = @user_id;

-- name: ListPayments :many
-- Newest first, keyset-paginated: pass the created time and id of the last
-- payment of the previous page; the first page passes a time after every payment.
SELECT * FROM payments
WHERE user_id = @user_id
  AND (created_at, id) < (@before_created::timestamptz, @before_id::text)
ORDER BY created_at DESC, id DESC
LIMIT @row_limit;
