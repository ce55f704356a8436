package users

import (
	"context"
	"crypto/sha256"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/example/payments/internal/db/dbsqlc"
)

// DefaultAuthCacheTTL is how long an Authenticator trusts a key it has looked
// up, unless told otherwise.
const DefaultAuthCacheTTL = 10 * time.Second

// DefaultAuthCacheSize is how many keys an Authenticator remembers at most,
// unless told otherwise.
const DefaultAuthCacheSize = 10_000

// Authenticator is Authenticate with a small in-process cache in front of the
// database, so that a key seen recently is answered from memory instead of a
// query on every request. It is safe for concurrent use.
//
// What it remembers, and for how long:
//
//   - Only successful lookups, keyed by the key's SHA-256 hash (never the key
//     itself), with the user and the time of the lookup. An unknown key is not
//     remembered: it goes to the database every time, so a key created a
//     moment ago works at once.
//   - Each answer for TTL. A key revoked (api_keys.revoked_at) or deleted in
//     the database therefore keeps working for up to TTL on every instance
//     that looked it up just before. Whoever adds a revoke command must say
//     so, or lower the TTL.
//   - At most MaxEntries keys. When a new key would go past that, expired
//     entries are dropped; if more than half of the limit is still fresh,
//     every entry is dropped and the cache refills from the database. That
//     keeps the sweep's cost a constant per added key and needs no LRU list;
//     it only costs much when more keys than the limit are in use within one
//     TTL, and then a cache of that size could not help much anyway.
//
// Looking answers up by hash keeps what the constant-time comparison in
// Authenticate stands for. The map compares hashes in variable time, as the
// database's unique index does, but a caller chooses only the key, not its
// hash: timing can at best tell how the hash of its own guess compares to a
// stored hash, and SHA-256 gives no way to steer a guess toward one, so it
// learns nothing about any real key. A key is only ever answered by an entry
// with its exact hash.
type Authenticator struct {
	conn       dbsqlc.DBTX
	ttl        time.Duration // <= 0: no cache
	maxEntries int
	now        func() time.Time

	mu      sync.Mutex
	entries map[[sha256.Size]byte]authEntry

	// lookups makes concurrent lookups of one key one query.
	lookups singleflight.Group

	hits, misses atomic.Uint64
}

// AuthenticatorConfig tunes an Authenticator. The zero value is the default.
type AuthenticatorConfig struct {
	// TTL is how long a looked-up key is trusted: 0 means
	// DefaultAuthCacheTTL, negative turns the cache off (every call queries).
	TTL time.Duration
	// MaxEntries bounds the number of keys remembered; 0 means
	// DefaultAuthCacheSize.
	MaxEntries int
	// Now, when set, is the clock used instead of the system's, for tests.
	Now func() time.Time
}

type authEntry struct {
	user     User
	lookedUp time.Time
}

// NewAuthenticator returns an Authenticator that looks keys up on conn.
func NewAuthenticator(conn dbsqlc.DBTX, cfg AuthenticatorConfig) *Authenticator {
	a := &Authenticator{
		conn: conn, ttl: cfg.TTL, maxEntries: cfg.MaxEntries, now: cfg.Now,
		entries: map[[sha256.Size]byte]authEntry{},
	}
	if a.ttl == 0 {
		a.ttl = DefaultAuthCacheTTL
	}
	if a.maxEntries <= 0 {
		a.maxEntries = DefaultAuthCacheSize
	}
	if a.now == nil {
		a.now = time.Now
	}
	return a
}

// Authenticate returns the user an API key belongs to, or ErrUnknownKey,
// from memory when the key was looked up less than TTL ago.
func (a *Authenticator) Authenticate(ctx context.Context, key string) (User, error) {
	return a.AuthenticateGated(ctx, key, nil)
}

// Gate is asked before a key that was never seen valid (SeenValid) is
// looked up in the key store. It returns settle, which is called with
// whether the key turned out unknown, or an error, which the caller gets
// instead of a lookup. The API limits failed authentications with it.
type Gate func() (settle func(unknown bool), err error)

// lookupTimeout bounds a lookup shared by concurrent callers (see
// AuthenticateGated), which runs apart from its first caller's context.
const lookupTimeout = 10 * time.Second

