package users_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/example/payments/internal/clocktest"
	"github.com/example/payments/internal/dbtest"
	"github.com/example/payments/internal/users"
)

type authBundle struct {
	ctx   context.Context
	pool  *pgxpool.Pool
	clock *clocktest.Clock
}

func setupAuth(t *testing.T) *authBundle {
	t.Helper()
	return &authBundle{
		ctx:   context.Background(),
		pool:  dbtest.NewPool(t),
		clock: clocktest.New(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)),
	}
}

// newAuthenticator returns an Authenticator on the bundle's pool and clock.
func (b *authBundle) newAuthenticator(cfg users.AuthenticatorConfig) *users.Authenticator {
	cfg.Now = b.clock.Now
	return users.NewAuthenticator(b.pool, cfg)
}

func (b *authBundle) createUser(t *testing.T, email string) (users.User, string) {
	t.Helper()
	u, key, err := users.CreateUser(b.ctx, b.pool, email)
	require.NoError(t, err)
	return u, key
}

func requireCounts(t *testing.T, auth *users.Authenticator, hits, misses uint64) {
	t.Helper()
	gotHits, gotMisses := auth.Counts()
	require.Equal(t, [2]uint64{hits, misses}, [2]uint64{gotHits, gotMisses}, "[hits, misses]")
}

func TestAuthenticator_answersAKnownKeyFromMemoryUntilTheTTL(t *testing.T) {
	t.Parallel()
	b := setupAuth(t)
	auth := b.newAuthenticator(users.AuthenticatorConfig{})
	u, key := b.createUser(t, "carol@example.com")

	got, err := auth.Authenticate(b.ctx, key)
	require.NoError(t, err)
	require.Equal(t, u, got)

	// With the row gone, only the cache can still know the key.
	_, err = b.pool.Exec(b.ctx, "DELETE FROM api_keys WHERE user_id = $1", u.ID)
	require.NoError(t, err)
	b.clock.Advance(users.DefaultAuthCacheTTL - time.Nanosecond)
	got, err = auth.Authenticate(b.ctx, key)
	require.NoError(t, err, "answered from memory within the TTL")
	require.Equal(t, u, got)
	requireCounts(t, auth, 1, 1)

	b.clock.Advance(time.Nanosecond)
	_, err = auth.Authenticate(b.ctx, key)
	require.ErrorIs(t, err, users.ErrUnknownKey, "after the TTL the database is asked again")
	requireCounts(t, auth, 1, 2)
}

func TestAuthenticator_keepsARevokedKeyForAtMostTheTTL(t *testing.T) {
	t.Parallel()
	b := setupAuth(t)
	auth := b.newAuthenticator(users.AuthenticatorConfig{TTL: time.Minute})
	u, key := b.createUser(t, "grace@example.com")
	_, err := auth.Authenticate(b.ctx, key)
	require.NoError(t, err)

	_, err = b.pool.Exec(b.ctx, "UPDATE api_keys SET revoked_at = now() WHERE user_id = $1", u.ID)
	require.NoError(t, err)
	b.clock.Advance(59 * time.Second)
	_, err = auth.Authenticate(b.ctx, key)
	require.NoError(t, err, "the documented window: a revoked key works until its entry expires")

	b.clock.Advance(time.Second)
	_, err = auth.Authenticate(b.ctx, key)
	require.ErrorIs(t, err, users.ErrUnknownKey)
	_, err = auth.Authenticate(b.ctx, key)
	require.ErrorIs(t, err, users.ErrUnknownKey, "the refusal is not cached either, and stays a refusal")
	requireCounts(t, auth, 1, 3)
}

func TestAuthenticator_neverRemembersAnUnknownKey(t *testing.T) {
	t.Parallel()
	b := setupAuth(t)
	auth := b.newAuthenticator(users.AuthenticatorConfig{})
	alice := users.DemoUsers[0]

	_, err := auth.Authenticate(b.ctx, alice.APIKey)
	require.ErrorIs(t, err, users.ErrUnknownKey)
	require.Zero(t, auth.Len())

	require.NoError(t, users.SeedDemoUsers(b.ctx, b.pool))
	got, err := auth.Authenticate(b.ctx, alice.APIKey)
	require.NoError(t, err, "a key created after a failed attempt works at once, without waiting for a TTL")
	require.Equal(t, alice.Email, got.Email)
	requireCounts(t, auth, 0, 2)
}

