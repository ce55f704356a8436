// Package users owns the API's users and their API keys: creating them,
// seeding the demo users of `payments dev`, and authenticating a presented key.
//
// Keys are stored only as SHA-256 hashes. A presented key is hashed, found by
// the unique index on the hash, and the stored hash is compared to it in
// constant time. The plain key exists only in the answer to CreateUser.
// Authenticator remembers successful lookups for a few seconds, by hash, so
// most requests do not query at all (see its comment for what that costs).
package users

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/example/payments/internal/db"
	"github.com/example/payments/internal/db/dbsqlc"
)

// User is an authenticated caller of the API.
type User struct {
	ID    int64
	Email string
}

// ErrUnknownKey is returned for a key that does not exist or was revoked.
var ErrUnknownKey = errors.New("unknown API key")

// DemoUsers are the users `payments dev` seeds, always with the same keys,
// so the README's curl lines work on every machine.
var DemoUsers = []struct{ Email, APIKey string }{
	{"alice@example.com", "sk_dev_alice_0123456789abcdef"},
	{"bob@example.com", "sk_dev_bob_0123456789abcdef"},
}

var queries = dbsqlc.New()

// CreateUser creates a user with a new random API key and returns the key.
// The key cannot be recovered later: only its hash is stored.
func CreateUser(ctx context.Context, pool *pgxpool.Pool, email string) (User, string, error) {
	key, err := newAPIKey()
	if err != nil {
		return User{}, "", err
	}
	var u dbsqlc.User
	err = db.WithTx(ctx, pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
		if u, err = queries.CreateUser(ctx, tx, email); err != nil {
			return err
		}
		return storeKey(ctx, tx, u.ID, key)
	})
	if errors.Is(err, db.ErrUniqueViolation) {
		return User{}, "", fmt.Errorf("a user with email %q already exists", email)
	}
	if err != nil {
		return User{}, "", err
	}
	return User{ID: u.ID, Email: u.Email}, key, nil
}

// SeedDemoUsers makes sure the demo users and their keys exist. It can run on
// every start.
func SeedDemoUsers(ctx context.Context, pool *pgxpool.Pool) error {
	return db.WithTx(ctx, pool, db.TxOptions{}, func(ctx context.Context, tx *db.Tx) error {
		for _, demo := range DemoUsers {
			u, err := queries.UpsertUserByEmail(ctx, tx, demo.Email)
			if err != nil {
				return fmt.Errorf("seeding %s: %w", demo.Email, err)
			}
			if err := storeKey(ctx, tx, u.ID, demo.APIKey); err != nil {
				return fmt.Errorf("seeding %s: %w", demo.Email, err)
			}
		}
		return nil
	})
}

// Authenticate returns the user an API key belongs to, or ErrUnknownKey. It
// queries the database on every call; Authenticator caches its answers.
func Authenticate(ctx context.Context, conn dbsqlc.DBTX, key string) (User, error) {
	return lookup(ctx, conn, hashKey(key))
}

// lookup finds the user whose unrevoked key has the given hash.
func lookup(ctx context.Context, conn dbsqlc.DBTX, hash [sha256.Size]byte) (User, error) {
	row, err := queries.GetUserByAPIKeyHash(ctx, conn, hash[:])
	if errors.Is(err, pgx.ErrNoRows) {
		return User{}, ErrUnknownKey
	}
	if err != nil {
		return User{}, err
	}
	// The index already matched the hash; comparing again in constant time
	// keeps the check itself free of timing differences whatever finds the row.
	if subtle.ConstantTimeCompare(row.KeyHash, hash[:]) != 1 {
		return User{}, ErrUnknownKey
	}
	return User{ID: row.ID, Email: row.Email}, nil
}

func storeKey(ctx context.Context, tx *db.Tx, userID int64, key string) error {
	hash := hashKey(key)
	return queries.CreateAPIKey(ctx, tx, dbsqlc.CreateAPIKeyParams{
		UserID: userID, KeyHash: hash[:], KeyPrefix: keyPrefix(key),
	})
}

// newAPIKey returns "sk_" and 48 hex characters (192 random bits).
func newAPIKey() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "sk_" + hex.EncodeToString(b), nil
}

func hashKey(key string) [sha256.Size]byte { return sha256.Sum256([]byte(key)) }

// keyPrefix is the part of a key that is safe to show: enough to tell keys
// apart, far too little to guess the rest.
func keyPrefix(key string) string {
	const n = 10
	if len(key) <= n {
		return key[:len(key)/2]
	}
	return key[:n]
}
