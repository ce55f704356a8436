package users_test

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/users"
)

func TestMain(m *testing.M) { os.Exit(dbtest.Main(m)) }

func TestSeedDemoUsers_isRepeatableAndTheKeysWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	require.NoError(t, users.SeedDemoUsers(ctx, pool))
	require.NoError(t, users.SeedDemoUsers(ctx, pool), "seeding again changes nothing")

	var n int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM api_keys").Scan(&n))
	require.Equal(t, len(users.DemoUsers), n)
	for _, demo := range users.DemoUsers {
		u, err := users.Authenticate(ctx, pool, demo.APIKey)
		require.NoError(t, err)
		require.Equal(t, demo.Email, u.Email)
	}
}

func TestAuthenticate_refusesUnknownAndRevokedKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	u, key, err := users.CreateUser(ctx, pool, "dave@example.com")
	require.NoError(t, err)
	got, err := users.Authenticate(ctx, pool, key)
	require.NoError(t, err)
	require.Equal(t, u, got)

	_, err = users.Authenticate(ctx, pool, key+"x")
	require.ErrorIs(t, err, users.ErrUnknownKey)

	_, err = pool.Exec(ctx, "UPDATE api_keys SET revoked_at = now() WHERE user_id = $1", u.ID)
	require.NoError(t, err)
	_, err = users.Authenticate(ctx, pool, key)
	require.ErrorIs(t, err, users.ErrUnknownKey)
}

func TestCreateUser_refusesADuplicateEmail(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := dbtest.NewPool(t)
	_, _, err := users.CreateUser(ctx, pool, "erin@example.com")
	require.NoError(t, err)
	_, _, err = users.CreateUser(ctx, pool, "erin@example.com")
	require.ErrorContains(t, err, "already exists")
}