func TestAuthenticator_withTheCacheOffQueriesEveryTime(t *testing.T) {
	t.Parallel()
	b := setupAuth(t)
	auth := b.newAuthenticator(users.AuthenticatorConfig{TTL: -1})
	u, key := b.createUser(t, "heidi@example.com")

	for range 3 {
		got, err := auth.Authenticate(b.ctx, key)
		require.NoError(t, err)
		require.Equal(t, u, got)
	}
	require.Zero(t, auth.Len())
	requireCounts(t, auth, 0, 3)

	_, err := b.pool.Exec(b.ctx, "UPDATE api_keys SET revoked_at = now() WHERE user_id = $1", u.ID)
	require.NoError(t, err)
	_, err = auth.Authenticate(b.ctx, key)
	require.ErrorIs(t, err, users.ErrUnknownKey, "revocation takes effect at once")
}

func TestAuthenticator_staysWithinMaxEntries(t *testing.T) {
	t.Parallel()
	b := setupAuth(t)
	const ttl = 10 * time.Second
	auth := b.newAuthenticator(users.AuthenticatorConfig{TTL: ttl, MaxEntries: 4})
	keys := make([]string, 5)
	for i := range keys {
		_, keys[i] = b.createUser(t, fmt.Sprintf("user%d@example.com", i))
	}
	authenticate := func(i int) {
		t.Helper()
		_, err := auth.Authenticate(b.ctx, keys[i])
		require.NoError(t, err)
		require.LessOrEqual(t, auth.Len(), 4)
	}

	authenticate(0)
	authenticate(1)
	b.clock.Advance(ttl)
	authenticate(2)
	authenticate(3)
	require.Equal(t, 4, auth.Len(), "expired entries stay until room is needed")

	authenticate(4)
	require.Equal(t, 3, auth.Len(), "full: the two expired entries were dropped, the fresh ones kept")
	authenticate(2)
	authenticate(3)
	requireCounts(t, auth, 2, 5)

	authenticate(0)
	require.Equal(t, 4, auth.Len())
	authenticate(1)
	require.Equal(t, 1, auth.Len(), "full of fresh entries: all were dropped for the new one")
	authenticate(1)
	authenticate(2)
	requireCounts(t, auth, 3, 8)
}

func TestAuthenticator_isSafeForConcurrentUse(t *testing.T) {
	t.Parallel()
	b := setupAuth(t)
	// One entry at most, so adds keep emptying the cache under the readers.
	auth := users.NewAuthenticator(b.pool, users.AuthenticatorConfig{MaxEntries: 1})
	type account struct {
		user users.User
		key  string
	}
	accounts := make([]account, 3)
	for i := range accounts {
		accounts[i].user, accounts[i].key = b.createUser(t, fmt.Sprintf("conc%d@example.com", i))
	}

	const goroutines, calls = 6, 30
	errs := make(chan error, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				a := accounts[(g+i)%len(accounts)]
				got, err := auth.Authenticate(b.ctx, a.key)
				if err == nil && got != a.user {
					err = fmt.Errorf("key of %s answered %s", a.user.Email, got.Email)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	hits, misses := auth.Counts()
	require.Equal(t, uint64(goroutines*calls), hits+misses)
	require.LessOrEqual(t, auth.Len(), 1)
}

// SeenValid is what the API's limit on failed authentications asks (without
// a query) to let a client with a valid key through: a key found valid,
// fresh or lapsed, until a lookup finds it unknown (revoked), after which it
// is a guess like any other and cannot make the key store be asked freely.
func TestAuthenticator_seenValidUntilALookupFindsTheKeyUnknown(t *testing.T) {
	t.Parallel()
	b := setupAuth(t)
	auth := b.newAuthenticator(users.AuthenticatorConfig{TTL: time.Minute})
	u, key := b.createUser(t, "seen@example.com")
	require.False(t, auth.SeenValid(key), "never looked up")
	require.False(t, auth.SeenValid("sk_guess"))

	_, err := auth.Authenticate(b.ctx, key)
	require.NoError(t, err)
	require.True(t, auth.SeenValid(key))
	b.clock.Advance(2 * time.Minute)
	require.True(t, auth.SeenValid(key), "its answer lapsed, but it was valid")

	_, err = b.pool.Exec(b.ctx, "UPDATE api_keys SET revoked_at = now() WHERE user_id = $1", u.ID)
	require.NoError(t, err)
	_, err = auth.Authenticate(b.ctx, key)
	require.ErrorIs(t, err, users.ErrUnknownKey)
	require.False(t, auth.SeenValid(key), "revoked: no longer let through the limit")
	requireCounts(t, auth, 0, 2)

	off := b.newAuthenticator(users.AuthenticatorConfig{TTL: -1})
	_, key2 := b.createUser(t, "off@example.com")
	_, err = off.Authenticate(b.ctx, key2)
	require.NoError(t, err)
	require.False(t, off.SeenValid(key2), "with the cache off nothing is remembered")
}
