package keyadmin_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/keyadmin"
)

// The operator's words for a lock say what is known: a live lock whose
// holder has not renewed it for half its lifetime (a live holder renews it
// every third) is held until it lapses, and its holder may have died. A
// retry of a locked key says when to try again, instead of stopping at
// "try again after".
func TestAdmin_aLockWhoseHolderIsOverdueIsToldApart(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	b.abandon(t, "after_commit:payment_created", "held")
	admin, _, _ := b.admin(t, "")
	lock := func(age, left string) {
		t.Helper()
		_, err := b.pool.Exec(ctx, `UPDATE idempotency_keys
			SET locked_at = now() - $1::interval, lock_expires_at = now() + $2::interval WHERE idempotency_key = 'held'`, age, left)
		require.NoError(t, err)
	}

	lock("5 seconds", "85 seconds") // renewed 5 s ago
	story, err := admin.Show(ctx, alice, "held")
	require.NoError(t, err)
	require.True(t, story.Locked)
	require.False(t, story.LockOverdue)

	lock("60 seconds", "30 seconds") // not renewed for 60 s of 90
	story, err = admin.Show(ctx, alice, "held")
	require.NoError(t, err)
	require.True(t, story.Locked)
	require.True(t, story.LockOverdue)
	listed, err := admin.List(ctx, keyadmin.ListParams{State: keyadmin.Locked, Limit: 10})
	require.NoError(t, err)
	require.Len(t, listed, 1)
	require.True(t, listed[0].LockOverdue)

	_, err = admin.Retry(ctx, alice, "held")
	require.ErrorIs(t, err, keyadmin.ErrInUse)
	require.Contains(t, err.Error(), "try again after "+story.LockExpiresAt.UTC().Format(time.RFC3339))
	require.Contains(t, err.Error(), "may have died")
}