// AuthenticateGated is Authenticate with gate asked before any lookup of a
// key never seen valid (nil: none asked). Concurrent calls with the same
// key share one lookup, and one question to gate: a storm of requests with
// a new key costs one query, and one failure at most.
func (a *Authenticator) AuthenticateGated(ctx context.Context, key string, gate Gate) (User, error) {
	hash := hashKey(key)
	if u, ok := a.cached(hash); ok {
		a.hits.Add(1)
		return u, nil
	}
	leader := false
	u, err, _ := a.lookups.Do(string(hash[:]), func() (any, error) {
		leader = true
		// Not the first caller's context: its client going away must not
		// fail the others.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lookupTimeout)
		defer cancel()
		return a.lookUp(ctx, hash, gate)
	})
	if !leader {
		a.hits.Add(1) // answered by another call's lookup, without a query
	}
	if err != nil {
		return User{}, err
	}
	return u.(User), nil
}

func (a *Authenticator) lookUp(ctx context.Context, hash [sha256.Size]byte, gate Gate) (User, error) {
	settle := func(bool) {}
	if gate != nil && !a.seen(hash) {
		var err error
		if settle, err = gate(); err != nil {
			return User{}, err
		}
	}
	a.misses.Add(1)
	lookedUp := a.now()
	u, err := lookup(ctx, a.conn, hash)
	unknown := errors.Is(err, ErrUnknownKey)
	settle(unknown)
	if unknown {
		a.forget(hash) // revoked or deleted: no longer SeenValid
	}
	if err != nil {
		return User{}, err
	}
	a.remember(hash, u, lookedUp)
	return u, nil
}

// SeenValid reports whether key was valid when this Authenticator last
// looked it up: it is remembered, its answer fresh or lapsed, and no lookup
// since has found it unknown. It asks nothing of the database. Such a key
// is looked up without asking AuthenticateGated's gate (a client with a
// valid key is not a guesser); whether it is still valid, the lookup says.
// With the cache off, nothing is remembered and no key is SeenValid.
func (a *Authenticator) SeenValid(key string) bool { return a.seen(hashKey(key)) }

func (a *Authenticator) seen(hash [sha256.Size]byte) bool {
	if a.ttl <= 0 {
		return false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	_, ok := a.entries[hash]
	return ok
}

func (a *Authenticator) forget(hash [sha256.Size]byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	delete(a.entries, hash)
}

// Counts returns how many calls were answered without a query (hits: from
// memory, or by another call's lookup of the same key) and how many
// queries were made (misses).
func (a *Authenticator) Counts() (hits, misses uint64) {
	return a.hits.Load(), a.misses.Load()
}

// Len returns how many keys are remembered, expired ones included.
func (a *Authenticator) Len() int {
	a.mu.Lock()
	defer a.mu.Unlock()
	return len(a.entries)
}

func (a *Authenticator) cached(hash [sha256.Size]byte) (User, bool) {
	if a.ttl <= 0 {
		return User{}, false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	e, ok := a.entries[hash]
	if !ok || a.expired(e, a.now()) {
		return User{}, false
	}
	return e.user, true
}

// remember stores a successful lookup, making room first when the cache is
// full (see Authenticator). lookedUp is taken before the query, so an entry
// never outlives TTL counted from when the database was asked.
func (a *Authenticator) remember(hash [sha256.Size]byte, u User, lookedUp time.Time) {
	if a.ttl <= 0 {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.entries[hash]; !ok && len(a.entries) >= a.maxEntries {
		a.makeRoom()
	}
	a.entries[hash] = authEntry{user: u, lookedUp: lookedUp}
}

// makeRoom drops expired entries, and every entry if more than half the limit
// is still fresh, so the next sweep is at least half the limit of adds away.
func (a *Authenticator) makeRoom() {
	now := a.now()
	for h, e := range a.entries {
		if a.expired(e, now) {
			delete(a.entries, h)
		}
	}
	if len(a.entries) > a.maxEntries/2 {
		clear(a.entries)
	}
}

func (a *Authenticator) expired(e authEntry, now time.Time) bool {
	return now.Sub(e.lookedUp) >= a.ttl
}
